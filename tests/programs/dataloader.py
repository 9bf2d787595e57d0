"""`from torch.utils.data import DataLoader, TensorDataset`: mini-batches (in order, so no
random shuffling differs between frameworks), SGD with momentum."""

import torch
import torch.nn as nn
from common import regression_data, set_weights
from torch.utils.data import DataLoader, TensorDataset

x, y = regression_data(seed=5, n=50)
loader = DataLoader(TensorDataset(x, y), batch_size=16, shuffle=False)
model = nn.Sequential(nn.Linear(4, 8), nn.Sigmoid(), nn.Linear(8, 1))
set_weights(model, seed=6)
opt = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
loss_fn = nn.MSELoss()
print(f"batches {len(loader)} last batch {len(list(loader)[-1][0])}")
for epoch in range(4):
    total = 0.0
    for xb, yb in loader:
        opt.zero_grad()
        loss = loss_fn(model(xb), yb)
        loss.backward()
        opt.step()
        total += loss.item() * len(xb)
    print(f"epoch {epoch} mean loss {total / len(x):.6f}")
