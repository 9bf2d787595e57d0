"""Layer ``backends``: a fused group with row reductions (a layer norm, its backward) as
one Numba kernel that walks the rows: per row, one loop over the row's elements per
*phase* (the elementwise work between two reductions), the row sums in between.

Results stay NumPy's bit for bit, as fused_numba.py's rule asks: the elementwise ops are
the correctly rounded ones fused_numba.py allows, and a row sum is NumPy's own pairwise
summation (``block``: 8 accumulators up to 128 elements; halves above, ``_tree``; as
NumPy's ``pairwise_sum`` in its loops), over the row's values stored in a row buffer in
the order NumPy reads them; a mean divides that sum by the count, which is what
``np.mean`` computes (float64 division rounded once to float32 equals float32 division).
Reductions other than sum and mean, and dtypes other than float32/float64, keep the
NumPy lowering.

Shapes: the group's largest value is ``(..., D)`` and every reduction is over the last
dim with ``keepdim`` (the last step may drop it). A value is *per element* (full, or a
``(D,)`` row of weights), *per row* (``(..., 1)``) or a scalar; inputs are passed as 2-d
``(N, D)`` arrays, ``(N,)`` row vectors, ``(D,)`` vectors or scalars (``operands``).
"""

from __future__ import annotations

from math import prod

from graphgrad.backend import xp
from graphgrad.passes import FusedProgram
from graphgrad.passes.fused_op import Ref
from graphgrad.passes.fusion import EXPAND, reduced_dims

from .fused_numba import _EXPR, _refusal

__all__ = ["row_source", "operands", "PAIRWISE"]

_SUMS = ("Sum", "Mean")
# NumPy's pairwise sum of a block of at most 128 elements; longer rows are split in
# halves (``_tree``) as NumPy splits them, written out for the row length at hand (a
# recursive jitted function crashes when Numba loads it from its disk cache)
PAIRWISE = '''
@njit(cache=True, error_model='numpy', nogil=True)
def block(a, lo, n, z):
    if n < 8:
        r = z
        for i in range(n):
            r += a[lo + i]
        return r
    r0, r1, r2, r3 = a[lo], a[lo + 1], a[lo + 2], a[lo + 3]
    r4, r5, r6, r7 = a[lo + 4], a[lo + 5], a[lo + 6], a[lo + 7]
    i = 8
    m = n - n % 8
    while i < m:
        r0 += a[lo + i]
        r1 += a[lo + i + 1]
        r2 += a[lo + i + 2]
        r3 += a[lo + i + 3]
        r4 += a[lo + i + 4]
        r5 += a[lo + i + 5]
        r6 += a[lo + i + 6]
        r7 += a[lo + i + 7]
        i += 8
    r = ((r0 + r1) + (r2 + r3)) + ((r4 + r5) + (r6 + r7))
    while i < n:
        r += a[lo + i]
        i += 1
    return r
'''
MAX_ROW = 1 << 16   # longer rows: the written-out tree gets long; NumPy runs them


def _tree(src: str, lo: int, n: int, z: str) -> str:
    """NumPy's pairwise split of ``n`` elements from ``lo`` as an expression."""
    if n <= 128:
        return f"block({src}, {lo}, {n}, {z})"
    n2 = n // 2
    n2 -= n2 % 8
    return f"({_tree(src, lo, n2, z)} + {_tree(src, lo + n2, n - n2, z)})"


def _kind(shape: tuple, full: tuple) -> str | None:
    """``"e"`` per element, ``"w"`` a (D,) vector, ``"r"`` per row, ``"s"`` a scalar."""
    if shape == full:
        return "e"
    if prod(shape) == 1:
        return "s"
    if shape[-1:] == full[-1:] and all(d == 1 for d in shape[:-1]):
        return "w"
    if len(shape) == len(full) and shape[:-1] == full[:-1] and shape[-1] == 1:
        return "r"
    return None


def _plan(program: FusedProgram) -> tuple[tuple, list, list] | str:
    """(full shape, kind per input, kind per step), or why the group has no row kernel."""
    steps = program.steps
    if not any(s.op.__name__ in _SUMS for s in steps):
        return "no row reduction"
    full = max((s.spec.shape for s in steps), key=prod)
    if None in full or len(full) < 2 or 0 in full or full[-1] > MAX_ROW:
        return "not a (rows, D) group"
    kinds_in = [_kind(tuple(sp.shape), full) for sp in program.input_specs]
    kinds = []
    for j, s in enumerate(steps):
        name = s.op.__name__
        if name in _SUMS:
            rank = _operand_spec(s.args[0], program).ndim
            if reduced_dims(s.op, s.params, rank) != (rank - 1,) or rank != len(full) \
                    or s.params.get("dtype") is not None:
                return f"{name} over other dims than the last"
            if not s.params.get("keepdim") and j != len(steps) - 1:
                return f"{name} without keepdim"
            kinds.append("r")
            continue
        k = _kind(tuple(s.spec.shape), full)
        if k is None:
            return f"{name} of shape {s.spec.shape}"
        kinds.append(k)
    if None in kinds_in:
        return "an input of another shape"
    if kinds[-1] not in "er":
        return "a result that is not per element or per row"
    for s in steps:   # a row sum reads a per-element value
        if s.op.__name__ in _SUMS:
            a = s.args[0]
            if (kinds_in[a.index] if a.kind == "in" else kinds[a.index]) != "e":
                return "a sum of a broadcast value"
    return full, kinds_in, kinds


def _operand_spec(a: Ref, program: FusedProgram):
    return program.input_specs[a.index] if a.kind == "in" else program.steps[a.index].spec


def _elementwise_refusal(program: FusedProgram, libm: bool) -> str | None:
    """fused_numba's exactness rule for the non-reduction steps."""
    rest = [s for s in program.steps if s.op.__name__ not in _SUMS and s.op is not EXPAND
            and s.op.__name__ != "Rsqrt"]
    probe = FusedProgram(rest, list(program.input_specs)) if rest else None
    why = _refusal(probe, libm) if probe is not None else None
    dts = {str(s.spec.dtype) for s in program.steps} | {str(sp.dtype)
                                                       for sp in program.input_specs}
    if why is None and not dts <= {"float32", "float64", "bool"}:
        why = f"dtypes {sorted(dts)}"
    return why


def row_source(program: FusedProgram, libm: bool = False) -> tuple[str | None, str]:
    """``(source, "")`` of the row kernel module (functions ``serial(out, x0, ...)`` and
    ``block``), or ``(None, why)``."""
    plan = _plan(program)
    if isinstance(plan, str):
        return None, plan
    why = _elementwise_refusal(program, libm)
    if why is not None:
        return None, why
    full, kinds_in, kinds = plan
    steps = program.steps
    # phase: how many row sums a value waits for (inputs: 0)
    phase: list[int] = []
    for s in steps:
        ins = [phase[a.index] for a in s.args if isinstance(a, Ref) and a.kind == "t"]
        p = max(ins, default=0)
        phase.append(p + 1 if s.op.__name__ in _SUMS else p)
    last = len(steps) - 1
    # per-element values read by a sum or by a later phase live in a row buffer
    stored: set[int] = set()
    for j, s in enumerate(steps):
        for a in s.args:
            if isinstance(a, Ref) and a.kind == "t" and kinds[a.index] in "ew" and (
                    s.op.__name__ in _SUMS or phase[a.index] != phase[j]):
                stored.add(a.index)
    consts: list[str] = []

    def operand(a, j: int, in_loop: bool) -> str:
        if not isinstance(a, Ref):   # typed as the array operand (NumPy's weak scalars)
            dts = [str(_operand_spec(r, program).dtype) for r in steps[j].args
                   if isinstance(r, Ref)]
            dt = next((d for d in dts if d != "bool"), str(steps[j].spec.dtype))
            dt = "float64" if dt == "bool" else dt
            consts.append(f"_k{len(consts)} = np.{dt}(float({float(a)!r}))")
            return f"_k{len(consts) - 1}"
        if a.kind == "in":
            k = kinds_in[a.index]
            return {"e": f"x{a.index}[i, j]", "w": f"x{a.index}[j]", "r": f"x{a.index}[i]",
                    "s": f"x{a.index}"}[k]
        if kinds[a.index] in "ew" and a.index in stored and (
                not in_loop or phase[a.index] != phase[j]):
            return f"b{a.index}[j]"
        return f"t{a.index}"

    def expr(j: int, in_loop: bool) -> str:
        s = steps[j]
        name = s.op.__name__
        ops = [operand(a, j, in_loop) for a in s.args]
        dt = str(s.spec.dtype)
        if name == "Rsqrt":
            consts.append(f"_k{len(consts)} = np.{dt}(1)")
            return f"_k{len(consts) - 1} / np.sqrt({ops[0]})"
        if name == "Pow":
            return f"{ops[0]} * {ops[0]}"
        if s.op is EXPAND:
            return ops[0]
        if "{z}" in _EXPR[name]:
            consts.append(f"_k{len(consts)} = np.{dt}(0)")
            return _EXPR[name].format(*ops, z=f"_k{len(consts) - 1}")
        return _EXPR[name].format(*ops)

    def typed(j: int, e: str) -> str:
        dt = str(steps[j].spec.dtype)
        return f"np.{'bool_' if dt == 'bool' else dt}({e})"

    body: list[str] = []
    for p in range(max(phase) + 1):
        for j, s in enumerate(steps):   # this phase's row sums, then per-row values
            if phase[j] != p or kinds[j] not in "rs":
                continue
            if s.op.__name__ in _SUMS:
                a = s.args[0]
                src = (f"x{a.index}[i]" if a.kind == "in" else f"b{a.index}")
                dt = str(s.spec.dtype)
                e = _tree(src, 0, full[-1], f"_z_{dt}")
                if s.op.__name__ == "Mean":
                    e = f"{e} / np.{dt}({full[-1]})"
                body.append(f"t{j} = np.{dt}({e})")
            else:
                body.append(f"t{j} = {typed(j, expr(j, False))}")
            if j == last:
                body.append(f"out[i] = t{j}")
        loop = [j for j in range(len(steps)) if phase[j] == p and kinds[j] in "ew"]
        if not loop:
            continue
        body.append(f"for j in range({full[-1]}):")
        for j in loop:
            body.append(f"    t{j} = {typed(j, expr(j, True))}")
            if j in stored:
                body.append(f"    b{j}[j] = t{j}")
            if j == last:
                body.append(f"    out[i, j] = t{j}")
    dtypes = sorted({str(s.spec.dtype) for s in steps if str(s.spec.dtype) != "bool"})
    head = ["import numpy as np", "from numba import njit", "",
            *(f"_z_{dt} = np.{dt}(-0.0)" for dt in dtypes), *consts, "", PAIRWISE, ""]
    params = ", ".join(["out"] + [f"x{k}" for k in range(len(kinds_in))])
    lines = ["@njit(cache=True, error_model='numpy', nogil=True)",
             f"def serial({params}):"]
    for j in sorted(stored):
        dt = str(steps[j].spec.dtype)
        lines.append(f"    b{j} = np.empty({full[-1]}, np.{'bool_' if dt == 'bool' else dt})")
    lines.append("    for i in range(out.shape[0]):")
    lines.extend(f"        {ln}" for ln in body)
    return "\n".join(head) + "\n" + "\n".join(lines) + "\n", ""


def operands(program: FusedProgram, arrays: tuple) -> list | None:
    """The inputs as the row kernel takes them (2-d rows, vectors, scalars), or None
    where one is not in row-major order (then the NumPy lowering runs)."""
    plan = _plan(program)
    full, kinds_in, _ = plan
    d = full[-1]
    out = []
    for a, k in zip(arrays, kinds_in, strict=True):
        if k == "s":
            out.append(a.reshape(-1)[0] if isinstance(a, xp.ndarray) else a)
            continue
        if not isinstance(a, xp.ndarray):
            return None
        if k == "e":
            out.append(a.reshape(-1, d))
        elif k == "r":
            out.append(a.reshape(-1))
        else:
            out.append(a.reshape(d))
    return out


def out_shape(program: FusedProgram) -> tuple:
    """The kernel's ``out``: (N, D) for a per-element result, (N,) for a per-row one."""
    full = max((s.spec.shape for s in program.steps), key=prod)
    n = prod(full[:-1])
    return (n, full[-1]) if tuple(program.spec.shape) == tuple(full) else (n,)
