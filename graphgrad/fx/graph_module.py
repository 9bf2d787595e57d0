"""Layer ``fx``: ``GraphModule``, an ``nn.Module`` whose forward is a ``graph.Graph``.

As in torch.fx, it copies from the root the submodules and parameters its graph
names (``call_module`` targets, ``variable`` reads), so ``gm.parameters()`` are the
root's own tensors; ``.code`` is the graph printed as runnable Python (the IR's one
printer), and calling the module runs that code: each op goes through the dispatch
point, so autograd records it and ``backward()`` reaches inputs and parameters.
"""

from __future__ import annotations

import copy
from typing import Any

from graphgrad.func.pytree import LEAF, TreeSpec, tree_unflatten
from graphgrad.graph import Graph, Node, PythonCode, Symbol, short
from graphgrad.graph.readable_code import attribute_input, readable_code
from graphgrad.nn import Module, Parameter
from graphgrad.tensor import Value

from .node_view import FxGraph

__all__ = ["GraphModule", "captured_graph_module"]

_BASIC = (bool, int, float, complex, str, type(None))


def resolve_qualname(obj: Any, qualname: str) -> Any:
    for part in qualname.split("."):
        obj = obj[part] if isinstance(obj, dict) else getattr(obj, part)
    return obj


def _copy_attr(root: Any, gm: Module, qualname: str) -> None:
    """Install ``root``'s ``qualname`` at the same path in ``gm`` (empty Modules between)."""
    *path, last = qualname.split(".")
    src, dst = root, gm
    for part in path:
        src = src[part] if isinstance(src, dict) else getattr(src, part)
        sub = dst._modules.get(part)
        if sub is None:
            sub = Module()
            setattr(dst, part, sub)
        dst = sub
    value = src[last] if isinstance(src, dict) else getattr(src, last)
    if isinstance(value, (Parameter, Module)):
        setattr(dst, last, value)
    elif isinstance(value, Value):  # a buffer keeps its persistence; a frozen constant
        persistent = isinstance(src, Module) and last in src._buffers \
            and last not in src._non_persistent   # (_tensor_constant<k>) is not state
        dst.register_buffer(last, value, persistent=persistent)
    else:
        object.__setattr__(dst, last, value)


class GraphModule(Module):
    """``GraphModule(root, graph, class_name)``: ``root`` is the traced module (or a dict
    from qualified names to the modules and tensors the graph reads)."""

    def __init__(self, root: Module | dict, graph: Graph | FxGraph,
                 class_name: str = "GraphModule"):
        super().__init__()
        graph = graph.graph if isinstance(graph, FxGraph) else graph
        self._init_face(class_name)
        for node in graph.nodes:
            if node.kind in ("variable", "call_module") and "target" in node.params:
                _copy_attr(root, self, node.params["target"])
        self.graph = graph

    # what prints ``self`` as forward's first parameter: the code reads attributes of it
    _self_param = True

    def _init_face(self, class_name: str) -> None:
        """The fields every GraphModule has, whatever frontend made it (``jit.trace`` and
        ``jit.script`` results are GraphModules that run their graph their own way)."""
        d = self.__dict__
        d["_class_name"] = class_name
        d["_signature"] = None      # the traced function's signature (for binding)
        d["_out_spec"] = None       # the traced output's structure (tree_unflatten)
        d["_concrete"] = {}         # concrete_args: name -> the value baked in
        d["_dtype_baked"] = False   # graphgrad code read a dtype while tracing
        d["_state"] = {}            # what the printed code reads: refreshed per call
        d["_reads"] = []

    def _share_state(self, module: Module) -> None:
        """Make ``module``'s parameters, buffers and submodules this GraphModule's own
        attributes (the same stores, so a parameter replaced in ``module`` is seen here):
        ``self.fc.weight`` in the code and a ``get_attr`` target reach them."""
        d, src = self.__dict__, module.__dict__
        for key in ("_parameters", "_buffers", "_non_persistent", "_modules"):
            d[key] = src[key]
        d["_shared_with"] = module

    def train(self, mode: bool = True) -> GraphModule:
        """As ``nn.Module.train``; a GraphModule that shares a module's state sets that
        module's flag too (``scripted.eval()`` is ``module.eval()``, as in PyTorch)."""
        super().train(mode)
        shared = self.__dict__.get("_shared_with")
        if shared is not None:
            shared.train(mode)
        return self

    # ---- the graph and its code -------------------------------------------------------

    @property
    def ir(self) -> Graph:
        """The IR graph (``graphgrad.graph.Graph``) that ``graph`` presents: what passes,
        backends and the printer read."""
        return self.__dict__["_graph"]

    def _set_ir(self, g: Graph) -> None:
        self.__dict__["_graph"] = g

    @property
    def graph(self) -> FxGraph:
        """The graph with torch.fx's interface (``fx.node_view``): ``node.op`` is
        "call_function", ``node.target`` is ``graphgrad.relu``... Edits made through it
        change the one IR graph (``ir``); call ``recompile()`` after them, as in torch.fx."""
        view = self.__dict__.get("_fx_view")
        if view is None or view.graph is not self.ir:
            view = self.__dict__["_fx_view"] = FxGraph(self.ir, self)
        return view

    @graph.setter
    def graph(self, g: Graph | FxGraph) -> None:
        self._set_ir(g.graph if isinstance(g, FxGraph) else g)
        self.recompile()

    fx_graph = graph   # the name this view had before ``graph`` was it

    def recompile(self) -> PythonCode:
        """Regenerate ``code`` from ``graph`` (call it after editing the graph)."""
        d = self.__dict__
        d["_reads"] = [n for n in self.ir.nodes
                       if n.kind in ("variable", "call_module") and "target" in n.params]
        d["_python"] = readable_code(self.ir, d["_state"], "forward",
                                     self_param=self._self_param)
        d["_python_of"] = self.ir
        # the large constants the code reads as ``self._code_constant<k>``: plain
        # attributes (no state_dict entries), as torch.fx keeps them
        d.update(d["_python"].attributes or {})
        return d["_python"]

    @property
    def code(self) -> str:
        """The graph as PyTorch-style Python (``graph.readable_code``), as of the last
        ``recompile()`` (made anew where ``ir`` is another graph: a jit.script call that
        compiled a graph for its input shapes)."""
        if self.__dict__.get("_python_of") is not self.ir:
            self.recompile()
        return self.__dict__["_python"].src

    def state(self) -> dict:
        """What the graph reads when it runs: each ``variable`` node's tensor and each
        ``call_module`` target's module, looked up in this module now."""
        state: dict = {}
        for n in self.__dict__["_reads"]:
            value = resolve_qualname(self, n.params["target"])
            state[n if n.kind == "variable" else n.params["target"]] = value
        return state

    def print_readable(self, print_output: bool = True) -> str:
        """The generated forward inside a class, as torch.fx prints it."""
        head, _, defs = self.code.partition("\n\n\n")
        body = "\n".join(("    " + line) if line else line for line in defs.splitlines())
        text = f"{head}\n\n\nclass {self._class_name}(graphgrad.nn.Module):\n{body}\n"
        if print_output:
            print(text)
        return text

    def to_dot(self) -> str:
        return self.ir.to_dot()

    # ---- calling ----------------------------------------------------------------------

    def inputs_of(self, *args, **kwargs) -> list:
        """Bind a call's arguments to the graph's placeholders; check the specialized ones
        (torch.fx's ``_assert`` on concrete_args) and the traced ranks and sizes."""
        sig = self._signature
        if sig is not None:
            bound = sig.bind(*args, **kwargs)
            bound.apply_defaults()
            values = dict(bound.arguments)
        else:
            if kwargs:
                raise TypeError(f"{self._class_name}.forward() takes positional arguments "
                                f"only, got {sorted(kwargs)}")
            values = dict(zip([p.name for p in self.ir.inputs], args, strict=False))
        for name, baked in self._concrete.items():
            given = values.get(name, baked)
            if isinstance(baked, _BASIC) and not isinstance(given, Value) and given != baked:
                raise AssertionError(f"{name} has been specialized to have value {baked} but "
                                     f"got another value")
        phs = [p for p in self.ir.inputs if attribute_input(p) is None]
        if sig is None and len(args) != len(phs):
            raise TypeError(f"{self._class_name}.forward() takes {len(phs)} arguments "
                            f"({', '.join(p.name for p in phs)}), got {len(args)}")
        out = [values[p.name] for p in phs]
        for p, v in zip(phs, out, strict=True):
            _check_spec(self._class_name, p, v, self._dtype_baked)
        return out

    def forward(self, *args, **kwargs):
        if any(isinstance(a, Symbol) for a in (*args, *kwargs.values())):
            # traced again (inside another symbolic_trace): run node by node, so that each
            # node is recorded as what it is (a shape node stays one)
            from .interpreter import Interpreter
            return Interpreter(self).run(*args, **kwargs)
        inputs = self.inputs_of(*args, **kwargs)
        state = self.__dict__["_state"]
        state.clear()
        state.update(self.state())
        flat = self.__dict__["_python"].fn(self, *inputs)
        if self._out_spec is None:
            return flat[0] if len(flat) == 1 else flat
        return tree_unflatten(list(flat), self._out_spec)

    def __deepcopy__(self, memo: dict) -> GraphModule:
        """A copy with its own graph and state; the generated code is made again (it holds
        the graphgrad package, which does not copy), as torch.fx's GraphModule does."""
        cls = type(self)
        new = cls.__new__(cls)
        memo[id(self)] = new
        for key, value in self.__dict__.items():
            if key not in ("_python", "_python_of", "_fx_view", "_state"):
                new.__dict__[key] = copy.deepcopy(value, memo)
        new.__dict__["_state"] = {}
        new.recompile()
        return new

    def __repr__(self) -> str:
        return f"{self._class_name}(\n  {self.code.strip().replace(chr(10), chr(10) + '  ')}\n)"


def captured_graph_module(graph: Graph) -> GraphModule:
    """What ``graphgrad.compile`` hands a backend for a captured ``graph``: a GraphModule
    whose forward returns the tuple of the graph's outputs, as the GraphModules that
    ``torch._dynamo`` hands its backends do (so ``return gm`` and ``return gm.forward``
    are callables of the same contract as the built-in backends' results)."""
    gm = GraphModule({}, graph)
    gm.__dict__["_out_spec"] = TreeSpec("tuple", None, (LEAF,) * len(graph.outputs))
    return gm


def _check_spec(name: str, p: Node, value: Any, dtype: bool) -> None:
    """An input must have the rank (and the sizes, and with ``dtype`` the dtype) that the
    graph was traced for."""
    spec = p.spec
    if not isinstance(value, Value) or isinstance(value, Symbol) or spec is None:
        return   # a Symbol: the graph is being traced again, with shape rules of its own
    arr = value._array
    if dtype and arr.dtype != spec.dtype:
        raise RuntimeError(f"{name}: input {p.name!r} has dtype {arr.dtype} but the graph was "
                           f"traced for {spec.dtype} (graphgrad code read the dtype while "
                           f"tracing, so it is baked in); trace again with an example of "
                           f"this dtype")
    if spec.shape is None:
        return
    shape = tuple(arr.shape)
    if len(shape) != len(spec.shape) or any(d is not None and d != s
                                            for d, s in zip(spec.shape, shape, strict=True)):
        raise RuntimeError(f"{name}: input {p.name!r} of shape {list(shape)} does not fit the "
                           f"graph, which was traced for {short(spec)} ('?' is any size); "
                           f"trace again with an example of this shape")
