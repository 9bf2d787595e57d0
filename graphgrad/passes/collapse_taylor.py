"""Layer ``passes``: ``collapse_taylor``, collapsed Taylor mode as a graph rewrite
(Dangel, Siebert, Zeinhofer, Walther, 2025).

A graph that sums R Taylor jets sharing x_0 (a Laplacian as sum_r y_{2,r} of 2-jets
seeded by e_r, captured by ``capture_taylor_operator``) carries R top coefficients
through every op. Each op's top coefficient is *linear* in its inputs' top
coefficients, with a factor that does not depend on r (Faa di Bruno): so the final sum
can be pushed up the graph, and R top coefficients become one. As a rewrite that is
distributivity read backwards, applied where a sum meets its terms:

    op(.., u_1, ..) + op(.., u_2, ..) + ...  ->  op(.., u_1 + u_2 + ..., ..)

for terms that apply the same op, with the same params and the same other operands, to
operands of the same shape in a position where the op is linear (either factor of a
product, the input of linear/matmul/sum/reshape..., a quotient's numerator). The new
inner sum is rewritten the same way, so the sum climbs until the terms differ in
something else: the products of first-order coefficients, sum_r P(x_{1,r}), which is
what collapsed Taylor mode keeps per direction. Common subexpressions are merged first
(the R jets recompute the same primal and the same factors, which must become one node
for terms to match) and dead nodes dropped after.

The result equals the input graph's up to rounding (sums are reassociated), not bit for
bit, which is why ``optimize`` does not run it: it is asked for. ``func.laplacian``'s
eager ``method="collapsed"`` is written directly as a dispatch level
(``func/taylor_collapsed.py``), not by this pass; tests check that both agree.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from graphgrad.func.jet import jet_coefficients
from graphgrad.graph import Graph, Node, trace
from graphgrad.ops import REGISTRY
from graphgrad.tensor import tensor

from .common_subexpressions import common_subexpression_elimination
from .dead_code import dead_code_elimination
from .keys import value_key
from .purity import has_side_effects
from .rebuild import GraphPass, Rebuild

__all__ = ["collapse_taylor", "capture_taylor_operator", "unrolled_operator"]

_ADD = REGISTRY["Add"]
# op -> the input positions in which it is linear (the others are held fixed)
_LINEAR_IN = {REGISTRY["Mul"]: (0, 1), REGISTRY["Linear"]: (0,), REGISTRY["Matmul"]: (0, 1),
              REGISTRY["Neg"]: (0,), REGISTRY["Sum"]: (0,), REGISTRY["Mean"]: (0,),
              REGISTRY["Reshape"]: (0,), REGISTRY["Permute"]: (0,),
              REGISTRY["Expand"]: (0,), REGISTRY["Getitem"]: (0,), REGISTRY["Div"]: (0,)}


def _is_sum(n, users: dict) -> bool:
    return isinstance(n, Node) and n.kind == "call" and n.op is _ADD and not n.deps \
        and not has_side_effects(n)


def _terms(root: Node, users: dict) -> list:
    """The addends of the tree of Adds under ``root`` whose inner Adds feed only it."""
    out, todo = [], [root]
    while todo:
        n = todo.pop()
        for i in reversed(n.inputs):
            if _is_sum(i, users) and len(users.get(i, ())) == 1:
                todo.append(i)
            else:
                out.append(i)
    return out


def _group_key(t: Node, pos: int):
    others = tuple(("node", id(v)) if isinstance(v, Node) else value_key(v)
                   for k, v in enumerate(t.inputs) if k != pos)
    u = t.inputs[pos]
    return (id(t.op), pos, others, value_key(t.params), t.nargs, u.spec)


def _factorable(t) -> bool:
    return isinstance(t, Node) and t.kind == "call" and t.op in _LINEAR_IN and not t.deps \
        and not has_side_effects(t) and not (t.op is REGISTRY["Div"]
                                             and t.params.get("rounding_mode") is not None)


def _sum_of(rb: Rebuild, values: list, name: str):
    total = values[0]
    for v in values[1:]:
        spec = _ADD.infer(total.spec, v.spec)
        total = rb.new.call(_ADD, (total, v), {}, spec, name=name)
    return total


def _factor(rb: Rebuild, terms: list, name: str) -> list:
    """Merge the terms that apply one linear op to different operands, inner sums
    included (a work list: each merge's new inner sum is factored in turn)."""
    changed = True
    while changed:
        changed = False
        groups: dict = {}
        for t in terms:
            if _factorable(t):
                for pos in _LINEAR_IN[t.op]:
                    if isinstance(t.inputs[pos], Node):
                        groups.setdefault(_group_key(t, pos), []).append(t)
        best = max(groups.items(), key=lambda kv: len(kv[1]), default=None)
        if best is None or len(best[1]) < 2:
            break
        (_, pos, *_), members = best
        inner = _factor(rb, _opened([m.inputs[pos] for m in members]), name)
        operand = _sum_of(rb, inner, name)
        first = members[0]
        inputs = list(first.inputs)
        inputs[pos] = operand
        merged = rb.new.call(first.op, inputs, dict(first.params), first.spec,
                             nargs=first.nargs, name=name)
        chosen = {id(m) for m in members}
        terms = [t for t in terms if id(t) not in chosen] + [merged]
        rb.changed = changed = True
    return terms


def _opened(terms: list) -> list:
    """The addends of the sums among ``terms`` (an order's coefficient is often a sum,
    x_2 f'(x_0) + P(x_1): its linear part can climb further only as a term of its own).
    Only sums whose operands have the sum's spec: nothing broadcasts inside."""
    out, todo = [], list(reversed(terms))
    while todo:
        t = todo.pop()
        if isinstance(t, Node) and t.kind == "call" and t.op is _ADD and not t.deps \
                and not t.params and not has_side_effects(t) and all(
                    isinstance(i, Node) and i.spec == t.spec for i in t.inputs):
            todo.extend(reversed(t.inputs))
        else:
            out.append(t)
    return out


def _rewrite(graph: Graph, subs: dict) -> Rebuild:
    rb = Rebuild(graph, subs)
    users = graph.users()
    for n in graph.nodes:
        inner_sum = _is_sum(n, users) and all(
            _is_sum(u, users) for u in users.get(n, ())) and len(users.get(n, ())) == 1
        if not _is_sum(n, users) or inner_sum:
            rb.keep(n)
            continue
        old_terms = _terms(n, users)
        if not all(isinstance(t, Node) for t in old_terms) or len(old_terms) < 2:
            rb.keep(n)
            continue
        terms = _factor(rb, [rb.arg(t) for t in old_terms], n.name)
        if len(terms) == len(old_terms):
            rb.keep(n)
            continue
        total = _sum_of(rb, terms, n.name)
        if total.spec != n.spec:  # broadcasting would change the result: leave it
            rb.keep(n)
            continue
        rb.replace(n, total)
    return rb


COLLAPSE = GraphPass("collapse_taylor", _rewrite)


def collapse_taylor(graph: Graph) -> Graph:
    """``graph`` with sums of jets collapsed (see the module docstring): common
    subexpressions merged, sums pushed up through the ops linear in them, dead nodes
    dropped. A new Graph, or ``graph`` itself when nothing collapsed."""
    merged = common_subexpression_elimination(graph)
    collapsed = COLLAPSE(merged).graph
    if collapsed is merged:
        return graph if merged is graph else merged
    return dead_code_elimination(collapsed)


def unrolled_operator(f: Callable, point, directions: np.ndarray, weights: np.ndarray):
    """sum_r w_r d^2/dt^2 f(point + t v_r) as R separate 2-jets (plain Taylor mode,
    directions unrolled; v_r applied to the last dim of ``point``): the form this pass
    collapses. ``graphgrad.compile`` records a traced ``func.laplacian`` so."""
    total = out = None
    for v, w in zip(directions, weights, strict=True):
        if w == 0:
            continue
        seed = tensor(np.asarray(v, np.float64), dtype=point.dtype)
        out, terms = jet_coefficients(f, (point,), ([seed, None],), 2)
        y2 = terms[0][1]
        if y2 is None:
            continue
        term = y2 if w == 1 else y2 * float(w)
        total = term if total is None else total + term
    if total is None:  # f is affine along every direction
        out = f(point) if out is None else out
        return out * 0.0
    return total * 2.0


def capture_taylor_operator(f: Callable, x, coefficients=None, name: str = "laplacian"
                            ) -> Graph:
    """The graph of sum_r w_r d^2/dt^2 f(x + t v_r) as R separate 2-jets (plain Taylor
    mode, directions unrolled), for ``x`` shaped like the example: the Laplacian
    (``coefficients`` None: v_r = e_r, w_r = 1) or sum_i c_i d_ii f (a vector).
    ``collapse_taylor`` turns it into collapsed Taylor mode."""
    d = x.shape[-1]
    weights = np.ones(d) if coefficients is None else np.asarray(coefficients, np.float64)

    def operator(point):
        return unrolled_operator(f, point, np.eye(d), weights)
    return trace(operator, x, name=name)
