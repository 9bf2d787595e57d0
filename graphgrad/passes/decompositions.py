"""Layer ``passes``: ``decompose``, library ops replaced by their parts where a compiler
does better with the parts (Inductor's decompositions).

Eager graphgrad runs ``layer_norm`` as one op with its own kernels: the fastest way to
run it one call at a time. A fusing compiler runs it faster as mean, centring, variance,
rsqrt and affine fused into one pass over the rows, together with the elementwise ops
around it. The parts are the op's own ``decompose`` rule (a graphgrad program kept beside
the op, like its vjp), which returns None where they would not give the op's result
(e.g. a dtype the op computes in a wider one). Run by ``fuse_elementwise`` before it
groups; never by ``optimize``, whose graphs eager code and exporters read as written.
"""

from __future__ import annotations

from graphgrad.graph import Graph, Node, is_dynamic, symbol
from graphgrad.graph.builder import building

from .rebuild import GraphPass, Rebuild

__all__ = ["decompose"]


def _decomposable(n: Node) -> bool:
    return n.kind == "call" and getattr(n.op, "decompose", None) is not None \
        and not n.deps and not any(is_dynamic(v) for v in n.params.values())


def _rewrite(graph: Graph, subs: dict) -> Rebuild:
    rb = Rebuild(graph, subs)
    for n in graph.nodes:
        if not _decomposable(n):
            rb.keep(n)
            continue
        with building(rb.new):
            args = [symbol(rb.arg(a)) if isinstance(a, Node) else a for a in n.inputs]
            parts = n.op.decompose(*args, **n.params)
        if parts is None:
            rb.keep(n)
            continue
        if parts._node.spec != n.spec:   # a wrong rule: never a silently different graph
            raise RuntimeError(f"{n.op.__name__}.decompose gave {parts._node.spec}, where "
                               f"the op gives {n.spec}")
        rb.replace(n, parts._node)
    return rb


DECOMPOSE = GraphPass("decompose", _rewrite)


def decompose(graph: Graph) -> Graph:
    """``graph`` with each op that has a ``decompose`` rule replaced by its parts (the
    argument itself when none has)."""
    return DECOMPOSE(graph).graph
