"""argparse options and an exit code: `--steps N --lr LR --exit-code K`; prints what it
was given (sys.argv as python sets it) and exits with K."""

import argparse
import os
import sys

import torch
from common import regression_data, set_weights

parser = argparse.ArgumentParser()
parser.add_argument("--steps", type=int, default=3)
parser.add_argument("--lr", type=float, default=0.1)
parser.add_argument("--exit-code", type=int, default=0)
args = parser.parse_args()
print(f"argv0 {os.path.basename(sys.argv[0])} name {__name__} steps {args.steps} lr {args.lr}")
model = torch.nn.Linear(4, 1)
set_weights(model, seed=9)
x, y = regression_data(seed=10)
opt = torch.optim.SGD(model.parameters(), lr=args.lr)
for step in range(args.steps):
    opt.zero_grad()
    loss = ((model(x) - y) ** 2).mean()
    loss.backward()
    opt.step()
    print(f"step {step} loss {loss.item():.6f}")
sys.exit(args.exit_code)
