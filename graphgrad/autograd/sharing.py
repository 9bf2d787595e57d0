"""Layer ``autograd``: derivative graphs that share, for ``create_graph=True``.

Nesting ``autograd.grad(create_graph=True)`` extends the graph once per order, and each
pass re-derives what earlier passes already built: the k-th derivative graph grows
exponentially. While the engine records a backward pass (and only then: the eager path
and ``create_graph=False`` never see this), ``SharingMode`` sits on the dispatch stack
and does what XLA's CSE and algebraic simplifier do for jax.jit:

* hash-consing: an op call with the same op, params and inputs (by identity; Python
  numbers by value) as one already recorded by a backward pass returns that node;
* exact simplifications: x * 1 and x + 0 (a ones/zeros seed or a Python 1 or 0) are x,
  -(-x) is x;
* one form for a scalar multiple, ``Mul(x, k)`` with k a Python float: chains of scalar
  factors fold ((x * a) * b -> x * (a b), -(x * a) -> x * (-a), a 0-d constant of x's
  dtype counts as a scalar), and a product of scaled factors has its scalars pulled
  out, (a x)(b y) -> (a b)(x y), with x y in one order: the same product reached along
  two paths is one node;
* like terms collected: a x + b x -> (a + b) x (x + x is 2 x), the pairs the product
  rule makes at every order.

The last two reassociate floating-point products (x (a b) for (x a) b): equal up to
rounding, which is what the tests check against plain graph extension and PyTorch. For
tanh's k-th derivative they cut the nodes ~2.5x (675 at k = 10, 1,677 before) and the
growth per order from ~2.0 to ~1.9.

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
            return _consed(op, args, params)


def _consed(op, args: tuple, params: dict):
    """The recorded node of this call if there is one, else a new one, remembered."""
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
                k = _factor(c, t)
                if k is not None:
                    x, k0 = _term(t)
                    return _scaled(x, k0 * k)
            return _product(a, b)
        return _collect(a, b, 1.0 if op is Add else -1.0)
    if op is Neg:
        (a,) = args
        if isinstance(a, Value) and a.op is Neg:
            return a.inputs[0]
        if isinstance(a, Value) and a._array.dtype.kind == "f":
            x, k0 = _term(a)
            return _scaled(x, -k0)
    return None


def _factor(c, t) -> float | None:
    """``c`` as a Python float where ``t * c`` is ``t`` scaled by it, dtype and shape
    unchanged: a Python number, or a 0-d constant of ``t``'s float dtype (the -1 seeds
    the rules make). None otherwise."""
    if not isinstance(t, Value) or t._array.dtype.kind != "f":
        return None
    if type(c) in _NUMBER:
        return float(c)
    if isinstance(c, Value) and c.op is None and not c._requires_grad:
        arr = c._array
        if arr.ndim == 0 and arr.dtype == t._array.dtype:
            return float(arr)
    return None


def _term(t: Value) -> tuple:
    """``t`` as (x, k) with t = k x for a float k: ``x * k`` (either order) or t, 1."""
    if t.op is Mul and not t.params:
        a, b = t.inputs
        for x, c in ((a, b), (b, a)):
            k = _factor(c, x)
            if k is not None:
                return x, k
    return t, 1.0


def _scaled(x: Value, k: float):
    """k x in one canonical form, ``Mul(x, k)``, so that the same product reached by two
    paths ((x * -1) * 2, (x * 2) * -1, -(2 x)) is one node."""
    return x if k == 1.0 else _consed(Mul, (x, k), {})


def _product(a, b):
    """(ka x)(kb y) -> (ka kb)(x y): the scalars out, so that x y is one node however it
    was scaled (the product rule scales the same products by different constants); x y
    with its factors in one order (by identity: exact, multiplication commutes)."""
    if not (isinstance(a, Value) and isinstance(b, Value)) or a._array.dtype.kind != "f" \
            or a._array.dtype != b._array.dtype:
        return None
    x, ka = _term(a)
    y, kb = _term(b)
    if ka == 1.0 and kb == 1.0 and id(a) < id(b):
        return None  # already plain, and in order: recorded as it is
    if id(x) > id(y):
        x, y = y, x
    return _scaled(_consed(Mul, (x, y), {}), ka * kb)


def _collect(a, b, sign: float):
    """Like terms: k1 x + k2 x -> (k1 + k2) x for scalar factors (x + x is 2 x; with
    ``sign`` -1, a difference). The product rule makes such pairs at every order, and
    each would be differentiated as two terms. Only where nothing broadcasts and the
    dtypes agree. (Opening longer sums to find like terms deeper was measured: rebuilding
    them made more nodes than it saved.)"""
    if not (isinstance(a, Value) and isinstance(b, Value)) or a._array.dtype.kind != "f" \
            or a._array.shape != b._array.shape or a._array.dtype != b._array.dtype:
        return None
    x, ka = _term(a)
    y, kb = _term(b)
    if x is not y:
        return None
    return _scaled(x, ka + sign * kb)


def _fits(keep: Value, other) -> bool:
    """x op constant is x itself only if broadcasting and promotion change nothing."""
    if not isinstance(other, Value):
        return keep._array.dtype.kind in "fc"
    return other._array.ndim <= keep._array.ndim and other._array.dtype == keep._array.dtype \
        and all(o == 1 or o == s for o, s in zip(reversed(other._array.shape),
                                                  reversed(keep._array.shape)))


def _key(op, args: tuple, params: dict):
    parts = []
    for a in args:
        if isinstance(a, Value):  # and its version: a node of a mutated input is stale
            vc = a._version_counter
            parts.append((id(a), vc[0] if vc is not None else 0))
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
