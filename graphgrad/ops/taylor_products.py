"""Layer ``ops``: Taylor series of products along an axis, shared by the Taylor rules of
``prod`` and ``cumprod`` (and through them ``CumprodBackward``).

Both work on the last axis and multiply series pairwise by Leibniz's rule, never
dividing: ``exp(sum(log x))`` would be shorter but divides by x_0, which breaks at the
zeros a product is most often taken over. A balanced tree (prod) or a Hillis-Steele scan
(cumprod) needs log2(n) rounds of O(K^2) ops rather than n, as JAX jets cumprod through
an associative scan. ``full`` lists carry the order-0 term at index 0 and ``None`` for
zero coefficients, as in ``ops.taylor``.
"""

from __future__ import annotations

from .join import Pad
from . import taylor as ts

__all__ = ["product_tree", "product_scan"]


def _pad_last(x: list, before: int, after: int) -> list:
    """Pads the last axis of every term with the series of the constant 1 (1 at order 0,
    0 above), the identity of a product."""
    return [None if t is None else Pad.apply(t, pad=(before, after), value=1.0 if i == 0
                                             else 0.0) for i, t in enumerate(x)]


def _times(a: list, b: list, order: int) -> list:
    return [a[0] * b[0]] + ts.mul_series(a, b, order)


def product_tree(x: list, order: int) -> list:
    """The full series of the product over the last axis of ``x`` (kept, size 1)."""
    n = x[0].shape[-1]
    if n == 0:
        return [x[0].new_ones((*x[0].shape[:-1], 1))] + [None] * order
    width = 1
    while width < n:
        width *= 2
    if width != n:
        x = _pad_last(x, 0, width - n)
    while width > 1:
        width //= 2
        pairs = [None if t is None else t.reshape(*t.shape[:-1], width, 2) for t in x]
        x = _times([None if t is None else t[..., 0] for t in pairs],
                   [None if t is None else t[..., 1] for t in pairs], order)
    return x


def product_scan(x: list, order: int) -> list:
    """The full series of the running product along the last axis of ``x``: round r
    multiplies each element by the partial product 2^r places before it."""
    n = x[0].shape[-1]
    shift = 1
    while shift < n:
        before = _pad_last([None if t is None else t[..., :n - shift] for t in x], shift, 0)
        x = _times(x, before, order)
        shift *= 2
    return x
