"""Layer ``ops``: un-broadcasting, the one place a cotangent is reduced to the shape
and dtype of the input it belongs to (tinygrad's and the engines' rule: no vjp rule
does it for itself). The eager engine, graph-level differentiation and the vjp nodes
of captured graphs all call ``unbroadcast``."""

from __future__ import annotations

from graphgrad.backend import from_numpy_dtype, xp

__all__ = ["unbroadcast"]


def unbroadcast(ct, shape: tuple | None, dtype, op_name: str | None = None):
    """``ct`` summed over the dims it was broadcast along, reshaped to ``shape`` and
    cast to ``dtype`` (a NumPy dtype). ``shape`` (or ``ct.shape``) may be None and dims
    may be None for symbolic tensors: then only what is known is reduced. A cotangent
    that ``shape`` cannot have been broadcast to is a bug in ``op_name``'s vjp rule."""
    cs = ct.shape
    if shape is not None and cs is not None:
        shape, cs = tuple(shape), tuple(cs)
        if cs != shape:
            lead = len(cs) - len(shape)
            if lead < 0 or any(s is not None and c is not None and s != 1 and s != c
                               for s, c in zip(shape, cs[lead:], strict=True)):
                raise RuntimeError(f"graphgrad internal error: {op_name}Backward0 returned a "
                                   f"gradient of shape {cs} for an input of shape {shape}")
            dims = tuple(range(lead)) + tuple(lead + i for i, s in enumerate(shape)
                                              if s == 1 and cs[lead + i] != 1)
            if dims:
                ct = ct.sum(dim=dims, keepdim=True)
            if tuple(ct.shape) != shape and None not in shape:
                ct = ct.reshape(shape)
    if ct._array.dtype != xp.dtype(dtype):
        ct = ct.to(from_numpy_dtype(xp.dtype(dtype)))
    return ct
