"""Shared by the test programs: data and initial weights drawn with NumPy, so PyTorch and
graphgrad (whose random generators differ) start from the same numbers. Imported by the
programs as a sibling module, which also checks that `import torch` inside a module the
script imports is aliased too."""

import numpy as np
import torch


def set_weights(model: torch.nn.Module, seed: int, scale: float = 0.3) -> None:
    rng = np.random.default_rng(seed)
    with torch.no_grad():
        for p in model.parameters():
            values = rng.standard_normal(tuple(p.shape)).astype(np.float32) * scale
            p.copy_(torch.from_numpy(values))


def regression_data(seed: int, n: int = 64, d: int = 4):
    rng = np.random.default_rng(seed)
    x = rng.standard_normal((n, d)).astype(np.float32)
    y = (np.sin(x.sum(1, keepdims=True)) + 0.1 * x[:, :1] ** 2).astype(np.float32)
    return torch.from_numpy(x), torch.from_numpy(y)


def classification_data(seed: int, n: int = 60, d: int = 5, classes: int = 3):
    rng = np.random.default_rng(seed)
    x = rng.standard_normal((n, d)).astype(np.float32)
    y = (x[:, 0] > 0).astype(np.int64) + (x[:, 1] > 0.5).astype(np.int64)
    return torch.from_numpy(x), torch.from_numpy(y % classes)
