"""Layer ``func``: Taylor mode, a level on the dispatch stack that carries truncated
Taylor series (the machinery of ``func.jet``).

While a ``TaylorLevel`` is on the stack, each op call reaches it first. It runs the op
on the levels below (the primal, taped for reverse mode as usual), then the op's Taylor
rule (``Op.taylor``, beside its vjp and jvp) with the level lowered, so the series
computation is itself ordinary graphgrad ops: reverse mode records it (the gradient of
a jet coefficient w.r.t. parameters), vmap batches it, an enclosing level sees it. This
is forward AD's design (``autograd.forward_ad``) with K coefficients in place of one
tangent; like JAX's ``JetTrace`` there is no fallback: an op without a rule raises.

Series live in the level (by tensor identity), not on the tensors: a level is
short-lived (one ``jet`` call) and nothing else needs them.
"""

from __future__ import annotations

from graphgrad.tensor import Mode, Value, dispatch, pop_mode, push_mode

__all__ = ["SeriesLevel", "TaylorLevel", "no_rule_error"]


def no_rule_error(op) -> NotImplementedError:
    return NotImplementedError(
        f"jet: the op {op.__name__} has no Taylor rule ({op.__name__}.taylor is not defined), "
        f"so Taylor mode cannot propagate a series through it. Add a `taylor` rule beside "
        f"its vjp/jvp rules in graphgrad/ops.")


class SeriesLevel(Mode):
    """What Taylor-mode levels share: per-tensor payloads kept by tensor identity, an op
    call that runs the primal below and then ``propagate`` (the op's Taylor rule) with
    the level lowered, no in-place writes, and push/pop as a context manager."""

    name = "jet"
    # each op call is run below (lowered) and then the rule: over a graph builder, the
    # builder records both, so a Symbol's methods need not push the builder over it
    over_graph_builder = True

    def __init__(self):
        self._store: dict[int, tuple[Value, object]] = {}

    def lookup(self, t):
        """``t``'s payload at this level; None for a constant."""
        if not isinstance(t, Value):
            return None
        hit = self._store.get(id(t))
        return hit[1] if hit is not None and hit[0] is t else None

    def store(self, t: Value, payload) -> None:
        if payload is not None:
            self._store[id(t)] = (t, payload)

    def propagate(self, op, rule, payloads: tuple, out, args: tuple, params: dict):
        raise NotImplementedError

    def process(self, op, args: tuple, params: dict):
        payloads = tuple(self.lookup(a) for a in args)
        with self.lowered():
            out = dispatch(op, args, params)
            if all(p is None for p in payloads) or not isinstance(out, Value):
                return out
            if not op.differentiable or out._array.dtype.kind not in "fc":
                return out  # comparisons, argmax, integer results: zero series
            rule = getattr(op, "taylor", None)
            if rule is None:
                raise no_rule_error(op)
            self.store(out, self.propagate(op, rule, payloads, out, args, params))
        return out

    def process_inplace(self, t, fn, args, kw, name, below):
        """``t <- fn(t, ...)``: ``t`` takes the new value's payload (the ops of ``fn``
        come through ``process``). When the graph is recorded, ``t``'s old identity keeps
        the old payload, as forward AD's tangent. A write into a view, or into a tensor
        with views, would have to update the payloads of the aliases: refused."""
        if self.lookup(t) is None and all(self.lookup(a) is None for a in args):
            return below(fn)
        if _aliased(t):
            raise NotImplementedError(
                f"{self.name}: the in-place op {name} on a view (or on a tensor with views) "
                f"is not supported under Taylor mode; use its out-of-place form")
        new = []

        def with_payloads(old, *a, **k):
            if old is not t:  # the graph is recorded: old is t's identity before the write
                self.store(old, self.lookup(t))
            new.append(fn(old, *a, **k))
            return new[-1]
        out = below(with_payloads)
        if new:
            self._store.pop(id(t), None)
            self.store(t, self.lookup(new[-1]))
        return out

    def __enter__(self):
        push_mode(self)
        return self

    def __exit__(self, *exc) -> None:
        pop_mode(self)
        self._store.clear()


class TaylorLevel(SeriesLevel):
    """One Taylor-mode level carrying ``order`` coefficients per tensor."""

    def __init__(self, order: int):
        super().__init__()
        self.order = order

    def __repr__(self) -> str:
        return f"TaylorLevel(order={self.order})"

    def series(self, t) -> list | None:
        """The coefficients x_1..x_K of ``t`` at this level; None for a constant."""
        return self.lookup(t)

    def attach(self, t: Value, terms: list) -> None:
        self.store(t, _fitted(t, terms))

    def propagate(self, op, rule, payloads, out, args, params):
        return _fitted(out, rule(payloads, out, *args, **params))


def _aliased(t: Value) -> bool:
    e = t._extras
    return e is not None and (e.base is not None or any(
        r() is not None for r in (e.views or ())))


def _fitted(t: Value, terms: list) -> list | None:
    """The terms shaped and typed as ``t`` (a rule may leave broadcasting implicit or
    return a number for a 0-d constant); None when all are zero."""
    if all(c is None for c in terms):
        return None
    shape = t.shape
    fixed = []
    for c in terms:
        if c is not None and isinstance(c, Value):
            if c.shape != shape and c.ndim <= len(shape):
                c = c.expand(*shape)
            if c._array.dtype != t._array.dtype:
                c = c.to(t.dtype)
        elif c is not None:
            c = t.new_full(tuple(shape), c)
        fixed.append(c)
    return fixed
