"""Layer ``backends``: which forward values the compiled backward reads saved and which
it recomputes, chosen by a minimum cut (the partitioner of PyTorch's AOTAutograd,
``min_cut_rematerialization_partition``).

The forward nodes form a flow network: each value is an edge ``in -> out`` whose
capacity is its size in bytes; a value flows to every node that reads it; the source
feeds the graph inputs and every value that may not be recomputed; every value the
backward reads flows to the sink. A cut separates the values computed in the forward
from those the backward recomputes, and the edges it crosses are the values saved
between the two: the minimum cut saves the fewest bytes from which the backward can
recompute what it reads. Like Inductor, only cheap elementwise ops are recomputed, and
not one whose value the backward must materialize anyway (a matrix product reads it:
recomputing it is then a full extra pass, not a few instructions inside a fused kernel)
nor one whose output is a quarter of its inputs' size or less.
"""

from __future__ import annotations

from collections import deque
from math import prod

from graphgrad.backend import xp
from graphgrad.graph import Node
from graphgrad.ops.elementwise import Elementwise
from graphgrad.passes import has_side_effects

__all__ = ["recomputable", "min_cut", "size_of", "config"]

_INF = float("inf")


class PartitionConfig:
    """Switches of the partition, read when a compiled backward is built (PyTorch's
    ``torch._functorch.config`` names). ``ban_recompute_materialized_backward`` (True):
    a value a backward matmul reads is saved, not recomputed, for speed; False: the cut
    minimizes saved bytes alone (a GELU MLP then saves GELU's input only and recomputes
    GELU in the backward: less memory, a slower step)."""

    def __init__(self):
        self.ban_recompute_materialized_backward = True


config = PartitionConfig()


def size_of(n: Node) -> int:
    """A value's bytes (its spec; 8 for a Python scalar or an unknown layout)."""
    spec = n.spec
    shape, dtype = getattr(spec, "shape", None), getattr(spec, "dtype", None)
    if shape is None or dtype is None or None in shape:
        return 8
    return prod(shape) * xp.dtype(dtype).itemsize


def recomputable(n: Node) -> bool:
    """An elementwise op with no effects and no ordering edges: cheap to run again."""
    return n.kind == "call" and issubclass(n.op, Elementwise) and not n.deps \
        and not has_side_effects(n)


def min_cut(inputs: list[Node], fwd_nodes: list[Node], needed: list[Node],
            materialized: set[Node]) -> tuple[list[Node], list[Node]]:
    """``(saved, recomputed)``: the values the forward hands the backward (in graph
    order, inputs last) and the forward nodes the backward runs again (in graph order).
    ``needed``: the forward values the backward reads; ``materialized``: those of them
    that a backward op other than an elementwise one reads."""
    order = [*fwd_nodes, *inputs]
    cap: dict[object, dict[object, float]] = {}

    def edge(a, b, c: float) -> None:
        cap.setdefault(a, {})[b] = cap.get(a, {}).get(b, 0) + c
        cap.setdefault(b, {}).setdefault(a, 0)   # the residual edge back

    is_input = set(inputs)
    for n in order:
        edge((n, "in"), (n, "out"), size_of(n))
        if n in is_input or _banned(n, materialized):
            edge("source", (n, "in"), _INF)
        if n not in is_input:
            for i in (*n.input_nodes(), *n.deps):
                edge((i, "out"), (n, "in"), _INF)
    for n in needed:
        edge((n, "out"), "sink", _INF)
    reach = _max_flow_source_side(cap)
    saved = [n for n in order if (n, "in") in reach and (n, "out") not in reach]
    kept = set(saved)
    recompute: set[Node] = set()
    todo = [n for n in needed if n not in kept]
    while todo:
        n = todo.pop()
        if n in recompute:
            continue
        recompute.add(n)
        todo.extend(i for i in (*n.input_nodes(), *n.deps) if i not in kept)
    return saved, [n for n in fwd_nodes if n in recompute]


def _banned(n: Node, materialized: set[Node]) -> bool:
    """Whether ``n`` must run in the forward (then it is saved if the backward reads it)."""
    if not recomputable(n) or (n in materialized and config.ban_recompute_materialized_backward):
        return True
    return size_of(n) * 4 < sum(size_of(i) for i in n.input_nodes())


def _max_flow_source_side(cap: dict) -> set:
    """The vertices the source reaches in the residual network of a maximum flow
    (Edmonds-Karp: shortest augmenting paths). ``cap`` is updated to the residual."""
    while True:
        parent = {"source": None}
        q = deque(["source"])
        while q and "sink" not in parent:
            u = q.popleft()
            for v, c in cap.get(u, {}).items():
                if c > 0 and v not in parent:
                    parent[v] = u
                    q.append(v)
        if "sink" not in parent:
            return set(parent)
        path, v = [], "sink"
        while parent[v] is not None:
            path.append((parent[v], v))
            v = parent[v]
        push = min(cap[u][v] for u, v in path)
        if push == _INF:   # a value that can be neither saved nor recomputed
            raise RuntimeError("min_cut: a value the backward reads has no finite cut")
        for u, v in path:
            cap[u][v] -= push
            cap[v][u] += push
