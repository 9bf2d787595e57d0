"""Layer ``tensor``: ``repr`` of a tensor in PyTorch's format.

``tensor([1., 2.], requires_grad=True)``, ``tensor([0.1000, 2.5000])``,
``tensor([1.0000e-05, 1.0000e+00])``, ``tensor(3., dtype=graphgrad.float64)``.
"""

from __future__ import annotations

from graphgrad.backend import get_default_dtype, xp

from .grad_fn import op_backward_name

_PREFIX = "tensor("


def _float_formatter(arr):
    finite = arr[xp.isfinite(arr)]
    nonzero = xp.abs(finite[finite != 0])
    if nonzero.size == 0:
        return lambda v: _special(v) or f"{v:.0f}."
    amax, amin = float(nonzero.max()), float(nonzero.min())
    if xp.all(finite == xp.round(finite)):
        if amax / amin > 1000.0 or amax > 1e8:
            return lambda v: _special(v) or f"{v:.4e}"
        return lambda v: _special(v) or f"{v:.0f}."
    if amax / amin > 1000.0 or amax > 1e8 or amin < 1e-4:
        return lambda v: _special(v) or f"{v:.4e}"
    return lambda v: _special(v) or f"{v:.4f}"


def _special(v) -> str | None:
    if v != v:
        return "nan"
    if v in (float("inf"), float("-inf")):
        return "inf" if v > 0 else "-inf"
    return None


def format_array(arr) -> str:
    """The bracketed body of the repr, aligned and wrapped at 80 columns as PyTorch does."""
    if arr.dtype.kind == "f":
        base = _float_formatter(arr.astype(xp.float64))
    elif arr.dtype.kind == "b":
        def base(v):
            return "True" if v else "False"
    elif arr.dtype.kind == "c":
        return xp.array2string(arr, separator=", ", prefix=_PREFIX, threshold=1000,
                               edgeitems=3, precision=4)
    else:
        def base(v):
            return str(int(v))
    flat = arr.reshape(-1)
    sample = flat if flat.size <= 1000 else xp.concatenate([flat[:3], flat[-3:]])
    values = sample.tolist()
    if arr.dtype.kind == "f":  # PyTorch sizes columns by the finite nonzero values
        values = [v for v in values if v == v and v not in (float("inf"), float("-inf"))
                  and v != 0] or values
    width = max(len(base(v)) for v in values)
    text = xp.array2string(arr, separator=", ", prefix=_PREFIX, threshold=1000, edgeitems=3,
                           max_line_width=80, formatter={"all": lambda v: base(v).rjust(width)})
    return text.replace(", ...,", ",  ...,")


def tensor_repr(t, show_dtype: bool = True) -> str:
    """``show_dtype=False``: the parts of a sparse tensor, whose dtype is shown once."""
    arr = t._array
    suffix = []
    if arr.size == 0:
        body = "[]"
        if arr.shape != (0,):
            suffix.append(f"size={tuple(arr.shape)}")
    else:
        body = format_array(arr)
    kind = arr.dtype
    default = get_default_dtype().np
    if show_dtype and not (kind == default or kind == xp.int64 or kind == xp.bool_
            or (kind == xp.complex64 and default == xp.float32)):
        suffix.append(f"dtype={t.dtype!r}")
    if t.op is not None and t._requires_grad:
        suffix.append(f"grad_fn=<{op_backward_name(t.op)}>")
    elif t._requires_grad:
        suffix.append("requires_grad=True")
    return _PREFIX + body + "".join(", " + s for s in suffix) + ")"
