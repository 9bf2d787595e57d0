"""Layer ``backends``: how a ``Fused`` node (``graphgrad.passes.fuse_elementwise``) runs:
``lower(program)`` gives a ``FusedKernel``, one of two lowerings chosen by the cost model
(cost_model.py):

* ``"numba"``: one loop kernel generated as source and compiled by Numba
  (fused_numba.py), serial or parallel; a group with row sums (a layer norm) gets a
  kernel that walks the rows (fused_rows.py); a group with tanh, exp, log or another
  unary ufunc gets a kernel that calls NumPy's own inner loop for it between fused
  element loops (fused_loops.py, fused_segments.py: NumPy's bits, one call instead of
  one per op); compiled once per argument layout, cached in memory and on disk;
* ``"numpy"``: the group's ufuncs writing into ``out=`` buffers, block by block for
  large arrays (fused_numpy.py).

Numba is the optional extra ``graphgrad[jit]``; without it, or with
``config.numba = False`` (env ``GRAPHGRAD_NUMBA=0``), every group gets the NumPy
lowering, which computes what eager computes. ``config.parallel`` (env
``GRAPHGRAD_NUMBA_PARALLEL=1``): threaded kernels for large groups (off by default:
cost_model.py says why). ``config.libm`` (env ``GRAPHGRAD_NUMBA_LIBM=1``): exp, log and
tanh as scalar libm calls in Numba kernels where NumPy's loop is not available to them
(row kernels; a NumPy whose loop table cannot be read), whose results may then differ
from NumPy's in the last bit (fused_numba.py); where the loop is available it is used,
libm or not (exact, and faster: scalar libm tanh costs ~20 ns an element). A Numba
kernel that fails to compile warns once and its group falls back to NumPy. ``config.debug_dir`` (env
``GRAPHGRAD_DEBUG_DIR``): each kernel's generated source is written there too.
``config.autotune`` (env ``GRAPHGRAD_FUSION_AUTOTUNE=1``, opt-in): a group that has
both lowerings times them on its first call (``AUTOTUNE_REPEATS`` runs each, interleaved,
the minimum of each by ``config.clock``) and keeps the faster; the decision is cached
per kernel key in ``autotune_decisions``, so an equal group never times again. The
default is the cost model: its decisions never depend on timing.
``config.memory_plan`` (env ``GRAPHGRAD_MEMORY_PLAN=0`` turns it off): array programs
run large groups in place or into dead buffers (``FusedKernel(..., out=)``,
memory_plan.py).
"""

from __future__ import annotations

import os
import time
import warnings
from dataclasses import dataclass, field
from math import prod
from pathlib import Path

from graphgrad.backend import xp
from graphgrad.graph import Graph
from graphgrad.passes import FusedProgram
from graphgrad.passes.fusion import REDUCTIONS

from . import fused_loops, fused_numba, fused_rows, fused_segments
from .cost_model import Estimate, choose
from .fused_numpy import _into, _row_major, numpy_source

__all__ = ["FusedKernel", "lower", "config", "kernel_cache", "dump_graphs",
           "autotune_decisions", "AUTOTUNE_REPEATS"]


@dataclass
class FusionConfig:
    """Switches of the fused lowerings (read when a kernel is made)."""

    numba: bool = field(default_factory=lambda: os.environ.get("GRAPHGRAD_NUMBA", "1") != "0")
    libm: bool = field(default_factory=lambda: os.environ.get("GRAPHGRAD_NUMBA_LIBM") == "1")
    parallel: bool = field(
        default_factory=lambda: os.environ.get("GRAPHGRAD_NUMBA_PARALLEL", "0") == "1")
    debug_dir: str | None = field(default_factory=lambda: os.environ.get("GRAPHGRAD_DEBUG_DIR"))
    autotune: bool = field(
        default_factory=lambda: os.environ.get("GRAPHGRAD_FUSION_AUTOTUNE", "0") == "1")
    clock: object = time.perf_counter   # what autotuning reads (a test injects a fake)
    # array programs reuse buffers and run fused groups in place (memory_plan.py)
    memory_plan: bool = field(
        default_factory=lambda: os.environ.get("GRAPHGRAD_MEMORY_PLAN", "1") != "0")


config = FusionConfig()
# (program key, input dtypes and ranks, Numba on) -> kernel: equal programs share one
kernel_cache: dict[tuple, FusedKernel] = {}
# kernel key -> (lowering, numba seconds, numpy seconds) measured by autotuning
autotune_decisions: dict[tuple, tuple] = {}
AUTOTUNE_REPEATS = 3


class FusedKernel:
    """A lowered fusion group: call it with the group's input arrays. ``decision`` (the
    cost model's ``Estimate``) says which lowering runs and why; ``numpy_source`` and
    ``numba_source`` are the generated programs."""

    def __init__(self, program: FusedProgram, key: tuple | None = None):
        self.program = program
        self.key = key
        self.numpy_source, glb = numpy_source(program)
        exec(compile(self.numpy_source, f"<fused {program!r}>", "exec"), glb)  # noqa: S102
        self._numpy = glb["kernel"]
        # whether the NumPy program writes ``out`` itself (else it copies its result in)
        self.numpy_writes_out = glb.get("_direct", False)
        self.numba_source: str | None = None
        self._numba: dict[str, object] = {}   # layout -> compiled module
        # the kernel of every input full-size and contiguous, once it has run: a call
        # then checks the inputs and runs it (a small group's whole cost is this call)
        self._flat = None
        self.failed: str | None = None
        self.libm = config.libm
        shape = program.spec.shape
        self._shape, self._dtype = tuple(shape), program.spec.dtype
        self._full_layout = "f" * len(program.input_specs)
        numel = prod(shape) if None not in shape else 0
        why = "" if config.numba else "Numba disabled (config.numba = False)"
        if config.numba and not fused_numba.numba_available():
            why = "Numba is not installed (pip install graphgrad[jit])"
        ok = not why and None not in shape
        # a group with row sums gets a row kernel (fused_rows.py)
        self.rows = any(s.op.__name__ in ("Sum", "Mean") for s in program.steps)
        self.reduces = any(s.op in REDUCTIONS for s in program.steps)
        # steps computed by NumPy's own inner loop inside the kernel (fused_loops.py)
        self.loops = ({} if self.rows or not ok else
                      fused_loops.loop_steps(program, fused_numba._EXPR))
        self._addresses = fused_loops.addresses(fused_segments.loop_table(self.loops))
        if ok:
            src, why = (fused_rows.row_source(program, config.libm) if self.rows else
                        self._flat_source("f" * len(program.input_specs)))
            ok = src is not None
        self.decision: Estimate = choose(
            program.op_names, numel, ok, why or "unknown dims: NumPy", config.parallel,
            loops=[program.steps[j].op.__name__ for j in self.loops])
        # timed on the first call when asked and there is a choice to make
        self.tune = bool(ok and config.autotune)
        if self.tune and key in autotune_decisions:
            self._keep(*autotune_decisions[key])
        _debug_write(self)

    @property
    def lowering(self) -> str:
        return "numpy" if self.failed else self.decision.lowering

    def __call__(self, *arrays, out=None):
        """The group's result; with ``out`` (a C-contiguous array of the group's exact
        shape and dtype, owning its data) written into ``out``, bit for bit what the call
        without it returns. ``out`` may be input ``i`` itself only where
        ``may_alias(i)`` says so (the memory planner's rule, memory_plan.py)."""
        if self.tune:
            return self._autotune(arrays, out)
        if self.decision.lowering == "numba" and self.failed is None:
            flat = self._flat
            if flat is not None:
                shape = self._shape
                for a in arrays:
                    if type(a) is not xp.ndarray or a.shape != shape or \
                            not a.flags.c_contiguous:
                        break
                else:
                    if out is None:
                        out = xp.empty(shape, self._dtype)
                    flat(out.reshape(-1), *[a.reshape(-1) for a in arrays])
                    return out
            return self._run_numba(*arrays, out=out)
        return self._numpy(*arrays, out=out)

    @property
    def writes_out(self) -> bool:
        """Whether the chosen lowering writes a given ``out`` directly; the NumPy program
        of a group whose last step is not a ufunc (relu, gelu) copies its result into it,
        which costs more than the allocation it saves."""
        return self.lowering == "numba" or self.numpy_writes_out

    def may_alias(self, i: int) -> bool:
        """Whether ``out`` may be input ``i`` (a call in place): only in a group without
        reductions, whose every lowering reads each element of a full-size input at the
        flat position it writes, before writing it (the flat Numba loop, the segment
        kernel's blocks, the NumPy program, which writes ``out`` at its last step only).
        A row kernel or a reduction reads a row after writing part of it in other
        lowerings' orders, so those groups only get a distinct dead buffer."""
        sp = self.program.input_specs[i]
        return (not self.reduces and tuple(sp.shape) == self._shape
                and sp.dtype == self._dtype)

    def _autotune(self, arrays: tuple, out=None):
        """Both lowerings on these inputs (each run once first: Numba compiles then),
        then ``AUTOTUNE_REPEATS`` timed runs of each, interleaved; the faster is kept.
        (Into fresh arrays: ``out`` may be an input, which the runs must all read; the
        result is copied into it at the end.)"""
        self.decision = self.decision._replace(lowering="numba")
        self._run_numba(*arrays)
        if self.failed is not None:   # no kernel after all: NumPy, without timing
            self.tune = False
            return self._numpy(*arrays, out=out)
        self._numpy(*arrays)
        clock = config.clock
        best = [float("inf"), float("inf")]
        for _ in range(AUTOTUNE_REPEATS):
            for i, run in enumerate((self._run_numba, self._numpy)):
                t0 = clock()
                res = run(*arrays)
                best[i] = min(best[i], clock() - t0)
        lowering = "numba" if best[0] <= best[1] else "numpy"
        autotune_decisions[self.key] = (lowering, *best)
        self._keep(lowering, *best)
        return _into(out, res)

    def _keep(self, lowering: str, numba_s: float, numpy_s: float) -> None:
        self.tune = False
        self.decision = self.decision._replace(
            lowering=lowering, reason=f"{lowering}: autotuned, numba {numba_s * 1e6:.1f} us "
                                      f"vs NumPy {numpy_s * 1e6:.1f} us")

    def _run_rows(self, arrays: tuple, out=None):
        if not _row_major(*arrays):   # eager's order differs (fused_numpy.py): NumPy
            return self._numpy(*arrays, out=out)
        kernel = self._numba.get("rows")
        if kernel is None:
            src, _ = fused_rows.row_source(self.program, self.libm)
            self.numba_source = src
            kernel = self._numba["rows"] = fused_numba.load(src).serial
        ops = fused_rows.operands(self.program, arrays)
        rows_shape = fused_rows.out_shape(self.program)
        if out is None:   # (allocated in the group's shape: a result that owns its
            out = xp.empty(self._shape, self._dtype)   # memory, which a plan can reuse)
        kernel(out.reshape(rows_shape), *ops)
        return out

    def _run_numba(self, *arrays, out=None):
        if self.rows:
            try:
                return self._run_rows(arrays, out)
            except Exception as err:  # noqa: BLE001 - falls back once, as below
                return self._fail(err, arrays, out)
        shape = self._shape
        layout = "".join([_code(a, shape) for a in arrays])
        if self.loops and "b" in layout:   # loop steps take flat inputs (fused_segments.py)
            return self._numpy(*arrays, out=out)
        kernel = self._numba.get(layout)
        try:
            if kernel is None:
                src, _ = self._flat_source(layout)
                self.numba_source = src
                module = fused_numba.load(src)
                kernel = module.parallel if self.decision.parallel else module.serial
                self._numba[layout] = kernel
            if out is None:
                out = xp.empty(shape, self._dtype)
            if out.size:
                # (the common case, every input full-size and contiguous, without a call
                # per input: this path is a small group's whole cost)
                if layout == self._full_layout:
                    ops = [a.reshape(-1) for a in arrays]
                else:
                    flat = "b" not in layout
                    ops = [fused_numba.as_operand(a, c, shape, flat)
                           for a, c in zip(arrays, layout, strict=True)]
                if self.loops:
                    ops.append(self._addresses)
                kernel(out if "b" in layout else out.reshape(-1), *ops)
                if layout == self._full_layout and not self.loops:
                    self._flat = kernel
            return out
        except Exception as err:  # noqa: BLE001 - a kernel that fails falls back, once
            return self._fail(err, arrays, out)

    def _flat_source(self, layout: str) -> tuple[str | None, str]:
        if self.loops:
            return fused_segments.source(self.program, layout, self.loops, self.libm)
        return fused_numba.source(self.program, layout, self.libm)

    def _fail(self, err: Exception, arrays: tuple, out=None):
        self.failed = f"{type(err).__name__}: {str(err).splitlines()[0][:200]}"
        warnings.warn(f"graphgrad: the Numba kernel for {self.program!r} failed to "
                      f"compile ({self.failed}); NumPy runs this group from now on",
                      RuntimeWarning, stacklevel=2)
        self.decision = self.decision._replace(lowering="numpy",
                                               reason=f"numpy: Numba failed ({self.failed})")
        # (a kernel fails when it is compiled or typed, before it writes anything: an
        # ``out`` that is an input still holds the input here)
        return self._numpy(*arrays, out=out)


def _code(a, shape: tuple) -> str:
    """How an input is passed to a Numba kernel (see ``fused_numba.source``)."""
    if not isinstance(a, xp.ndarray) or a.size == 1 or not any(a.strides):
        return "s"   # (all strides 0: one value broadcast, as a backward's ones)
    if a.shape == shape and a.flags.c_contiguous:
        return "f"
    return "b"


def lower(program: FusedProgram) -> FusedKernel:
    """The kernel of ``program``, from the in-memory cache when an equal program (same
    structure, dtypes, ranks) was lowered before."""
    key = (program.key, tuple((sp.dtype, sp.shape) for sp in program.input_specs),
           program.spec.shape, config.numba, config.libm, config.autotune)
    k = kernel_cache.get(key)
    if k is None:
        k = kernel_cache[key] = FusedKernel(program, key)
    return k


def dump_graphs(*stages: tuple[str, Graph]) -> None:
    """With ``config.debug_dir`` set: each (stage name, graph) written there as its
    printed Python program, named ``<graph>.<n>.<stage>.py`` in pipeline order."""
    if not config.debug_dir:
        return
    folder = Path(config.debug_dir)
    folder.mkdir(parents=True, exist_ok=True)
    for i, (stage, graph) in enumerate(stages):
        (folder / f"{graph.name}.{i}.{stage}.py").write_text(graph.code)


def _debug_write(k: FusedKernel) -> None:
    if not config.debug_dir:
        return
    folder = Path(config.debug_dir)
    folder.mkdir(parents=True, exist_ok=True)
    name = f"fused_{abs(hash(k.program.key)) % 10**10}"
    text = (f"# {k.program!r}\n# lowering: {k.decision.reason}\n\n{k.numpy_source}\n")
    src, _ = (k._flat_source("f" * len(k.program.input_specs)) if not k.rows
              else fused_rows.row_source(k.program, k.libm))
    if src:
        text += "\n# Numba form (flat contiguous inputs):\n" + src
    (folder / f"{name}.py").write_text(text)
