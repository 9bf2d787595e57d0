"""Layer ``dynamo``: ``graphgrad.compile``, graph capture from Python bytecode.

``compile(fn)`` waits for the first call, then interprets ``fn``'s CPython bytecode
(3.11 and 3.12) in a pure-Python symbolic interpreter: tensors become nodes of a
``graphgrad.graph.Graph``, Python values are computed for real and guarded. A
tensor-dependent branch or a call it must not trace (NumPy, ``random``, ``print``) is a
graph break: the graph so far runs, the breaking operation runs for real, and capture
goes on from there. The result is a tree of guarded segments per function, cached, so
a later call costs a guard check plus the compiled graphs. See ``eval_frame`` for the
runtime, ``interpreter`` (``BytecodeInterpreter``; its opcodes in ``opcodes_stack``,
``opcodes_values``, ``opcodes_flow``) for the bytecode, ``capture`` for guards and
templates. The backends that turn each captured graph into a callable live in
``graphgrad.backends``.

What runs eagerly instead of being captured (never a wrong result): a function using
``try``/``except``/``finally``, generators or ``async`` (as a whole when it is the
compiled function, as one eager call when it is a callee); a ``with`` block on anything
but graphgrad's grad-mode context managers; Python code of the standard library and
NumPy; everything on Python versions other than 3.11 and 3.12 (with one warning).
Python ints and bools are specialized (guarded by value), a float made by an eager call
is a graph input; shapes are static until a recompile shows a size changing (or
``dynamic=True``).

Guards cover everything a graph read (see ``guards``): globals, class attributes through
instances and classes (with no instance shadow), the code, defaults and closure cells of
inlined functions, methods replaced on an instance or a class, ``training`` flags and
module hooks (which PyTorch does not guard). Modules are guarded by type and their
parameters are graph inputs, so instances of a class share graphs; identity guards hold
weak references; the recompile limits are Dynamo's (``recompile``).
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any

from graphgrad.nn import Module
from graphgrad.nn.modules.hooks import call_with_hooks

from . import config
from graphgrad.backends import BACKENDS, lookup_backend, register_backend
from .capture import Unsupported
from .eval_frame import BreakRecord, CompiledFunction, forget_all
from .exc import FailOnRecompileLimitHit, RecompileError
from .stats import counters

__all__ = ["compile", "CompiledFunction", "OptimizedModule", "Unsupported", "reset",
           "counters", "config", "BACKENDS", "register_backend", "lookup_backend",
           "BreakRecord", "RecompileError", "FailOnRecompileLimitHit"]


class OptimizedModule(Module):
    """``graphgrad.compile(module)``: a module whose forward is the compiled forward of
    the original (kept as ``_orig_mod``, so parameters and state dicts are shared)."""

    def __init__(self, mod: Module, compiled: CompiledFunction):
        super().__init__()
        self._orig_mod = mod
        self.__dict__["_compiled"] = compiled

    def forward(self, *args, **kwargs):
        # what ``mod(*args)`` would run, checked on every call (PyTorch compiles
        # ``mod.__call__``): a forward replaced on the instance is compiled in its turn,
        # and the module's hooks run around the compiled forward
        d = self.__dict__
        mod = d["_modules"]["_orig_mod"]
        own = mod.__dict__.get("forward")
        if own is None:
            if mod._hooks is None:   # the training hot path: no partial to build
                return d["_compiled"](mod, *args, **kwargs)
            fwd = functools.partial(d["_compiled"], mod)
        else:
            if d.get("_own_forward", (None,))[0] is not own:
                cf = d["_compiled"]
                d["_own_forward"] = (own, CompiledFunction(own, cf.backend, cf.fullgraph,
                                                           cf.dynamic))
            fwd = d["_own_forward"][1]
        if mod._hooks is None:
            return fwd(*args, **kwargs)
        return call_with_hooks(mod, args, kwargs, forward=fwd)

    def __getattr__(self, name: str) -> Any:
        try:
            return super().__getattr__(name)
        except AttributeError:
            return getattr(self.__dict__["_modules"]["_orig_mod"], name)

    def __repr__(self) -> str:
        return f"OptimizedModule({self._orig_mod!r})"


def compile(fn: Callable | None = None, *, backend: str | Callable = "default",
            fullgraph: bool = False, dynamic: bool | None = None, mode: str | None = None,
            options: dict | None = None, disable: bool = False,
            model: Callable | None = None):
    """Compile ``fn`` (a function or an ``nn.Module``; PyTorch's keyword ``model=`` works
    too) by bytecode capture, as ``torch.compile``. Nothing happens until the first call.
    Used bare or as ``@compile(backend=...)``.

    ``backend``: "default" (graphs as Python programs on arrays), "eager" (the IR
    interpreter), "print" (prints each graph it is handed) or a callable
    ``backend(graph, example_inputs) -> callable``. ``fullgraph=True``: a graph break
    raises ``Unsupported`` naming the reason and the source line. ``dynamic``: True gives
    symbolic sizes from the start; None (default) after a shape-changing recompile;
    False never. ``mode`` and ``options`` are accepted and ignored (one mode here)."""
    model = fn if fn is not None else model
    def wrap(target):
        if disable:
            return target
        if isinstance(target, Module):
            forward = type(target).forward
            return OptimizedModule(target, CompiledFunction(forward, backend, fullgraph,
                                                            dynamic, mode))
        return CompiledFunction(target, backend, fullgraph, dynamic, mode)
    if model is None:
        return wrap
    return wrap(model)


def reset() -> None:
    """Forget every cached graph and zero the counters (``torch._dynamo.reset``)."""
    forget_all()
    counters.clear()
