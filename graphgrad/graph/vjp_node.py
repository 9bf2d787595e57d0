"""Layer ``graph``: the ``vjp`` node kind: a derivative computed at run time, on the
concrete values, by a function object held in the node's params.

Graph differentiation normally calls each vjp rule on Symbols, so the backward pass
becomes ordinary call nodes. Three things cannot be built that way and run here:

* ``RuleFn``: an op's vjp rule that needs a dim the graph does not know as a Python
  number (``cat`` on a placeholder of shape ``(None, 3)`` splits its cotangent by the
  inputs' sizes): the rule runs when the shapes are known. (A rule that only computes
  with a size, as ``mean`` divides by the batch size, builds ordinary ops on a ``shape``
  node instead: passes/differentiate.py.)
* ``WhileGradFn``: the reverse of a ``while_loop`` (a ``while_grad`` node): replay the
  loop keeping each iteration's state (the tape), then run the body's vjp graph from
  the last iteration back to the first.
* ``VjpFn``: the vjp of either of these, or of another ``VjpFn``: it reruns the
  function on its inputs under eager autograd and pulls the cotangents back with
  ``autograd.grad``. Differentiating a ``vjp`` or ``while_grad`` node again makes one
  of these, so every order works; nested, each level records for the one above it
  (``create_graph`` exactly when its own inputs are being recorded).
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Sequence

from graphgrad.backend import xp
from graphgrad.ops.unbroadcast import unbroadcast
from graphgrad.tensor import Tensor, Value, set_grad_mode

from .node import Dyn

__all__ = ["run_vjp_rule", "RuleFn", "WhileGradFn", "VjpFn", "function_of",
           "while_grad_replay"]


def _differentiable(t) -> bool:
    return isinstance(t, Value) and t._array.dtype.kind in "fc"


def _fresh(t, requires_grad: bool) -> Tensor:
    """A new tensor on ``t``'s array with no history; ``requires_grad`` is also what the
    vjp rules read (``_requires_grad``) to skip cotangents nobody wants."""
    c = Tensor(t._array)
    c._requires_grad = requires_grad
    return c


def _zeros_like(t) -> Tensor:
    return Tensor(xp.zeros(t._array.shape, t._array.dtype))


class _RunTimeFn:
    """A function of a vjp node's inputs, printed (tables, code) by its name."""

    __name__ = "RunTimeFn"

    def __repr__(self) -> str:
        return self.__name__


class RuleFn(_RunTimeFn):
    """The vjp rule of ``op``: ``(g, out, *tensor inputs) -> cotangents at wrt``.

    ``literals`` holds the op's non-tensor arguments by position. Run on untracked
    values (a session step) the rule runs with grad mode off on history-free copies
    marked with what is wanted; run on values eager autograd records (inside a
    ``VjpFn``), it runs on them as they are, so that it can be differentiated."""

    def __init__(self, op, op_params: dict, literals: dict, wrt: tuple, n: int,
                 nargs: int | None = None):
        self.op, self.op_params, self.literals, self.wrt, self.n = op, op_params, literals, \
            wrt, n
        self.nargs = n if nargs is None else nargs  # the op's arguments; the rest bind Dyn
        self.__name__ = f"{op.__name__}Backward"

    def __call__(self, args: Sequence, interp=None) -> tuple:
        g, out, rest = args[0], args[1], iter(args[2:])
        full = [self.literals[k] if k in self.literals else next(rest) for k in range(self.n)]
        params = self.op_params
        if self.nargs != self.n:  # run-time params, bound as Interpreter.run_call does
            params = {k: tuple(int(full[e.index]) if isinstance(e, Dyn) else e for e in v)
                      if isinstance(v, tuple) else v for k, v in params.items()}
            full = full[:self.nargs]
        if any(isinstance(a, Value) and a._requires_grad for a in args):  # recorded: differentiable
            # a wanted cotangent must be computed even if its input is not recorded
            inputs = [_fresh(a, True) if k in self.wrt and _differentiable(a)
                      and not a._requires_grad else a for k, a in enumerate(full)]
            return self._rule(g, out, inputs, full, params)
        inputs = [_fresh(a, k in self.wrt) if isinstance(a, Value) else a
                  for k, a in enumerate(full)]
        prev = set_grad_mode(False)
        try:
            return self._rule(g, out, inputs, full, params)
        finally:
            set_grad_mode(prev)

    def _rule(self, g, out, inputs: list, full: list, params: dict) -> tuple:
        cts = self.op.vjp(g, out, *inputs, **params)
        res = []
        for k in self.wrt:
            a, ct = full[k], cts[k]
            if ct is None:
                res.append(_zeros_like(a))
                continue
            if not isinstance(ct, Value):
                ct = Tensor(xp.asarray(ct, a._array.dtype))
            res.append(unbroadcast(ct, a._array.shape, a._array.dtype, self.op.__name__))
        return tuple(res)


def while_grad_replay(cond: Callable, body: Callable, vjp: Callable, state: list,
                      caps: list, gs: list) -> tuple:
    """The reverse of ``while cond(*state, *caps): state = body(*state, *caps)`` for the
    output cotangents ``gs``: replay keeping every state (the tape, as TF's while-loop
    gradient keeps stacks), then ``vjp(*state_t, *caps, *gs)`` -> (cotangents of
    state_t, of caps) from the last iteration back to the first. Returns the cotangents
    of the initial state and of the captured values."""
    tape = []
    while bool(cond(*state, *caps)[0]):
        tape.append(state)
        state = list(body(*state, *caps))
    n, gcaps = len(state), None
    for st in reversed(tape):
        out = vjp(*st, *caps, *gs)
        gs = list(out[:n])
        gc = out[n:]
        gcaps = list(gc) if gcaps is None else [a + b for a, b in zip(gcaps, gc, strict=True)]
    if gcaps is None:  # the loop ran zero times
        gcaps = [_zeros_like(c) for c in caps]
    return (*gs, *gcaps)


class WhileGradFn(_RunTimeFn):
    """What a ``while_grad`` node computes, as a function of its inputs
    ``(*state, *captured, *output cotangents)``."""

    __name__ = "WhileBackward"

    def __init__(self, subgraphs: dict, n: int, m: int):
        self.subgraphs, self.n, self.m = subgraphs, n, m

    def __call__(self, args: Sequence, interp=None) -> tuple:
        if interp is None:
            from .interpreter import Interpreter
            run = {k: Interpreter(g).run for k, g in self.subgraphs.items()}
        else:
            run = {k: interp.sub(g).run for k, g in self.subgraphs.items()}
        n, m = self.n, self.m
        return while_grad_replay(run["cond"], run["body"], run["vjp"], list(args[:n]),
                                 list(args[n:n + m]), list(args[n + m:]))


class VjpFn(_RunTimeFn):
    """The vjp of ``fn`` (a RuleFn, WhileGradFn or VjpFn of ``nargs`` inputs): inputs
    ``(*fn's inputs, *cotangents of fn's outputs at positions has_ct)``, outputs the
    cotangents of fn's inputs at positions ``wrt``."""

    def __init__(self, fn, nargs: int, wrt: tuple, has_ct: tuple):
        self.fn, self.nargs, self.wrt, self.has_ct = fn, nargs, tuple(wrt), tuple(has_ct)
        self.__name__ = f"{fn.__name__}Backward"

    def __call__(self, args: Sequence, interp=None) -> tuple:
        from graphgrad.autograd import enable_grad, grad
        primal, cts = list(args[:self.nargs]), list(args[self.nargs:])
        # create_graph exactly when an enclosing VjpFn records our inputs
        tracking = any(isinstance(a, Value) and a._requires_grad for a in args)
        leaves = [_leaf(a, k in self.wrt) for k, a in enumerate(primal)]
        with enable_grad():
            outs = self.fn(leaves, interp)
        pairs = [(outs[k], ct) for k, ct in zip(self.has_ct, cts, strict=True)
                 if isinstance(outs[k], Value) and outs[k]._requires_grad]
        targets = [leaves[k] for k in self.wrt]
        found = [None] * len(targets)
        if pairs:
            found = grad([o for o, _ in pairs], targets, [c for _, c in pairs],
                         create_graph=tracking, allow_unused=True)
        return tuple(_zeros_like(t) if f is None else unbroadcast(f, t._array.shape, t._array.dtype)
                     for f, t in zip(found, targets, strict=True))


def _leaf(a, wanted: bool):
    """What ``VjpFn`` differentiates with respect to: a recorded value is cloned (still
    recorded, and one node per argument even when two arguments are the same tensor);
    a wanted float value becomes a fresh leaf that requires grad."""
    if not _differentiable(a):
        return a
    if a._requires_grad:
        return a.clone()
    return _fresh(a, True) if wanted else a


def function_of(params: dict):
    """The run-time function of a ``vjp`` node (a first-order node stores its op's rule
    description, a higher-order one the function itself under ``fn``)."""
    fn = params.get("fn")
    if fn is None:
        fn = RuleFn(params["op"], params["op_params"], params["literals"], params["wrt"],
                    params["n"], params.get("nargs"))
    return fn


# Grad mode is global: a rule run sets it off, a VjpFn on. On the scheduler's threads two
# vjp nodes at once would switch it under each other, so they take turns (re-entrant:
# a VjpFn runs its function, and a while_grad its vjp graph, inside its own turn).
_GRAD_MODE_TURN = threading.RLock()


def run_vjp_rule(params: dict, args: list, interp=None) -> tuple:
    """Run a ``vjp`` node (described by its ``params``) on concrete ``args``; one
    cotangent per ``wrt`` position."""
    with _GRAD_MODE_TURN:
        return tuple(function_of(params)(args, interp))
