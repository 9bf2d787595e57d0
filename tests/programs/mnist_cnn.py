"""The shape of PyTorch's examples/mnist on random 12x12 "digits": a Net(nn.Module) with
Conv2d, max_pool2d, dropout (eval mode, so no randomness), log_softmax and nll_loss,
trained with Adadelta and StepLR; a test pass under torch.no_grad()."""

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F
import torch.optim as optim
from common import set_weights
from torch.optim.lr_scheduler import StepLR
from torch.utils.data import DataLoader, TensorDataset


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv1 = nn.Conv2d(1, 4, 3, 1)
        self.conv2 = nn.Conv2d(4, 8, 3, 1)
        self.dropout = nn.Dropout(0.25)
        self.fc = nn.Linear(8 * 4 * 4, 3)

    def forward(self, x):
        x = F.relu(self.conv1(x))
        x = F.max_pool2d(F.relu(self.conv2(x)), 2)
        x = torch.flatten(self.dropout(x), 1)
        return F.log_softmax(self.fc(x), dim=1)


rng = np.random.default_rng(15)
images = torch.from_numpy(rng.standard_normal((24, 1, 12, 12)).astype(np.float32))
labels = torch.from_numpy(rng.integers(0, 3, 24))
loader = DataLoader(TensorDataset(images, labels), batch_size=8)
device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
model = Net().to(device)
set_weights(model, seed=16, scale=0.2)
model.eval()  # dropout off: the two frameworks draw different random masks
optimizer = optim.Adadelta(model.parameters(), lr=1.0)
scheduler = StepLR(optimizer, step_size=1, gamma=0.7)
for epoch in range(1, 4):
    for batch_idx, (data, target) in enumerate(loader):
        data, target = data.to(device), target.to(device)
        optimizer.zero_grad()
        loss = F.nll_loss(model(data), target)
        loss.backward()
        optimizer.step()
        print(f"epoch {epoch} batch {batch_idx} loss {loss.item():.6f}")
    scheduler.step()
with torch.no_grad():
    output = model(images)
    test_loss = F.nll_loss(output, labels, reduction="sum").item() / len(images)
    correct = output.argmax(dim=1, keepdim=True).eq(labels.view_as(output.argmax(
        dim=1, keepdim=True))).sum().item()
print(f"test loss {test_loss:.6f} correct {correct}/{len(images)}")
