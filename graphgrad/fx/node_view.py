"""Layer ``fx``: torch.fx's read-and-edit interface on graphgrad's one IR, as a thin view.

``FxGraph(graph)`` (``gm.graph`` of a ``GraphModule``; ``gm.ir`` is the IR graph it
views) and its ``FxNode``s speak torch.fx: ``node.op`` is one of torch.fx's six opcodes,
``node.target`` the public graphgrad function of a call (``graphgrad.relu`` for the
``Relu`` op), a method's name, a module's path; ``node.args`` / ``node.kwargs`` /
``node.users`` refer to other views, ``node.meta["val"]`` and ``node.meta["tensor_meta"]``
give the shape and dtype where the IR knows them (``passes.shape_prop`` fills the rest);
the graph iterates its nodes in order, prints torch.fx's table, finds, inserts calls
(``inserting_before/after``, ``call_function``, ``call_method``, ``create_node``), erases,
eliminates dead code and lints. So a pass written for torch.fx runs on graphgrad.

Why a view and not new attribute values on ``graph.Node``: the IR's ``Node.op`` is the op
class and ``Node.target`` the variable an ``assign`` writes, read in some fifty places
(printer, passes, backends, frontends). Giving those names torch.fx's meaning would fork
every consumer. The view keeps no graph of its own (only each node's ``meta`` dict, filled
from its Spec): every read looks at the IR node (fields torch.fx has no name for, such as
``kind``, ``spec``, ``inputs``, ``params``, read through), every edit (``node.target =
F.gelu``, ``call_function``, ``replace_all_uses_with``, ``erase_node``,
``eliminate_dead_code``) changes the IR graph in place, so there is still one graph;
``gm.recompile()`` then runs the edited graph.

Mapping of the IR's kinds onto torch.fx's opcodes (the nearest, as torch.fx has fewer):

=================================  ================  ==================================
IR kind                            ``node.op``       ``node.target``
=================================  ================  ==================================
placeholder                        placeholder       the argument's name
placeholder bound to module state  get_attr          the attribute path (``jit.trace`` and
                                                     ``jit.script`` of a module)
constant, variable                 get_attr          the attribute path (variable), or
                                                     the node's name (a baked constant)
call                               call_function     the public function (``graphgrad.
                                                     relu``), else the op class;
                                   call_method       the method's name, where the user's
                                                     code called it as a tensor method
call_function, call_method         the same          the function or the method's name
(a call recorded without ranks)
call_module                        call_module       the module's qualified name
output                             output            ``"output"``
cond, while_loop, while_grad, vjp, call_function     the IR's name for it (a str:
item, shape, assign, group, random                   ``"cond"``, ``"item"``,
                                                     ``"random_normal"``...)
=================================  ================  ==================================

The IR's own node stays reachable as ``view.node``, and its graph as ``view.graph``.
"""

from __future__ import annotations

from contextlib import contextmanager
from typing import Any, NamedTuple

from graphgrad.backend import get_default_dtype
from graphgrad.graph import Graph, Node, Spec, Symbol
from graphgrad.graph.builder import GraphBuilder
from graphgrad.graph.python_call import PYTHON_CALL_KINDS, bind_call, split_call
from graphgrad.graph.readable_code import public_function as printed_function
from graphgrad.graph.readable_code import attribute_input, probe_call, single_call, snake_name
from graphgrad.ops import REGISTRY, Op

__all__ = ["FxGraph", "FxNode", "TensorMetadata", "public_function", "op_of"]

_CALL_KINDS = frozenset({"cond", "while_loop", "while_grad", "vjp", "item", "shape",
                         "assign", "group", "random"})
_OPCODE = {"placeholder": "placeholder", "constant": "get_attr", "variable": "get_attr",
           "call": "call_function", "call_module": "call_module", "output": "output",
           "call_function": "call_function", "call_method": "call_method"}


class TensorMetadata(NamedTuple):
    """``meta["tensor_meta"]``: torch.fx's ShapeProp record, the fields the IR knows (a
    ``None`` dim is a size unknown until run; shape ``None``: the rank too)."""

    shape: tuple | None
    dtype: Any
    requires_grad: bool = False
    stride: tuple | None = None
    memory_format: Any = None
    is_quantized: bool = False
    qparams: dict = {}   # noqa: RUF012 - torch.fx's field; never mutated


# ---- op class <-> public function -----------------------------------------------------

_TABLES: dict[str, dict] = {}


def _tables() -> tuple[dict, dict]:
    """op class -> public function (the printed code's: ``graph.readable_code``), and every
    such public function -> its op class."""
    if not _TABLES:
        import graphgrad.nn.functional  # noqa: F401 - its functions are public targets too
        to_fn: dict = {}
        to_op: dict = {}
        for op in set(REGISTRY.values()):
            fn, _ = printed_function(op)
            if fn is not None:
                to_fn[op] = fn
                to_op.setdefault(fn, op)
        _TABLES["to_fn"], _TABLES["to_op"] = to_fn, to_op
    return _TABLES["to_fn"], _TABLES["to_op"]


def public_function(op: type) -> Any:
    """The public graphgrad function of ``op`` (``graphgrad.relu`` for ``Relu``); the op
    class itself where graphgrad has no function of that name."""
    return _tables()[0].get(op, op)


def op_of(target: Any) -> type:
    """The op class a call target names: an op class, a public graphgrad function
    (``graphgrad.relu``, ``graphgrad.nn.functional.gelu``), or a function whose name is an
    op's (``torch.relu``)."""
    if isinstance(target, type) and issubclass(target, Op):
        return target
    to_op = _tables()[1]
    if target in to_op:
        return to_op[target]
    name = getattr(target, "__name__", target if isinstance(target, str) else None)
    if isinstance(name, str):
        camel = "".join(part[:1].upper() + part[1:] for part in name.split("_"))
        for key in (camel, name):
            if key in REGISTRY:
                return REGISTRY[key]
    raise ValueError(f"{target!r} names no graphgrad op: a call node's target must be an op "
                     f"class or a public graphgrad function")


# ---- the views -------------------------------------------------------------------------

class FxNode:
    """torch.fx's ``Node`` interface on one IR node (``self.node``)."""

    def __init__(self, fx_graph: FxGraph, node: Node):
        self.graph = fx_graph
        self.node = node
        self.meta: dict = {}
        spec = node.spec
        if spec is not None and hasattr(spec, "dtype"):
            self.meta["val"] = spec
            self.meta["tensor_meta"] = TensorMetadata(
                None if spec.shape is None else tuple(spec.shape), spec.dtype)

    @property
    def name(self) -> str:
        return self.node.name

    @property
    def op(self) -> str:
        kind = self.node.kind
        if kind == "call" and self.node in self.graph.graph.__dict__.get("fx_methods", ()):
            return "call_method"   # an op the user's code called as a tensor method
        if attribute_input(self.node) is not None:
            return "get_attr"      # bound to a module's parameter or buffer at each call
        return "call_function" if kind in _CALL_KINDS else _OPCODE[kind]

    @property
    def target(self) -> Any:
        n = self.node
        if n.kind == "call":
            method = self.graph.graph.__dict__.get("fx_methods", {}).get(n)
            return method if method is not None else public_function(n.op)
        if n.kind in ("variable", "call_module", "placeholder", *PYTHON_CALL_KINDS) and \
                "target" in n.params:
            return n.params["target"]
        if n.kind in ("placeholder", "constant"):
            return n.name
        return n.target_name

    @target.setter
    def target(self, value: Any) -> None:
        """Retarget a call (``node.target = graphgrad.nn.functional.gelu``): the IR node's
        op class becomes the one ``value`` names; its inputs and params stay."""
        if self.node.kind in PYTHON_CALL_KINDS:   # a call recorded as torch.fx records it
            self.node.params = {**self.node.params, "target": value}
            return
        if self.node.kind != "call":
            raise TypeError(f"only a call_function node of an op can be retargeted; "
                            f"{self.name!r} is {self.op} ({self.node.kind} in the IR)")
        self.node.op = op_of(value)

    def _view(self, v: Any) -> Any:
        return self.graph.view(v) if isinstance(v, Node) else v

    @property
    def args(self) -> tuple:
        n = self.node
        if n.kind == "output":   # torch.fx: one argument, the returned structure
            outs = tuple(self._view(v) for v in n.inputs)
            return (outs[0] if len(outs) == 1 else outs,)
        if n.kind in PYTHON_CALL_KINDS:
            return bind_call(n.params, [self._view(v) for v in n.inputs])[0]
        return tuple(self._view(v) for v in n.inputs)

    @property
    def kwargs(self) -> dict:
        n = self.node
        if n.kind in PYTHON_CALL_KINDS:
            return bind_call(n.params, [self._view(v) for v in n.inputs])[1]
        return dict(n.params) if n.kind == "call" else {}

    @property
    def all_input_nodes(self) -> list[FxNode]:
        return [self.graph.view(i) for i in dict.fromkeys((*self.node.input_nodes(),
                                                           *self.node.deps))]

    @property
    def users(self) -> dict[FxNode, None]:
        """The nodes that read this one (data or control input), as torch.fx's dict."""
        me = self.node
        return {self.graph.view(n): None for n in self.graph.graph.nodes
                if any(i is me for i in (*n.inputs, *n.deps))}

    def replace_all_uses_with(self, replace_with: FxNode,
                              delete_user_cb=lambda user: True) -> list[FxNode]:
        """Make every user (those ``delete_user_cb`` accepts) read ``replace_with``
        instead; returns the users changed."""
        me, new = self.node, replace_with.node
        changed = []
        for n in self.graph.graph.nodes:
            if not delete_user_cb(self.graph.view(n)):
                continue
            if any(i is me for i in (*n.inputs, *n.deps)):
                n.inputs = tuple(new if i is me else i for i in n.inputs)
                n.deps = tuple(new if d is me else d for d in n.deps)
                changed.append(self.graph.view(n))
        return changed

    def __getattr__(self, name: str) -> Any:
        # the IR node's own fields (kind, spec, inputs, params, subgraphs...) read through
        if name.startswith("__") or name == "node":
            raise AttributeError(name)
        return getattr(self.node, name)

    def __repr__(self) -> str:
        return self.name


class FxGraph:
    """torch.fx's ``Graph`` interface on one IR graph (``self.graph``)."""

    def __init__(self, graph: Graph, owning_module: Any = None):
        self.graph = graph
        self.owning_module = owning_module
        self._views: dict[Node, FxNode] = {}
        self._insert: tuple[str, Node] | None = None   # inserting_before/after's point

    def view(self, node: Node) -> FxNode:
        v = self._views.get(node)
        if v is None:
            v = self._views[node] = FxNode(self, node)
        return v

    @property
    def nodes(self) -> list[FxNode]:
        return [self.view(n) for n in self.graph.nodes]

    def __iter__(self):
        return iter(self.nodes)

    def __len__(self) -> int:
        return len(self.graph.nodes)

    def __getattr__(self, name: str) -> Any:
        # the IR graph's own API (inputs, output_node, header, verify, to_dot...) reads
        # through, so code written for the IR runs on ``gm.graph`` too
        if name.startswith("__") or name == "graph":
            raise AttributeError(name)
        return getattr(self.graph, name)

    def find_nodes(self, *, op: str, target: Any = None, sort: bool = True) -> list[FxNode]:
        """The nodes of opcode ``op`` (and ``target``, when given), in graph order."""
        return [n for n in self.nodes
                if n.op == op and (target is None or n.target is target or n.target == target)]

    # ---- editing ----------------------------------------------------------------------

    @contextmanager
    def inserting_before(self, node: FxNode):
        saved, self._insert = self._insert, ("before", node.node)
        try:
            yield
        finally:
            self._insert = saved

    @contextmanager
    def inserting_after(self, node: FxNode):
        saved, self._insert = self._insert, ("after", node.node)
        try:
            yield
        finally:
            self._insert = saved

    def create_node(self, op: str, target: Any, args: tuple = (), kwargs: dict | None = None,
                    name: str | None = None) -> FxNode:
        """A new ``call_function`` or ``call_method`` node, inserted where
        ``inserting_before/after`` says (else before the output). An op class as the
        target makes an op node (``kwargs``: its params as the IR holds them); a function
        whose call on these arguments is one op (``graphgrad.relu``, ``graphgrad.sum(x,
        dim=0)``) makes that op's node; any other call (``graphgrad.addmm``, a method) is a
        node that makes the call when the graph runs (``graph.python_call``)."""
        if op not in ("call_function", "call_method"):
            raise NotImplementedError(f"create_node makes call_function and call_method nodes, "
                                      f"not {op!r} (the frontends make the others)")
        args = tuple(a.node if isinstance(a, FxNode) else a for a in args)
        kwargs = {k: v.node if isinstance(v, FxNode) else v for k, v in (kwargs or {}).items()}
        if op == "call_function" and isinstance(target, type) and issubclass(target, Op):
            spec = GraphBuilder.infer(target, list(args), kwargs, False)
            node = Node(self.graph, "call", self.graph.unique_name(
                name or snake_name(target.__name__)), op=target, inputs=args, params=kwargs,
                spec=spec)
            return self._insert_node(node)
        call = (lambda *a, **k: getattr(a[0], target)(*a[1:], **k)) if op == "call_method" \
            else target
        probe = probe_call(call, args, kwargs)
        made = single_call(probe, args)
        if made is not None:   # one op: its node, as the frontends would record it
            node = Node(self.graph, "call", self.graph.unique_name(
                name or snake_name(made.op.__name__)), op=made.op, params=made.params,
                spec=made.spec, inputs=tuple(
                    a for a in args))
            return self._insert_node(node)
        values, args_s, kwargs_s = split_call(args, kwargs, lambda v: isinstance(v, Node))
        out = probe[1] if probe is not None else None
        spec = out._node.spec if isinstance(out, Symbol) and isinstance(out._node.spec, Spec) \
            else Spec(None, next((v.spec.dtype for v in values if isinstance(v.spec, Spec)),
                                 None) or get_default_dtype().np)
        label = target if isinstance(target, str) else getattr(target, "__name__", "call")
        node = Node(self.graph, op, self.graph.unique_name(name or label.strip("_")),
                    inputs=tuple(values), params={"target": target, "args": args_s,
                                                  "kwargs": kwargs_s}, spec=spec)
        return self._insert_node(node)

    def _insert_node(self, node: Node) -> FxNode:
        nodes = self.graph.nodes
        if self._insert is None:
            at = len(nodes) - 1 if self.graph.output_node is not None else len(nodes)
        else:
            where, anchor = self._insert
            at = nodes.index(anchor) + (where == "after")   # right after it, as torch.fx
        nodes.insert(at, node)
        return self.view(node)

    def call_function(self, the_function: Any, args: tuple | None = None,
                      kwargs: dict | None = None) -> FxNode:
        return self.create_node("call_function", the_function, tuple(args or ()), kwargs)

    def call_method(self, method_name: str, args: tuple | None = None,
                    kwargs: dict | None = None) -> FxNode:
        return self.create_node("call_method", method_name, tuple(args or ()), kwargs)

    def erase_node(self, to_erase: FxNode) -> None:
        users = to_erase.users
        if users:
            raise RuntimeError(f"Tried to erase Node {to_erase} but it still had {len(users)} "
                               f"users in the graph: {users}!")
        node = to_erase.node
        self.graph.nodes.remove(node)
        if node in self.graph.inputs:
            self.graph.inputs.remove(node)
        self._views.pop(node, None)

    def eliminate_dead_code(self) -> bool:
        """Erase, in place, the nodes that neither the output nor a side effect needs
        (graphgrad's liveness: random draws, assignments and module calls stay, and so
        do placeholders). Returns whether anything was erased, as torch.fx's does."""
        from graphgrad.passes.dead_code import live_nodes
        if self.graph.output_node is None:
            return False
        live = live_nodes(self.graph)
        dead = [n for n in self.graph.nodes if n not in live]
        for n in reversed(dead):
            self.graph.nodes.remove(n)
            self._views.pop(n, None)
        return bool(dead)

    def lint(self) -> None:
        """Check the graph (edges in topological order, every shape rule re-run)."""
        self.graph.verify()

    def tabular(self) -> str:
        """torch.fx's ``print_tabular`` table: opcode, name, target, args, kwargs."""
        rows = [[n.op, n.name, _target_text(n.target), str(n.args), str(n.kwargs)]
                for n in self.nodes]
        head = ["opcode", "name", "target", "args", "kwargs"]
        widths = [max(len(r[i]) for r in (head, *rows)) for i in range(len(head))]

        def line(cells):
            return "  ".join(c.ljust(w) for c, w in zip(cells, widths, strict=True)).rstrip()

        return "\n".join([line(head), line(["-" * w for w in widths]), *map(line, rows)])

    def print_tabular(self) -> None:
        print(self.tabular())

    def __repr__(self) -> str:
        return f"<FxGraph of {self.graph!r}>"


def _target_text(target: Any) -> str:
    """How torch.fx's table writes a target: a function by name (``<built-in function
    relu>`` in torch); here graphgrad's functions by their public name."""
    if isinstance(target, str):
        return target
    name = getattr(target, "__name__", None)
    return name if name is not None else repr(target)
