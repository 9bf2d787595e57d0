"""Layer ``backends``: a fused group as a NumPy program without full-size temporaries
(numexpr's method): each step's ufunc writes into a buffer of a value that is dead by
then (``out=``), and large groups run block by block along the first axis, so a
block's values stay in cache while every step is applied to it.

Only ufunc steps take ``out=``; other steps (an op's own ``forward``, e.g. GELU or a
reduction) run as they are. A buffer is reused only when this program allocated it
(a ufunc result), never an input or a view, and only at the same shape and dtype.
Each step computes exactly what its op's ``forward`` computes (same ufunc, same
dtypes): the program's result equals the reference lowering bit for bit.
"""

from __future__ import annotations

from math import prod

from graphgrad.backend import xp
from graphgrad.graph import literal_text
from graphgrad.passes import FusedProgram
from graphgrad.passes.fused_op import Ref
from graphgrad.passes.fusion import EXPAND, REDUCTIONS, reduced_dims, row_local

__all__ = ["numpy_source", "BLOCK_ELEMENTS", "BLOCK_MIN_ELEMENTS"]

# one block: 256 KiB of float32, a quarter of Zen 4's L2. Measured on (4096, 1024)
# float32: GELU 15.1 ms whole, 7.9 ms in 16-row blocks, 6.0 ms in 64-row blocks;
# softmax 10.5 / 7.2 / 6.3 ms
BLOCK_ELEMENTS = 65_536
BLOCK_MIN_ELEMENTS = 1 << 17   # below this, the per-block calls cost more than they save


def _ufunc(step):
    """The ufunc that is the step's forward, or None."""
    f = step.op.forward
    name = step.op.__name__
    if isinstance(f, xp.ufunc) and not step.params:
        return f
    if name == "Sub" and step.spec.dtype.kind != "b":   # (bool operands refused by forward)
        return xp.subtract
    if name == "Div" and step.params.get("rounding_mode") is None \
            and step.spec.dtype.kind == "f":
        return xp.true_divide
    return None


def _typed_literals(j: int, step, args: list, program: FusedProgram, glb: dict) -> list:
    """A Python number beside an array operand as a 0-d array of that operand's dtype:
    NumPy casts the (weak) number to that dtype anyway, so the result is the same bit for
    bit, and a ufunc call on (4, 4) float32 takes 0.47 us instead of 0.89 us with a
    Python float (its promotion is worked out on every call)."""
    dts = [(program.input_specs[a.index] if a.kind == "in" else program.steps[a.index].spec)
           .dtype for a in step.args if isinstance(a, Ref)]
    if not dts:
        return args
    dt = dts[0]
    out = list(args)
    for i, a in enumerate(step.args):
        if type(a) not in (int, float) or dt.kind not in "fiu" or \
                (type(a) is float and dt.kind != "f"):
            continue
        if dt.kind in "iu" and not xp.iinfo(dt).min <= a <= xp.iinfo(dt).max:
            continue
        glb[f"_k{j}_{i}"] = xp.asarray(a, dtype=dt)
        out[i] = f"_k{j}_{i}"
    return out


def _rowwise(program: FusedProgram, n: int, rank: int) -> list[bool]:
    """Per step: whether its value has the rows of the output (full rank, first dim
    ``n``); the other steps are small broadcast values, computed whole in each block."""
    return [s.spec.ndim == rank and s.spec.shape[0] == n for s in program.steps[:-1]] + [True]


def _full(program: FusedProgram):
    """The spec of the program's largest value: the rows a block takes are its rows."""
    return max((s.spec for s in program.steps), key=lambda sp: prod(sp.shape))


def _blockable(program: FusedProgram) -> int:
    """Rows per block when the program can run block by block, else 0: every reduction
    keeps the rows apart (never over dim 0; inside the group, of full rank), and no
    small value is computed from a block's values."""
    out = program.spec
    if any(d is None for s in program.steps for d in s.spec.shape) or not out.ndim:
        return 0
    n = out.shape[0]
    full = _full(program)
    for j, s in enumerate(program.steps):
        if s.op not in REDUCTIONS:
            continue
        rank = _spec(s.args[0], program).ndim
        dims = reduced_dims(s.op, s.params, rank)
        final = j == len(program.steps) - 1
        if not dims or 0 in dims or rank != full.ndim or not (
                final or row_local(s.op, s.params, rank)):
            return 0
    if out.shape[0] != n or (out.ndim != full.ndim and program.steps[-1].op not in REDUCTIONS):
        return 0
    rows_of = _rowwise(program, n, full.ndim)
    for j, s in enumerate(program.steps):
        if not rows_of[j] and any(isinstance(a, Ref) and a.kind == "t" and rows_of[a.index]
                                  for a in s.args):
            return 0
    if prod(full.shape) < BLOCK_MIN_ELEMENTS:
        return 0
    rows = max(2, BLOCK_ELEMENTS // max(1, prod(full.shape[1:])))
    return rows if n >= 2 * rows else 0


def _bounds(n: int, rows: int) -> tuple:
    """The (start, end) of each block. A last block of one row joins the one before it:
    NumPy may order a reduction over a strided row differently when the block has one
    row (its iterator drops the size-1 axis), and results must be eager's bit for bit."""
    starts = list(range(0, n, rows))
    if n - starts[-1] == 1 and len(starts) > 1:
        starts.pop()
    return tuple(zip(starts, [*starts[1:], n], strict=True))


def _row_major(*arrays) -> bool:
    """Whether every array's elements lie in row-major order (C-contiguous, or strided,
    sliced or broadcast with its strides decreasing): then eager's ufunc results are
    C-ordered, as the block buffers are."""
    for a in arrays:
        if type(a) is not xp.ndarray or a.flags.c_contiguous:
            continue
        last = None
        for n, s in zip(a.shape, a.strides, strict=True):
            if n == 1 or s == 0:   # a size-1 or broadcast dim orders nothing
                continue
            if s < 0 or (last is not None and s >= last):
                return False
            last = s
    return True


def _spec(a: Ref, program: FusedProgram):
    return program.input_specs[a.index] if a.kind == "in" else program.steps[a.index].spec


def numpy_source(program: FusedProgram) -> tuple[str, dict]:
    """The program's source (``def kernel(x0, x1, ...)``) and its globals."""
    steps = program.steps
    last_use = {j: len(steps) for j in range(len(steps))}
    for j, s in enumerate(steps):
        for a in s.args:
            if isinstance(a, Ref) and a.kind == "t":
                last_use[a.index] = j
    rows = _blockable(program)
    bounds = _bounds(program.spec.shape[0], rows) if rows else ()
    if bounds:   # the buffers hold the longest block
        rows = max(e - r for r, e in bounds)
    glb: dict = {"_empty": xp.empty, "_bt": xp.broadcast_to, "_bounds": bounds}
    free: dict[tuple, list[str]] = {}   # (shape, dtype) -> dead buffers
    slot_of: dict[int, str] = {}        # step -> the buffer holding its value
    alloc: list[str] = []
    body: list[str] = []
    n_in = len(program.input_specs)
    full_rank = _full(program).ndim if rows else 0
    rows_of = _rowwise(program, program.spec.shape[0], full_rank) if rows else []
    ins = []
    for k, sp in enumerate(program.input_specs):
        sliced = rows and sp.ndim == full_rank and sp.shape[0] == program.spec.shape[0]
        ins.append(f"v{k}" if sliced else f"x{k}")
        if sliced:
            body.append(f"v{k} = x{k}[r:e]")
    for j, s in enumerate(steps):
        args = [(ins[a.index] if a.kind == "in" else f"t{a.index}") if isinstance(a, Ref)
                else literal_text(a) for a in s.args]
        args += [f"{key}=_p{j}_{key}" for key in s.params]
        for key, v in s.params.items():
            glb[f"_p{j}_{key}"] = v
        uf = _ufunc(s)
        if uf is not None:
            args = _typed_literals(j, s, args, program, glb)
        final = j == len(steps) - 1
        key = (tuple(s.spec.shape), s.spec.dtype)
        if final and rows:
            glb[f"_f{j}"] = uf if uf is not None else s.op.forward
            body.append(f"_f{j}({', '.join(args)}, out=out[r:e])" if uf is not None
                        else f"out[r:e] = _f{j}({', '.join(args)})")
        elif s.op is EXPAND and rows and rows_of[j]:   # a view of the block's shape
            body.append(f"t{j} = _bt({args[0]}, (e - r, *{tuple(s.spec.shape[1:])!r}))")
        elif uf is None or not s.spec.ndim or None in key[0] or (rows and not rows_of[j]):
            glb[f"_f{j}"] = s.op.forward
            body.append(f"t{j} = _f{j}({', '.join(args)})")
        else:
            glb[f"_f{j}"] = uf
            dead = [slot_of[a.index] for a in s.args if isinstance(a, Ref) and a.kind == "t"
                    and last_use[a.index] == j and a.index in slot_of
                    and (tuple(steps[a.index].spec.shape), steps[a.index].spec.dtype) == key]
            pool = free.get(key, [])
            if final:   # (rows: above) the result into the caller's ``out`` if it gave one
                buf = dead[0] if dead else (pool[-1] if pool else None)
                body.append(f"t{j} = _f{j}({', '.join(args)}, "
                            f"out={'out' if buf is None else f'{buf} if out is None else out'})")
                buf = f"t{j}"
            else:
                buf = dead[0] if dead else (pool.pop() if pool else None)
                if rows:   # every ufunc step writes into a block buffer
                    if buf is None:
                        buf = f"b{len(alloc)}"
                        alloc.append((buf, (rows, *key[0][1:]), key[1]))
                    body.append(f"t{j} = _f{j}({', '.join(args)}, out={buf}[:e - r])")
                elif buf is None:
                    body.append(f"t{j} = _f{j}({', '.join(args)})")
                    buf = f"t{j}"
                else:
                    body.append(f"t{j} = _f{j}({', '.join(args)}, out={buf})")
            slot_of[j] = buf
        for a in s.args:   # values dead after this step give their buffer back
            if isinstance(a, Ref) and a.kind == "t" and last_use[a.index] == j \
                    and a.index in slot_of and slot_of[a.index] != slot_of.get(j):
                sk = (tuple(steps[a.index].spec.shape), steps[a.index].spec.dtype)
                free.setdefault(sk, []).append(slot_of.pop(a.index))
    params = ", ".join(f"x{k}" for k in range(n_in))
    lines = [f"def kernel({params}{', ' if n_in else ''}out=None):"]
    if any(st.op in REDUCTIONS for st in steps) and n_in:
        # eager's intermediates take a strided input's memory order, and a reduction's
        # summation order follows that order: inputs in another order (a transpose) get
        # eager's own computation
        glb.update(_ref=program.run, _cc=_row_major, _into=_into)
        lines.append(f"    if not _cc({params}{',' if n_in == 1 else ''}): "
                     f"return _into(out, _ref(({params}{',' if n_in == 1 else ''})))")
    if rows:
        glb["_dt_out"] = program.spec.dtype
        glb["_direct"] = True
        lines.append("    if out is None:")
        lines.append(f"        out = _empty({tuple(program.spec.shape)!r}, _dt_out)")
        for buf, shape, dt in alloc:
            glb[f"_dt_{buf}"] = dt
            lines.append(f"    {buf} = _empty({shape!r}, _dt_{buf})")
        lines.append("    for r, e in _bounds:")
        lines.extend(f"        {ln}" for ln in body)
        lines.append("    return out")
    else:
        glb["_into"] = _into
        lines.extend(f"    {ln}" for ln in body)
        last = steps[-1]
        glb["_direct"] = _ufunc(last) is not None and bool(last.spec.ndim) \
            and None not in last.spec.shape
        if glb["_direct"]:
            lines.append(f"    return t{len(steps) - 1}")   # (written into ``out`` already)
        else:   # a step that makes its own array: copied into ``out``
            lines.append(f"    return _into(out, t{len(steps) - 1})")
    return "\n".join(lines) + "\n", glb


def _into(out, res):
    """``res`` copied into ``out`` (None: ``res`` itself)."""
    if out is None:
        return res
    out[...] = res
    return out
