"""Layer ``nn``: ``nn.functional``'s ``linear`` (one fused op for a matrix of examples) and
``bilinear``."""

from __future__ import annotations


from graphgrad.ops.linalg import Linear, check_linear_dtypes
from graphgrad.tensor import active_modes

__all__ = ["linear", "bilinear"]


def linear(input, weight, bias=None):
    """``input @ weight.T + bias``: one fused op for a matrix of examples (the training
    case; PyTorch's addmm) and for batches of them (flattened to one matrix), the
    composite for other ranks."""
    if input.ndim == 2 and weight.ndim == 2:
        return Linear.apply(input, weight) if bias is None else Linear.apply(input, weight, bias)
    if input.ndim > 2 and weight.ndim == 2 and (bias is None or bias.ndim <= 1) \
            and input.shape[-1] == weight.shape[1]:
        # batches of sequences: the rows of all of them as one matrix, so the weight
        # gradient is one GEMM (not a product per batch entry and a sum)
        rows = input.reshape(-1, input.shape[-1])
        out = Linear.apply(rows, weight) if bias is None else Linear.apply(rows, weight, bias)
        return out.reshape(*input.shape[:-1], weight.shape[0])
    if bias is not None and weight.ndim == 2 \
            and not any(m.mixes_dtypes for m in active_modes()):  # as addmm checks them
        check_linear_dtypes(input._array, weight._array, bias._array)
    out = input @ weight.mT if weight.ndim > 1 else input @ weight
    return out + bias if bias is not None else out


def bilinear(input1, input2, weight, bias=None):
    """``y_k = x1^T W_k x2 + b_k`` for weight (out, in1, in2)."""
    # (..., 1, 1, in1) @ (out, in1, in2) -> (..., out, 1, in2), then dot with x2
    left = input1.unsqueeze(-2).unsqueeze(-2) @ weight
    out = (left.squeeze(-2) * input2.unsqueeze(-2)).sum(dim=-1)
    return out + bias if bias is not None else out
