"""Layer ``passes``: ``fold_matmul_scalars``: a Python-number scaling next to a matmul
(``(s * a) @ b``, ``a @ (b * s)``, ``(a @ b) * s``) is applied to whichever of the two
operands and the product has the fewest elements: one multiply pass over the smallest
array instead of the one the program wrote. Attention's ``(q * scale) @ k.T`` with few
queries, or a loss scaling ``(x @ w) * s`` with a wide ``x``, are the cases.

Scaling commutes with the product in exact arithmetic; in floating point the result may
differ from eager's in the last bits (as torch.compile's reassociations do), except for
powers of two, which scale exactly. Only floating-point tensors of one dtype whose
scaling node is read by the matmul alone (or reads the matmul alone) are rewritten, and
never across a dependency edge.

Transposed operands need no pass: ``Permute``/``t()`` is a NumPy view, and
``numpy.matmul`` hands a transposed (Fortran-ordered) 2-d operand to BLAS with its
transpose flag, without a copy; fusion never takes a permute into a group, so no
lowering materializes one (tests/test_matmul_scaling.py checks both).
"""

from __future__ import annotations

from math import prod

from graphgrad.graph import Graph, Node
from graphgrad.ops import REGISTRY, Spec

from .rebuild import GraphPass, Rebuild

__all__ = ["fold_matmul_scalars", "MATMUL_SCALARS", "matmul_scalar_plan"]

_MATMUL = frozenset(REGISTRY[n] for n in ("Matmul", "Mm", "Bmm") if n in REGISTRY)
_MUL = REGISTRY["Mul"]


def _scaling(n, users: dict, outputs: set) -> tuple[Node, int | float] | None:
    """``(t, s)`` when ``n`` is ``t * s`` (``s`` a Python number) keeping ``t``'s float
    dtype and shape, with no dependency edge; else None."""
    if not isinstance(n, Node) or n.kind != "call" or n.op is not _MUL or n.deps \
            or len(n.inputs) != 2 or any(n in u.deps for u in users[n]):
        return None
    a, b = n.inputs
    t, s = (a, b) if isinstance(a, Node) else (b, a)
    if not isinstance(t, Node) or type(s) not in (int, float):
        return None
    if not isinstance(t.spec, Spec) or not isinstance(n.spec, Spec) or \
            t.spec.dtype != n.spec.dtype or t.spec.dtype.kind != "f" or \
            tuple(t.spec.shape) != tuple(n.spec.shape) or None in n.spec.shape:
        return None
    return t, s


def _only_reader(n: Node, reader: Node, users: dict, outputs: set) -> bool:
    return n not in outputs and set(users[n]) == {reader}


def matmul_scalar_plan(graph: Graph) -> dict:
    """matmul node -> ``(a, b, s, where, dropped)``: its unscaled operands, the combined
    scalar, where it goes (``"a"``, ``"b"`` or ``"out"``) and the scaling nodes it
    replaces (the one reading the product last, if any). Only matmuls whose scaling
    moves are listed."""
    users = graph.users()
    outputs = {o for o in graph.outputs if isinstance(o, Node)}
    plan = {}
    for n in graph.nodes:
        if n.kind != "call" or n.op not in _MATMUL or n.deps or len(n.inputs) != 2 \
                or not all(isinstance(a, Node) for a in n.inputs) \
                or any(n in u.deps for u in users[n]) or n.inputs[0] is n.inputs[1]:
            continue
        operands, s, found, dropped = list(n.inputs), 1, [], []
        for side, name in ((0, "a"), (1, "b")):
            sc = _scaling(operands[side], users, outputs)
            if sc is not None and _only_reader(operands[side], n, users, outputs):
                dropped.append(operands[side])
                operands[side], k = sc
                s, found = s * k, [*found, name]
        reader = users[n][0] if len(users[n]) == 1 and n not in outputs else None
        sc = _scaling(reader, users, outputs) if reader is not None else None
        if sc is not None and sc[0] is n:
            s, found = s * sc[1], [*found, "out"]
            dropped.append(reader)
        if not found or None in n.spec.shape or any(None in a.spec.shape for a in operands):
            continue
        sizes = {"a": prod(operands[0].spec.shape), "b": prod(operands[1].spec.shape),
                 "out": prod(n.spec.shape)}
        where = min(sizes, key=lambda k: (sizes[k], k != found[0]))   # ties: stay put
        if found == [where]:
            continue
        plan[n] = (operands[0], operands[1], s, where, dropped)
    return plan


def _rewrite(graph: Graph, subs: dict) -> Rebuild:
    rb = Rebuild(graph, subs)
    plan = matmul_scalar_plan(graph)
    dropped = {d for *_, ds in plan.values() for d in ds}
    stands_for: dict[Node, Node] = {}   # a dropped product scaling -> the new result
    for n in graph.nodes:
        if n in plan:
            a, b, s, where, ds = plan[n]
            ins = [rb.arg(a), rb.arg(b)]
            if s == 1:   # the numbers cancelled (2 * 0.5): x * 1 is x, bit for bit
                where = "none"
            if where in ("a", "b"):
                i = 0 if where == "a" else 1
                src = (a, b)[i]
                ins[i] = rb.new.add("call", f"{src.name}_scaled", op=_MUL,
                                    inputs=(ins[i], s), params={}, spec=src.spec)
            # (``keep`` would look up the dropped scalings among the old inputs)
            mm = rb.new.add("call", n.name, op=n.op, inputs=tuple(ins), params=dict(n.params),
                            spec=n.spec, nargs=n.nargs)
            rb.replace(n, mm)
            out = mm
            if where == "out":
                out = rb.new.add("call", f"{n.name}_scaled", op=_MUL, inputs=(mm, s),
                                 params={}, spec=n.spec)
            for d in ds:
                if d.inputs and n in d.inputs:
                    stands_for[d] = out
            if where == "out" and not any(n in d.inputs for d in ds):
                rb.replace(n, out)   # the product's readers take the scaled one
        elif n in stands_for:
            rb.replace(n, stands_for[n])
        elif n in dropped:
            rb.drop(n)
        else:
            rb.keep(n)
    return rb


MATMUL_SCALARS = GraphPass("fold_matmul_scalars", _rewrite)


def fold_matmul_scalars(graph: Graph) -> Graph:
    """``graph`` with each movable scaling of a matmul on its smallest array (the argument
    itself when none moves)."""
    return MATMUL_SCALARS(graph).graph
