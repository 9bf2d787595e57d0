"""Layer ``backends``: the cost model that picks a fused group's lowering: a Numba loop
kernel or the NumPy ``out=`` program.

The constants are measurements on the development machine (2-core AMD Zen 4, NumPy
2.4, numba 0.68.1 from PyPI, float32; the numba-codegen reference notes of this
project, min of 7 runs):

* a NumPy ufunc call costs ~0.5-0.7 us on a tiny array; through an op's ``forward``
  ~1 us. On (4096, 1024) float32, a 10-op arithmetic chain takes 25.9 ms in NumPy
  (~0.62 ns per element per op, memory-bound, a full temporary per op);
* a serial Numba kernel call costs ~0.3 us, a ``parallel=True`` one ~2.5 us. The same
  arithmetic chain fused runs 10.7 ms serial (~0.26 ns/element/op), 6.9 ms on 2
  threads (~0.17) on a quiet machine. On the shared 2-core machine under load (load
  average ~3, other processes running), OpenMP's threads lost at every size: a 3-op
  kernel on 32k float32 took 5.3 ms parallel against 3.5 us serial, on 4M elements
  8.3 ms against 3.8 ms (medians). So kernels run serial unless ``config.parallel``
  (env ``GRAPHGRAD_NUMBA_PARALLEL=1``) asks for threads, and then only past
  ``PARALLEL_MIN_ELEMENTS``;
* Numba's wheels have no vector math library (SVML off): ``exp`` costs ~6x NumPy's SIMD
  loop per element, ``log`` ~9x, ``tanh`` ~40x (NumPy ~0.5 ns/element, so ~3, ~5 and
  ~20 ns). A 10-op chain with tanh and exp runs at 0.13x NumPy's speed in Numba;
* NumPy with ``out=`` buffers (no full temporary per op) gains ~1.3x on large arrays;
* a unary ufunc computed inside a kernel by NumPy's own loop (fused_loops.py) costs what
  NumPy's loop costs per element (tanh float32 ~2.7 ns here: this NumPy has no AVX-512
  tanh on this CPU), plus a buffer pass; ``NUMBA_LOOP_NS`` leaves large groups that are
  mostly such ops to NumPy, where both lowerings measured the same (a tanh GELU on
  (512, 512) float32: 1.01 ms kernel, 0.99 ms NumPy).

So Numba wins on arithmetic chains and on small tensors (one call instead of one per
op). Transcendentals reach it only when ``fused.config.libm`` allows them (fused_numba.py
keeps them out by default: libm's last bit differs from NumPy's SIMD loops); their
per-element cost below makes NumPy win on large tensors then.
``choose`` is a pure function of the group and the element count: decisions never
depend on timing.
"""

from __future__ import annotations

from typing import NamedTuple

__all__ = ["Estimate", "choose", "PARALLEL_MIN_ELEMENTS"]

NUMPY_CALL_US = 1.0          # one op's forward on a tiny array
NUMPY_NS_PER_ELEMENT = 0.62  # one op, memory-bound, allocating its result
NUMPY_OUT_GAIN = 1.3         # ``out=`` buffers instead of a temporary per op
NUMBA_CALL_US = 0.3          # serial kernel call
NUMBA_PARALLEL_CALL_US = 2.5
NUMBA_NS_PER_OP = 0.26       # an arithmetic op inside a fused serial loop
NUMBA_PARALLEL_GAIN = 1.55   # 2 threads on a memory-bound loop
PARALLEL_MIN_ELEMENTS = 1 << 20
# per-element cost of the ops that call scalar libm in a Numba loop (ns)
NUMBA_LIBM_NS = {"Exp": 3.0, "Log": 5.0, "Tanh": 20.0}
# an op computed by NumPy's own SIMD loop inside a kernel (fused_loops.py), on a block
# in L1: ~NumPy's per-element cost without the memory traffic, plus a pass over a buffer
NUMBA_LOOP_NS = 1.0


class Estimate(NamedTuple):
    """The choice, both estimates (microseconds) and the reason in words."""

    lowering: str        # "numba" or "numpy"
    parallel: bool
    numba_us: float | None
    numpy_us: float
    reason: str


def choose(op_names: list[str], numel: int, numba_ok: bool, why_not: str = "",
           allow_parallel: bool = False, loops: list[str] = ()) -> Estimate:
    """The lowering for a group of ``op_names`` over ``numel`` output elements.
    ``numba_ok``: whether the group has a Numba kernel at all (``why_not`` if not);
    ``allow_parallel``: whether threads may be used (see the module docstring);
    ``loops``: the names of the ops the kernel computes by NumPy's loop (one each)."""
    k = len(op_names)
    numpy_us = k * NUMPY_CALL_US + k * numel * NUMPY_NS_PER_ELEMENT / NUMPY_OUT_GAIN / 1e3
    if not numba_ok:
        return Estimate("numpy", False, None, numpy_us, why_not)
    per_element = sum(NUMBA_LIBM_NS.get(n, NUMBA_NS_PER_OP) for n in op_names) - sum(
        NUMBA_LIBM_NS.get(n, NUMBA_NS_PER_OP) - NUMBA_LOOP_NS for n in loops)
    parallel = allow_parallel and numel >= PARALLEL_MIN_ELEMENTS
    numba_us = (NUMBA_PARALLEL_CALL_US if parallel else NUMBA_CALL_US) + \
        numel * per_element / (NUMBA_PARALLEL_GAIN if parallel else 1.0) / 1e3
    if numba_us < numpy_us:
        why = (f"numba {'parallel' if parallel else 'serial'}: ~{numba_us:.1f} us vs NumPy "
               f"~{numpy_us:.1f} us ({k} ops, {numel} elements)")
        return Estimate("numba", parallel, numba_us, numpy_us, why)
    why = f"numpy: ~{numpy_us:.1f} us vs numba ~{numba_us:.1f} us"
    return Estimate("numpy", False, numba_us, numpy_us, why)
