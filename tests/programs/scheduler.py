"""`from torch.optim.lr_scheduler import StepLR`: the learning rate halves every 3 epochs;
prints it and the loss."""

import torch
from common import regression_data, set_weights
from torch.optim.lr_scheduler import StepLR

model = torch.nn.Linear(4, 1)
set_weights(model, seed=7)
x, y = regression_data(seed=8)
opt = torch.optim.SGD(model.parameters(), lr=0.2)
sched = StepLR(opt, step_size=3, gamma=0.5)
for epoch in range(8):
    opt.zero_grad()
    loss = torch.nn.functional.mse_loss(model(x), y)
    loss.backward()
    opt.step()
    sched.step()
    print(f"epoch {epoch} lr {sched.get_last_lr()[0]:.6f} loss {loss.item():.6f}")
