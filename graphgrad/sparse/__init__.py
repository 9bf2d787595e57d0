"""``graphgrad.sparse``: PyTorch's ``torch.sparse`` namespace for sparse COO tensors
(the ops live in ``graphgrad.ops.sparse_coo``)."""

from graphgrad.ops.sparse_coo import sparse_mm as mm
from graphgrad.ops.sparse_coo import sparse_sum as sum  # noqa: A004 - PyTorch's name

__all__ = ["mm", "sum"]
