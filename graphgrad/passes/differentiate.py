"""Layer ``passes``: differentiation of a Graph by graph extension.

``grad(graph, outputs, inputs)`` walks the graph backwards and calls each op's vjp
rule on Symbols while a GraphBuilder of the same graph is active: the rules are
graphgrad programs, so the backward pass appears as more nodes of the same graph.
Cotangents are un-broadcast here, in one place, as the eager engine does.

Control flow: the gradient of a ``cond`` is a ``cond`` on the same predicate whose
branches are the gradient graphs of the two branches (each built by copying the
branch and extending the copy). The gradient of a ``while_loop`` is a ``while_grad``
node: at run time it replays the loop keeping each iteration's state (a tape, as
TF's while-loop gradient keeps stacks), then runs the body's vjp graph - itself
built by graph extension - from the last iteration back to the first. The walk is
iterative over nodes; it recurses only into nested control flow, once per level.

Unknown dims (placeholders of shape ``(None, 3)``): the rule still runs on Symbols, and
a size it reads is a Symbol too (a ``shape`` node and ``Getitem``, read at run time), so
mean's division by the batch size is ordinary ops; where only the run can tell which
dims were broadcast, the cotangent is un-broadcast by a ``SumToSize`` op.

Run-time derivatives (``graphgrad/graph/vjp_node.py``): a rule that needs a size as a
Python number (cat's split sizes) becomes a ``vjp`` node. Differentiating a ``vjp`` or
``while_grad`` node again gives another ``vjp`` node, which reruns the node's function
under eager autograd, so ``grad`` of a ``grad`` works to any order through every node
kind. Those node kinds and their run-time functions stay in ``graph``: the IR's
interpreter and printer run them, and nothing in ``graph`` calls this module.

Kernel vjps (``kernels=True``, for a backward that is never differentiated again: the
compiled backward of backends/aot.py): an op with a ``kernel_vjp`` (ops/fused.py) adds
its backward kernel op as one node instead of its composite rule's ops.

Slices (``Getitem`` with basic indexing): the cotangents of a value's slices are joined
into one ``Stack`` or ``Cat`` once the walk reaches the value (window_cotangents.py),
where each slice's vjp would be a zero array of the whole value and the pieces a sum.

Unlike the other passes, ``grad`` changes its argument: graph extension adds the
backward nodes to the graph itself (the lecture's point: the backward pass is more
graph), so that its result can be differentiated, optimized and run like any node.
"""

from __future__ import annotations

from collections.abc import Sequence

from graphgrad.backend import xp
from graphgrad.graph import Graph, GraphBuilder, Interpreter, Node, Spec, Symbol, building, symbol
from graphgrad.graph.interpreter import as_tensor
from graphgrad.graph.node import Dyn
from graphgrad.graph.vjp_node import VjpFn, WhileGradFn, function_of
from graphgrad.ops.elementwise import Elementwise
from graphgrad.ops.shape import SumToSize
from graphgrad.ops.unbroadcast import unbroadcast
from graphgrad.tensor import Value

from .window_cotangents import join_windows, window_of

__all__ = ["grad"]


def _differentiable(spec) -> bool:
    return isinstance(spec, Spec) and xp.dtype(spec.dtype).kind in "fc"


def zeros(spec: Spec, like=None):
    """Zeros of ``spec``: a constant when the shape is known, else ``like * 0``."""
    if None not in spec.shape or like is None:
        return _const(xp.zeros(tuple(spec.shape), spec.dtype))
    return like * 0


def _const(arr):
    return as_tensor(arr)


def grad(graph: Graph, outputs: Sequence[Node], inputs: Sequence[Node],
         grad_outputs: Sequence | None = None, stop: Sequence[Node] = (),
         kernels: bool = False) -> list[Node | None]:
    """Append to ``graph`` the nodes computing d(sum of outputs)/d(input) for each input
    (seeded with ``grad_outputs``, default ones); None for an input not reached. Nodes in
    ``stop`` count as constants (TF's ``stop_gradients``). ``kernels``: ops' backward
    kernels where they have one (``kernel_vjp``), for a result that will not be
    differentiated again."""
    outputs = [getattr(o, "_node", o) for o in outputs]  # Symbols stand for their nodes
    inputs = [getattr(i, "_node", i) for i in inputs]
    stop = {getattr(s, "_node", s) for s in stop}
    with building(graph) as b:
        if b.graph is not graph:
            b = GraphBuilder(graph)
        with b.active():
            gs = _grad(b, graph, outputs, inputs, grad_outputs, stop, kernels)
    return [None if s is None else s._node for s in gs]


def _grad(b: GraphBuilder, graph: Graph, outputs, inputs, grad_outputs,
          stop: set | frozenset = frozenset(), kernels: bool = False) -> list:
    wanted = set(inputs)
    reach: set[Node] = set(inputs)  # nodes that depend on an input: only they get cotangents
    for n in graph.nodes:
        if n not in reach and n not in stop and any(i in reach for i in n.input_nodes()):
            reach.add(n)
    cts: dict[Node, Symbol] = {}
    multi: dict[Node, list] = {}
    results: dict[Node, Symbol] = {}
    for k, o in enumerate(outputs):
        if grad_outputs is not None and grad_outputs[k] is not None:
            seed = grad_outputs[k]
            seed = seed if isinstance(seed, Symbol) else symbol(b.node_of(seed,
                                                                          literal_ok=False))
        else:
            seed = symbol(b.node_of(_const(xp.ones(tuple(d or 1 for d in o.spec.shape),
                                                    o.spec.dtype)))) \
                if None not in o.spec.shape else symbol(o) * 0 + 1
        cts[o] = cts[o] + seed if o in cts else seed
    windows: dict[Node, list] = {}   # a value -> its slices' (node, window, cotangent)
    for node in reversed(list(graph.nodes)):  # a snapshot: the walk appends nodes
        if node not in reach:
            continue
        if node in windows:   # every slice of it is done: their cotangents as one op
            _join_slices(cts, node, windows.pop(node), reach)
        if node.kind in _MULTI_GRAD:
            gs = multi.pop(node, None)
            if gs is None:
                continue
            _accumulate(cts, node.inputs, _MULTI_GRAD[node.kind](b, node, gs, reach), reach)
            continue
        g = cts.pop(node, None)
        if g is None:
            continue
        if node in wanted:
            results[node] = g
        if node in stop:  # a constant: its cotangent goes no further
            continue
        if node.kind == "item":
            src = node.inputs[0]
            slot = multi.setdefault(src, [None] * len(src.spec))
            i = node.params["index"]
            slot[i] = g if slot[i] is None else slot[i] + g
        elif node.kind == "call":
            op = node.op
            if not op.differentiable:
                continue
            if node.nargs != len(node.inputs) or _unknown_dims(node):
                ins = _rule_with_run_time_sizes(b, node, g, reach)
                if ins is None:   # the rule needs a size as a Python int: run it at run time
                    ins = _vjp_node(b, node, g, reach)
                _accumulate(cts, node.inputs, ins, reach)
                continue
            syms = [_marked(i, i in reach) if isinstance(i, Node) else i for i in node.inputs]
            src = node.inputs[0] if node.inputs else None
            window = window_of(node, syms) if isinstance(src, Node) and src in reach and \
                _differentiable(src.spec) and g._node.spec.dtype == src.spec.dtype and \
                g._node.spec.shape == node.spec.shape else None
            if window is not None:   # joined with the other slices of src, at src
                windows.setdefault(src, []).append((node, window, g))
                continue
            kernel = getattr(op, "kernel_vjp", None) if kernels else None
            try:
                ins = kernel and kernel(g, symbol(node), *syms, **node.params)
                if ins is None:
                    ins = op.vjp(g, symbol(node), *syms, **node.params)
            except TypeError as e:
                raise NotImplementedError(
                    f"passes.grad: the vjp rule of {op.__name__} (node {node.name!r}) failed "
                    f"on symbolic inputs {[i.spec for i in node.input_nodes()]}: {e}. Rules "
                    f"that read unknown (None) dims need a static shape") from e
            _accumulate(cts, node.inputs, ins, reach)
        elif node.kind not in _NO_GRADIENT:
            raise NotImplementedError(f"passes.grad: cannot differentiate {node.kind} node "
                                      f"{node.name!r} ({node.target_name})")
    return [results.get(x) for x in inputs]


def _join_slices(cts: dict, src: Node, pieces: list, reach) -> None:
    """The cotangents of the slices of ``src`` (``window_cotangents.py``) added to its
    own: one op where they lie along one dim, else each slice's vjp as usual."""
    joined = join_windows(src.spec.shape, src.spec.dtype,
                          [(window, g) for _, window, g in pieces])
    if joined is not None:
        _accumulate(cts, [src], [joined], reach)
        return
    for node, _, g in pieces:
        syms = [_marked(i, i in reach) if isinstance(i, Node) else i for i in node.inputs]
        _accumulate(cts, node.inputs, node.op.vjp(g, symbol(node), *syms, **node.params),
                    reach)


# kinds whose cotangent stops there: graph inputs and state, and samples / assignments,
# which TF1 does not differentiate either
_NO_GRADIENT = frozenset({"placeholder", "constant", "variable", "random", "assign", "shape",
                          "group"})


def _unknown_dims(node: Node) -> bool:
    for s in (node.spec, *[i.spec for i in node.input_nodes()]):
        if isinstance(s, Spec) and (s.shape is None or None in s.shape):
            return True
    return False


# what a rule raises when it asks a size known only at run time for a Python value (a
# Symbol's bool, int or numel) or hands one to code that needs ints
_NEEDS_CONCRETE = (TypeError, ValueError, RuntimeError, NotImplementedError, IndexError)


def _rule_with_run_time_sizes(b: GraphBuilder, node: Node, g, reach) -> list | None:
    """The vjp rule of a node with dims (or params) known only at run time, run on Symbols
    whose unknown sizes are Symbols too (read from the values by a ``shape`` node): the
    gradient as ordinary ops, its shapes as unknown as the forward's. The cotangents are
    un-broadcast with ``SumToSize`` where only the run can tell which dims to sum. None,
    and no node added, where the rule needs a size as a Python number."""
    graph = b.graph
    if graph is not node.graph:
        return None
    start = len(graph.nodes) - (graph.output_node is not None)   # new nodes go before it
    params = {k: tuple(symbol(node.inputs[e.index]) if isinstance(e, Dyn) else e for e in v)
              if isinstance(v, tuple) else v for k, v in node.params.items()}
    syms = [_marked(i, i in reach) if isinstance(i, Node) else i
            for i in node.inputs[:node.nargs]]
    try:
        with b.sizes_at_run_time():
            ins = list(node.op.vjp(g, symbol(node), *syms, **params))
            for k, (i, ct) in enumerate(zip(node.inputs, ins, strict=False)):
                if ct is not None and isinstance(i, Node) and i in reach and \
                        _differentiable(i.spec):
                    ins[k] = _unbroadcast_at_run_time(b, node, k, ct)
        return ins
    except _NEEDS_CONCRETE:
        # drop the nodes the attempt added (and what the builder cached on them)
        end = len(graph.nodes) - (graph.output_node is not None)
        added = set(graph.nodes[start:end])
        del graph.nodes[start:end]
        b.sizes = {n: sz for n, sz in b.sizes.items()
                   if not any(isinstance(d, Symbol) and d._node in added for d in sz)}
        b.consts = {k: n for k, n in b.consts.items() if n not in added}
        return None


def _unbroadcast_at_run_time(b: GraphBuilder, node: Node, k: int, ct):
    """``ct`` reduced to input ``k``'s shape: the dims known statically as ``unbroadcast``
    does, then the dims only the run can tell (the input's dim unknown, the cotangent's
    not 1) with a ``SumToSize`` to the input's run-time sizes, unless broadcasting cannot
    have widened them (an elementwise op whose other inputs are 1 or absent there)."""
    i = node.inputs[k]
    if not isinstance(ct, Symbol):
        ct = symbol(b.node_of(ct if isinstance(ct, Value) else _const(xp.asarray(ct)),
                              literal_ok=False))
    with b.sizes_at_run_time(False):   # unbroadcast compares static dims (None)
        ct = unbroadcast(ct, i.spec.shape, i.spec.dtype, node.op.__name__)
    shape, cs = i.spec.shape, ct._node.spec.shape
    if cs is None:
        raise NotImplementedError("a cotangent of unknown rank")
    if _has_sizes(ct._node, b.sizes.get(i)):
        return ct
    lead = len(cs) - len(shape)
    out_rank = len(node.spec.shape)
    others = [o.spec.shape for o in node.input_nodes() if o is not i]
    for d, sd in enumerate(shape):
        if sd is not None or cs[lead + d] == 1:
            continue
        pos = out_rank - len(shape) + d   # the dim's place in the output
        if issubclass(node.op, Elementwise) and all(
                pos - (out_rank - len(o)) < 0 or o[pos - (out_rank - len(o))] == 1
                for o in others):
            continue
        return SumToSize.apply(ct, shape=b.sizes_of(i))
    return ct


_SHAPED = frozenset({"Reshape", "Expand", "SumToSize"})   # ops whose output has shape=


def _has_sizes(node: Node, sizes, depth: int = 4) -> bool:
    """Whether ``node``'s value has exactly the run-time ``sizes`` (a rule reshaped or
    expanded to them, then maybe scaled elementwise by 0-d values): then un-broadcasting
    it has nothing to sum. A few levels deep; False when it cannot tell."""
    if sizes is None or node.kind != "call" or depth == 0:
        return False
    if node.op.__name__ in _SHAPED:
        want = node.params["shape"]
        return len(want) == len(sizes) and all(
            (node.inputs[w.index] is d._node) if isinstance(w, Dyn) else
            (not isinstance(d, Symbol) and w == d) for w, d in zip(want, sizes, strict=True))
    if issubclass(node.op, Elementwise):
        tensors = node.input_nodes()
        return any(_has_sizes(t, sizes, depth - 1) for t in tensors) and all(
            t.spec.shape == () or _has_sizes(t, sizes, depth - 1) for t in tensors)
    return False


def _vjp_node(b: GraphBuilder, node: Node, g, reach) -> list:
    """A ``vjp`` node: the rule runs at run time, when every dim and every run-time
    param (``Dyn``: the inputs after the op's ``nargs``) is known."""
    wrt = tuple(k for k, i in enumerate(node.inputs[:node.nargs])
                if isinstance(i, Node) and i in reach and _differentiable(i.spec))
    literals = {k: i for k, i in enumerate(node.inputs) if not isinstance(i, Node)}
    params = {"op": node.op, "op_params": node.params, "literals": literals, "wrt": wrt,
              "n": len(node.inputs), "nargs": node.nargs}
    outs = b.multi("vjp", [g, symbol(node), *[symbol(i) for i in node.input_nodes()]], {},
                   tuple(node.inputs[k].spec for k in wrt), params=params,
                   name=node.name + "_vjp")
    return _placed(outs, wrt, len(node.inputs))


def _marked(node: Node, needs: bool) -> Symbol:
    """A Symbol that tells the vjp rule whether its cotangent is wanted (``_requires_grad``)."""
    s = symbol(node)
    s._requires_grad = needs and _differentiable(node.spec)
    return s


def _accumulate(cts: dict, inputs, ins, reach) -> None:
    b = None
    for i, ct in zip(inputs, ins, strict=False):
        if ct is None or not isinstance(i, Node) or i not in reach or not _differentiable(
                i.spec):
            continue
        if not isinstance(ct, Symbol):
            from graphgrad.tensor.modes import current_mode
            b = b or current_mode()
            ct = symbol(b.node_of(ct if isinstance(ct, Value) else _const(xp.asarray(ct)),
                                  literal_ok=False))
        ct = unbroadcast(ct, i.spec.shape, i.spec.dtype)
        cts[i] = cts[i] + ct if i in cts else ct


def _refuse_impure(branch: Graph) -> None:
    """Copying a sub-graph reruns it: a random draw in it would differ from the one the
    forward pass made, so the gradient would be of another function. Say so."""
    todo = [branch]
    while todo:
        g = todo.pop()
        for n in g.nodes:
            if n.kind == "random":
                raise NotImplementedError(
                    f"passes.grad: sub-graph {branch.name!r} draws random numbers (node "
                    f"{n.name!r}); its gradient would replay it with other draws. Draw "
                    f"outside the cond/while_loop and pass the values in")
            todo.extend(n.subgraphs.values())


def _copy_and_grad(branch: Graph, name: str, n_grad_inputs: int, gspecs,
                   wrt: Sequence[int]) -> Graph:
    """A new graph: placeholders (branch inputs..., cotangents...) -> the cotangents of
    the branch inputs at positions ``wrt``. Built by copying ``branch`` and extending."""
    _refuse_impure(branch)
    g = Graph(name)
    sb = GraphBuilder(g)
    xs = [g.placeholder(p.spec, p.name) for p in branch.inputs[:n_grad_inputs]]
    rest = [g.placeholder(p.spec, p.name) for p in branch.inputs[n_grad_inputs:]]
    gph = [g.placeholder(s, f"grad_{k}") for k, s in enumerate(gspecs)]
    with sb.active():
        outs = Interpreter(branch).run(*[symbol(p) for p in (*xs, *rest)])
        outs = [sb.node_of(o, literal_ok=False) for o in outs]
        allx = [*xs, *rest]
        targets = [allx[k] for k in wrt]
        gs = _grad(sb, g, outs, targets, [symbol(p) for p in gph])
        res = []
        for k, t in zip(wrt, gs, strict=True):
            if t is None:
                t = zeros(allx[k].spec, symbol(allx[k]))
            res.append(sb.node_of(t, literal_ok=False))
    g.set_outputs(res)
    return g


def _missing_zero(node: Node, gs: list) -> list:
    """The output cotangents of a multi-output node with zeros where none arrived (shaped
    like the output itself when its shape is not fully known)."""
    items = {}
    if any(g is None for g in gs):
        items = {n.params["index"]: n for n in node.graph.nodes
                 if n.kind == "item" and n.inputs[0] is node}
    return [g if g is not None else zeros(s, symbol(items[k]) if k in items else None)
            for k, (g, s) in enumerate(zip(gs, node.spec, strict=True))]


def _cond_grad(b: GraphBuilder, node: Node, gs: list, reach) -> list:
    specs = node.spec
    gsyms = _missing_zero(node, gs)
    caps = node.inputs[1:]
    wrt = [k for k, c in enumerate(caps) if _differentiable(c.spec)]
    then = _copy_and_grad(node.subgraphs["then"], node.name + "_then_grad", len(caps), specs,
                          wrt)
    other = _copy_and_grad(node.subgraphs["else"], node.name + "_else_grad", len(caps), specs,
                           wrt)
    outs = b.multi("cond", [node.inputs[0], *caps, *gsyms], {"then": then, "else": other},
                   tuple(caps[k].spec for k in wrt), name=node.name + "_grad")
    return _placed(outs, wrt, len(node.inputs), 1)


def _while_grad(b: GraphBuilder, node: Node, gs: list, reach) -> list:
    if not node.params.get("back_prop", True):  # TF1's back_prop=False: a constant
        return [None] * len(node.inputs)
    n = node.params["n"]
    ins = node.inputs
    m = len(ins) - n
    body = node.subgraphs["body"]
    # non-float loop variables (counters) get zero cotangents: they carry no gradient
    vjp = _copy_and_grad(body, node.name + "_body_vjp", n, node.spec, list(range(n + m)))
    return b.multi("while_grad", [*ins, *_missing_zero(node, gs)],
                   {"cond": node.subgraphs["cond"], "body": body, "vjp": vjp},
                   tuple(i.spec for i in ins), params={"n": n, "m": m},
                   name=node.name + "_grad")


def _runtime_vjp(b: GraphBuilder, node: Node, gs: list, reach) -> list:
    """The gradient of a node computed at run time (``vjp``, ``while_grad``): a ``vjp``
    node whose function reruns the node's own under eager autograd (vjp_node.VjpFn)."""
    fn = function_of(node.params) if node.kind == "vjp" else WhileGradFn(
        node.subgraphs, node.params["n"], node.params["m"])
    wrt = tuple(k for k, i in enumerate(node.inputs)
                if isinstance(i, Node) and i in reach and _differentiable(i.spec))
    has_ct = tuple(k for k, g in enumerate(gs) if g is not None)
    vfn = VjpFn(fn, len(node.inputs), wrt, has_ct)
    outs = b.multi("vjp", [*node.inputs, *[gs[k] for k in has_ct]], {},
                   tuple(node.inputs[k].spec for k in wrt),
                   params={"op": fn, "fn": vfn, "wrt": wrt}, name=node.name + "_vjp")
    return _placed(outs, wrt, len(node.inputs))


def _placed(outs: list, positions, n: int, offset: int = 0) -> list:
    """Cotangents ``outs`` for the inputs at ``positions`` (shifted by ``offset``), None
    for the other ``n`` inputs."""
    res = [None] * n
    for k, o in zip(positions, outs, strict=True):
        res[offset + k] = o
    return res


_MULTI_GRAD = {"cond": _cond_grad, "while_loop": _while_grad, "while_grad": _runtime_vjp,
               "vjp": _runtime_vjp}
