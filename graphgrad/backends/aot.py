"""Layer ``backends``: the compiled backward (AOTAutograd's method). When a compiled
graph's inputs require grad, its joint forward+backward graph is built by graph-level
differentiation (``graphgrad.passes.grad``), partitioned into a forward graph, which
also returns what the backward reads (the *saved* values, nothing else), and a backward
graph from those saved values and the output cotangents to the input gradients. Which
values are saved and which cheap elementwise ones the backward recomputes is a minimum
cut of the forward (min_cut.py: the fewest bytes saved). Both
halves are optimized, fused and run as array programs. The backward is never
differentiated again, so ops with a backward kernel appear in it as that kernel op, one
node (``kernel_vjp``, ops/fused.py). The outputs' ``grad_fn`` is a
``CompiledFunctionBackward`` that runs the compiled backward.

``create_graph=True`` (a backward that must itself be differentiable) runs the
op-by-op graph again on the original inputs with eager autograd recording, so
higher-order gradients through a compiled function stay exact.
"""

from __future__ import annotations

from collections.abc import Callable

from graphgrad.autograd import Function, enable_grad
from graphgrad.autograd import grad as autograd_grad
from graphgrad.autograd.engine import _TWICE as TWICE_MESSAGE
from graphgrad.autograd.engine import Freed
from graphgrad.backend import xp
from graphgrad.graph import Graph, Node, Spec, symbol
from graphgrad.passes import fuse_elementwise, optimize
from graphgrad.passes import grad as graph_grad
from graphgrad.ops.base import Op, Residuals
from graphgrad.tensor import Tensor, Value, is_grad_enabled
from graphgrad.tensor.dispatch import record

from .array_program import INTERPRETED, array_function
from .fused import dump_graphs
from .min_cut import min_cut, recomputable

__all__ = ["AotProgram", "Partition", "partition", "specialize"]


class Partition:
    """The two halves of a joint graph: ``forward`` (inputs -> outputs + saved values),
    ``backward`` (saved values + output cotangents -> one gradient per input in
    ``grad_inputs``), and the names of the saved values."""

    def __init__(self, forward: Graph, backward: Graph, saved: list[str],
                 grad_inputs: list[int], n_outputs: int, saved_inputs: tuple = (),
                 saves_output: bool = False):
        self.forward = forward
        self.backward = backward
        self.saved = saved
        self.grad_inputs = grad_inputs
        self.n_outputs = n_outputs
        self.saved_inputs = saved_inputs   # positions of the inputs among the saved values
        self.saves_output = saves_output   # an output is among them


def _extract(name: str, inputs: list[Node], nodes: list[Node], outputs: list) -> Graph:
    g = Graph(name)
    m: dict[Node, Node] = {}
    for p in inputs:
        m[p] = g.placeholder(p.spec, p.name)
    for n in nodes:
        m[n] = g.add(n.kind, n.name, op=n.op, inputs=tuple(m[i] if isinstance(i, Node) else i
                                                           for i in n.inputs),
                     deps=tuple(m[d] for d in n.deps if d in m), params=dict(n.params),
                     spec=n.spec, subgraphs=dict(n.subgraphs), value=n.value, nargs=n.nargs,
                     target=m.get(n.target))
    g.set_outputs([m[o] if isinstance(o, Node) else o for o in outputs])
    return g


def _float(spec) -> bool:
    return getattr(spec, "dtype", None) is not None and xp.dtype(spec.dtype).kind == "f"


def partition(graph: Graph, grad_inputs: list[int]) -> Partition | None:
    """The joint graph of ``graph`` differentiated w.r.t. its inputs at ``grad_inputs``,
    split in two; None when it cannot be (non-float or passthrough outputs, state)."""
    outs = list(graph.outputs)
    if not outs or any(not isinstance(o, Node) or o.kind == "placeholder" or not _float(o.spec)
                       for o in outs):
        return None
    if any(n.kind not in ("placeholder", "constant", "call", "item", "shape", "output",
                          "random") and n.kind not in INTERPRETED for n in graph.nodes):
        return None
    joint = _extract(graph.name, graph.inputs, [n for n in graph.nodes
                                                if n.kind not in ("placeholder", "output")],
                     outs)
    fwd_nodes = [n for n in joint.nodes if n.kind not in ("placeholder", "output")]
    before = set(joint.nodes)
    seeds = [joint.placeholder(o.spec, f"tangents_{k}") for k, o in enumerate(joint.outputs)]
    grads = graph_grad(joint, list(joint.outputs), [joint.inputs[i] for i in grad_inputs],
                       grad_outputs=[symbol(s) for s in seeds], kernels=True)
    bwd_nodes = [n for n in joint.nodes if n not in before and n.kind not in
                 ("placeholder", "output")]
    needed: list[Node] = []
    materialized: set[Node] = set()   # read by a backward op that is not elementwise
    for n in bwd_nodes:
        for i in (*n.input_nodes(), *n.deps):
            if i in before:
                if i not in needed:
                    needed.append(i)
                if not recomputable(n):
                    materialized.add(i)
    saved, recompute = min_cut(joint.inputs[:len(graph.inputs)], fwd_nodes, needed,
                               materialized)
    forward = _extract(f"{graph.name}_forward", joint.inputs[:len(graph.inputs)], fwd_nodes,
                       [*joint.outputs, *saved])
    backward = _extract(f"{graph.name}_backward", [*saved, *seeds],
                        recompute + bwd_nodes,
                        [g if g is not None else 0.0 for g in grads])
    primals = joint.inputs[:len(graph.inputs)]
    return Partition(forward, backward, [s.name for s in saved], list(grad_inputs), len(outs),
                     tuple(i for i, p in enumerate(primals) if p in saved),
                     any(o in saved for o in joint.outputs))


def specialize(graph: Graph, args: tuple) -> Graph | None:
    """A copy of ``graph`` with every spec re-inferred from the shapes of ``args`` (None
    where a node's shape depends on more than its op's shape rule)."""
    g = Graph(graph.name)
    m: dict[Node, Node] = {}
    for p, a in zip(graph.inputs, args, strict=True):
        spec = Spec(tuple(a.shape), a._array.dtype) if isinstance(a, Value) else p.spec
        m[p] = g.placeholder(spec, p.name)
    for n in graph.nodes:
        if n.kind in ("placeholder", "output"):
            continue
        if n.kind not in ("call", "constant") or n.nargs != len(n.inputs):
            return None
        ins = tuple(m[i] if isinstance(i, Node) else i for i in n.inputs)
        spec = n.spec if n.kind == "constant" else n.op.infer(
            *[i.spec if isinstance(i, Node) else i for i in ins], **n.params)
        m[n] = g.add(n.kind, n.name, op=n.op, inputs=ins, params=dict(n.params), spec=spec,
                     value=n.value, deps=tuple(m[d] for d in n.deps))
    g.set_outputs([m[o] if isinstance(o, Node) else o for o in graph.outputs])
    return g


class AotProgram:
    """What a compiled graph runs when a gradient is needed: the compiled forward and
    backward, built per pattern of which inputs require grad; ``slow`` (the op-by-op
    program) where the graph cannot be split."""

    def __init__(self, graph: Graph, slow: Callable):
        self.graph = graph
        self.slow = slow
        self.built: dict[tuple, type | None] = {}
        # a graph with unknown dims is specialized to each call's shapes (its backward
        # needs static shapes to be an array program)
        self.dynamic = any(None in getattr(n.spec, "shape", ()) for n in graph.nodes
                           if n.kind != "output" and isinstance(n.spec, Spec))

    def __call__(self, *args):
        """Called by the array program (array_program.py) only when no mode is on the
        dispatch stack, grad mode is on and an input requires grad."""
        mask = tuple([isinstance(a, Value) and a._requires_grad for a in args])
        key = (mask, self.dynamic and tuple([getattr(a, "shape", None) for a in args]))
        fn = self.built.get(key, False)
        if fn is False:
            fn = self.built[key] = self._build(mask, args)
        if fn is None:
            return self.slow(*args)
        if fn.single:   # an op of its own, the residuals in its one parameter: what
            # ``dispatch`` does for it, less the checks the caller made (mode, grad mode,
            # an input requiring grad) and those the build settled (float array output)
            run = Residuals()
            out = fn.forward(*[a._array if isinstance(a, Value) else a for a in args], run=run)
            return (record(fn, args, {"run": run}, out),)
        out = fn.apply(*args)
        return out if isinstance(out, tuple) else (out,)

    def _build(self, mask: tuple, args: tuple) -> type | None:
        positions = [i for i, m in enumerate(mask) if m]
        if any(not _float(self.graph.inputs[i].spec) for i in positions):
            return None
        graph = specialize(self.graph, args) if self.dynamic else self.graph
        if graph is None:
            return None
        part = partition(graph, positions)
        if part is None:
            return None
        fwd_graph = fuse_elementwise(optimize(part.forward)[0])
        bwd_graph = fuse_elementwise(optimize(part.backward)[0])
        dump_graphs(("forward", part.forward), ("forward_fused", fwd_graph),
                    ("backward", part.backward), ("backward_fused", bwd_graph))
        fwd, bwd = array_function(fwd_graph), array_function(bwd_graph, boxed=True)
        if fwd is None or bwd is None:
            return None
        if part.n_outputs == 1:
            return _single_output_op(self, part, fwd, bwd, fwd_graph, bwd_graph)
        return _function(self, part, fwd, bwd, fwd_graph, bwd_graph)


class _CompiledOp(Op):
    """A compiled graph with one output as an op of its own: ``forward`` runs the
    compiled forward on arrays, ``vjp`` the compiled backward on the saved arrays (a
    plain ``autograd.Function`` costs a context, fresh leaves for the inputs and checks
    of each gradient's shape: a third of a small MLP's compiled step). The engine checks
    the saved inputs' and output's versions (``saves_inputs``/``saves_output``): an
    in-place change between forward and backward raises PyTorch's error.
    ``create_graph=True`` runs the op-by-op graph again, recorded."""

    single = True
    promotes = False
    boxed_grad = True   # the output's gradient goes after its last read too
    backward_name = "CompiledFunctionBackward"

    @classmethod
    def explain_failure(cls, err: Exception, args: tuple, params: dict) -> Exception:
        return err   # the op-by-op program's own error ran first (array_program's fallback)


def _single_output_op(aot: AotProgram, part: Partition, fwd, bwd, fwd_graph,
                      bwd_graph) -> type:
    positions, slow, _make = part.grad_inputs, aot.slow, Tensor._make
    # without random draws the forward gives the saved values again, so they can go at
    # the first backward (a loop's previous loss no longer holds a step's activations)
    replayable = not any(n.kind == "random" for n in part.forward.nodes)

    def forward(*arrays, run: Residuals):
        res = fwd(*arrays)
        run.values = res[1:]
        return res[0]

    def vjp(gbox: list, out, *inputs, run: Residuals):
        g = gbox.pop()   # (the engine's box: now held here alone, unless elsewhere too)
        grads: list = [None] * len(inputs)
        if is_grad_enabled():   # create_graph=True: the op-by-op graph, recorded
            with enable_grad():
                outs = slow(*inputs)
            got = autograd_grad([outs[0]], [inputs[i] for i in positions], [g],
                                create_graph=True, allow_unused=True)
        else:
            values = run.values
            if values is None:   # a second backward (retain_graph=True): forward again
                if type(out._saved_versions) is Freed:   # (the first one freed the graph)
                    raise RuntimeError(TWICE_MESSAGE)
                values = fwd(*[a._array if isinstance(a, Value) else a for a in inputs])[1:]
            elif replayable:   # released now, as eager backward frees what nodes saved
                run.values = None
            box = [*values, g._array]
            del values, g   # (the backward frees each saved value after its last read)
            for i, r in zip(positions, bwd(box), strict=True):
                if not isinstance(r, float):   # (a float: a zero gradient, none)
                    grads[i] = _make(r)
            return grads
        for i, gi in zip(positions, got, strict=True):
            grads[i] = gi
        return grads

    return type("_CompiledFunction", (_CompiledOp,), {
        "__module__": __name__, "forward": staticmethod(forward), "vjp": staticmethod(vjp),
        "saves_inputs": part.saved_inputs, "saves_output": part.saves_output,
        "partition": part, "forward_graph": fwd_graph, "backward_graph": bwd_graph,
        "backward_arrays": staticmethod(bwd)})


def _function(aot: AotProgram, part: Partition, fwd, bwd, fwd_graph, bwd_graph) -> type:
    n_out, positions, slow = part.n_outputs, part.grad_inputs, aot.slow

    class CompiledFunction(Function):
        single = False
        partition = part
        forward_graph = fwd_graph
        backward_graph = bwd_graph
        backward_arrays = staticmethod(bwd)   # (the compiled backward, boxed)

        @staticmethod
        def forward(ctx, *args):
            res = fwd(*[a._array if isinstance(a, Value) else a for a in args])
            ctx.residuals = res[n_out:]
            ctx.args = args
            # the saved inputs, for ctx.saved_tensors' check of in-place changes
            ctx.save_for_backward(*[args[i] for i in part.saved_inputs
                                    if isinstance(args[i], Value)])
            outs = tuple(Tensor._make(xp.asarray(r)) for r in res[:n_out])
            return outs if n_out > 1 else outs[0]

        @staticmethod
        def backward(ctx, *gs):
            grads = [None] * len(ctx.args)
            if is_grad_enabled():   # create_graph=True: the op-by-op graph, recorded
                args = ctx._inputs   # the caller's tensors (forward saw fresh leaves)
                with enable_grad():
                    outs = slow(*args)
                got = autograd_grad(list(outs), [args[i] for i in positions], list(gs),
                                    create_graph=True, allow_unused=True)
            else:
                ctx.saved_tensors   # noqa: B018 - raises PyTorch's error on a changed input
                res = bwd([*ctx.residuals, *[g._array for g in gs]])
                got = [None if isinstance(r, float) else Tensor._make(xp.asarray(r))
                       for r in res]
            for i, g in zip(positions, got, strict=True):
                grads[i] = g
            return tuple(grads)

    return CompiledFunction
