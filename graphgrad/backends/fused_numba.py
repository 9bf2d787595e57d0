"""Layer ``backends``: a fused group as one Numba loop kernel, generated as Python source.

Only correctly rounded operations get a scalar form here (+ - * /, sqrt, max/min,
abs, relu, comparisons, ``where``, casts, squares): their result is the same bit for bit
in Numba and in NumPy, so results never depend on whether Numba is installed. exp, log,
tanh have no exact scalar form: Numba calls scalar libm, whose last bit can differ from
NumPy's SIMD loops (and which is 6-40x slower per element, cost_model.py), unless the
caller passes ``libm=True`` (``fused.config.libm``, opt-in). A group with them usually
gets fused_segments.py's kernel instead, which calls NumPy's own loop for them.

Only float32/float64 arithmetic groups (with comparisons, ``where``, casts and a few
math functions) get one: ``source`` returns None with the reason otherwise. The kernel
writes into a preallocated ``out``; every step's value is cast to its own dtype and
constants are typed to it (Numba would promote ``float32 * 0.5`` to float64; NumPy 2
keeps float32), and ``error_model="numpy"`` gives ``1/0 = inf`` as NumPy does.

The source is written to a file in the kernel cache directory and imported: Numba's
on-disk cache only works for functions defined in a real file, and the module is named
by a hash of its source, so a second process finds both the file and Numba's cached
machine code (``GRAPHGRAD_KERNEL_CACHE``, default ``~/.cache/graphgrad/kernels``).
Numba is imported lazily, at the first kernel build (its import costs ~0.3 s).
"""

from __future__ import annotations

import hashlib
import importlib.util
import os
import sys
from pathlib import Path
from types import ModuleType

from graphgrad.backend import xp
from graphgrad.passes import FusedProgram
from graphgrad.passes.fused_op import Ref

__all__ = ["source", "load", "cache_dir", "numba_available"]

# scalar expression of each supported op ({0}, {1}...: its operands)
_EXPR = {"Add": "{0} + {1}", "Sub": "{0} - {1}", "Mul": "{0} * {1}", "Div": "{0} / {1}",
         "Neg": "-{0}", "Maximum": "np.maximum({0}, {1})", "Minimum": "np.minimum({0}, {1})",
         "Abs": "abs({0})", "Sign": "np.sign({0})", "Sqrt": "np.sqrt({0})",
         "Relu": "np.maximum({0}, {z})",
         "Eq": "{0} == {1}", "Ne": "{0} != {1}", "Lt": "{0} < {1}", "Le": "{0} <= {1}",
         "Gt": "{0} > {1}", "Ge": "{0} >= {1}", "Where": "{1} if {0} else {2}",
         "Cast": "{0}"}
_LIBM = {"Exp": "np.exp({0})", "Log": "np.log({0})", "Tanh": "np.tanh({0})"}
_FLOATS = ("float32", "float64")


def numba_available() -> bool:
    return importlib.util.find_spec("numba") is not None


def cache_dir() -> Path:
    return Path(os.environ.get("GRAPHGRAD_KERNEL_CACHE")
                or Path.home() / ".cache" / "graphgrad" / "kernels")


def _refusal(program: FusedProgram, libm: bool, loops=()) -> str | None:
    """Why the program has no kernel, or None. ``loops``: steps that call NumPy's own
    inner loop (fused_loops.py) instead of a scalar form."""
    for j, s in enumerate(program.steps):
        name = s.op.__name__
        if j in loops:
            continue
        if name in _LIBM and not libm:
            return f"{name} has no Numba kernel form (scalar libm; fused.config.libm)"
        if name not in _EXPR and name not in _LIBM and not (
                name == "Pow" and s.args[1:] == (2,)):
            return f"{name} has no Numba kernel form"
        if name == "Div" and s.params.get("rounding_mode") is not None:
            return "rounded division"
        if s.params and name not in ("Div", "Cast"):
            return f"{name} with params {s.params}"
        if str(s.spec.dtype) not in _FLOATS + ("bool",):
            return f"dtype {s.spec.dtype} (Numba kernels are made for float32/float64)"
    for sp in program.input_specs:
        if str(sp.dtype) not in _FLOATS + ("bool",):
            return f"input dtype {sp.dtype}"
    return None


def source(program: FusedProgram, layout: str,
           libm: bool = False) -> tuple[str | None, str]:
    """``(source, "")`` of the kernel module for ``layout`` (one letter per input:
    ``f`` a flat contiguous array of the output's size, ``s`` a one-element value
    passed as a scalar, ``b`` an array broadcast to the output's shape, indexed in n
    dims), or ``(None, why)`` when the group has no Numba form. ``libm``: exp, log and
    tanh may be in the kernel (see the module docstring)."""
    why = _refusal(program, libm)
    if why is not None:
        return None, why
    nd = program.spec.ndim if "b" in layout else 1
    idx = ", ".join(f"i{d}" for d in range(nd))
    consts: list[str] = []
    lines = []
    for k, code in enumerate(layout):
        if code != "s":
            lines.append(f"a{k} = x{k}[{idx}]")
    vals = [f"x{k}" if code == "s" else f"a{k}" for k, code in enumerate(layout)]
    for j in range(len(program.steps)):
        lines.append(step_line(program, j, vals, consts))
    lines.append(f"out[{idx}] = t{len(program.steps) - 1}")
    params = ", ".join(["out"] + [f"x{k}" for k in range(len(layout))])
    head = ["import numpy as np", "from numba import njit, prange", "", *consts, ""]
    funcs = []
    for name, rng, flags in (("serial", "range", ""), ("parallel", "prange", ", parallel=True")):
        body, ind = [], "    "
        for d in range(nd):
            body.append(f"{ind}for i{d} in {rng if d == 0 else 'range'}(out.shape[{d}]):")
            ind += "    "
        body.extend(f"{ind}{ln}" for ln in lines)
        funcs.append(f"@njit(cache=True, error_model='numpy', nogil=True{flags})\n"
                     f"def {name}({params}):\n" + "\n".join(body) + "\n")
    return "\n".join(head) + "\n\n" + "\n\n".join(funcs), ""


def step_line(program: FusedProgram, j: int, vals: list[str], consts: list[str]) -> str:
    """``t{j} = ...``: step ``j`` as a scalar statement (``vals``: each input's name in the
    kernel); its constants, typed, are appended to ``consts`` as module-level lines."""
    s = program.steps[j]
    dt = str(s.spec.dtype)
    arg_dt = next((str(_spec(a, program, j).dtype) for a in s.args
                   if isinstance(a, Ref) and str(_spec(a, program, j).dtype) != "bool"), dt)
    ops = []
    for a in s.args:
        if isinstance(a, Ref):
            ops.append(vals[a.index] if a.kind == "in" else f"t{a.index}")
        else:
            cdt = arg_dt if arg_dt != "bool" else "float64"
            consts.append(f"_k{len(consts)} = np.{cdt}(float({float(a)!r}))")
            ops.append(f"_k{len(consts) - 1}")
    if s.op.__name__ == "Pow":
        expr = f"{ops[0]} * {ops[0]}"
    elif s.op.__name__ in _LIBM:
        expr = _LIBM[s.op.__name__].format(*ops)
    elif "{z}" in _EXPR[s.op.__name__]:   # relu's zero, typed
        consts.append(f"_k{len(consts)} = np.{dt}(0)")
        expr = _EXPR[s.op.__name__].format(*ops, z=f"_k{len(consts) - 1}")
    else:
        expr = _EXPR[s.op.__name__].format(*ops)
    return f"t{j} = np.{'bool_' if dt == 'bool' else dt}({expr})"


def _spec(a: Ref, program: FusedProgram, _j: int):
    return program.input_specs[a.index] if a.kind == "in" else program.steps[a.index].spec


def load(src: str) -> ModuleType:
    """Write ``src`` to the cache directory (once: an unchanged file keeps its mtime, which
    Numba's cache index is stamped with) and import it."""
    name = "ggk_" + hashlib.sha1(src.encode()).hexdigest()[:20]
    if name in sys.modules:
        return sys.modules[name]
    folder = cache_dir()
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / f"{name}.py"
    if not path.exists():
        tmp = folder / f".{name}.{os.getpid()}.tmp"
        tmp.write_text(src)
        os.replace(tmp, path)   # atomic: another process never reads half a file
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    sys.modules[name] = module
    return module


def as_operand(a, code: str, shape: tuple, flat: bool):
    """An input array in the form ``layout`` code ``code`` says (``flat``: the kernel
    loops over one flat index, all array inputs being contiguous and full-size)."""
    if code == "s":   # (indexed, not reshaped: a broadcast value would be copied)
        return a[(0,) * a.ndim] if isinstance(a, xp.ndarray) else a
    if flat:
        return a.reshape(-1)
    return xp.broadcast_to(a, shape)
