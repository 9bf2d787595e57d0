"""Layer ``fx``: torch.fx's ``Interpreter`` and ``Transformer`` over graphgrad's IR.

Both subclass the IR's ``graph.Interpreter`` (one interpreter class for every
consumer) and present its nodes with torch.fx's opcodes: ``placeholder``, ``get_attr``
(a ``variable`` node), ``call_function`` (a ``call`` node: the target is the op class,
e.g. ``graphgrad.ops.REGISTRY["Add"]``), ``call_module`` and ``output``; the other IR
kinds (``constant``, ``shape``) run as the IR runs them. Override a hook to change how
a kind of node runs. ``Interpreter.run`` frees each value after its last use.
``Transformer`` runs the hooks on Proxies under a Tracer, so what they return is
recorded into a new graph: ``transform()`` gives the rewritten ``GraphModule``.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from graphgrad.func.pytree import tree_unflatten
from graphgrad.graph import Dyn, Graph, Node, Symbol
from graphgrad.graph import Interpreter as GraphInterpreter
from graphgrad.ops import Op
from graphgrad.tensor import Value

from .graph_module import GraphModule, resolve_qualname
from .proxy import Proxy
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


class Interpreter(GraphInterpreter):
    """Run a GraphModule node by node: ``Interpreter(gm).run(*args)``."""

    def __init__(self, module: GraphModule, garbage_collect_values: bool = True,
                 graph: Graph | None = None):
        super().__init__(graph if graph is not None else module.graph, module.state())
        self.module = module
        self.garbage_collect_values = garbage_collect_values
        self.env: dict[Node, Any] = {}
        self.args_iter: Iterator = iter(())
        self.current_node: Node | None = None

    def run(self, *args, initial_env: dict | None = None, enable_io_processing: bool = True,
            **kwargs):
        """Bind ``args`` to the placeholders and run every node; ``initial_env`` pre-sets
        node values (partial evaluation)."""
        inputs = self.module.inputs_of(*args, **kwargs) if enable_io_processing else list(args)
        self.args_iter = iter(inputs)
        self.env = env = dict(initial_env or {})
        nodes = self.graph.nodes
        last_use: dict[Node, Node] = {}
        for n in nodes:
            for i in (*n.input_nodes(), *n.deps):
                last_use[i] = n
        out = ()
        for n in nodes:
            if n not in env:
                env[n] = self.run_node(n, env)
            if n.kind == "output":
                out = env[n]
            if self.garbage_collect_values:
                for i in (*n.input_nodes(), *n.deps):
                    if last_use.get(i) is n:
                        env.pop(i, None)
        if enable_io_processing and self.module._out_spec is not None:
            return tree_unflatten(list(out), self.module._out_spec)
        return out[0] if enable_io_processing and len(out) == 1 else out

    def run_node(self, node: Node, env: dict):
        """Call the torch.fx hook for ``node``'s opcode with its target and arguments."""
        self.current_node = node
        args = [env[i] if isinstance(i, Node) else i for i in node.inputs]
        kind = node.kind
        if kind == "shape" and isinstance(args[0], Proxy):  # being traced: a shape node
            return args[0].tracer.shape_proxy(args[0])
        if kind == "placeholder":
            return self.placeholder(node.name, (), {})
        if kind == "variable" and "target" in node.params:
            return self.get_attr(node.params["target"], (), {})
        if kind == "call":
            args, params = _bound_params(node, args)
            return self.call_function(node.op, tuple(args), dict(params))
        if kind == "call_module":
            return self.call_module(node.params["target"], tuple(args), {})
        if kind == "output":
            return self.output("output", tuple(args), {})
        return super().run_node(node, env)

    # ---- one hook per torch.fx opcode -------------------------------------------------

    def placeholder(self, target: str, args: tuple, kwargs: dict) -> Any:
        try:
            return next(self.args_iter)
        except StopIteration:
            raise RuntimeError(f"Expected positional argument for parameter {target}, but one "
                               f"was not passed in!") from None

    def get_attr(self, target: str, args: tuple, kwargs: dict) -> Any:
        return resolve_qualname(self.module, target)

    def call_function(self, target, args: tuple, kwargs: dict) -> Any:
        if isinstance(target, type) and issubclass(target, Op):
            return target.apply(*args, **kwargs)
        return target(*args, **kwargs)

    def call_module(self, target: str, args: tuple, kwargs: dict) -> Any:
        return resolve_qualname(self.module, target)(*args, **kwargs)

    def output(self, target: str, args: tuple, kwargs: dict) -> Any:
        return args


class Transformer(Interpreter):
    """Rebuild a GraphModule node by node: the hooks run on Proxies, so an override that
    returns something else (another op, several ops) rewrites the graph."""

    def __init__(self, module: GraphModule):
        super().__init__(module, garbage_collect_values=False)
        self.tracer = Tracer()
        self.tracer.root = module

    def placeholder(self, target: str, args: tuple, kwargs: dict) -> Any:
        return self.tracer.proxy(self.tracer.graph.placeholder(self.current_node.spec, target))

    def get_attr(self, target: str, args: tuple, kwargs: dict) -> Any:
        value = resolve_qualname(self.module, target)
        return self.tracer.proxy(self.tracer.get_attr(target, value))

    def call_module(self, target: str, args: tuple, kwargs: dict) -> Any:
        return self.tracer.module_node(target, resolve_qualname(self.module, target), args)

    def transform(self) -> GraphModule:
        """The GraphModule of the graph the hooks built."""
        graph = self.tracer.new_graph(self.graph.name)
        env: dict[Node, Any] = {}
        with self.tracer.active():
            for n in self.graph.nodes:
                env[n] = self.run_node(n, env)
            outs = env[self.graph.output_node] if self.graph.output_node is not None else ()
            nodes = [self.tracer.node_of(v, literal_ok=False) if isinstance(v, Value) else v
                     for v in outs]
        graph.set_outputs(nodes)
        gm = GraphModule(self.module, graph, self.module._class_name)
        for key in ("_signature", "_out_spec", "_concrete", "_dtype_baked"):
            gm.__dict__[key] = self.module.__dict__[key]
        return gm
