"""Layer ``ops``: elementwise functions of logarithms that need care at the edges:
``logaddexp`` (log(exp(a) + exp(b)) without overflow) and ``xlogy`` (x * log(y), 0
where x is 0).

Composites: logaddexp shifts by the larger argument, a detached constant, so the value
cannot overflow while the expression stays exactly log(exp(a) + exp(b)) as a function
of a and b (its derivatives of every order are the true ones, even where a == b);
xlogy replaces y where x is 0 and log(y) is not a finite number.
"""

from __future__ import annotations

from graphgrad.tensor import Value
from graphgrad.tensor import Tensor

__all__ = ["logaddexp", "xlogy"]


def _as_tensor(v, like):
    if isinstance(v, Value):
        return v
    from graphgrad.backend import xp
    return Tensor._make(xp.asarray(v, dtype=like._array.dtype if like._array.dtype.kind in "fc"
                            else xp.float32))


def logaddexp(input, other):
    """``log(exp(input) + exp(other))``, exact for large arguments and infinities."""
    from .arithmetic import maximum
    from .compare import isfinite, where
    from .base import scalar_name
    from .unary import detach
    for t in (input, other):
        if t._array.dtype.kind not in "fc":
            raise NotImplementedError(f'"logaddexp_cpu" not implemented for '
                                      f"'{scalar_name(t._array.dtype)}'")
    top = maximum(input, other)
    shift = detach(where(isfinite(top), top, 0.0))
    return shift + ((input - shift).exp() + (other - shift).exp()).log()


def xlogy(input, other):
    """``input * log(other)``, 0 where ``input`` is 0 (unless ``other`` is NaN), whatever
    ``other`` is; either may be a Python number."""
    from .compare import isinf, where
    x = _as_tensor(input, other) if not isinstance(input, Value) else input
    y = _as_tensor(other, x) if not isinstance(other, Value) else other
    if y._array.dtype.kind not in "fc":
        y = y.float() if x._array.dtype.kind not in "fc" else y.to(x.dtype)
    # 0 * log(y) is 0 by itself for a positive finite y (and the derivative in x stays
    # log(y) there); y <= 0 and y = inf would give nan or 0 * inf: PyTorch says 0 (a
    # NaN y stays NaN)
    undefined = (x == 0) & ((y <= 0) | isinf(y))
    return x * where(undefined, 1.0, y).log()
