"""torch.amp.GradScaler on the CPU scales for real: the loss is multiplied by the scale,
step() unscales and skips a step whose gradients overflow, update() backs off after it
and grows after growth_interval clean steps."""

import torch
from common import regression_data, set_weights

model = torch.nn.Linear(4, 1)
set_weights(model, seed=13)
x, y = regression_data(seed=14)
opt = torch.optim.SGD(model.parameters(), lr=0.05)
scaler = torch.amp.GradScaler("cpu", init_scale=2.0**10, growth_interval=2)
for step in range(6):
    opt.zero_grad()
    loss = ((model(x) - y) ** 2).mean()
    scaled = scaler.scale(loss)
    if step == 2:
        scaled = scaled * float("inf")  # an overflow: this step must be skipped
    scaled.backward()
    result = scaler.step(opt)
    scaler.update()
    print(f"step {step} loss {loss.item():.6f} scaled {scaled.item():.1f} "
          f"skipped {result is None and step == 2} scale {scaler.get_scale()}")
print(f"state {scaler.state_dict()}")
print(f"bias {model.bias.item():.6f}")
