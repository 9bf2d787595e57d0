"""Layer ``passes``: the cotangent of a value read in slices, joined in one op.

Graph differentiation gives each slice (``Getitem`` with basic indexing, whose
``cotangent_window`` says where its cotangent lands) a vjp of its own: a zero array of
the whole value with the slice's cotangent added in (``IndexPut``), and the pieces are
then summed. A compiled backward runs that as written: for attention's q, k and v, read
as three slices of one projection, three (3, B, H, L, E) zero arrays copied and filled
and a three-way sum, ~1.3 ms of a 2-layer Transformer's compiled backward at d_model 64,
where eager autograd adds the pieces into one buffer (``autograd/engine.py``,
``_add_into_window``). Here the pieces of one value, once all of them are known (the
walk reaches the value after every op reading it), become one op where they lie along
one dim without overlapping: ``Stack`` when they are its every index, else ``Cat``, the
gaps filled by zero constants (NumPy's ``pad`` costs 2-10x a concatenation here; the
cotangents of a slice read twice are summed first). Other layouts keep the per-slice
vjps. The values are the sum's, but for the sign of a zero: the sum gives +0.0 where a
piece holds -0.0.
"""

from __future__ import annotations

from graphgrad.backend import xp
from graphgrad.graph import Node
from graphgrad.graph.interpreter import as_tensor
from graphgrad.ops.join import Cat, Stack
from graphgrad.ops.shape import Reshape

__all__ = ["window_of", "join_windows"]


def window_of(node: Node, syms: list):
    """The basic index where ``node``'s cotangent lands in its input 0, one entry per dim
    of the input: an int, or a slice as its ``(start, stop, step)`` (hashable), or None
    (not a slice, or one with a new axis or an index this pass does not place)."""
    window = node.op.cotangent_window
    if window is None:
        return None
    idx = window(*syms, **node.params)
    if idx is None:
        return None
    shape = node.inputs[0].spec.shape
    items = [i for i in idx if i is not Ellipsis]
    if len(items) > len(shape) or sum(i is Ellipsis for i in idx) > 1 or \
            any(type(i) not in (int, slice) for i in items):
        return None
    if Ellipsis in idx:
        at = idx.index(Ellipsis)
        idx = (*idx[:at], *[slice(None)] * (len(shape) - len(items)), *idx[at + 1:])
    else:
        idx = (*idx, *[slice(None)] * (len(shape) - len(items)))
    out = []
    for i, n in zip(idx, shape, strict=True):
        if type(i) is int:
            if not -n <= i < n:
                return None
            out.append(i % n)
        else:
            out.append(i.indices(n))
    return tuple(out)


def join_windows(shape: tuple, dtype, pieces: list):
    """The cotangent of a value of ``shape`` whose slices ``pieces`` ((window, cotangent)
    with ``window_of``'s windows) hold cotangents, as one op; None where they do not lie
    along one dim without overlap (the caller keeps the per-slice vjps)."""
    same: dict[tuple, object] = {}   # a slice read twice: its cotangents summed first
    for window, g in pieces:
        same[window] = same[window] + g if window in same else g
    dims = set()
    spans = []   # (start, stop, is_int, cotangent)
    for window, g in same.items():
        along = [d for d, (i, n) in enumerate(zip(window, shape, strict=True))
                 if type(i) is int or i != (0, n, 1)]
        if len(along) != 1:
            return None   # (the whole value, or a block over several dims)
        d = along[0]
        i = window[d]
        if type(i) is int:
            spans.append((i, i + 1, True, g))
        elif i[2] == 1 and i[0] < i[1]:
            spans.append((i[0], i[1], False, g))
        else:
            return None
        dims.add(d)
    if len(dims) != 1:
        return None
    (d,) = dims
    spans.sort(key=lambda s: s[0])
    if any(a[1] > b[0] for a, b in zip(spans, spans[1:], strict=False)):
        return None   # overlapping pieces add up: the sum of the vjps says it
    n = shape[d]
    if len(spans) == n and all(s[2] for s in spans):
        return Stack.apply(*[s[3] for s in spans], dim=d)

    def along_d(start, stop, is_int, g):
        if not is_int:
            return g
        return Reshape.apply(g, shape=(*shape[:d], 1, *shape[d + 1:]))

    parts, at = [], 0
    for span in spans:
        if span[0] > at:
            parts.append(_zeros((*shape[:d], span[0] - at, *shape[d + 1:]), dtype))
        parts.append(along_d(*span))
        at = span[1]
    if at < n:
        parts.append(_zeros((*shape[:d], n - at, *shape[d + 1:]), dtype))
    return Cat.apply(*parts, dim=d)


def _zeros(shape: tuple, dtype):
    return as_tensor(xp.zeros(shape, dtype))
