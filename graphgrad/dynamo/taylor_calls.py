"""Layer ``dynamo``: Taylor-mode transforms traced into the graph.

``func.jet``, ``func.taylor_derivatives``, and the operators ``func.laplacian`` /
``func.linear_operator`` called in compiled code are expanded at capture time instead of
being a graph break. The transform runs for real on the graph values with its Taylor
level on the dispatch stack *above* the capture's builder: each op goes to the level,
which runs it below (the builder records the primal op) and then the op's Taylor rule
(the builder records what the rule emits). The function being differentiated is not
called for real but interpreted by a nested run of the bytecode interpreter, so what it
reads (module parameters, globals) is guarded like any inlined code.

A PDE operator is recorded as R unrolled 2-jets (plain Taylor mode,
``passes.collapse_taylor.unrolled_operator``) and the capture is marked, so that compile
runs ``passes.collapse_taylor`` on the graph: the R top coefficients collapse into one.

What cannot be traced stays a graph break, with the reason, and the transform runs
eagerly as before: a break inside the function (a tensor-dependent branch, a call that
must run for real), a Taylor rule that needs values, ``method="reverse"`` (nested
autograd), coefficients that are graph values. A float output that depends on a seeded
input but carries no series (its series lost on the way) is refused too: never a graph
that is silently wrong.
"""

from __future__ import annotations

import inspect
from typing import Any

import numpy as np

from graphgrad.func.jet import jet, jet_coefficients, taylor_derivatives
from graphgrad.func.laplacian import laplacian, linear_operator, operator_directions
from graphgrad.func.pytree import tree_flatten
from graphgrad.func.taylor_mode import SeriesLevel
from graphgrad.graph import Symbol
from graphgrad.passes.collapse_taylor import unrolled_operator
from graphgrad.tensor import Value
from graphgrad.tensor.modes import current_mode

from .capture import Unsupported
from .values import INLINED

__all__ = ["is_taylor_transform", "taylor_call", "OperatorV"]

_JETS = {id(jet): jet, id(taylor_derivatives): taylor_derivatives,
         id(jet_coefficients): jet_coefficients}
_OPERATORS = {id(laplacian): laplacian, id(linear_operator): linear_operator}


def is_taylor_transform(fn: Any) -> bool:
    return id(fn) in _JETS or id(fn) in _OPERATORS


class NotTraceable(Exception):  # noqa: N818 - a signal that the call runs eagerly
    """The transform cannot be traced into the graph (the call becomes a graph break)."""


class Interpreted:
    """The user's function as the transform calls it: a nested run of the bytecode
    interpreter on the capture (its reads guarded, its ops recorded), checked for lost
    series on return."""

    def __init__(self, interp, fn: Any):
        self.interp, self.fn = interp, fn

    def __call__(self, *args):
        from .interpreter import EagerStep, Return, _Break
        sub = type(self.interp)(self.interp.cap, [])
        try:
            out = sub.call(self.fn, list(args), {})
            if out is INLINED:
                sub.run()
        except Return as r:
            out = r.value
        except (EagerStep, _Break) as b:
            raise NotTraceable(f"{b.kind} inside the function: {b.reason}") from None
        _check_series(args, out)
        return out


def _check_series(args: tuple, out: Any) -> None:
    """Every float output that depends on a seeded input must carry a series at the
    Taylor level on top (a Symbol re-made on the way would have lost it)."""
    level = current_mode()
    if not isinstance(level, SeriesLevel):
        raise NotTraceable("the function ran outside its Taylor level")
    seeded = {a._node for a in args if isinstance(a, Symbol) and level.lookup(a) is not None}
    flat, _ = tree_flatten(out)
    for o in flat:
        if isinstance(o, Value) and not isinstance(o, Symbol) and seeded:
            raise NotTraceable("the function returned a tensor made outside the graph")
        if isinstance(o, Symbol) and o.dtype.is_floating_point and level.lookup(o) is None \
                and _depends(o._node, seeded):
            raise NotTraceable(f"the series of the output {o._node.name} was lost")


def _depends(node, sources: set) -> bool:
    seen, todo = set(), [node]
    while todo:
        n = todo.pop()
        if n in sources:
            return True
        if n in seen:
            continue
        seen.add(n)
        todo.extend(i for i in n.inputs if hasattr(i, "inputs"))
    return False


def _realized(cap, v: Any) -> Any:
    """``v`` with the lists and tuples read from outside (``Extras``) made real, at any
    depth (the series of a jet: a tuple of lists)."""
    v = cap.realize(v)
    if type(v) in (tuple, list):
        return type(v)(_realized(cap, i) for i in v)
    return v


def _bound(fn, args: list, kwargs: dict) -> inspect.BoundArguments:
    b = inspect.signature(fn).bind(*args, **kwargs)
    b.apply_defaults()
    return b


def _traced(interp, fn, args: list, kwargs: dict, run) -> Any:
    """``run()`` with the capture's builder under the transform; a graph break that runs
    ``fn(*args, **kwargs)`` eagerly where it cannot be traced."""
    cap = interp.cap
    mutated = dict(cap.mutated)
    try:
        with cap.builder.active():
            return run()
    except (NotTraceable, Unsupported, TypeError, ValueError, RuntimeError,
            NotImplementedError) as e:
        cap.mutated.clear()   # writes the nested run recorded: the eager call makes them
        cap.mutated.update(mutated)
        reason = str(e) if isinstance(e, NotTraceable) else f"{type(e).__name__}: {e}"
        return interp.eager_call(fn, args, kwargs, f"{fn.__qualname__} cannot be traced "
                                 f"into the graph ({reason})")


def taylor_call(interp, fn, args: list, kwargs: dict) -> Any:
    """A call of one of the Taylor transforms met by the interpreter."""
    cap = interp.cap
    if cap.concrete:
        return interp.eager_call(fn, args, kwargs, "")
    if id(fn) in _OPERATORS:
        return OperatorV(fn, args, kwargs)
    try:
        bound = _bound(fn, args, kwargs)
    except TypeError as e:
        return interp.eager_call(fn, args, kwargs, f"bad arguments for {fn.__name__}: {e}")
    names = list(bound.arguments)
    real = {k: _realized(cap, v) for k, v in bound.arguments.items() if k != names[0]}

    def run():
        return fn(Interpreted(interp, bound.arguments[names[0]]), **real)
    return _traced(interp, fn, args, kwargs, run)


def _apply_operator(make, args: tuple, kwargs: dict, x):
    """The eager form of a traced ``laplacian(f)(x)``, for the graph break."""
    return make(*args, **kwargs)(x)


class OperatorV:
    """``laplacian(f)`` / ``linear_operator(f, c)`` made in traced code: called, it is
    traced as unrolled 2-jets and its capture collapsed by compile."""

    __slots__ = ("make", "args", "kwargs")

    def __init__(self, make, args: list, kwargs: dict):
        self.make, self.args, self.kwargs = make, list(args), dict(kwargs)

    def __repr__(self) -> str:
        return f"<traced {self.make.__name__} operator>"

    def call(self, interp, args: list, kwargs: dict) -> Any:
        cap = interp.cap
        fallback = (_apply_operator, (self.make, tuple(self.args), self.kwargs, *args))

        def brk(reason: str):
            return interp.eager_call(fallback[0], list(fallback[1]), kwargs, reason)
        if kwargs or len(args) != 1:
            return brk(f"{self.make.__name__}(f) takes one argument x")
        try:
            bound = _bound(self.make, self.args, self.kwargs)
        except TypeError as e:
            return brk(f"bad arguments for {self.make.__name__}: {e}")
        if bound.arguments["method"] == "reverse":
            return brk(f"{self.make.__name__}(method='reverse') differentiates with "
                       f"autograd.grad, which runs eagerly")
        x = cap.realize(args[0])
        if not isinstance(x, Symbol):
            return brk(f"{self.make.__name__} of a value outside the graph")
        if x.shape is None or not isinstance(x.shape[-1], int):
            return brk(f"{self.make.__name__} needs the number of coordinates of x (its "
                       f"last dim) when it is traced")
        if self.make is laplacian:
            d = x.shape[-1]
            directions, weights = np.eye(d), np.ones(d)
        else:
            c = cap.realize(bound.arguments["coefficients"])
            if isinstance(c, Symbol) or not isinstance(c, (Value, np.ndarray, list, tuple)):
                return brk("linear_operator's coefficients are factored when it is made: "
                           "they must be a constant, not a graph value")
            directions, weights = operator_directions(c)
            if x.shape[-1] != directions.shape[1]:
                return brk(f"linear_operator: x has {x.shape[-1]} coordinates but the "
                           f"coefficients are for {directions.shape[1]}")
        f = Interpreted(interp, bound.arguments["f"])

        def run():
            out = unrolled_operator(f, x, directions, weights)
            cap.collapse_taylor = True   # compile runs passes.collapse_taylor on the graph
            return out
        return _traced(interp, fallback[0], list(fallback[1]), kwargs, run)
