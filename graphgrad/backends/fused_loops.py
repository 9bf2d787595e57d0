"""Layer ``backends``: NumPy's own inner loops of unary ufuncs (tanh, exp, log, sin...),
for Numba kernels to call. A Numba kernel cannot compute ``tanh`` as NumPy does (NumPy's
SIMD loops and scalar libm differ in the last bit, fused_numba.py), but it can call the
very loop NumPy calls: ``np.tanh(a, out=b)`` on a contiguous float32 ``a`` ends in
``loop(args=[a, b], dimensions=[n], steps=[4, 4], data)``, the first ``f->f`` entry of
the ufunc's loop table. Called the same way from a kernel, it computes the same bits,
without the ~0.45 us a ufunc call costs on a tiny array (a 200-op chain of multiplies and
tanh on (4, 4) float32: 94 us in NumPy calls, 8 us as one kernel).

The table is read from the ufunc object (``PyUFuncObject`` of NumPy's public C API,
``numpy/ufuncobject.h``: ``functions``, ``data``, ``types``, ``ntypes``); ``loop``
trusts it only when the fields it reads agree with what the ufunc says about itself in
Python (``nin``, ``nout``, ``nargs``, ``ntypes``, ``__name__``, ``types``), and when the
loop, called through ctypes, gives NumPy's own result bit for bit on a probe of values
(special values, both signs, an odd length, in place). Otherwise there is no loop and the
group keeps the NumPy lowering. Addresses differ between processes, so kernels take them
as arguments (``addresses``), never as compiled-in constants (Numba caches kernels on
disk). This module never imports Numba; fused_call_loop.py holds the kernel side.
"""

from __future__ import annotations

import ctypes
import sys

import numpy as np

from graphgrad.backend import xp
from graphgrad.passes import FusedProgram
from graphgrad.passes.fused_op import Ref

__all__ = ["loop", "loop_steps", "addresses"]


class _UFuncHead(ctypes.Structure):
    """The start of ``PyUFuncObject`` (numpy/ufuncobject.h) after ``PyObject_HEAD``."""

    _fields_ = [("ob_refcnt", ctypes.c_ssize_t), ("ob_type", ctypes.c_void_p),
                ("nin", ctypes.c_int), ("nout", ctypes.c_int), ("nargs", ctypes.c_int),
                ("identity", ctypes.c_int), ("functions", ctypes.POINTER(ctypes.c_void_p)),
                ("data", ctypes.POINTER(ctypes.c_void_p)), ("ntypes", ctypes.c_int),
                ("reserved1", ctypes.c_int), ("name", ctypes.c_char_p),
                ("types", ctypes.POINTER(ctypes.c_char))]


_LOOP_TYPE = ctypes.CFUNCTYPE(None, ctypes.c_void_p, ctypes.c_void_p, ctypes.c_void_p,
                              ctypes.c_void_p)
_FLOATS = (np.dtype(np.float32), np.dtype(np.float64))
_found: dict[tuple, tuple[int, int] | None] = {}   # (ufunc name, dtype) -> (loop, data)


def loop_steps(program: FusedProgram, scalar_forms=()) -> dict[int, tuple]:
    """``{step: (ufunc, dtype)}``: the steps that a kernel computes by NumPy's own loop:
    a unary ufunc as the whole forward (no params), its operand a value of the step's own
    float dtype, a loop found for it, and no exact scalar form (``scalar_forms``: op
    names, fused_numba.py)."""
    found = {}
    for j, s in enumerate(program.steps):
        f = s.op.forward
        if not isinstance(f, np.ufunc) or xp is not np or s.params or f.nin != 1 \
                or f.nout != 1 or s.spec.dtype not in _FLOATS \
                or s.op.__name__ in scalar_forms or not isinstance(s.args[0], Ref):
            continue
        a = s.args[0]
        arg = (program.input_specs if a.kind == "in" else program.steps)[a.index]
        arg = arg if a.kind == "in" else arg.spec
        if arg.dtype == s.spec.dtype and loop(f, s.spec.dtype) is not None:
            found[j] = (f, s.spec.dtype)
    return found


def loop(uf: np.ufunc, dtype) -> tuple[int, int] | None:
    """``(address of the inner loop, its data pointer)`` that NumPy runs for
    ``uf`` on ``dtype`` -> ``dtype``, or None (see the module docstring)."""
    dtype = np.dtype(dtype)
    key = (uf.__name__, dtype)
    if key not in _found:
        try:
            _found[key] = _lookup(uf, dtype)
        except Exception:  # noqa: BLE001 - an unreadable table means no loop, not an error
            _found[key] = None
    return _found[key]


def addresses(ufuncs: list) -> np.ndarray:
    """The ``(loop, data)`` pairs of ``ufuncs`` (``(ufunc, dtype)`` pairs, each with a
    loop) flattened into the int64 array a kernel takes."""
    return np.array([a for uf, dt in ufuncs for a in loop(uf, dt)], dtype=np.int64)


def _lookup(uf: np.ufunc, dtype: np.dtype) -> tuple[int, int] | None:
    if sys.implementation.name != "cpython" or ctypes.sizeof(ctypes.c_void_p) != 8:
        return None
    head = _UFuncHead.from_address(id(uf))
    if (head.nin, head.nout, head.nargs, head.ntypes) != (uf.nin, uf.nout, uf.nargs,
                                                          uf.ntypes) \
            or head.name != uf.__name__.encode() or uf.nargs != 2:
        return None
    nums = [ord(head.types[i]) for i in range(head.ntypes * 2)]
    if nums != [np.dtype(c).num for t in uf.types for c in t.split("->")]:
        return None
    # NumPy's loop selector takes the first entry whose types match exactly
    for i in range(head.ntypes):
        if nums[2 * i] == nums[2 * i + 1] == dtype.num:
            fn, data = head.functions[i], head.data[i] or 0
            return (fn, data) if fn and _agrees(uf, dtype, fn, data) else None
    return None


def _agrees(uf: np.ufunc, dtype: np.dtype, fn: int, data: int) -> bool:
    """Whether the loop at ``fn`` computes ``uf``'s result bit for bit on a probe."""
    info = np.finfo(dtype)
    special = [0.0, -0.0, np.inf, -np.inf, np.nan, info.tiny, -info.tiny, info.max,
               -info.max, info.eps, 1.0, -1.0, 0.5, 2.0, 10.0, 88.5, 710.0, 1e-30]
    grid = np.random.default_rng(0).standard_normal(301) * np.geomspace(1e-6, 1e3, 301)
    probe = np.concatenate([special, grid]).astype(dtype)
    with np.errstate(all="ignore"):
        want = uf(probe)
        got = np.empty_like(probe)
        _call(fn, data, probe, got)
        inplace = probe.copy()
        _call(fn, data, inplace, inplace)
    bits = np.dtype(f"u{dtype.itemsize}")
    return (want.dtype == dtype and np.array_equal(got.view(bits), want.view(bits))
            and np.array_equal(inplace.view(bits), want.view(bits)))


def _call(fn: int, data: int, src: np.ndarray, dst: np.ndarray) -> None:
    args = (ctypes.c_void_p * 2)(src.ctypes.data, dst.ctypes.data)
    dims = (ctypes.c_ssize_t * 1)(src.size)
    steps = (ctypes.c_ssize_t * 2)(src.strides[0], dst.strides[0])
    _LOOP_TYPE(fn)(ctypes.addressof(args), ctypes.addressof(dims), ctypes.addressof(steps),
                   data or None)
