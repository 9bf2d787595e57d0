"""Layer ``static``: TF1 control flow: ``cond`` (both branches built into the graph, one
run), ``while_loop``, ``control_dependencies``, ``group``, ``identity``.

Each branch / condition / body function is called once, at construction, on a
sub-graph builder whose parent is the default graph's: outer tensors it uses are
captured as sub-graph inputs, and the control-flow node takes them as operands.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator

from graphgrad.func.pytree import tree_flatten, tree_unflatten
from graphgrad.graph import Graph as IRGraph
from graphgrad.graph import GraphBuilder, Symbol, builder_of, merge_specs, symbol
from graphgrad.graph.node import Node
from graphgrad.tensor.dispatch import current_interpreter

from .graph import get_default_graph
from .tensors import convert_to_tensor

__all__ = ["cond", "while_loop", "control_dependencies", "group", "identity", "no_op"]


def _current_builder() -> GraphBuilder:
    top = current_interpreter()
    if isinstance(top, GraphBuilder):
        return top
    return builder_of(get_default_graph().ir)


def _build(fn: Callable, name: str, parent: GraphBuilder, args: list[Node] = ()) -> tuple:
    """Run ``fn`` on a fresh sub-graph: returns (graph, builder, result structure, nodes)."""
    g = IRGraph(name)
    sb = GraphBuilder(g, parent)
    phs = [g.placeholder(a.spec, a.name) for a in args]
    with sb.active():
        res = fn(*[symbol(p) for p in phs])
        leaves, spec = tree_flatten(res)
        nodes = [sb.node_of(x if isinstance(x, Symbol) else convert_to_tensor(x),
                            literal_ok=False) for x in leaves]
    g.set_outputs(nodes)
    return g, sb, spec, nodes, phs


def _unify(parts: list, nfixed: int) -> list[Node]:
    """Give every sub-graph the same inputs: its own ``nfixed`` first, then one
    placeholder per outer node captured by any of them, in one order."""
    outer: list[Node] = []
    for _, sb, *_ in parts:
        for o in sb.captures:
            if o not in outer:
                outer.append(o)
    for g, sb, _, _, phs in parts:
        caps = [sb.captures.get(o) or g.placeholder(o.spec, o.name) for o in outer]
        g.inputs = [*phs[:nfixed], *caps]
    return outer


def cond(pred, true_fn: Callable | None = None, false_fn: Callable | None = None,
         strict: bool = False, name: str | None = None):
    """Both branches are built into the graph; at run time only ``pred``'s one runs."""
    if isinstance(pred, bool):
        raise TypeError("pred must not be a Python bool")
    if true_fn is None:
        raise TypeError("cond(): true_fn argument required")
    if false_fn is None:
        raise TypeError("cond(): false_fn argument required")
    if not callable(true_fn):
        raise TypeError("true_fn must be callable.")
    if not callable(false_fn):
        raise TypeError("false_fn must be callable.")
    b = _current_builder()
    with b.active() if current_interpreter() is not b else contextlib.nullcontext():
        pred = convert_to_tensor(pred)
        spec = pred._node.spec
        if spec.shape is not None and len(spec.shape) != 0:
            raise ValueError(f"Shape must be rank 0 but is rank {len(spec.shape)} for "
                             f"'cond/Switch' (op: 'Switch') with input shapes: "
                             f"[{','.join('?' if d is None else str(d) for d in spec.shape)}]")
        if spec.dtype.kind != "b":
            raise TypeError(f"pred must be a scalar bool tensor, got dtype {spec.dtype.name}")
        base = name or "cond"
        t = _build(lambda: _returns(true_fn(), "true_fn"), f"{base}_then", b)
        f = _build(lambda: _returns(false_fn(), "false_fn"), f"{base}_else", b)
        if t[2] != f[2]:
            raise ValueError(f"Incompatible return values of true_fn and false_fn: The two "
                             f"structures don't have the same nested structure.\n\nFirst "
                             f"structure: {t[2]}\n\nSecond structure: {f[2]}")
        specs = []
        for a, c in zip(t[3], f[3], strict=True):
            if a.spec.dtype != c.spec.dtype:
                raise TypeError(f"Outputs of true_fn and false_fn must have the same type: "
                                f"{a.spec.dtype.name}, {c.spec.dtype.name}")
            specs.append(merge_specs(a.spec, c.spec))
        outer = _unify([t, f], 0)
        outs = b.multi("cond", [pred, *[symbol(o) for o in outer]],
                       {"then": t[0], "else": f[0]}, tuple(specs), name=base)
    result = tree_unflatten(outs, t[2])
    if not strict and isinstance(result, (list, tuple)) and len(result) == 1:
        return result[0]
    return result


def _returns(res, which: str):
    if res is None:
        raise ValueError(f"{which} must have a return value.")
    return res


def while_loop(cond: Callable, body: Callable, loop_vars, shape_invariants=None,
               parallel_iterations: int = 10, back_prop: bool = True,
               maximum_iterations=None, name: str | None = None,
               return_same_structure: bool = False):
    """``while cond(*vars): vars = body(*vars)`` as one node with two sub-graphs.
    ``maximum_iterations`` is not supported (raises)."""
    if maximum_iterations is not None:
        raise NotImplementedError("while_loop: maximum_iterations is not supported; put the "
                                  "bound into cond")
    if not callable(cond):
        raise TypeError("cond must be callable.")
    if not callable(body):
        raise TypeError("body must be callable.")
    if not isinstance(parallel_iterations, int) or parallel_iterations <= 0:
        raise TypeError("parallel_iterations must be a positive integer.")
    single = not isinstance(loop_vars, (list, tuple))
    leaves, struct = tree_flatten([loop_vars] if single else loop_vars)
    if not leaves:
        raise ValueError("No loop variables provided")
    b = _current_builder()
    with b.active() if current_interpreter() is not b else contextlib.nullcontext():
        init = [b.node_of(convert_to_tensor(v), literal_ok=False) for v in leaves]
        base = name or "while"

        def as_struct(fn):
            return lambda *xs: fn(*tree_unflatten(list(xs), struct))
        c = _build(lambda *xs: as_struct(cond)(*xs), f"{base}_cond", b, init)
        bd = _build(lambda *xs: tree_flatten(as_struct(body)(*xs))[0], f"{base}_body", b,
                    init)
        if len(bd[3]) != len(init):
            raise ValueError(f"body returns {len(bd[3])} loop variables but the loop has "
                             f"{len(init)}: the two structures don't have the same number of "
                             f"elements")
        for i, o in zip(init, bd[3], strict=True):
            if o.spec.dtype != i.spec.dtype or (shape_invariants is None
                                                and o.spec.shape != i.spec.shape):
                raise ValueError(f"Input tensor '{i.name}:0' enters the loop with shape "
                                 f"{_tf(i.spec.shape)}, but has shape {_tf(o.spec.shape)} "
                                 f"after one iteration. To allow the shape to vary across "
                                 f"iterations, use the `shape_invariants` argument of "
                                 f"tf.while_loop to specify a less-specific shape.")
        if len(c[3]) != 1 or c[3][0].spec.dtype.kind != "b":
            raise TypeError("while_loop: cond must return one scalar bool tensor")
        outer = _unify([c, bd], len(init))
        outs = b.multi("while_loop", [*[symbol(i) for i in init], *[symbol(o) for o in outer]],
                       {"cond": c[0], "body": bd[0]}, tuple(i.spec for i in init),
                       params={"n": len(init)}, name=base)
    result = tree_unflatten(outs, struct)
    if single or (len(outs) == 1 and not return_same_structure):  # TF1: a bare tensor
        return tree_flatten(result)[0][0]
    return result


def _tf(shape) -> str:
    from graphgrad.graph import tf_shape
    return tf_shape(shape)


@contextlib.contextmanager
def control_dependencies(control_inputs) -> Iterator[None]:
    """Ops created inside the block run after ``control_inputs``."""
    b = _current_builder()
    if control_inputs is None:
        saved, b.control = b.control, []
        try:
            yield
        finally:
            b.control = saved
        return
    b.control.append([b.node_of(c, literal_ok=False) for c in control_inputs])
    try:
        yield
    finally:
        b.control.pop()


def group(*inputs, name: str | None = None) -> Symbol:
    """A no-op that runs after all ``inputs``."""
    b = _current_builder()
    deps = [b.node_of(i, literal_ok=False) for i in inputs] + list(b.deps())
    return symbol(b.graph.add("group", name or "group_deps", deps=tuple(dict.fromkeys(deps))))


def no_op(name: str | None = None) -> Symbol:
    return group(name=name or "NoOp")


def identity(x, name: str | None = None) -> Symbol:
    """A new node equal to ``x`` (inside control_dependencies it gets the dependency)."""
    b = _current_builder()
    with b.active() if current_interpreter() is not b else contextlib.nullcontext():
        from graphgrad.ops import REGISTRY
        return REGISTRY["Clone"].apply(convert_to_tensor(x))
