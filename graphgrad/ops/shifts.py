"""Layer ``ops``: moving elements along dims: roll (a cyclic shift), rot90 (a quarter
turn in a plane) and diff (the n-th forward difference).

All are composites of slices, cat, flip, transpose and sub, so their gradients (to any
order) are those ops' rules.
"""

from __future__ import annotations

from graphgrad.backend import xp

from .base import normalize_dim, int_arg
from .refusals import int_tuple_arg

__all__ = ["roll", "rot90", "diff"]


def roll(input, shifts, dims=None):
    """Elements shifted cyclically by ``shifts[i]`` along ``dims[i]``; without ``dims``
    the tensor is shifted as if flattened, then given its shape back."""
    from .join import cat
    shifts = int_tuple_arg(shifts, "roll", "shifts", 2)
    if dims is None:
        if len(shifts) != 1:
            raise RuntimeError(f"shifts and dimensions must align. shifts: {len(shifts)}, "
                               f"dims:0")
        return roll(input.reshape(-1), shifts, 0).reshape(tuple(input.shape))
    dims = int_tuple_arg(dims, "roll", "dims", 3)
    if len(shifts) != len(dims):
        raise RuntimeError(f"shifts and dimensions must align. shifts: {len(shifts)}, "
                           f"dims:{len(dims)}")
    out = input
    for shift, dim in zip(shifts, dims, strict=True):
        d = normalize_dim(dim, input.ndim, "roll")
        n = input.shape[d] if input.ndim else 1
        s = int(shift) % n if n else 0
        if input.ndim and s:
            # the last s elements come first
            out = cat([out.narrow(d, n - s, s), out.narrow(d, 0, n - s)], d)
    return out.clone() if out is input else out


def rot90(input, k: int = 1, dims=(0, 1)):
    """``input`` turned ``k`` quarter turns in the plane of ``dims``, from the first
    dim's direction towards the second's."""
    dims = list(dims)
    if len(dims) != 2:
        raise RuntimeError(f"expected total rotation dims == 2, but got dims = {len(dims)}")
    if input.ndim < 2:
        raise RuntimeError(f"expected total dims >= 2, but got total dims = {input.ndim}")
    d0, d1 = (normalize_dim(d, input.ndim, "rot90") for d in dims)
    if d0 == d1:
        raise RuntimeError(f"expected rotation dims to be different, but got dim0 = {dims[0]} "
                           f"and dim1 = {dims[1]}")
    k %= 4
    if k == 1:
        return input.flip(d1).transpose(d0, d1)
    if k == 2:
        return input.flip((d0, d1))
    if k == 3:
        return input.flip(d0).transpose(d0, d1)
    return input.clone()


def diff(input, n: int = 1, dim: int = -1, prepend=None, append=None):
    """The n-th forward difference along ``dim``: ``out[i] = input[i + 1] - input[i]``,
    applied ``n`` times, after ``prepend`` and ``append`` are joined on (logical xor for
    bool tensors, as in PyTorch); ``n = 0`` gives ``input`` as it is."""
    n = int_arg(n, "diff", "n", 1)
    from .compare import logical_xor
    from .join import cat
    if input.ndim == 0:
        raise RuntimeError("diff expects input to be at least one-dimensional")
    if n < 0:
        raise RuntimeError(f"order must be non-negative but got {n}")
    d = normalize_dim(dim, input.ndim, "diff")
    parts = [p for p in (prepend, input, append) if p is not None]
    for p in parts:
        if p.ndim != input.ndim:
            raise RuntimeError("diff expects prepend or append to be the same dimension as "
                               "input")
    if n == 0:  # PyTorch ignores prepend and append then
        return input
    out = cat(parts, d) if len(parts) > 1 else input
    for _ in range(n):
        size = out.shape[d]
        if size == 0:
            break
        later, earlier = out.narrow(d, 1, size - 1), out.narrow(d, 0, size - 1)
        out = logical_xor(later, earlier) if out._array.dtype == xp.bool_ else later - earlier
    return out
