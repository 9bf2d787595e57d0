"""Layer ``passes``: ``fuse_elementwise``, the fusion pass: maximal groups of elementwise
ops (broadcasting, Python scalars, casts, ``where``, comparisons, ``expand``) and
reductions become one ``Fused`` node each (fused_op.py), so a backend can run a group
as one kernel: one pass over memory instead of one per op.

A reduction may sit inside a group when it is *row-local*: over dims other than the
first, keeping its rank (``keepdim=True``; softmax and log_softmax keep the shape), so
its result broadcasts back onto the rows it came from (a layer norm's mean and variance,
a softmax's max and sum, a backward's ``sum(dy * xhat)``). Such a group runs row block
by row block, every value of a block in cache (fused_numpy.py): one pass over memory
where separate groups made one per reduction.

A group has one result: every value inside it but the last is read only inside it.
What never joins a group, and why (``fusion_report`` lists each such node):

* matmul, convolution and every other non-elementwise op: they stay library calls;
* random draws and other impure nodes, and opaque module calls;
* nodes with dependency edges (control inputs), or that others wait on;
* reads of a ``variable`` that an ``assign`` mutates (order matters there);
* ops whose NumPy result dtype differs from PyTorch's promotion (dispatch decides
  those at run time), and params bound at run time (``Dyn``);
* a reduction that is not row-local anywhere but at the end of a group (one over the
  first dim, or dropping dims, needs every row before any op can read it);
* ``expand`` at the end of a group (eager's result is a view, not a copy).
"""

from __future__ import annotations

import heapq
from typing import NamedTuple

from graphgrad.backend import xp
from graphgrad.graph import Graph, Node, is_dynamic
from graphgrad.ops import REGISTRY, Spec
from graphgrad.ops.elementwise import Elementwise

from .decompositions import decompose
from .fused_op import Fused, FusedProgram, Ref, Step
from .matmul_scaling import fold_matmul_scalars
from .purity import has_side_effects
from .rebuild import GraphPass, Rebuild

__all__ = ["fuse_elementwise", "fusion_report", "FusionReport", "FUSION", "REDUCTIONS",
           "reduced_dims", "row_local", "numpy_dtype_agrees"]

# reductions a group may end with: sum/mean/amax/amin/logsumexp and row softmaxes
REDUCTIONS = frozenset(REGISTRY[n] for n in ("Sum", "Mean", "Amax", "Amin", "Logsumexp",
                                             "Softmax", "LogSoftmax"))
# ops whose forward makes several passes over memory by itself: worth a group of their
# own on large tensors (a backend can run it block by block, in cache)
COMPOSITE = frozenset(REGISTRY[n] for n in ("Gelu", "Softmax", "LogSoftmax", "Logsumexp",
                                            "Sigmoid", "Softplus", "Silu") if n in REGISTRY)
SINGLE_MIN_ELEMENTS = 1 << 17
# cheap elementwise ops that a group may recompute from their inputs rather than read
# their full-size result (a value several groups read: x - mean in a layer norm)
RECOMPUTED = frozenset(REGISTRY[n] for n in ("Add", "Sub", "Mul", "Div", "Neg", "Cast"))
ROW_KEEPING = frozenset(REGISTRY[n] for n in ("Softmax", "LogSoftmax"))
EXPAND = REGISTRY["Expand"]
_LIBRARY = frozenset(n for n in ("Matmul", "Mm", "Bmm", "Linear", "Conv1d", "Conv2d",
                                 "Conv3d", "ConvNd", "Einsum", "Addmm") if n in REGISTRY)


class FusionReport(NamedTuple):
    """``groups``: per fused group, the node names it took (in order) and their ops;
    ``not_fused``: (node name, op, reason) for each op node left as it was."""

    groups: list
    not_fused: list

    def __str__(self) -> str:
        lines = [f"{len(self.groups)} fused group{'s' if len(self.groups) != 1 else ''}"]
        for i, (names, ops) in enumerate(self.groups):
            lines.append(f"  group {i}: {' -> '.join(ops)}  ({', '.join(names)})")
        lines.append("not fused:")
        lines.extend(f"  {name} ({op}): {why}" for name, op, why in self.not_fused)
        return "\n".join(lines)


def numpy_dtype_agrees(n: Node) -> bool:
    """Whether the op's NumPy ``forward`` gives the dtype PyTorch's promotion gives (the
    node's spec): then running ``forward`` alone is exactly what eager does."""
    dummies = [xp.ones((1,) * len(a.spec.shape), a.spec.dtype) if isinstance(a, Node) else a
               for a in n.inputs]
    try:
        with xp.errstate(all="ignore"):
            got = xp.asarray(n.op.forward(*dummies, **n.params)).dtype
    except Exception:  # noqa: BLE001 - an op that refuses stand-ins is left alone
        return False
    return got == n.spec.dtype


def reduced_dims(op: type, params: dict, rank: int) -> tuple | None:
    """The dims a reduction step reduces, normalized (None: all of them)."""
    dims = params.get("dim")
    if dims is None:
        return None
    dims = dims if isinstance(dims, tuple) else (dims,)
    return tuple(d % rank for d in dims) if rank else ()


def row_local(op: type, params: dict, rank: int) -> bool:
    """Whether a reduction (``op`` with ``params`` on a rank-``rank`` input) keeps the
    rows apart: over dims other than the first, its result of the input's rank."""
    dims = reduced_dims(op, params, rank)
    if rank < 2 or not dims or 0 in dims:
        return False
    return op in ROW_KEEPING or params.get("keepdim") is True


def _inner_ok(m: Node) -> bool:
    """Whether ``m`` may be inside a group, not only its root."""
    if m.op in REDUCTIONS:
        return row_local(m.op, m.params, m.inputs[0].spec.ndim)
    return True


def _why_not(n: Node, users: dict, mutated: set) -> str | None:
    """Why ``n`` cannot be in any group (None: it can)."""
    if n.kind != "call":
        return f"a {n.kind} node" if n.kind not in ("placeholder", "output", "constant") \
            else ""
    if has_side_effects(n):
        return "random or side-effecting op"
    if n.op in REDUCTIONS or issubclass(n.op, Elementwise) or n.op is EXPAND:
        pass
    elif n.op.__name__ in _LIBRARY:
        return "a library call (BLAS/convolution): never fused"
    else:
        return "not an elementwise op or a reduction"
    if n.deps or any(n in u.deps for u in users[n]):
        return "has a dependency edge"
    if any(isinstance(a, Node) and a in mutated for a in n.inputs):
        return "reads a mutated input"
    if any(is_dynamic(v) for v in n.params.values()) or n.nargs != len(n.inputs):
        return "params bound at run time"
    if not isinstance(n.spec, Spec) or any(not isinstance(a.spec, Spec)
                                          for a in n.inputs if isinstance(a, Node)):
        return "no single-tensor spec"
    if not numpy_dtype_agrees(n):
        return "NumPy's dtype differs from PyTorch's promotion (dispatch decides)"
    return None


def _numel(spec) -> int:
    n = 1
    for d in spec.shape:
        if d is None:
            return 0
        n *= d
    return n


def _groups(graph: Graph) -> tuple[list[list[Node]], dict[Node, str]]:
    """The fusion groups (each in graph order, its root last) and why each op node that
    is in none was left out. A cheap op (``RECOMPUTED``) whose inputs are the group's
    inputs may be in several groups: each recomputes it."""
    nodes = graph.nodes
    index = {n: i for i, n in enumerate(nodes)}
    users = graph.users()
    mutated = {n.target for n in nodes if n.kind == "assign" and n.target is not None}
    outputs = set(graph.outputs)
    why = {n: _why_not(n, users, mutated) for n in nodes}
    owner: dict[Node, int] = {}
    groups: list[list[Node]] = []
    copies: dict[Node, list[set]] = {}   # node -> the groups that recompute it
    member_of: dict[Node, list[set]] = {}
    for root in reversed(nodes):   # consumers first: each group grows from its result
        if why[root] is not None or root in owner or root.op is EXPAND:
            continue
        if root in copies and _recomputed_by_all(root, users, member_of):
            continue

        members = {root}
        frontier = [-index[a] for a in root.input_nodes()]
        heapq.heapify(frontier)
        seen = set()
        while frontier:   # latest producer first: all its users are decided by then
            m = nodes[-heapq.heappop(frontier)]
            if m in seen:
                continue
            seen.add(m)
            if why[m] is not None or m in owner or m in outputs or not _inner_ok(m):
                continue
            if not all(u in members for u in users[m]):
                # recomputed here (its inputs stay the group's inputs) when every reader
                # can fuse it too; a value a library call reads exists anyway
                if m.op in RECOMPUTED and all(why[u] is None for u in users[m]):
                    members.add(m)
                continue
            members.add(m)
            for a in m.input_nodes():
                heapq.heappush(frontier, -index[a])
        if len(members) < 2 and not (root.op in COMPOSITE
                                     and _numel(root.spec) >= SINGLE_MIN_ELEMENTS):
            continue
        gid = len(groups)
        for m in members:
            member_of.setdefault(m, []).append(members)
            if all(u in members for u in users[m]) or m is root:
                owner[m] = gid
            else:
                copies.setdefault(m, []).append(members)
        groups.append(sorted(members, key=index.__getitem__))
    groups.reverse()
    reasons = {}
    for n in nodes:
        if n.kind == "call" and n not in owner and n not in copies:
            reasons[n] = why[n] or (
                "a reduction over the first dim or dropping dims: it may only end a group"
                if n.op in REDUCTIONS and not _inner_ok(n) else "nothing to fuse it with")
    return groups, reasons


def _reads_directly(u: Node, n: Node, kept: set, root_of: dict, member_of: dict) -> bool:
    """Whether ``u``, as the fused graph has it, reads ``n``'s value: ``u`` on its own
    (kept, not a group's result), or a group that has ``u`` but recomputes not ``n``."""
    if u not in member_of:
        return True
    if u in kept and u not in root_of:
        return True
    return any(n not in g for g in member_of[u])


def _recomputed_by_all(n: Node, users: dict, member_of: dict) -> bool:
    """Whether every reader of ``n`` is in groups only, each of which recomputes ``n``."""
    return all(u in member_of and all(n in g for g in member_of[u]) for u in users[n])


def _program(members: list[Node]) -> tuple[FusedProgram, list]:
    """A group's program and its external inputs (graph nodes, in first-use order)."""
    pos = {m: i for i, m in enumerate(members)}
    ext: list[Node] = []
    steps = []
    for m in members:
        args = []
        for a in m.inputs:
            if not isinstance(a, Node):
                args.append(a)
            elif a in pos:
                args.append(Ref("t", pos[a]))
            else:
                if a not in ext:
                    ext.append(a)
                args.append(Ref("in", ext.index(a)))
        steps.append(Step(m.op, tuple(args), dict(m.params), m.spec, m.name))
    return FusedProgram(steps, [a.spec for a in ext]), ext


def _rewrite(graph: Graph, subs: dict) -> Rebuild:
    rb = Rebuild(graph, subs)
    groups, _ = _groups(graph)
    root_of = {g[-1]: g for g in groups}
    member_of: dict[Node, list[set]] = {}
    for g in groups:
        for m in g:
            member_of.setdefault(m, []).append(set(g))
    users = graph.users()
    # which group members still exist on their own: those read directly by a node that
    # exists (a kept node, or a fused node whose group does not recompute them)
    kept: set[Node] = set()
    for n in reversed(graph.nodes):
        if n not in member_of or n in root_of or any(
                _reads_directly(u, n, kept, root_of, member_of) for u in users[n]):
            kept.add(n)
    for n in graph.nodes:
        if n not in kept:
            rb.drop(n)
        elif n in root_of:
            program, ext = _program(root_of[n])
            new = rb.new.add("call", f"fused_{n.name}", op=Fused,
                             inputs=tuple(rb.arg(a) for a in ext),
                             params={"kernel": program}, spec=n.spec)
            rb.replace(n, new)
        else:
            rb.keep(n)
    return rb


def fusion_report(graph: Graph) -> FusionReport:
    """What ``fuse_elementwise`` would do to ``graph`` (its top level): the groups and,
    for every other op node, why it was left alone."""
    groups, reasons = _groups(fold_matmul_scalars(decompose(graph)))
    return FusionReport([([m.name for m in g], [m.op.__name__ for m in g]) for g in groups],
                        [(n.name, n.op.__name__, r) for n, r in reasons.items()])


FUSION = GraphPass("fuse_elementwise", _rewrite)


def fuse_elementwise(graph: Graph) -> Graph:
    """``graph`` with each fusion group replaced by one ``Fused`` node (the argument
    itself when nothing fuses). Sub-graphs are fused too. First, library ops a fused
    kernel runs better as their parts are decomposed (``decompose``: layer_norm), and
    scalings of matmuls move to their smallest array (``fold_matmul_scalars``): what
    remains of them fuses with their neighbours."""
    return FUSION(fold_matmul_scalars(decompose(graph))).graph
