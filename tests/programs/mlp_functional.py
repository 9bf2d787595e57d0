"""`import torch.nn as nn` and `import torch.nn.functional as F`: an MLP fitted with
plain SGD, written by hand (zero_grad, backward, update under no_grad)."""

import torch
import torch.nn as nn
import torch.nn.functional as F
from common import regression_data, set_weights


class MLP(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc1 = nn.Linear(4, 16)
        self.fc2 = nn.Linear(16, 1)

    def forward(self, x):
        return self.fc2(F.tanh(self.fc1(x)))


torch.manual_seed(0)
model = MLP()
set_weights(model, seed=1)
x, y = regression_data(seed=2)
for step in range(20):
    model.zero_grad()
    loss = F.mse_loss(model(x), y)
    loss.backward()
    with torch.no_grad():
        for p in model.parameters():
            p -= 0.1 * p.grad
    if step % 4 == 0:
        print(f"step {step} loss {loss.item():.6f}")
print(f"final weight norm {model.fc1.weight.norm().item():.6f}")
