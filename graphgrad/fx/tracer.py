"""Layer ``fx``: ``Tracer``, torch.fx's symbolic tracer on graphgrad's IR.

The tracer is a ``graph.GraphBuilder`` on the dispatch stack: the traced function runs
once on Proxies (placeholders), and every op call that touches one becomes a ``call``
node of the one IR. What is not a Proxy runs at trace time and is frozen: a Python
number is a literal, a tensor is stored on the root as ``_tensor_constant<k>``, so
``x + np.random.rand()`` bakes the number it drew (torch.fx's documented behaviour,
reproduced on purpose). A draw graphgrad makes for a traced value (dropout,
``randn_like``) is a ``random`` node instead (``batched_random``).

``nn.Module`` calls go through ``call_module``: graphgrad.nn's built-in layers are
leaves (``is_leaf_module``) and become ``call_module`` nodes that call the live module
when the graph runs; other modules are traced through. Parameters and buffers are
``variable`` nodes named by their qualified name (torch.fx's ``get_attr``), read from
the module when the graph runs, so gradients reach them and updates are seen.
"""

from __future__ import annotations

import contextlib
import copy
import inspect
import sys
from collections.abc import Callable, Iterator
from typing import Any

from graphgrad.backend import get_default_dtype, xp
from graphgrad.func.pytree import tree_flatten
from graphgrad.graph import Graph, GraphBuilder, Node, Spec, Symbol, symbol
from graphgrad.graph.random_calls import describe_draw, draw_frame
from graphgrad.graph.random_node import add_random
from graphgrad.nn import Module, Sequential
from graphgrad.ops import REGISTRY
from graphgrad.tensor import Value
from graphgrad.tensor.modes import current_mode

from .errors import CONTROL_FLOW, ITERATION, in_graphgrad, trace_error, user_location
from .proxy import Proxy, ProxyArray, ShapeProxy
from .python_calls import patched_functions, record

__all__ = ["Tracer", "PH"]

_I64 = xp.dtype(xp.int64)
_GETITEM = REGISTRY["Getitem"]


def _one_int(spec: tuple) -> bool:
    return len(spec) == 1 and isinstance(spec[0], int) and not isinstance(spec[0], bool)


class _PH:
    """``concrete_args={"x": PH}``: keep ``x`` a placeholder (torch.fx's ``PH``)."""

    def __repr__(self) -> str:
        return "PH"


PH = _PH()


class Tracer(GraphBuilder):
    """Symbolic tracer: ``Tracer().trace(root, concrete_args)`` returns a ``Graph``.

    Subclass it and override ``is_leaf_module`` to choose which modules stay opaque
    ``call_module`` nodes."""

    def __init__(self) -> None:
        super().__init__(Graph("graph"))
        self.root: Module | None = None
        self.out_spec = None          # how to rebuild the traced function's output
        self.arg_names: list[str] = []
        self.signature: inspect.Signature | None = None   # of the traced function
        self.concrete: dict[str, Any] = {}
        self._module_names: dict[int, str] = {}
        self._attr_names: dict[int, str] = {}
        self._attr_nodes: dict[str, Node] = {}
        self._shapes: dict[Node, ShapeProxy] = {}
        self._constants = 0
        self.dtype_read = False   # whether graphgrad code read a traced value's dtype
        # without the inputs' ranks, calls that need them are recorded as torch.fx records
        # calls (python_calls); with example inputs, as op nodes only
        self.defer = True
        self.attempting = 0   # how many calls python_calls.attempt is trying now

    # ---- overridable policy -----------------------------------------------------------

    def is_leaf_module(self, m: Module, module_qualified_name: str) -> bool:
        """graphgrad.nn's own layers are leaves; Sequential (a container) is not."""
        return (type(m).__module__.startswith("graphgrad.nn")
                and not isinstance(m, Sequential))

    def path_of_module(self, mod: Module) -> str:
        name = self._module_names.get(id(mod))
        if name is None:
            raise NameError(f"module is not installed as a submodule\n{user_location()}")
        return name

    def call_module(self, m: Module, forward: Callable, args: tuple, kwargs: dict) -> Any:
        """A module call: a ``call_module`` node for a leaf, its forward traced otherwise."""
        name = self.path_of_module(m)
        if not self.is_leaf_module(m, name):
            return forward(*args, **kwargs)
        bound = inspect.signature(forward).bind(*args, **kwargs)
        if bound.kwargs:
            raise NotImplementedError(f"symbolic_trace: keyword-only arguments "
                                      f"{sorted(bound.kwargs)} of module {name!r}")
        return self.module_node(name, m, bound.args)

    def create_proxy(self, kind: str, target: Any, args: tuple, kwargs: dict,
                     name: str | None = None, type_expr: Any = None) -> Proxy:
        """torch.fx's ``create_proxy``: a node of opcode ``kind`` and its Proxy (what an
        override of ``call_module`` or a custom leaf records)."""
        if kind in ("call_function", "call_method"):
            return record(self, kind, target, args, kwargs)
        if kind == "call_module":
            return self.module_node(target, self.root.get_submodule(target), args)
        if kind == "get_attr":
            return self.proxy(self.get_attr(target, _resolve(self.root, target)))
        raise NotImplementedError(f"create_proxy of kind {kind!r} (call_function, "
                                  f"call_method, call_module and get_attr are made here)")

    def module_node(self, qualname: str, m: Module, args: tuple) -> Proxy:
        """A ``call_module`` node: ``m`` (the root's ``qualname``) called on ``args``."""
        inputs = [self.node_of(a) for a in args]
        node = self.graph.add("call_module", qualname, inputs=tuple(inputs),
                              params={"target": qualname}, spec=_module_spec(m, inputs),
                              deps=self.deps())
        return self.proxy(node)

    # ---- tracing ----------------------------------------------------------------------

    def trace(self, root: Module | Callable, concrete_args: dict | tuple | None = None, *,
              input_specs: tuple | None = None) -> Graph:
        """Run ``root`` on Proxies and return the graph of what it computed.

        ``input_specs`` (one ``Spec`` per non-concrete argument) gives the inputs'
        ranks and dtypes; without it their rank is unknown."""
        if isinstance(root, Module):
            self.root, fn = root, root.forward
            name = root.__dict__.get("_class_name", type(root).__name__)  # a GraphModule's
        else:
            self.root, fn = Module(), root
            name = getattr(root, "__name__", type(root).__name__)
        self.new_graph(name)
        self._module_names = {id(m): n for n, m in self.root.named_modules()}
        self._attr_names = {id(t): n for n, t in (*self.root.named_parameters(),
                                                  *self.root.named_buffers())}
        kwargs = self._placeholders(fn, concrete_args, input_specs)
        self.defer = input_specs is None
        fn_globals = getattr(inspect.unwrap(fn), "__globals__", None)
        with self.active(), _patch_module_call(), patched_functions(fn_globals):
            try:
                out = fn(**kwargs)
            except Exception as e:  # say which trace it was; the user's line is in the stack
                e.add_note(f"(while symbolically tracing {name!r} with graphgrad.fx)")
                raise
            leaves, self.out_spec = tree_flatten(out)
            nodes = [self.node_of(v, literal_ok=False) if isinstance(v, Value) else v
                     for v in leaves]
        self.graph.set_outputs(nodes)
        return self.graph

    def new_graph(self, name: str) -> Graph:
        """Start recording into a fresh Graph called ``name``."""
        GraphBuilder.__init__(self, Graph(name))
        self._attr_nodes, self._shapes, self._constants = {}, {}, 0
        self.dtype_read = False
        return self.graph

    def _placeholders(self, fn: Callable, concrete: dict | tuple | None,
                      specs: tuple | None) -> dict:
        self.signature = _signature(self.root, fn)
        params = self.signature.parameters.values()
        self.arg_names = [p.name for p in params]
        if isinstance(concrete, tuple):  # one per argument, PH for those to trace
            if len(concrete) != len(self.arg_names):
                raise RuntimeError(f"Tracing expected {len(self.arg_names)} arguments but got "
                                   f"{len(concrete)} concrete arguments")
            concrete = dict(zip(self.arg_names, concrete, strict=True))
        concrete = dict(concrete or {})
        unknown = set(concrete) - set(self.arg_names)
        if unknown:
            raise TypeError(f"concrete_args names {sorted(unknown)}, which are not arguments "
                            f"of {getattr(fn, '__name__', fn)!r} ({', '.join(self.arg_names)})")
        self.concrete = {k: v for k, v in concrete.items() if v is not PH}
        kwargs, k = {}, 0
        for p in params:
            if p.kind in (p.VAR_POSITIONAL, p.VAR_KEYWORD):
                raise NotImplementedError(f"symbolic_trace: argument {p} of "
                                          f"{getattr(fn, '__name__', fn)!r}: *args and **kwargs "
                                          f"are not traced; give them through concrete_args")
            if p.name in self.concrete:
                kwargs[p.name] = self.concrete[p.name]
                continue
            spec = specs[k] if specs is not None and k < len(specs) else \
                Spec(None, get_default_dtype().np)
            k += 1
            kwargs[p.name] = self.proxy(self.graph.placeholder(spec, p.name))
        if specs is not None and k != len(specs):
            raise TypeError(f"symbolic_trace: {len(specs)} example inputs for {k} traced "
                            f"arguments ({', '.join(p.name for p in self.graph.inputs)})")
        return kwargs

    # ---- values to nodes --------------------------------------------------------------

    def proxy(self, node: Node, cls: type = Proxy) -> Proxy:
        p = symbol(node, cls)
        p._tracer = self
        p._array = p._array.view(ProxyArray)
        p._array._proxy = p
        return p

    def node_of(self, value, *, literal_ok: bool = True):
        """Tensors that are not traced values become ``variable`` nodes read from the root
        when the graph runs (torch.fx's ``get_attr``): parameters and buffers under their
        qualified names, any other tensor (computed at trace time, captured from outside)
        stored on the root as ``_tensor_constant<k>``, so its value is frozen."""
        if isinstance(value, Value) and not isinstance(value, Symbol) and self.root is not None:
            qualname = self._attr_names.get(id(value))
            if qualname is None:
                qualname = f"_tensor_constant{self._constants}"
                self._constants += 1
                object.__setattr__(self.root, qualname, value)
                self._attr_names[id(value)] = qualname
            return self.get_attr(qualname, value)
        return super().node_of(value, literal_ok=literal_ok)

    def get_attr(self, qualname: str, value: Value) -> Node:
        node = self._attr_nodes.get(qualname)
        if node is None:
            arr = value._array
            node = self.graph.add("variable", qualname, spec=Spec(arr.shape, arr.dtype),
                                  params={"target": qualname})
            self._attr_nodes[qualname] = node
        return node

    def process(self, op, args: tuple, params: dict):
        if op is _GETITEM and isinstance(args[0], ShapeProxy) and len(args) == 1 \
                and _one_int(params["spec"]):
            # x.shape[i]: a vector of unknown length has no shape rule for indexing, but
            # an integer index of a vector is 0-d whatever the length
            return self.record(op, args, params, Spec((), _I64))
        out = super().process(op, args, params)
        if isinstance(out, Symbol) and not isinstance(out, Proxy):
            return self.proxy(out._node)
        return out

    def record(self, op, args: tuple, params: dict, spec: Spec) -> Proxy:
        """A call node with a Spec given by the caller (where no shape rule applies)."""
        node = self.graph.call(op, [self.node_of(a) for a in args], params, spec,
                               deps=self.deps())
        return self.proxy(node)

    def shape_proxy(self, x: Proxy) -> ShapeProxy:
        """``x.shape`` as a node (one per traced value)."""
        node = x._node
        proxy = self._shapes.get(node)
        if proxy is None:
            rank = node.spec.shape if isinstance(node.spec, Spec) else None
            spec = Spec((None if rank is None else len(rank),), _I64)
            shape = self.graph.add("shape", f"{node.name}_shape", inputs=(node,), spec=spec,
                                   deps=self.deps())
            proxy = self._shapes[node] = self.proxy(shape, ShapeProxy)
        return proxy

    # ---- random draws while tracing ---------------------------------------------------

    # random_tensor (graphgrad's one source of random tensors) hands each draw made while
    # a level with randomness="different" is on the stack to that level's batched_random
    randomness = "different"

    def batched_random(self, sample: Callable, shape: tuple):
        """A draw with no traced input (``randn(3)``) runs now and is frozen, as torch.fx
        freezes it. A draw for a traced value (``dropout(x)``, ``randn_like(x)``) is a
        ``random`` node that draws anew on every run, as torch.fx records the call; it
        draws from graphgrad's default generator as eager code does (``manual_seed``
        reproduces eager's draws). Dropout's ``training`` flag is read at trace time."""
        top = current_mode()
        # a leaf module's output Spec is found on a scratch builder above this tracer
        builder = top if isinstance(top, GraphBuilder) else self
        culprit = _drawing_for_a_proxy()
        if builder is self and culprit is None:
            return sample(shape)
        draw = describe_draw(draw_frame(sys._getframe(1)))
        if draw is None:
            raise trace_error(
                f"{culprit}() draws random numbers for a traced value in a way a random "
                f"node cannot reproduce (from a user's Generator, or a leaf that requires "
                f"grad); graphgrad.fx would freeze one draw into the graph, so it refuses. "
                f"Draw from the default generator (graphgrad.manual_seed seeds it) or pass "
                f"the tensor in")
        node = add_random(builder, draw.dist, list(draw.shape), draw.dtype, draw.params)
        return self.proxy(node) if builder is self else symbol(node)

    # ---- where the traced code needs a concrete value (overridable, as in torch.fx) ----

    def to_bool(self, obj: Proxy) -> bool:
        """``bool(proxy)``: an ``if``/``while``/``assert`` on a traced value."""
        raise trace_error(CONTROL_FLOW)

    def iter(self, obj: Proxy):
        """``iter(proxy)``: a loop or an unpacking of a traced value."""
        raise trace_error(ITERATION)


def _resolve(root: Module, qualname: str) -> Any:
    obj = root
    for part in qualname.split("."):
        obj = getattr(obj, part)
    return obj


def _drawing_for_a_proxy() -> str | None:
    """The graphgrad function between here and the user's code that holds a Proxy (whose
    shape the random draw was made for), if any."""
    frame = sys._getframe(2)
    while frame is not None and in_graphgrad(frame):
        if any(isinstance(v, Proxy) for v in frame.f_locals.values()):
            return frame.f_code.co_name
        frame = frame.f_back
    return None


def _signature(root: Module, fn: Callable) -> inspect.Signature:
    """The arguments to trace: a GraphModule's are those of the function it was traced
    from (its own forward takes ``*args``), or its placeholders'."""
    sig = root.__dict__.get("_signature")
    if sig is not None:
        return sig
    graph = root.__dict__.get("_graph")
    if isinstance(graph, Graph):
        return inspect.Signature([inspect.Parameter(p.name, inspect.Parameter.POSITIONAL_OR_KEYWORD)
                                  for p in graph.inputs])
    return inspect.signature(fn)


def _module_spec(m: Module, inputs: list) -> Spec:
    """The output Spec of a leaf module, found by tracing it into a scratch graph (it stays
    one node in the real graph); unknown rank where that fails."""
    specs = [i.spec if isinstance(i, Node) else i for i in inputs]
    dtype = next((s.dtype for s in specs if isinstance(s, Spec)), get_default_dtype().np)
    if any(isinstance(s, Spec) and s.shape is None for s in specs):
        return Spec(None, dtype)
    scratch = Graph("scratch")
    args = [symbol(scratch.placeholder(s, f"x{k}")) if isinstance(s, Spec) else s
            for k, s in enumerate(specs)]
    probe = copy.deepcopy(m) if any(True for _ in m.buffers()) else m  # buffers may update
    try:
        with GraphBuilder(scratch).active():
            out = probe(*args)
        return out._node.spec if isinstance(out, Symbol) else Spec(None, dtype)
    except Exception:  # noqa: BLE001 - the spec is metadata: unknown is honest
        return Spec(None, dtype)


@contextlib.contextmanager
def _patch_module_call() -> Iterator[None]:
    """Route ``Module.__call__`` to the tracer on top of the dispatch stack while tracing
    (torch.fx patches ``torch.nn.Module.__call__`` the same way)."""
    original = Module.__call__

    def traced_call(mod, *args, **kwargs):
        tracer = current_mode()
        if isinstance(tracer, Tracer):
            return tracer.call_module(mod, mod.forward, args, kwargs)
        return original(mod, *args, **kwargs)

    Module.__call__ = traced_call
    try:
        yield
    finally:
        Module.__call__ = original
