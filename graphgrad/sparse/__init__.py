"""``graphgrad.sparse``: PyTorch's ``torch.sparse`` namespace for sparse COO tensors
(the ops live in ``graphgrad.ops.sparse_coo``)."""

from graphgrad.ops.sparse_coo import sparse_mm as mm
from graphgrad.ops.sparse_coo import sparse_coo_tensor, sparse_softmax
from graphgrad.ops.sparse_coo import sparse_sum as sum  # noqa: A004 - PyTorch's name

__all__ = ["mm", "sum", "softmax", "log_softmax", "FloatTensor"]


def softmax(input, dim: int, dtype=None):
    """``torch.sparse.softmax``: over the stored entries along ``dim``; sparse result."""
    return sparse_softmax(input, dim, dtype)


def log_softmax(input, dim: int, dtype=None):
    """``torch.sparse.log_softmax``: over the stored entries along ``dim``."""
    return sparse_softmax(input, dim, dtype, log=True)


def FloatTensor(indices, values, size=None):  # noqa: N802 - PyTorch's legacy name
    """``torch.sparse.FloatTensor(indices, values, size)``, the legacy constructor that
    pygcn builds its adjacency with: ``sparse_coo_tensor``, keeping the values' dtype as
    PyTorch does."""
    return sparse_coo_tensor(indices, values, size)
