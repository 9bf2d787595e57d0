"""Layer ``nn``: ``nn.functional``'s ``embedding`` (lookup, ``padding_idx``, ``max_norm``)."""

from __future__ import annotations


from graphgrad import ops
from graphgrad.tensor import Value

__all__ = ["embedding"]


def embedding(input, weight, padding_idx: int | None = None, max_norm=None,
              norm_type: float = 2.0, scale_grad_by_freq: bool = False, sparse: bool = False):
    """Rows of ``weight`` picked by the integer ``input``; no gradient reaches the
    ``padding_idx`` row."""
    if max_norm is not None or scale_grad_by_freq or sparse:
        raise NotImplementedError("embedding: max_norm, scale_grad_by_freq and sparse are not "
                                  "supported")
    if not isinstance(input, Value) or input._array.dtype.kind not in "iu":
        raise RuntimeError("Expected tensor for argument #1 'indices' to have one of the "
                           "following scalar types: Long, Int")
    if weight.ndim != 2:
        raise RuntimeError("'weight' must be 2-D")
    ops.check_index_range(input, weight.shape[0], 0)
    out = weight[input]
    if padding_idx is not None:
        if padding_idx < 0:
            padding_idx += weight.shape[0]
        # the padding row's values as they are, without a gradient path to them
        out = ops.where((input == padding_idx).unsqueeze(-1), out.detach(), out)
    return out
