"""Layer ``passes``: ``simplify``: algebraic identities that hold exactly in IEEE
arithmetic, bit for bit, for every input (NaN, infinities and -0.0 included):

* ``x * 1``, ``1 * x`` -> ``x`` and ``x / 1`` -> ``x`` for a real ``x`` (true division
  only: ``floor`` rounding changes non-integers; complex products are not exact), for a
  Python literal 1 or 1.0 or a 0-d constant 1;
* ``-(-x)`` -> ``x``;
* ``reshape(reshape(x, s1), s2)`` -> ``reshape(x, s2)`` (a reshape reads the elements in
  the same order whatever the intermediate shape);
* ``permute(permute(x, p1), p2)`` -> ``permute(x, p1 o p2)``, or ``x`` when they cancel
  (``x.t().t()``).

Not done, because they are not exact: ``x + 0`` -> ``x`` (``-0.0 + 0`` is ``+0.0``),
``x - x`` -> ``0`` (NaN, inf), ``x * 0`` -> ``0``, reassociation.

A rewrite is made only where the result's Spec (shape and dtype, unknown dims included)
is exactly the node's (``x * 1`` of an int tensor by ``1.0`` is a float tensor: not
``x``), so the graph's Specs, its outputs' dtypes and the gradients are unchanged; only
where the nodes bypassed have no control inputs (a control dependant of the result still
waits for what it waited for); and never where the result would hand out a graph input,
variable or constant itself as an output or assigned value (the caller would get an
alias of its own input where it got a new tensor).

The identities read the Specs the graph records; a graph run on inputs of other shapes
than its Specs say (a jit trace serves other sizes) keeps its values: none of the rules
depends on sizes, only on ranks and dtypes, which the IR fixes.
"""

from __future__ import annotations

from graphgrad.graph import Graph, GraphBuilder, Node, Spec
from graphgrad.ops import REGISTRY

from .purity import handed_out, has_side_effects
from .rebuild import GraphPass, Rebuild

__all__ = ["simplify", "SIMPLIFY"]

_MUL, _DIV, _NEG = REGISTRY["Mul"], REGISTRY["Div"], REGISTRY["Neg"]
_RESHAPE, _PERMUTE = REGISTRY["Reshape"], REGISTRY["Permute"]
_HANDED_OUT_AS_IS = frozenset({"placeholder", "variable", "constant"})


def _is_one(value) -> bool:
    """A Python literal 1 or 1.0, or a 0-d constant node equal to 1."""
    if type(value) in (int, float):
        return value == 1
    if isinstance(value, Node) and value.kind == "constant" and not value.deps:
        arr = value.value
        return getattr(arr, "ndim", None) == 0 and arr.dtype.kind in "iufc" and arr == 1
    return False


def _pure_call(value, op) -> bool:
    """Whether ``value`` is a call node of ``op`` with no control inputs."""
    return isinstance(value, Node) and value.kind == "call" and value.op is op and \
        not value.deps and not has_side_effects(value)


def _real(value) -> bool:
    """A node of a real dtype: complex ``x * 1`` is computed as ``x * (1 + 0j)``, whose
    ``-0.0 + 0.0`` and ``inf * 0`` terms change -0.0 and infinite parts."""
    return isinstance(value, Node) and isinstance(value.spec, Spec) and \
        value.spec.dtype.kind in "iuf"


def _same_spec(a, b) -> bool:
    dims = (None if s.shape is None else tuple(s.shape) for s in (a, b))
    return next(dims) == next(dims) and a.dtype == b.dtype


def _identity_operand(n: Node, ins: list):
    """The operand ``n`` equals exactly (a node of the new graph), or None."""
    if n.op is _MUL and len(ins) == 2:
        for x, other in ((ins[0], ins[1]), (ins[1], ins[0])):
            if _real(x) and _is_one(other):
                return x
    if n.op is _DIV and n.params.get("rounding_mode") is None and _real(ins[0]) \
            and _is_one(ins[1]):
        return ins[0]
    if n.op is _NEG and _pure_call(ins[0], _NEG) and isinstance(ins[0].inputs[0], Node):
        return ins[0].inputs[0]
    return None


def _composed(n: Node, ins: list):
    """``(inputs, params)`` of one node doing what ``n`` and its input do together, or
    None."""
    inner = ins[0]
    if n.op is _RESHAPE and _pure_call(inner, _RESHAPE):
        return (inner.inputs[0], *ins[1:]), n.params
    if n.op is _PERMUTE and _pure_call(inner, _PERMUTE):
        p1, p2 = inner.params["dims"], n.params["dims"]
        return (inner.inputs[0],), {"dims": tuple(p1[d] for d in p2)}
    return None


def _infer(n: Node, inputs: tuple, params: dict) -> Spec | None:
    """The Spec of ``n``'s op on other inputs and params, by its shape rule; None where the
    rule refuses them."""
    try:
        return GraphBuilder.infer(n.op, list(inputs[:n.nargs]), params, n.nargs != len(inputs))
    except Exception:  # noqa: BLE001 - no rewrite then
        return None


def _rewrite(graph: Graph, subs: dict) -> Rebuild:
    rb = Rebuild(graph, subs)
    held = handed_out(graph)
    for n in graph.nodes:
        if n.kind != "call" or n.deps or has_side_effects(n):
            rb.keep(n)
            continue
        ins = [rb.arg(i) for i in n.inputs]
        x = _identity_operand(n, ins)
        if x is None:
            composed = _composed(n, ins)
            if composed is not None:
                inputs, params = composed
                if n.op is _PERMUTE and params["dims"] == tuple(range(len(params["dims"]))):
                    x = inputs[0]  # the permutations cancel
                else:
                    spec = _infer(n, inputs, params)
                    if spec is not None and _same_spec(spec, n.spec):
                        rb.keep(n, inputs=inputs, params=params)
                        continue
        if x is not None and isinstance(x.spec, Spec) and _same_spec(x.spec, n.spec) \
                and not (n in held and x.kind in _HANDED_OUT_AS_IS):
            rb.replace(n, x)
        else:
            rb.keep(n)
    return rb


SIMPLIFY = GraphPass("simplify", _rewrite)


def simplify(graph: Graph) -> Graph:
    """``graph`` with the exact identities above applied: a new Graph, or ``graph``
    itself when none applies. The argument is never changed."""
    return SIMPLIFY(graph).graph
