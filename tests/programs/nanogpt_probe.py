"""The first lines of nanoGPT's train.py on a machine without a GPU: pick the device,
set the TF32 flags, autocast only off the CPU, a GradScaler that is enabled only for
float16 (so on CUDA, here disabled with a warning), then one training step through it."""

from contextlib import nullcontext

import torch
import torch.nn as nn
from common import regression_data, set_weights

device = "cuda" if torch.cuda.is_available() else "cpu"
if torch.accelerator.is_available():
    device = torch.accelerator.current_accelerator().type
print(f"device {device} accelerators {torch.accelerator.device_count()}")
print(f"cudnn {torch.backends.cudnn.is_available()} mps {torch.backends.mps.is_available()} "
      f"bf16 {torch.cuda.is_available() and torch.cuda.is_bf16_supported()}")
torch.backends.cuda.matmul.allow_tf32 = True
torch.backends.cudnn.allow_tf32 = True
torch.backends.cudnn.benchmark = True
print(f"tf32 {torch.backends.cuda.matmul.allow_tf32} {torch.backends.cudnn.allow_tf32}")
device_type = "cuda" if "cuda" in device else "cpu"
dtype = "float16"
ctx = nullcontext() if device_type == "cpu" else torch.amp.autocast(device_type=device_type)
scaler = torch.amp.GradScaler("cuda", enabled=(dtype == "float16"))
print(f"scaler enabled {scaler.is_enabled()} state {scaler.state_dict()} "
      f"scale {scaler.get_scale()}")
model = nn.Linear(4, 1).to(device)
set_weights(model, seed=11)
opt = torch.optim.AdamW(model.parameters(), lr=0.01)
x, y = regression_data(seed=12)
for step in range(3):
    with ctx:
        loss = ((model(x.to(device)) - y.to(device)) ** 2).mean()
    scaler.scale(loss).backward()
    scaler.unscale_(opt)
    torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
    scaler.step(opt)
    scaler.update()
    opt.zero_grad(set_to_none=True)
    print(f"step {step} loss {loss.item():.6f}")
with torch.autocast(device_type="cpu", enabled=False):
    print(f"no autocast {model(x[:2]).sum().item():.6f}")
