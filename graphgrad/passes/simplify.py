"""Layer ``passes``: ``simplify``: algebraic identities that hold exactly in IEEE
arithmetic, bit for bit, for every input (NaN, infinities and -0.0 included):

* ``x * 1``, ``1 * x`` -> ``x`` and ``x / 1`` -> ``x`` for a real ``x`` (true division
  only: ``floor`` rounding changes non-integers; complex products are not exact), for a
  Python literal 1 or 1.0 or a 0-d constant 1;
* ``-(-x)`` -> ``x``;
* ``reshape(reshape(x, s1), s2)`` -> ``reshape(x, s2)`` (a reshape reads the elements in
  the same order whatever the intermediate shape);
* ``permute(permute(x, p1), p2)`` -> ``permute(x, p1 o p2)``, or ``x`` when they cancel
  (``x.t().t()``);
* ``permute(stack(xs, d), p)`` -> ``stack([permute(x, q) for x in xs], p.index(d))``
  (``q``: ``p`` without the stacked dim) where nothing else reads the stack: the same
  elements in the same places (data movement only), but the stack writes its fresh
  array in the layout its readers see (``Stack`` writes a stack of row-contiguous views
  in C order), where the permute of a stack is a strided view that a reshape copies
  again. Graph differentiation makes this for attention written out: q, k and v are
  slices of one projection reshaped and permuted to (3, N, H, L, hd); their cotangents
  are one Stack (window_cotangents.py), permuted back and reshaped to the projection's
  (N*L, 3E), which wrote that gradient twice. (Not for ``cat``: NumPy concatenates permuted views
  into a permuted array, which the reshape would copy all the same.)
* ``stack([t[0:m].reshape(s), t[m:2m].reshape(s), ...], 0)`` -> ``t.reshape(k, *s)``
  where the pieces are the consecutive slices (or the indices: ``stack(t.unbind(0))``)
  of one ``t`` along its dim 0, each once and in order, whole in the other dims: the
  same elements in the same (row-major) order, as a view. The fused attention backward
  (nn.MultiheadAttention's) returns the cotangents of q, k and v as one flat array that
  graph differentiation slices and stacks again; this comes first, at the stack, so
  the permute above is of that view and the reshape after it the one copy.

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
from .window_cotangents import window_of

__all__ = ["simplify", "SIMPLIFY"]

_MUL, _DIV, _NEG = REGISTRY["Mul"], REGISTRY["Div"], REGISTRY["Neg"]
_RESHAPE, _PERMUTE = REGISTRY["Reshape"], REGISTRY["Permute"]
_STACK, _GETITEM = REGISTRY["Stack"], REGISTRY["Getitem"]
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


def _tiled(n: Node, ins: list):
    """The value ``t`` where ``n`` stacks along dim 0 the consecutive pieces of ``t``
    along its dim 0 (``t[i]``, or ``t[i*m:(i+1)*m]`` reshaped), every one in order:
    ``n`` is then ``t`` reshaped; else None."""
    if n.op is not _STACK or n.params["dim"] != 0 or n.nargs != len(ins) or \
            not isinstance(n.spec, Spec) or n.spec.shape is None or None in n.spec.shape:
        return None
    source, at = None, 0
    for x in ins:
        if _pure_call(x, _RESHAPE):
            x = x.inputs[0]
        if not _pure_call(x, _GETITEM) or x.nargs != 1 or len(x.inputs) != 1:
            return None
        t = x.inputs[0]
        if source is None:
            source = t
        known = t is source and isinstance(t.spec, Spec) and t.spec.shape is not None and \
            None not in t.spec.shape   # (window_of places slices in known sizes)
        window = window_of(x, [t]) if known else None
        if window is None or any(w != (0, size, 1) for w, size
                                 in zip(window[1:], t.spec.shape[1:], strict=True)):
            return None
        w = window[0]
        if type(w) is not int and w[2] != 1:
            return None
        start, stop = (w, w + 1) if type(w) is int else w[:2]
        if start != at or stop <= start:
            return None
        at = stop
    if at != source.spec.shape[0] or source.spec.dtype != n.spec.dtype:
        return None
    return source


def _stack_permuted(n: Node, users: dict, held: set) -> tuple | None:
    """``(dim, q)`` where ``n`` permutes (by ``p``) a Stack that nothing else reads: the
    stack of its inputs each permuted by ``q`` (None: left as they are) along ``dim``
    equals ``n``; else None. A stack read elsewhere too would be made twice."""
    if n.op is not _PERMUTE or not _pure_call(n.inputs[0], _STACK):
        return None
    stack = n.inputs[0]
    if stack in held or users[stack] != [n] or not isinstance(stack.spec, Spec) or \
            stack.spec.shape is None:
        return None
    p, rank = n.params["dims"], len(stack.spec.shape)
    if sorted(p) != list(range(rank)):
        return None
    d = stack.params["dim"] % rank
    q = tuple(s - (s > d) for s in p if s != d)   # the stacked dim is no dim of the inputs
    return p.index(d), None if q == tuple(range(len(q))) else q


def _rewrite_stack_permuted(rb: Rebuild, n: Node, found: tuple) -> bool:
    """Copy ``n`` as ``_stack_permuted``'s stack of permuted inputs (the old stack is
    left for dead-code elimination); False, nothing added, where a shape rule refuses."""
    dim, q = found
    stack = rb.arg(n.inputs[0])
    if not _pure_call(stack, _STACK) or stack.nargs != len(stack.inputs) or \
            not all(isinstance(x, Node) and isinstance(x.spec, Spec) for x in stack.inputs):
        return False
    specs = [x.spec if q is None else _spec_of(_PERMUTE, [x.spec], {"dims": q})
             for x in stack.inputs]
    spec = None if None in specs else _spec_of(_STACK, specs, {"dim": dim})
    if spec is None or not _same_spec(spec, n.spec):
        return False
    inputs = tuple(x if q is None else rb.new.call(_PERMUTE, (x,), {"dims": q}, s,
                                                   name="permute")
                   for x, s in zip(stack.inputs, specs, strict=True))
    rb.keep(n, op=_STACK, inputs=inputs, params={"dim": dim}, nargs=len(inputs))
    return True


def _spec_of(op, inputs: list, params: dict, dynamic: bool = False) -> Spec | None:
    """What ``op``'s shape rule says for ``inputs`` (nodes or specs); None where it
    refuses them. ``dynamic``: a param is a run-time value (its dims unknown)."""
    try:
        return GraphBuilder.infer(op, inputs, params, dynamic)
    except Exception:  # noqa: BLE001 - no rewrite then
        return None


def _infer(n: Node, inputs: tuple, params: dict) -> Spec | None:
    """The Spec of ``n``'s op on other inputs and params, by its shape rule; None where the
    rule refuses them."""
    return _spec_of(n.op, list(inputs[:n.nargs]), params, n.nargs != len(inputs))


def _rewrite(graph: Graph, subs: dict) -> Rebuild:
    rb = Rebuild(graph, subs)
    held = handed_out(graph)
    users = graph.users()
    for n in graph.nodes:
        if n.kind != "call" or n.deps or has_side_effects(n):
            rb.keep(n)
            continue
        found = _stack_permuted(n, users, held)
        if found is not None and _rewrite_stack_permuted(rb, n, found):
            continue
        ins = [rb.arg(i) for i in n.inputs]
        whole = _tiled(n, ins)
        if whole is not None:   # (a view: the stack's copy is not made)
            rb.keep(n, op=_RESHAPE, inputs=(whole,), params={"shape": tuple(n.spec.shape)},
                    nargs=1)
            continue
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
