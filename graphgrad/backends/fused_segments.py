"""Layer ``backends``: a fused group with ufunc-loop steps (tanh, exp, log... computed by
NumPy's own inner loop, fused_loops.py) as one Numba kernel in *segments*: the exact
scalar steps between two loop steps run fused in one element loop (fused_numba.py's
statements), and each loop step is one ``call_loop`` over a buffer. A value crosses a
segment boundary through a buffer; buffers are reused once their value is dead (a loop
step writes into its operand's buffer when the operand dies there, as the NumPy lowering
does with ``out=``), and the last step writes ``out``.

The kernel walks the flat output in blocks of ``LOOP_BLOCK`` elements, every segment on
one block before the next, so the buffers stay in L1 on large tensors. Every input must
be flat and contiguous (``f``) or one value (``s``); a broadcast input (``b``) gets no
kernel (the caller runs the NumPy lowering for that call). Each element's result is
what NumPy computes: the same exact scalar operations, the same loop on the same dtype.
"""

from __future__ import annotations

import re

from graphgrad.passes import FusedProgram
from graphgrad.passes.fused_op import Ref

from .fused_numba import _refusal, step_line

__all__ = ["source", "loop_table", "LOOP_BLOCK"]

LOOP_BLOCK = 4096   # elements per block: a float32 buffer is 16 KiB
MAX_PERIOD = 8      # segments in a repeated run that is written as one Python loop


def loop_table(loops: dict) -> list:
    """The distinct ``(ufunc, dtype)`` of ``loops`` in order: the kernel's ``L`` holds one
    (loop, data) pair for each (``fused_loops.addresses``)."""
    return list(dict.fromkeys(loops.values()))


def source(program: FusedProgram, layout: str, loops: dict,
           libm: bool = False) -> tuple[str | None, str]:
    """``(source, "")`` of the kernel module (``serial``, ``parallel`` the same function;
    called as ``serial(out, x0, ..., addresses)`` with ``fused_loops.addresses`` of
    ``loop_table(loops)``), or ``(None, why)``. Segments that repeat (a chain of the same
    few ops) are written once inside a ``for`` loop: Numba's compile time grows with the
    source (a 200-op chain as 100 written-out segments: ~30 s to compile)."""
    why = _refusal(program, libm, loops)
    if why is not None:
        return None, why
    if "b" in layout:
        return None, "a broadcast input (loop steps take flat inputs)"
    steps = program.steps
    table = loop_table(loops)
    slot = {j: table.index(loops[j]) for j in loops}   # loop step -> its pair in L
    seg, n_seg = [], -1
    for j in range(len(steps)):   # a new segment at each loop step and after it
        if j in loops or j == 0 or (j - 1) in loops:
            n_seg += 1
        seg.append(n_seg)
    final = len(steps) - 1
    users: dict[int, list[int]] = {j: [] for j in range(len(steps))}
    for u, s in enumerate(steps):
        for a in s.args:
            if isinstance(a, Ref) and a.kind == "t":
                users[a.index].append(u)
    last_seg = {j: max((seg[u] for u in users[j]), default=seg[j]) for j in users}
    kept = {j for j in users if j != final and (j in loops or last_seg[j] != seg[j])}
    buffers: list[str] = []            # dtype of each buffer b0, b1, ...
    free: dict[str, list[int]] = {}    # dtype -> dead buffers
    buf_of: dict[int, int] = {}
    consts: list[str] = []
    chunks: list[list[str]] = []   # each segment's lines

    def take(dt: str) -> int:
        pool = free.get(dt)
        if pool:
            return pool.pop()
        buffers.append(dt)
        return len(buffers) - 1

    def release(s_id: int) -> None:
        for v in [v for v in buf_of if last_seg[v] == s_id]:
            free.setdefault(_dt(steps[v]), []).append(buf_of.pop(v))

    vals = [f"x{k}" if code == "s" else f"a{k}" for k, code in enumerate(layout)]
    j = 0
    while j < len(steps):
        if j in loops:
            chunks.append(body := [])
            src, tmp = _loop_operand(steps[j].args[0], layout, buf_of, _dt(steps[j]), take,
                                     body)
            if tmp is not None:
                free.setdefault(_dt(steps[j]), []).append(tmp)
            release(seg[j])
            if j == final:
                dst = "out[c0:c1]"
            else:
                buf_of[j] = take(_dt(steps[j]))
                dst = f"b{buf_of[j]}[:m]"
            body.append(f"call_loop(L[{2 * slot[j]}], L[{2 * slot[j] + 1}], {src}, {dst})")
            j += 1
            continue
        group = [k for k in range(j, len(steps)) if seg[k] == seg[j]]
        loads, lines = [], []
        for k in group:
            for a in steps[k].args:
                if not isinstance(a, Ref):
                    continue
                if a.kind == "in" and layout[a.index] == "f":
                    line = f"a{a.index} = x{a.index}[c0 + i]"
                elif a.kind == "t" and seg[a.index] != seg[j]:
                    line = f"t{a.index} = b{buf_of[a.index]}[i]"
                else:
                    continue
                if line not in loads:
                    loads.append(line)
            lines.append(step_line(program, k, vals, consts))
        release(seg[j])   # (values are loaded at the top of an iteration, stored at its end)
        for k in group:
            if k in kept:
                buf_of[k] = take(_dt(steps[k]))
                lines.append(f"b{buf_of[k]}[i] = t{k}")
            elif k == final:
                lines.append(f"out[c0 + i] = t{k}")
        chunks.append(["for i in range(m):", *(f"    {ln}" for ln in loads + lines)])
        j = group[-1] + 1
    chunks, consts = _same_constants(chunks, consts)
    params = ", ".join(["out"] + [f"x{k}" for k in range(len(layout))] + ["L"])
    head = ["import numpy as np", "from numba import njit",
            "from graphgrad.backends.fused_call_loop import call_loop", "", *consts, ""]
    fn = ["@njit(cache=True, error_model='numpy', nogil=True)", f"def serial({params}):",
          "    n = out.shape[0]", f"    w = min(n, {LOOP_BLOCK})"]
    fn += [f"    b{i} = np.empty(w, np.{dt})" for i, dt in enumerate(buffers)]
    fn += [f"    for c0 in range(0, n, {LOOP_BLOCK}):",
           f"        c1 = min(c0 + {LOOP_BLOCK}, n)", "        m = c1 - c0"]
    fn += [f"        {ln}" for ln in _fold(chunks)]
    return "\n".join(head + fn) + "\n\n\nparallel = serial\n", ""


def _same_constants(chunks: list, consts: list) -> tuple[list, list]:
    """One name per constant value (``_k3 = np.float32(...)`` written once), so that
    repeated segments read the same text."""
    first: dict[str, str] = {}
    name_of = {}
    for line in consts:
        name, expr = line.split(" = ", 1)
        name_of[name] = first.setdefault(expr, name)
    sub = re.compile(r"\b_k\d+\b")
    chunks = [[sub.sub(lambda m: name_of[m.group()], ln) for ln in c] for c in chunks]
    return chunks, [f"{n} = {e}" for e, n in first.items()]


def _fold(chunks: list) -> list[str]:
    """The segments' lines with each run of a period of at most ``MAX_PERIOD`` segments
    repeated 3 times or more written as ``for r in range(times):`` over one period.
    Segments compare with their values renamed by position (``t17`` and ``t19`` are the
    same place in two repeats); a run's copy names them ``v<run>_<segment>_<n>``."""
    canon = [_canonical(c) for c in chunks]
    out: list[str] = []
    i, runs = 0, 0
    while i < len(chunks):
        period, times = 1, 1
        for p in range(1, MAX_PERIOD + 1):
            k = 1
            while canon[i + k * p:i + (k + 1) * p] == canon[i:i + p]:
                k += 1
            if k >= 3 and p * k > period * times:
                period, times = p, k
        if times < 3:
            out.extend(chunks[i])
            i += 1
            continue
        out.append(f"for r in range({times}):")
        for c, lines in enumerate(canon[i:i + period]):
            out.extend(f"    {ln.replace('v@', f'v{runs}_{c}_')}" for ln in lines)
        runs += 1
        i += period * times
    return out


def _canonical(lines: list[str]) -> tuple[str, ...]:
    """``lines`` with each ``t<j>`` renamed ``v@<n>``, n by first appearance."""
    names: dict[str, str] = {}
    sub = re.compile(r"\bt\d+\b")
    return tuple(sub.sub(lambda m: names.setdefault(m.group(), f"v@{len(names)}"), ln)
                 for ln in lines)


def _dt(step) -> str:
    return "bool_" if step.spec.dtype.kind == "b" else str(step.spec.dtype)


def _loop_operand(a: Ref, layout: str, buf_of: dict, dt: str, take,
                  body: list) -> tuple[str, int | None]:
    """The array a loop step reads (a buffer or an input's block) and the buffer filled
    for it when the operand is a one-value input (``dt``; free again after the step)."""
    if a.kind == "t":
        return f"b{buf_of[a.index]}[:m]", None
    if layout[a.index] == "f":
        return f"x{a.index}[c0:c1]", None
    tmp = take(dt)
    body.extend(["for i in range(m):", f"    b{tmp}[i] = x{a.index}"])
    return f"b{tmp}[:m]", tmp
