"""`from torch import nn, optim`: a classifier trained with Adam and CrossEntropyLoss."""

import torch
from common import classification_data, set_weights
from torch import nn, optim

model = nn.Sequential(nn.Linear(5, 12), nn.ReLU(), nn.Linear(12, 3))
set_weights(model, seed=3)
x, y = classification_data(seed=4)
criterion = nn.CrossEntropyLoss()
opt = optim.Adam(model.parameters(), lr=0.01)
for step in range(25):
    opt.zero_grad()
    loss = criterion(model(x), y)
    loss.backward()
    opt.step()
    if step % 5 == 0:
        print(f"step {step} loss {loss.item():.6f}")
with torch.no_grad():
    accuracy = (model(x).argmax(dim=1) == y).float().mean().item()
print(f"accuracy {accuracy:.4f}")
