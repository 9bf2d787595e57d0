"""``graphgrad.sparse``: PyTorch's ``torch.sparse`` namespace for sparse COO tensors
(the ops live in ``graphgrad.ops.sparse_coo``)."""

from graphgrad.ops.sparse_coo import sparse_mm as mm
from graphgrad.ops.sparse_coo import sparse_softmax
from graphgrad.ops.sparse_coo import sparse_sum as sum  # noqa: A004 - PyTorch's name

__all__ = ["mm", "sum", "softmax", "log_softmax"]


def softmax(input, dim: int, dtype=None):
    """``torch.sparse.softmax``: over the stored entries along ``dim``; sparse result."""
    return sparse_softmax(input, dim, dtype)


def log_softmax(input, dim: int, dtype=None):
    """``torch.sparse.log_softmax``: over the stored entries along ``dim``."""
    return sparse_softmax(input, dim, dtype, log=True)
