"""Layer ``fx``: symbolic tracing without example inputs, by recording calls as torch.fx does.

graphgrad's ops need their inputs' ranks when they are built (``sum(dim=-1)`` fixes the
dim). Without example inputs a placeholder's rank is unknown, so a call from the user's
code that needs it cannot become op nodes. Such a call is recorded instead as torch.fx
records every call: a ``call_function`` node (``graphgrad.sum``, ``operator.matmul``) or a
``call_method`` node (``"sum"``) whose output's rank is unknown, run when the graph runs
(``graph.python_call``). Calls that need no rank (elementwise ops, ``relu``) still become
the op nodes, so passes and backends see ops wherever the IR can have them.

How a call is caught: Proxy's methods and operators (``x.sum(dim=0)``, ``x @ y``), and
graphgrad's public functions, patched while tracing as torch.fx patches what it wraps
(``graphgrad.sum``, ``graphgrad.nn.functional.softmax``, and the traced function's globals
that name them, for ``from graphgrad import relu``). Only calls made by the user's code
are caught; graphgrad's own code calling these functions runs as usual. A call is tried
first; if graphgrad code in it needed an unknown rank, the nodes it added are removed and
the call is recorded as one node.
"""

from __future__ import annotations

import builtins
import contextlib
import functools
import operator
import sys
import types
from collections.abc import Callable, Iterator
from typing import Any

from graphgrad.backend import get_default_dtype
from graphgrad.graph import Spec
from graphgrad.graph.python_call import split_call
from graphgrad.tensor.modes import current_mode

from .errors import UnknownShapeError, in_graphgrad

__all__ = ["attempt", "patched_functions", "method_target", "catching_method", "record",
           "wrap", "method_calls"]

# fx.wrap's registrations: (the globals of the module that called it, the name wrapped)
_WRAPPED: list[tuple[dict, str]] = []
_ABSENT = object()   # a wrapped builtin that the module's globals did not hold

# the modules whose public functions are graphgrad's API for tensors
_API_MODULES = ("graphgrad", "graphgrad.nn.functional")
_SOURCES = ("graphgrad.ops", "graphgrad.tensor", "graphgrad.nn.functional")


def _needs_rank(err: BaseException) -> bool:
    """Whether ``err`` (or an error it was raised from) is an unknown rank or size."""
    seen = 0
    while err is not None and seen < 20:
        if isinstance(err, UnknownShapeError):
            return True
        err = err.__cause__ or err.__context__
        seen += 1
    return False


def method_target(name: str) -> tuple[str, Any, bool]:
    """How torch.fx records the method ``name`` of a Proxy: an operator (``__add__``) as a
    ``call_function`` of ``operator.add`` (``swap``: reflected, ``__radd__``), any other
    method as a ``call_method``."""
    if name.startswith("__") and name.endswith("__"):
        bare = name[2:-2]
        if bare.startswith("r") and hasattr(operator, bare[1:]) and \
                not hasattr(operator, bare):
            return "call_function", getattr(operator, bare[1:]), True
        fn = getattr(operator, bare, None) or getattr(operator, bare + "_", None)
        if fn is not None:
            return "call_function", fn, False
    return "call_method", name, False


def _snapshot(tracer) -> tuple:
    g = tracer.graph
    return (len(g.nodes), len(g.inputs), dict(g._names), dict(tracer._attr_nodes),
            dict(tracer._shapes), dict(tracer.consts), tracer._constants)


def _restore(tracer, snap: tuple) -> None:
    g = tracer.graph
    n_nodes, n_inputs, names, attrs, shapes, consts, constants = snap
    del g.nodes[n_nodes:]
    del g.inputs[n_inputs:]
    g._names = names
    tracer._attr_nodes, tracer._shapes, tracer.consts = attrs, shapes, consts
    tracer._constants = constants


def attempt(tracer: Any, kind: str, target: Any, call: Callable, args: tuple,
            kwargs: dict) -> Any:
    """``call()``; where graphgrad code in it needed a rank that is unknown, a
    ``kind`` node of ``target`` on ``args``/``kwargs`` instead."""
    snap = _snapshot(tracer)
    tracer.attempting += 1
    try:
        return call()
    except Exception as e:
        if not _needs_rank(e):
            raise
        _restore(tracer, snap)
    finally:
        tracer.attempting -= 1
    return record(tracer, kind, target, args, kwargs)


def record(tracer: Any, kind: str, target: Any, args: tuple, kwargs: dict) -> Any:
    """A ``call_function``/``call_method`` node; its output's rank is unknown."""
    from .proxy import Proxy
    values, args_s, kwargs_s = split_call(args, kwargs, lambda v: isinstance(v, Proxy))
    inputs = [tracer.node_of(v) for v in values]
    dtype = next((n.spec.dtype for n in inputs if isinstance(n.spec, Spec)),
                 get_default_dtype().np)
    name = target if isinstance(target, str) else getattr(target, "__name__", "call")
    node = tracer.graph.add(kind, name.strip("_") or "call", inputs=tuple(inputs),
                            params={"target": target, "args": args_s, "kwargs": kwargs_s},
                            spec=Spec(None, dtype), deps=tracer.deps())
    return tracer.proxy(node)


def _has_proxy(args: tuple, kwargs: dict) -> bool:
    from .proxy import Proxy
    values, _, _ = split_call(args, kwargs, lambda v: isinstance(v, Proxy))
    return bool(values)


def _catching(fn: Callable) -> Callable:
    """``fn`` as called from the user's code while tracing: tried, recorded as a
    ``call_function`` node where it needed an unknown rank."""
    @functools.wraps(fn)
    def wrapper(*args, **kwargs):
        tracer = current_mode()
        if not getattr(tracer, "defer", False) or in_graphgrad(sys._getframe(1)) or \
                not _has_proxy(args, kwargs):
            return fn(*args, **kwargs)
        return attempt(tracer, "call_function", fn, lambda: fn(*args, **kwargs), args, kwargs)
    wrapper.__fx_original__ = fn
    return wrapper


def catching_method(name: str, fn: Callable) -> Callable:
    """Proxy's method ``name``: as called from the user's code while tracing, tried, and
    recorded as torch.fx records it (``operator.add``, ``"sum"``) where it needed an
    unknown rank."""
    kind, target, swap = method_target(name)

    @functools.wraps(fn)
    def method(self, *args, **kwargs):
        tracer = self._tracer
        if in_graphgrad(sys._getframe(1)):
            return fn(self, *args, **kwargs)
        first = len(tracer.graph.nodes)
        if tracer.defer:
            call_args = (args[0], self) if swap and args else (self, *args)
            out = attempt(tracer, kind, target, lambda: fn(self, *args, **kwargs), call_args,
                          kwargs)
        else:
            out = fn(self, *args, **kwargs)
        node = getattr(out, "_node", None)
        if kind == "call_method" and node is not None and node.kind == "call" and \
                node in tracer.graph.nodes[first:]:
            method_calls(tracer.graph)[node] = name   # torch.fx's opcode for it
        return out
    return method


def method_calls(graph: Any) -> dict:
    """The op nodes of ``graph`` that the user's code made as tensor methods
    (``x.relu()``), with the method's name: torch.fx calls them ``call_method``. Kept on
    the graph (passes that rebuild it drop it: their nodes are then ``call_function``)."""
    calls = graph.__dict__.get("fx_methods")
    if calls is None:
        calls = graph.__dict__["fx_methods"] = {}
    return calls


def wrap(fn_or_name: str | Callable) -> str | Callable:
    """``torch.fx.wrap``: called at a module's top level, it makes the function of that
    name in the module a leaf of symbolic tracing: a call of it with a traced value is
    recorded as one ``call_function`` node, not traced through."""
    frame = sys._getframe(1)
    if frame.f_code.co_name != "<module>":
        raise NotImplementedError("wrap must be called at the top level of a module")
    name = fn_or_name if isinstance(fn_or_name, str) else fn_or_name.__name__
    _WRAPPED.append((frame.f_globals, name))
    return fn_or_name


def _leaf(fn: Callable) -> Callable:
    """A wrapped function while tracing: one ``call_function`` node when a Proxy is passed."""
    @functools.wraps(fn)
    def wrapper(*args, **kwargs):
        tracer = current_mode()
        if getattr(tracer, "defer", None) is None or not _has_proxy(args, kwargs):
            return fn(*args, **kwargs)
        return record(tracer, "call_function", fn, args, kwargs)
    return wrapper


def _api_functions() -> Iterator[tuple[Any, str, Callable]]:
    for path in _API_MODULES:
        ns = sys.modules.get(path)
        if ns is None:
            continue
        for name, value in list(vars(ns).items()):
            if isinstance(value, types.FunctionType) and not name.startswith("_") and \
                    getattr(value, "__module__", "").startswith(_SOURCES):
                yield ns, name, value


@contextlib.contextmanager
def patched_functions(fn_globals: dict | None) -> Iterator[None]:
    """graphgrad's public tensor functions replaced by catching wrappers, in their modules
    and in ``fn_globals`` (the traced function's), restored on exit."""
    from .node_view import public_function
    public_function(type)   # the op <-> function tables read the originals
    wrappers: dict[int, Callable] = {}
    undo: list[tuple[Any, str, Any]] = []
    for ns, name, fn in _api_functions():
        w = wrappers.get(id(fn))
        if w is None:
            w = wrappers[id(fn)] = _catching(fn)
        undo.append((ns, name, fn))
        setattr(ns, name, w)
    originals = {id(fn): fn for _, _, fn in undo}
    for globs, name in _WRAPPED:
        fn = globs.get(name, getattr(builtins, name, None))   # wrap("len"): a builtin
        if fn is not None:
            undo.append((globs, name, globs.get(name, _ABSENT)))
            globs[name] = _leaf(getattr(fn, "__fx_original__", fn))
    if fn_globals is not None:
        for name, value in list(fn_globals.items()):
            if id(value) in wrappers and originals.get(id(value)) is value:
                undo.append((fn_globals, name, value))
                fn_globals[name] = wrappers[id(value)]
    try:
        yield
    finally:
        for ns, name, fn in reversed(undo):
            if isinstance(ns, dict) and fn is _ABSENT:
                del ns[name]
            elif isinstance(ns, dict):
                ns[name] = fn
            else:
                setattr(ns, name, fn)
