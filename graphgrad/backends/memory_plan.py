"""Layer ``backends``: memory planning of an array program (array_program.py): which
fused group or library call writes its result into a buffer the program already holds
instead of a fresh array.

Liveness over the program's top-level nodes gives each value its last use. A ``Fused``
node whose result is large (``PLAN_MIN_BYTES``) may write into

* **in place**: one of its own inputs that dies at this node, where its kernel allows
  ``out`` to be that input (``FusedKernel.may_alias``: elementwise groups, an input of
  the result's exact shape and dtype; never a row kernel or a reduction);
* **a dead buffer**: a value of the same shape and dtype that died at an earlier node,
  kept alive until then instead of freed (its ``del`` moves to this node), only where
  holding it cannot raise the program's peak: no op call runs in between (an op's
  temporaries are not in any spec), and the sum of live values' sizes (from their
  specs) stays under its estimated peak.

A library call (a matmul, a linear layer) whose op declares ``accepts_out`` for its
inputs' specs (ops/linalg.py: real floating operands of one dtype, no vectors) is given
a dead buffer the same way, through its own ``forward(..., out=buf)``; never one of its
inputs, in place: BLAS does not allow its result to alias an operand. This saves the
fresh allocation of each large product (above the mmap threshold, page faults on every
call).

Graph inputs, constants and graph outputs are never candidates. Op forwards may return
views (reshape, transpose, slices, a tuple's items) that share a buffer, which no static
rule can see, so the program checks each candidate when it runs, cheaply (~0.2 us, which
is why small results are not planned): the array owns its data (``base is None``), is
writeable, aligned and C-contiguous, has the group's shape and dtype, and nothing but the
program's own variable refers to it: ``sys.getrefcount`` equals ``REFS``, the count of a
fresh local array measured once at import by the same bytecode (NumPy's temporary
elision uses the same idea). A view keeps its base referenced, so a buffer seen by any
live view, tuple or tensor fails the check and the group allocates, as without a plan.

``fused.config.memory_plan`` (env ``GRAPHGRAD_MEMORY_PLAN=0`` turns it off) is read when a
program is built.
"""

from __future__ import annotations

import sys
from math import prod

from graphgrad.backend import xp
from graphgrad.graph import Graph, Node, Spec, is_dynamic
from graphgrad.ops.elementwise import Elementwise
from graphgrad.passes import Fused, FusedProgram
from graphgrad.passes.fused_op import Ref, Step
from graphgrad.passes.fusion import numpy_dtype_agrees
from graphgrad.passes.purity import has_side_effects

__all__ = ["plan_memory", "MemoryPlan", "single_program", "writes_out", "PLAN_MIN_BYTES",
           "REFS"]

# results smaller than this are allocated as they are: the run-time check costs about
# what a small allocation does
PLAN_MIN_BYTES = 1 << 17


def _calibrate() -> int:
    """The reference count ``sys.getrefcount`` sees for an array held by one local
    variable, written as the planned programs write the check."""
    ns = {"_rc": sys.getrefcount, "_empty": xp.empty}
    src = "def probe():\n    t = _empty(2)\n    return _rc(t)\n"
    exec(compile(src, "<memory plan probe>", "exec"), ns)  # noqa: S102
    return ns["probe"]()


REFS = _calibrate()


class MemoryPlan:
    """``into[n] = (value, in_place)``: the node ``n`` writes into the buffer of
    ``value``; ``kernel[n]``: its ``FusedKernel`` (a lone elementwise op's own, from
    ``single_program``; a node in ``into`` without one is a library call, whose op's own
    ``forward`` is given the buffer as ``out``, ``writes_out``); ``kept``: dead values
    whose ``del`` moves to the node that reuses them."""

    def __init__(self):
        self.into: dict[Node, tuple[Node, bool]] = {}
        self.kernel: dict[Node, object] = {}
        self.kept: set[Node] = set()

    def check(self, name: str, k: int, ns: dict) -> str:
        """The statement that sets ``_o`` to buffer ``name`` if it is free, else None."""
        ns.setdefault("_rc", sys.getrefcount)
        ns.setdefault("_B", REFS)
        return (f"_o = {name} if _rc({name}) == _B and {name}.base is None and "
                f"{name}.flags.carray and {name}.shape == _s{k} and {name}.dtype == _d{k} "
                f"else None")


def single_program(n: Node) -> FusedProgram | None:
    """A lone elementwise op node (a relu after a convolution, which the fusion pass
    leaves as it is) as a one-step fused program, whose kernel can write into a buffer;
    None where the node is not one (mixed dtypes go through dispatch's promotion)."""
    if n.kind != "call" or n.op is Fused or not issubclass(n.op, Elementwise) \
            or n.deps or n.nargs != len(n.inputs) or has_side_effects(n) \
            or any(is_dynamic(v) for v in n.params.values()) or not isinstance(n.spec, Spec) \
            or not numpy_dtype_agrees(n):   # (the fusion pass's rule: then the kernel's
        return None                          # result is what ``forward`` gives)
    specs, args = [], []
    for a in n.inputs:
        if isinstance(a, Node):
            if not isinstance(a.spec, Spec) or a.spec.dtype != n.spec.dtype:
                return None
            args.append(Ref("in", len(specs)))
            specs.append(a.spec)
        else:
            args.append(a)
    return FusedProgram([Step(n.op, tuple(args), dict(n.params), n.spec, n.name)], specs)


def writes_out(n: Node) -> bool:
    """Whether ``n`` is a library call (matmul, linear) whose op's ``forward`` writes its
    result into a given ``out`` bit for bit as it returns it: the op declares it for
    these input specs (``accepts_out``, next to its ``forward``). The planner never
    copies an op's semantics: an op without the declaration allocates as before."""
    accepts = getattr(n.op, "accepts_out", None)
    if accepts is None or n.op is Fused or n.deps or n.nargs != len(n.inputs) or n.params \
            or has_side_effects(n) or not isinstance(n.spec, Spec):
        return False
    specs = [a.spec for a in n.inputs if isinstance(a, Node)]
    if len(specs) != len(n.inputs) or not all(
            isinstance(sp, Spec) and sp.dtype == n.spec.dtype for sp in specs):
        return False   # (a literal operand, or mixed dtypes: dispatch's promotion)
    return accepts(*specs)


def _bytes(spec) -> int:
    if not isinstance(spec, Spec) or None in spec.shape:
        return 0
    return prod(spec.shape) * xp.dtype(spec.dtype).itemsize


def plan_memory(graph: Graph, order: list[Node], lower) -> MemoryPlan:
    """The plan of the nodes ``order`` (the program's statements, in order);
    ``lower(program)``: the ``FusedKernel`` of a ``FusedProgram`` (fused.py)."""
    plan = MemoryPlan()
    pos = {n: i for i, n in enumerate(order)}
    outputs = {o for o in graph.outputs if isinstance(o, Node)}
    last: dict[Node, int] = {}
    for n in order:
        for i in (*n.input_nodes(), *n.deps):
            last[i] = pos[n]
    end = len(order)
    death = {n: end if n in outputs else last.get(n, pos[n]) for n in order}
    live = [0] * (end + 1)
    for n in order:
        for t in range(pos[n], death[n] + 1):
            live[t] += _bytes(n.spec)
    peak = max(live)
    # values that may lend their buffer: computed here, never an output or a constant
    lender = [n for n in order if n.kind in ("call", "item") and n not in outputs]
    taken: set[Node] = set()
    for n in order:
        size = _bytes(n.spec)
        if n.kind != "call" or size < PLAN_MIN_BYTES:
            continue
        kernel = None
        if not writes_out(n):
            program = n.params["kernel"] if n.op is Fused else single_program(n)
            if program is None:
                continue
            kernel = lower(program)
            if not kernel.writes_out:
                continue
        key = (tuple(n.spec.shape), xp.dtype(n.spec.dtype))
        same = [v for v in lender if v not in taken and isinstance(v.spec, Spec)
                and (tuple(v.spec.shape), xp.dtype(v.spec.dtype)) == key]
        if kernel is not None:   # (a library call is never run in place)
            own = [v for v in same if v in n.inputs and death[v] == pos[n]
                   and all(kernel.may_alias(i) for i, a in enumerate(n.inputs) if a is v)]
            if own:
                plan.kernel[n] = kernel
                plan.into[n] = (own[0], True)
                taken.add(own[0])
                continue
        # (a value that died before n is not one of n's inputs)
        dead = sorted((v for v in same if death[v] < pos[n]), key=lambda v: -death[v])
        for v in dead:
            held = range(death[v] + 1, pos[n])
            # (an op call allocates temporaries no spec shows, so a buffer is never held
            # across one: the estimate could not promise the peak)
            if all(live[t] + size <= peak and order[t].kind != "call" for t in held):
                for t in held:
                    live[t] += size
                plan.into[n] = (v, False)
                if kernel is not None:
                    plan.kernel[n] = kernel
                plan.kept.add(v)
                taken.add(v)
                break
    return plan
