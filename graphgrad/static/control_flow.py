"""Layer ``static``: TF1 control flow: ``cond`` (both branches built into the graph, one
run), ``control_dependencies``, ``group``, ``identity`` (``while_loop`` has its own file).

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
from graphgrad.tensor.modes import current_mode

from .graph import get_default_graph
from .tensors import convert_to_tensor

__all__ = ["cond", "control_dependencies", "group", "identity", "no_op"]


def current_builder() -> GraphBuilder:
    top = current_mode()
    if isinstance(top, GraphBuilder):
        return top
    return builder_of(get_default_graph().ir)


def build_branch(fn: Callable, name: str, parent: GraphBuilder, args: list = ()) -> tuple:
    """Run ``fn`` on a fresh sub-graph whose inputs are placeholders like ``args`` (nodes,
    or (Spec, name) pairs): returns (graph, builder, result structure, nodes,
    placeholders)."""
    g = IRGraph(name)
    sb = GraphBuilder(g, parent)
    phs = [g.placeholder(*((a.spec, a.name) if isinstance(a, Node) else a)) for a in args]
    with sb.active():
        res = fn(*[symbol(p) for p in phs])
        leaves, spec = tree_flatten(res)
        nodes = [sb.node_of(x if isinstance(x, Symbol) else convert_to_tensor(x),
                            literal_ok=False) for x in leaves]
    g.set_outputs(nodes)
    return g, sb, spec, nodes, phs


def unify_branches(parts: list, nfixed: int) -> list[Node]:
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
    b = current_builder()
    with b.active() if current_mode() is not b else contextlib.nullcontext():
        pred = convert_to_tensor(pred)
        spec = pred._node.spec
        if spec.shape is not None and len(spec.shape) != 0:
            raise ValueError(f"Shape must be rank 0 but is rank {len(spec.shape)} for "
                             f"'cond/Switch' (op: 'Switch') with input shapes: "
                             f"[{','.join('?' if d is None else str(d) for d in spec.shape)}]")
        if spec.dtype.kind != "b":
            raise TypeError(f"pred must be a scalar bool tensor, got dtype {spec.dtype.name}")
        base = name or "cond"
        t = build_branch(lambda: _returns(true_fn(), "true_fn"), f"{base}_then", b)
        f = build_branch(lambda: _returns(false_fn(), "false_fn"), f"{base}_else", b)
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
        outer = unify_branches([t, f], 0)
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


@contextlib.contextmanager
def control_dependencies(control_inputs) -> Iterator[None]:
    """Ops created inside the block run after ``control_inputs``."""
    b = current_builder()
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
    b = current_builder()
    deps = [b.node_of(i, literal_ok=False) for i in inputs] + list(b.deps())
    return symbol(b.graph.add("group", name or "group_deps", deps=tuple(dict.fromkeys(deps))))


def no_op(name: str | None = None) -> Symbol:
    return group(name=name or "NoOp")


def identity(x, name: str | None = None) -> Symbol:
    """A new node equal to ``x`` (inside control_dependencies it gets the dependency)."""
    b = current_builder()
    with b.active() if current_mode() is not b else contextlib.nullcontext():
        from graphgrad.ops import REGISTRY
        return REGISTRY["Clone"].apply(convert_to_tensor(x))
