"""Layer ``dynamo``: what the bytecode interpreter does with each callable it meets.

* ``inline``: user Python code (and ``nn.Module.forward``): interpreted in a new frame,
  so tensor-dependent branches inside it become graph breaks at the right place;
* ``native``: graphgrad's own functions and Tensor methods, called for real on graph
  Symbols (their ops go through the dispatch stack and become graph nodes);
* ``fold``: pure Python builtins (``len``, ``range``, ``isinstance``, ``math.*``...),
  evaluated at capture time on constants;
* ``eager``: anything else (NumPy, ``random``, ``print``, I/O, randomness and state
  changes inside graphgrad): a graph break; the call runs for real on every call.
"""

from __future__ import annotations

import builtins
import math
import operator
import sys
import types
from typing import Any

__all__ = ["classify", "user_code", "PURE_BUILTINS", "TENSOR_EAGER_ATTRS"]

PURE_BUILTINS = frozenset(id(f) for f in (
    len, isinstance, issubclass, range, abs, min, max, int, float, bool, str, tuple, list,
    dict, zip, enumerate, reversed, sorted, sum, any, all, getattr, hasattr, type, round,
    divmod, pow, slice, repr, callable, id, hash, iter, next, set, frozenset, map, filter,
    format, chr, ord, complex))
_PURE_MODULES = (math, operator)

# graphgrad functions that must run for real: randomness, state, autograd, I/O
# (dropout is captured: its mask is a random node of the graph, capture.py)
_EAGER_NAMES = {"rand", "randn", "randint", "randperm", "rand_like", "randn_like",
                "randint_like", "alpha_dropout",
                "bernoulli", "multinomial", "normal", "manual_seed", "seed", "backward",
                "save", "load", "register_hook", "retain_grad", "numpy", "tolist", "item",
                "requires_grad_", "set_grad_enabled", "zero_grad", "step", "from_numpy",
                "as_tensor", "uniform", "poisson", "is_grad_enabled", "is_inference_mode_enabled",
                "get_default_dtype", "set_default_dtype", "initial_seed"}
# methods of graphgrad's modules that only check their input (pure Python on shapes):
# interpreted, so a layer's forward stays one graph
_INLINE_NAMES = {"_check_input_dim"}
_EAGER_MODULES = ("graphgrad.autograd", "graphgrad.optim", "graphgrad.utils",
                  "graphgrad.serialization", "graphgrad.nn.init", "graphgrad.dynamo",
                  "graphgrad.compiler", "graphgrad.numdiff", "graphgrad.func",
                  "graphgrad.static", "graphgrad.graph", "graphgrad.nn.modules")

# Tensor attributes whose value during capture would be wrong (a graph Symbol does not
# know them) or that change state: read or called for real
TENSOR_EAGER_ATTRS = frozenset({"requires_grad", "grad", "grad_fn", "is_leaf", "data",
                                "_version", "item", "tolist", "numpy", "backward",
                                "register_hook", "retain_grad", "__setitem__", "storage",
                                "data_ptr", "_base", "untyped_storage", "__array__", "stride",
                                "storage_offset"})

# the Transformer and attention layers' helpers: compositions of layer calls, interpreted
# like forward
_INLINE_NAMES |= {"_sa_block", "_mha_block", "_ff_block", "_hidden", "_project", "_heads",
                  "_mask", "_additive", "_attend", "_rows", "_check_causal", "_on_rows", "_blocks"}


# Python code of these packages runs for real (random state, I/O, clocks, NumPy's own
# Python layer): interpreting it would trace what must not be traced
_RUN_FOR_REAL = (set(sys.stdlib_module_names) | {"numpy", "scipy", "torch"}) - {
    "functools", "operator", "math", "collections", "itertools"}


def _module_of(fn: Any) -> str:
    return getattr(fn, "__module__", None) or ""


def is_graphgrad(fn: Any) -> bool:
    mod = _module_of(fn)
    return mod == "graphgrad" or mod.startswith("graphgrad.")


def user_code(obj: Any) -> bool:
    """A function or class of the user's (not graphgrad's, the standard library's or
    NumPy's): the capture reads into it, so what it reads there is guarded."""
    mod = _module_of(obj)
    return not is_graphgrad(obj) and mod.split(".")[0] not in _RUN_FOR_REAL


def is_inplace_name(name: str) -> bool:
    return name.endswith("_") and not name.endswith("__") or name in (
        "__setitem__", "__iadd__", "__isub__", "__imul__", "__itruediv__", "__ipow__",
        "__imatmul__", "__ifloordiv__", "__imod__", "__iand__", "__ior__", "__ixor__")


def classify(fn: Any) -> str:
    """``"inline"``, ``"native"``, ``"fold"`` or ``"eager"`` for a plain callable."""
    name = getattr(fn, "__name__", "")
    if isinstance(fn, types.MethodType):
        fn = fn.__func__
    if isinstance(fn, types.FunctionType):
        if _module_of(fn).split(".")[0] in _RUN_FOR_REAL:
            return "eager"   # the standard library, NumPy: never traced into
        if is_graphgrad(fn):
            mod = _module_of(fn)
            if name in _INLINE_NAMES:
                return "inline"
            if name in _EAGER_NAMES or "rand" in name or mod.startswith(_EAGER_MODULES) \
                    or is_inplace_name(name):
                return "eager"
            return "native"
        return "inline"
    if id(fn) in PURE_BUILTINS:
        return "fold"
    if isinstance(fn, (types.BuiltinFunctionType, types.BuiltinMethodType)):
        owner = getattr(fn, "__self__", None)
        if isinstance(owner, types.ModuleType) and owner in _PURE_MODULES:
            return "fold"
        if owner is builtins and id(fn) in PURE_BUILTINS:
            return "fold"
    return "eager"
