"""Layer ``autograd``: derivative graphs that share, for ``create_graph=True``.

Nesting ``autograd.grad(create_graph=True)`` extends the graph once per order, and each
pass re-derives what earlier passes already built: the k-th derivative graph grows
exponentially. While the engine records a backward pass (and only then: the eager path
and ``create_graph=False`` never see this), ``SharingMode`` sits on the dispatch stack
and does what XLA's CSE and algebraic simplifier do for jax.jit:

* hash-consing: an op call with the same op, params and inputs (by identity; Python
  numbers by value) as one already recorded by a backward pass returns that node;
* exact simplifications: x * 1 and x + 0 (a ones/zeros seed or a Python 1 or 0) are x,
  -(-x) is x, and chains of scalar factors fold, (x * a) * b -> x * (a b),
  -(x * a) -> x * (-a).

The table outlives one pass (weakly: an entry dies with its node), so the passes of a
nested derivative share with each other too. A hit is checked against the node's own
inputs, so an id reused after a node died never matches a stranger. Random ops are
never shared, and the mode stands aside when another mode (vmap, forward AD) is active.
"""

from __future__ import annotations

import threading
import weakref

from graphgrad.ops.arithmetic import Add, Mul, Neg, Sub
from graphgrad.tensor import Mode, Value, active_modes, dispatch, pop_mode, push_mode

__all__ = ["SharingMode", "sharing", "set_sharing", "is_sharing_enabled"]


class _Table(threading.local):
    """Per thread, as grad mode: the shared nodes, and whether sharing is on."""

    def __init__(self):
        self.nodes: weakref.WeakValueDictionary = weakref.WeakValueDictionary()
        self.enabled = True


_table = _Table()
_NUMBER = (int, float)


def _is_constant(t, value: float) -> bool:
    """A tensor that is a constant (no history, no grad) equal to ``value`` everywhere,
    or that Python number."""
    if isinstance(t, Value):
        a = t._array
        return t.op is None and not t._requires_grad and a.size <= 4096 and \
            a.dtype.kind in "fc" and bool((a == value).all())
    return type(t) in _NUMBER and t == value


def _scalar(t) -> bool:
    return type(t) in _NUMBER


def set_sharing(enabled: bool) -> bool:
    """Turn sharing in recorded backward passes on or off (on by default); returns the
    previous setting. Off reproduces plain graph extension (for comparisons)."""
    prev = _table.enabled
    _table.enabled = bool(enabled)
    if not enabled:
        _table.nodes.clear()
    return prev


def is_sharing_enabled() -> bool:
    return _table.enabled


class SharingMode(Mode):
    """Hash-conses and simplifies the op calls of a backward pass that records a graph."""

    def process(self, op, args: tuple, params: dict):
        with self.lowered():
            simple = _simplify(op, args, params)
            if simple is not None:
                return simple
            if op.__module__.endswith(".random"):
                return dispatch(op, args, params)
            key = _key(op, args, params)
            if key is not None:
                hit = _table.nodes.get(key)
                if hit is not None and _same_inputs(hit, args):
                    return hit
            out = dispatch(op, args, params)
            if key is not None and isinstance(out, Value) and out.op is op:
                _table.nodes[key] = out
            return out


def _simplify(op, args: tuple, params: dict):
    """An exactly equal tensor at hand (or one node in place of two), or None."""
    if params:
        return None
    if op is Mul or op is Add or op is Sub:
        a, b = args
        unit = 1.0 if op is Mul else 0.0
        for keep, other in ((a, b), (b, a)) if op is not Sub else ((a, b),):
            if isinstance(keep, Value) and _is_constant(other, unit) and _fits(keep, other):
                return keep
        if op is Mul:
            for t, c in ((a, b), (b, a)):
                if _scalar(c) and isinstance(t, Value):
                    folded = _fold(t, c)
                    if folded is not None:
                        return folded
    elif op is Neg:
        (a,) = args
        if isinstance(a, Value) and a.op is Neg:
            return a.inputs[0]
        if isinstance(a, Value):
            return _fold(a, -1.0)
    return None


def _fits(keep: Value, other) -> bool:
    """x op constant is x itself only if broadcasting and promotion change nothing."""
    if not isinstance(other, Value):
        return keep._array.dtype.kind in "fc"
    return other._array.ndim <= keep._array.ndim and other._array.dtype == keep._array.dtype \
        and all(o == 1 or o == s for o, s in zip(reversed(other._array.shape),
                                                  reversed(keep._array.shape)))


def _fold(t: Value, c):
    """(y * a) * c -> y * (a c) and (-y) * c -> y * (-c): one node instead of two."""
    if t.op is Mul and not t.params:
        a, b = t.inputs
        for y, k in ((a, b), (b, a)):
            if _scalar(k) and isinstance(y, Value):
                return Mul.apply(y, k * c)
    if t.op is Neg and isinstance(t.inputs[0], Value):
        return Mul.apply(t.inputs[0], -c)
    return None


def _key(op, args: tuple, params: dict):
    parts = []
    for a in args:
        if isinstance(a, Value):
            parts.append(id(a))
        elif type(a) in _NUMBER or type(a) is bool or a is None:
            parts.append((type(a), a))
        else:
            return None
    key = (op, tuple(parts), tuple(sorted(params.items())) if params else ())
    try:
        hash(key)
    except TypeError:  # an unhashable parameter: not shared
        return None
    return key


def _same_inputs(node: Value, args: tuple) -> bool:
    inputs = node.inputs
    return len(inputs) == len(args) and all(
        i is a for i, a in zip(inputs, args, strict=True) if isinstance(a, Value))


class sharing:  # noqa: N801 - a context manager, like grad modes
    """While a recording backward pass runs: ``SharingMode`` on the stack, unless sharing
    is off or another mode is active (their levels carry state a shared node would not)."""

    __slots__ = ("mode",)

    def __init__(self):
        self.mode = SharingMode() if _table.enabled and not active_modes() else None

    def __enter__(self):
        if self.mode is not None:
            push_mode(self.mode)

    def __exit__(self, *exc):
        if self.mode is not None:
            pop_mode(self.mode)
