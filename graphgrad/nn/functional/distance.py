"""Layer ``nn``: ``nn.functional``'s distances and similarities between tensors
(``normalize``, ``cosine_similarity``, ``pairwise_distance``)."""

from __future__ import annotations


from graphgrad import ops

__all__ = ["normalize", "cosine_similarity", "pairwise_distance"]


def normalize(input, p: float = 2.0, dim: int = 1, eps: float = 1e-12):
    n = ops.norm(input, p, dim, keepdim=True)
    return input / ops.clamp(n, min=eps)


def cosine_similarity(x1, x2, dim: int = 1, eps: float = 1e-8):
    """``sum(x1/max(|x1|, eps) * x2/max(|x2|, eps), dim)`` after broadcasting, each
    vector divided by its own norm first (PyTorch's order, kinder to precision)."""
    x1, x2 = ops.broadcast_tensors(x1, x2)
    n1 = ops.clamp(ops.vector_norm(x1, 2, dim, keepdim=True), min=eps)
    n2 = ops.clamp(ops.vector_norm(x2, 2, dim, keepdim=True), min=eps)
    return ((x1 / n1) * (x2 / n2)).sum(dim=dim)


def pairwise_distance(x1, x2, p: float = 2.0, eps: float = 1e-6, keepdim: bool = False):
    """``||x1 - x2 + eps||_p`` over the last dim (PyTorch adds ``eps`` to the difference,
    which keeps the norm's gradient finite at 0)."""
    dim = max(x1.ndim, x2.ndim) - 1
    return ops.vector_norm(x1 - x2 + eps, p, dim, keepdim=keepdim)
