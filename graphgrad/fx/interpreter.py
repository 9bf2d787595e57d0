"""Layer ``fx``: torch.fx's ``Interpreter`` and ``Transformer`` over graphgrad's IR.

Both subclass the IR's ``graph.Interpreter`` (one interpreter class for every
consumer) and walk the graph as torch.fx does: ``run_node(n)`` takes a node of the
torch.fx view (``fx.node_view``: ``n.op``, ``n.target``, ``n.args``), fetches its
arguments from ``self.env`` (keyed by those nodes) and calls the hook named by its
opcode with ``(target, args, kwargs)``: ``placeholder``, ``get_attr``, ``call_function``
(``target`` is the public function, ``graphgrad.relu``; for an op node ``kwargs`` are
the op's parameters as the IR holds them), ``call_method``, ``call_module``, ``output``.
The IR's other kinds (``cond``, ``item``, ``shape``...) come to ``call_function`` with
their kind as the target and run as the IR runs them. ``run`` frees each value after
its last use. ``Transformer`` runs the hooks on Proxies under a Tracer, so what they
return is recorded into a new graph: ``transform()`` gives the rewritten GraphModule.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from graphgrad.func.pytree import tree_unflatten
from graphgrad.graph import Dyn, Graph, Node, Symbol
from graphgrad.graph import Interpreter as GraphInterpreter
from graphgrad.graph.interpreter import as_tensor
from graphgrad.graph.python_call import PYTHON_CALL_KINDS, bind_call, split_call
from graphgrad.tensor import Value

from .graph_module import GraphModule, resolve_qualname
from .node_view import FxGraph, FxNode, op_of
from .proxy import Proxy
from .python_calls import attempt, method_calls, record
from .tracer import Tracer

__all__ = ["Interpreter", "Transformer"]


def _bound_params(node: Node, args: list) -> tuple[list, dict]:
    """A call node's op arguments and params, run-time params (Dyn) bound to their inputs:
    ints for values, the Proxy itself while transforming (it stays symbolic)."""
    if node.nargs == len(args):
        return args, node.params
    params = {k: tuple((args[e.index] if isinstance(args[e.index], Symbol)
                        else int(args[e.index])) if isinstance(e, Dyn) else e for e in v)
              if isinstance(v, tuple) else v for k, v in node.params.items()}
    return args[:node.nargs], params


def _call(kind: str, target, call, args: tuple, kwargs: dict):
    """A Python call of the graph: made now, or, while a graph is traced from this one
    (its values are Proxies of unknown rank), recorded as it was (python_calls.attempt)."""
    values, _, _ = split_call(args, kwargs, lambda v: isinstance(v, Proxy))
    if values:
        return attempt(values[0].tracer, kind, target, call, args, kwargs)
    return call()


class Interpreter(GraphInterpreter):
    """Run a GraphModule node by node: ``Interpreter(gm).run(*args)``."""

    def __init__(self, module: GraphModule, garbage_collect_values: bool = True,
                 graph: Graph | FxGraph | None = None):
        if isinstance(graph, FxGraph):
            graph = graph.graph
        ir = graph if graph is not None else module.ir
        super().__init__(ir, module.state())
        self.module = module
        self.fx_graph = module.graph if ir is module.ir else FxGraph(ir, module)
        self.garbage_collect_values = garbage_collect_values
        self.env: dict[FxNode, Any] = {}
        self.args_iter: Iterator = iter(())
        self.current_node: FxNode | None = None

    def run(self, *args, initial_env: dict | None = None, enable_io_processing: bool = True,
            **kwargs):
        """Bind ``args`` to the placeholders and run every node; ``initial_env`` pre-sets
        node values (partial evaluation)."""
        inputs = self.module.inputs_of(*args, **kwargs) if enable_io_processing else list(args)
        self.args_iter = iter(inputs)
        self.env = env = dict(initial_env or {})
        view = self.fx_graph.view
        last_use: dict[Node, Node] = {}
        for n in self.graph.nodes:
            for i in (*n.input_nodes(), *n.deps):
                last_use[i] = n
        out = None
        for n in self.graph.nodes:
            v = view(n)
            if v not in env:
                env[v] = self.run_node(v)
            if n.kind == "output":
                out = env[v]
            if self.garbage_collect_values:
                for i in (*n.input_nodes(), *n.deps):
                    if last_use.get(i) is n:
                        env.pop(view(i), None)
        if not enable_io_processing:
            return out
        outs = self.graph.output_node
        leaves = list(out) if outs is not None and len(outs.inputs) != 1 else [out]
        if self.module._out_spec is not None:
            return tree_unflatten(leaves, self.module._out_spec)
        return out

    def run_node(self, n: FxNode) -> Any:
        """Call the hook of ``n``'s opcode with its target and arguments."""
        self.current_node = n
        args, kwargs = self.fetch_args_kwargs_from_env(n)
        return getattr(self, n.op)(n.target, args, kwargs)

    def fetch_args_kwargs_from_env(self, n: FxNode) -> tuple[tuple, dict]:
        """``n``'s arguments with each node replaced by its value."""
        node = n.node
        values = [self.env[self.fx_graph.view(i)] if isinstance(i, Node) else i
                  for i in node.inputs]
        if node.kind == "call":
            args, params = _bound_params(node, values)
            return tuple(args), dict(params)
        if node.kind in PYTHON_CALL_KINDS:
            return bind_call(node.params, values)
        if node.kind == "output":
            return (values[0] if len(values) == 1 else tuple(values),), {}
        return tuple(values), {}

    def fetch_attr(self, target: str) -> Any:
        return resolve_qualname(self.module, target)

    # ---- one hook per torch.fx opcode -------------------------------------------------

    def placeholder(self, target: str, args: tuple, kwargs: dict) -> Any:
        try:
            return next(self.args_iter)
        except StopIteration:
            raise RuntimeError(f"Expected positional argument for parameter {target}, but one "
                               f"was not passed in!") from None

    def get_attr(self, target: str, args: tuple, kwargs: dict) -> Any:
        node = self.current_node.node
        if node.kind == "constant":   # a value baked into the graph
            return as_tensor(node.value)
        if node.kind == "variable" and "target" not in node.params:
            return self.run_variable(node, [])
        return self.fetch_attr(target)

    def call_function(self, target, args: tuple, kwargs: dict) -> Any:
        node = self.current_node.node
        if node.kind == "call":   # an op node: kwargs are the op's params
            try:
                op = op_of(target)
            except ValueError:
                return target(*args, **kwargs)
            return op.apply(*args, **kwargs)
        if node.kind in ("call_function", "call_method") or not isinstance(target, str):
            return _call(node.kind if node.kind in PYTHON_CALL_KINDS else "call_function",
                         target, lambda: target(*args, **kwargs), args, kwargs)
        return self.run_ir_kind(node, list(args))

    def run_ir_kind(self, node: Node, args: list) -> Any:
        """An IR kind that torch.fx has no opcode for (cond, item, shape...)."""
        if node.kind == "shape" and isinstance(args[0], Proxy):  # being traced
            return args[0].tracer.shape_proxy(args[0])
        return getattr(self, "run_" + node.kind)(node, args)

    def call_method(self, target: str, args: tuple, kwargs: dict) -> Any:
        node = self.current_node.node
        if node.kind == "call":   # an op node made by a method: kwargs are the op's params
            return node.op.apply(*args, **kwargs)
        return _call("call_method", target,
                     lambda: getattr(args[0], target)(*args[1:], **kwargs), args, kwargs)

    def call_module(self, target: str, args: tuple, kwargs: dict) -> Any:
        return self.fetch_attr(target)(*args, **kwargs)

    def output(self, target: str, args: tuple, kwargs: dict) -> Any:
        return args[0]


class Transformer(Interpreter):
    """Rebuild a GraphModule node by node: the hooks run on Proxies, so an override that
    returns something else (another op, several ops) rewrites the graph."""

    def __init__(self, module: GraphModule):
        super().__init__(module, garbage_collect_values=False)
        self.tracer = Tracer()
        self.tracer.root = module

    def placeholder(self, target: str, args: tuple, kwargs: dict) -> Any:
        spec = self.current_node.node.spec
        return self.tracer.proxy(self.tracer.graph.placeholder(spec, target))

    def get_attr(self, target: str, args: tuple, kwargs: dict) -> Any:
        node = self.current_node.node
        if node.kind in ("variable", "placeholder") and "target" in node.params:
            value = resolve_qualname(self.module, target)
            return self.tracer.proxy(self.tracer.get_attr(target, value))
        return super().get_attr(target, args, kwargs)

    def call_function(self, target, args: tuple, kwargs: dict) -> Any:
        if self.current_node.node.kind == "call_function":   # recorded again as it was
            return record(self.tracer, "call_function", target, args, kwargs)
        return super().call_function(target, args, kwargs)

    def call_method(self, target: str, args: tuple, kwargs: dict) -> Any:
        if self.current_node.node.kind == "call":
            out = super().call_method(target, args, kwargs)
            method_calls(self.tracer.graph)[out._node] = target
            return out
        return record(self.tracer, "call_method", target, args, kwargs)

    def call_module(self, target: str, args: tuple, kwargs: dict) -> Any:
        return self.tracer.module_node(target, resolve_qualname(self.module, target), args)

    def transform(self) -> GraphModule:
        """The GraphModule of the graph the hooks built."""
        graph = self.tracer.new_graph(self.graph.name)
        self.env = {}
        with self.tracer.active():
            for n in self.fx_graph.nodes:
                self.env[n] = self.run_node(n)
            out = self.graph.output_node
            result = self.env[self.fx_graph.view(out)] if out is not None else ()
            outs = result if out is not None and len(out.inputs) != 1 else (result,)
            nodes = [self.tracer.node_of(v, literal_ok=False) if isinstance(v, Value) else v
                     for v in outs]
        graph.set_outputs(nodes)
        gm = GraphModule(self.module, graph, self.module._class_name)
        for key in ("_signature", "_out_spec", "_concrete", "_dtype_baked"):
            gm.__dict__[key] = self.module.__dict__[key]
        return gm
