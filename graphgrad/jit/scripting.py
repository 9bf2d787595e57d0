"""Layer ``jit``: ``graphgrad.jit.script``, TorchScript's source-to-graph capture.

``script(fn)`` reads the function's source (``inspect`` + ``ast``; no inputs) and
compiles it into a ``graphgrad.graph.Graph``: ``if`` on a tensor becomes a ``cond``
node holding both branches, ``while`` on a tensor and ``for i in range(n)`` a
``while_loop`` (``break``, ``continue`` and ``return`` inside it as loop-carried flags,
as TorchScript does), calls of other user functions are inlined, and anything it cannot
translate is a ``ScriptError`` at compile time with the user's line and a ``~~~~``
pointer (``script_compiler``). Parameters are Tensors of unknown shape unless
annotated ``int``/``float``/``bool``.

Running it: graphgrad's ops fix dims and shape parameters when a node is built, so a
call whose ops need the rank of an input of unknown rank is recorded as one
``call_function``/``call_method`` node made when the graph runs; one that returns several
tensors (``max(dim)``, ``topk``, ``sort``, ``split``, ``chunk``) has its items as
``operator.getitem`` nodes on it (``TupleResult``), ``x.numel()`` is the product of the
run-time shape and ``y[..., 0] = v`` an ``index_put`` call made when the graph runs. So
one graph serves every rank unless the code itself reads the rank (``x.ndim``, an index
of a tensor inside graphgrad code that checks it). Then each call runs a graph compiled
from the same source for the call's input shapes (cached per shape, as TorchScript's
profiling executor specializes its graphs); ``graph_for(*inputs)`` shows it. Either
way the graph runs on the IR's ``Interpreter`` on tensors, so autograd records the ops
of the branch and the loop iterations taken and ``backward()`` gives eager's gradients.

Random numbers: ``rand``/``randn``/``randint``, their ``*_like`` forms and dropout in
training mode compile to ``random`` nodes that draw afresh at every call, from
graphgrad's default generator as eager code does (``manual_seed`` reproduces eager's
draws). A module's training flags are a guard: ``.eval()`` after scripting makes the
next call compile (once) the graph without the dropout mask. ``x.detach()`` is a
``Detach`` node.
"""

from __future__ import annotations

import ast
import inspect
import textwrap
from dataclasses import dataclass

from graphgrad.backend import xp
from graphgrad.func.pytree import TreeSpec, tree_flatten, tree_unflatten
from graphgrad.fx.graph_module import GraphModule
from graphgrad.graph import Graph, Interpreter, Spec, Symbol, symbol, to_dot
from graphgrad.graph.interpreter import as_tensor
from graphgrad.nn import Module
from graphgrad.tensor import Value

from .script_compiler import Compiler
from .script_control import Undefined
from .script_errors import ScriptError, Source, source_of
from .script_values import Lifts, ScriptBuilder, ShapeValue, is_library_module, is_module

__all__ = ["script", "ScriptFunction", "ScriptError"]

_F32 = xp.dtype(xp.float32)
# a TorchScript annotation -> (kind, the placeholder's Spec for a scalar kind)
_SCALARS = {int: Spec((), xp.dtype(xp.int64)), float: Spec((), xp.dtype(xp.float64)),
            bool: Spec((), xp.dtype(xp.bool_))}
_RANK_KEYS = ("dim", "perm", "axis")  # params an op normalizes against its input's rank


@dataclass
class _Compiled:
    graph: Graph
    lifts: Lifts
    out: TreeSpec
    incomplete: list       # library calls that needed static shapes (generic only)
    rank_bound: str | None  # why the generic graph is not run (None: it is)


class ScriptFunction(GraphModule):
    """The compiled form of a function (or an ``nn.Module``'s ``forward``): a
    ``fx.GraphModule`` (``.graph`` the torch.fx-style view of ``.ir``, ``.code``,
    ``print_readable()``, ``recompile()``; a scripted module's parameters and submodules
    are its attributes) that runs its graph on the IR's interpreter."""

    def __init__(self, fn, self_obj=None):
        Module.__init__(self)
        self._init_face(type(self_obj).__name__ if is_module(self_obj) else fn.__name__)
        if is_module(self_obj):
            self._share_state(self_obj)
        self._fn = fn
        self.__dict__["_self"] = self_obj   # no submodule of its own: it shares its state
        self._src: Source = source_of(fn)
        sig = inspect.signature(fn)
        params = list(sig.parameters.values())[1 if self_obj is not None else 0:]
        self._signature = sig.replace(parameters=params)
        self._params = [self._param_kind(p) for p in params]
        self.__name__ = self._src.name if self_obj is None else type(self_obj).__name__
        self.__qualname__ = getattr(fn, "__qualname__", self.__name__)
        self.__doc__ = fn.__doc__
        self.__dict__["__wrapped__"] = fn
        self.__dict__["__wrapped_script__"] = (fn, self_obj)  # what a scripted caller inlines
        self._generic = self._compile(None)
        self._modes_now = self._modes()
        self._generics = {self._modes_now: self._generic}
        self._special: dict[tuple, _Compiled] = {}
        self._last: _Compiled | None = None

    # ---- compiling ---------------------------------------------------------------------

    def _param_kind(self, p: inspect.Parameter):
        """(name, "tensor" | "scalar" | "constant", Spec or default value)."""
        if p.kind in (p.VAR_POSITIONAL, p.VAR_KEYWORD):
            raise self._src.error("variadic arguments aren't supported", self._src.tree)
        ann = p.annotation
        if isinstance(ann, str):  # from __future__ import annotations
            ann = {"int": int, "float": float, "bool": bool}.get(ann, ann)
        if ann in _SCALARS:
            return p.name, "scalar", _SCALARS[ann]
        if ann is inspect.Parameter.empty or getattr(ann, "__name__", ann) == "Tensor" or \
                (isinstance(ann, str) and ann.split(".")[-1] == "Tensor"):
            if p.default is not inspect.Parameter.empty and p.default is not None:
                return p.name, "constant", p.default  # a Python default: compile-time
            return p.name, "tensor", None
        raise self._src.error("unsupported annotation", self._src.tree,
                              f"the annotation {ann!r} of parameter {p.name!r} isn't supported "
                              f"(use Tensor, int, float or bool)")

    def _compile(self, specs: list | None) -> _Compiled:
        """Compile the source; ``specs``: the input Specs of a call (None: generic).
        graphgrad's own module is compiled from its forward's source like a user's (its
        ops then show in the graph); where that source is beyond the script compiler
        (a container's ``_modules``, BatchNorm's buffer counter), it is called whole,
        like an op, as when a user module calls it."""
        if self._self is None or not is_library_module(self._self):
            return self._compile_once(specs, whole=False)
        try:
            return self._compile_once(specs, whole=False)
        except ScriptError:
            return self._compile_once(specs, whole=True)

    def _compile_once(self, specs: list | None, whole: bool) -> _Compiled:
        g = Graph(self.__name__)
        g.header.append(f"graphgrad.jit.script of {self.__qualname__} "
                        f"({self._src.filename}:{self._src.file_line(self._src.tree)})")
        lifts = Lifts(g)
        b = ScriptBuilder(g, lifts=lifts)
        names = {}
        if is_module(self._self):
            names = {id(m): name for name, m in self._self.named_modules()}
        comp = Compiler(b, generic=specs is None, module_names=names)
        env: dict = {}
        tensor_specs = iter(specs or ())
        for name, kind, info in self._params:
            if kind == "constant":
                env[name] = info
                continue
            spec = info if kind == "scalar" else (Spec(None, _F32) if specs is None
                                                  else next(tensor_specs))
            env[name] = symbol(g.placeholder(spec, name))
            if kind == "scalar":
                comp.mark_scalar(env[name])
        comp.inputs = set(g.inputs)
        if self._self is not None:
            env[next(iter(inspect.signature(self._fn).parameters))] = self._self
            if is_module(self._self):
                comp.register_module(self._self)
        frame = comp.frame(self._fn, self._src, env)
        comp.active.append((self._fn, id(self._self)))
        with b.active():
            if whole:
                # graphgrad's own module: called like an op, as when a user module calls it
                args = [env[n] for n, kind, _ in self._params if kind != "constant"]
                call = ast.copy_location(ast.Call(ast.Name(type(self._self).__name__),
                                                  [], []), self._src.tree)
                result = comp.library(self._self, args, {}, call, frame)
            else:
                result = comp.run_function(frame)
            leaves, out = tree_flatten(result)
            nodes = [self._output(b, leaf) for leaf in leaves]
        g.set_outputs(nodes)
        if specs is not None:
            g.header.append("specialized for inputs " + ", ".join(
                _short(s) for s in specs))
        rank_bound = _rank_bound(g) if specs is None else None
        if comp.rank_bound:
            rank_bound = comp.rank_bound[0]
        if comp.incomplete:
            rank_bound = "graphgrad code needs the input shapes: " + comp.incomplete[0]
        if specs is None and rank_bound:
            g.header.append("generic graph (input ranks unknown), not run: each call runs a "
                            "graph specialized to its input shapes, because " + rank_bound)
        return _Compiled(g, lifts, out, comp.incomplete, rank_bound)

    def _output(self, b: ScriptBuilder, leaf):
        if isinstance(leaf, (Symbol, Value)):
            return b.node_of(leaf, literal_ok=False)
        if isinstance(leaf, (ShapeValue, Undefined)):
            raise self._src.error("unsupported return value", self._src.tree,
                                  "a scripted function cannot return "
                                  + ("a shape of unknown rank" if isinstance(leaf, ShapeValue)
                                     else "a value that is undefined on some path"))
        return leaf  # a Python constant: a literal output

    # ---- calling -----------------------------------------------------------------------

    def _inputs(self, args: tuple, kwargs: dict) -> list:
        try:
            bound = self._signature.bind(*args, **kwargs)
        except TypeError as e:
            raise TypeError(f"{self.__name__}() {e}") from None
        values = []
        for name, kind, info in self._params:
            if kind == "constant":
                if name in bound.arguments and bound.arguments[name] != info:
                    raise RuntimeError(f"{self.__name__}(): argument {name!r} was compiled as "
                                       f"the constant {info!r} (its default); script the "
                                       f"function with an annotated parameter to vary it")
                continue
            if name not in bound.arguments:
                raise TypeError(f"{self.__name__}() missing required argument {name!r}")
            v = bound.arguments[name]
            if kind == "tensor" and not isinstance(v, Value):
                raise RuntimeError(f"{self.__name__}() Expected a value of type 'Tensor' for "
                                   f"argument '{name}' but instead found type "
                                   f"'{type(v).__name__}'.")
            if kind == "scalar":
                v = as_tensor(xp.asarray(v, info.dtype))
            values.append(v)
        return values

    def _modes(self) -> tuple:
        """The training flags of the scripted module and its submodules. Library modules
        run at compile time (dropout in training mode becomes a random node, in eval mode
        nothing), so the flags are a guard: each set of them has its own graphs (where
        TorchScript reads ``self.training`` when the graph runs)."""
        if not is_module(self._self):
            return ()
        return tuple(m.training for m in self._self.modules())

    def _for(self, values: list) -> _Compiled:
        modes = self._modes()
        if modes != self._modes_now:  # .train() / .eval() since the last call
            self._generic = self._generics.get(modes) or self._compile(None)
            self._generics[modes], self._modes_now = self._generic, modes
        if self._generic.rank_bound is None:
            return self._generic
        key = (modes, *((tuple(v._array.shape), v._array.dtype.str) for v in values))
        compiled = self._special.get(key)
        if compiled is None:
            specs = [Spec(tuple(v._array.shape), v._array.dtype) for v, (_, kind, _) in
                     zip(values, [p for p in self._params if p[1] != "constant"],
                         strict=True) if kind == "tensor"]
            compiled = self._special[key] = self._compile(specs)
        return compiled

    def __call__(self, *args, **kwargs):
        values = self._inputs(args, kwargs)
        compiled = self._for(values)
        self._last = compiled
        lifted = [get() for get in compiled.lifts.getters]
        outs = Interpreter(compiled.graph, self.submodules()).run(*values, *lifted)
        return tree_unflatten(list(outs), compiled.out)

    forward = __call__

    def submodules(self) -> dict:
        """What the graph's call_module nodes call: the scripted module's submodules by
        qualified name (read at each call, so replaced submodules are seen)."""
        if not is_module(self._self):
            return {}
        return dict(self._self.named_modules())   # "" is the module itself

    def graph_for(self, *args, **kwargs) -> Graph:
        """The graph a call with these inputs runs."""
        return self._for(self._inputs(args, kwargs)).graph

    # ---- views -------------------------------------------------------------------------

    @property
    def ir(self) -> Graph:
        """The IR graph compiled from the source without inputs (input ranks unknown);
        when it cannot be run (see its header), the graph of the latest call. ``graph``
        is its torch.fx-style view, ``code`` its Python (branches and loop bodies as
        functions)."""
        return self._current().graph

    def _current(self) -> _Compiled:
        if self._generic.rank_bound is not None and self._last is not None:
            return self._last
        return self._generic

    def _set_ir(self, g: Graph) -> None:
        self._current().graph = g

    @property
    def _self_param(self) -> bool:
        return is_module(self._self)

    @property
    def schema(self) -> str:
        parts = [f"{n}: {'Tensor' if k == 'tensor' else i if k == 'constant' else _py(i)}"
                 for n, k, i in self._params]
        return f"{self.__name__}({', '.join(parts)})"

    def tabular(self) -> str:
        """The graph as a table, then each sub-graph (both branches of every cond, the
        condition and body of every loop) as its own table."""
        parts, todo = [], [("", self.ir)]
        while todo:
            title, g = todo.pop(0)
            text = g.tabular()
            parts.append(f"{title}\n{textwrap.indent(text, '    ')}" if title else text)
            for n in g.nodes:
                for key, sub in n.subgraphs.items():
                    todo.append((f"{n.name}.{key} = <{sub.name}>:", sub))
        return "\n".join(parts)

    def print_tabular(self) -> None:
        print(self.tabular())

    def to_dot(self) -> str:
        return to_dot(self.ir)

    def __repr__(self) -> str:
        return f"<graphgrad.jit.ScriptFunction {self.schema}>"


def _py(spec: Spec) -> str:
    return {"i": "int", "f": "float", "b": "bool"}[xp.dtype(spec.dtype).kind]


def _short(spec: Spec) -> str:
    from graphgrad.graph import short
    return short(spec)


def _rank_bound(graph: Graph) -> str | None:
    """Why a generic graph cannot be run: an op whose dims were fixed against an input
    of unknown rank (graphgrad normalizes ``dim=-1`` when the node is built)."""
    todo = [graph]
    while todo:
        g = todo.pop()
        for n in g.nodes:
            todo.extend(n.subgraphs.values())
            if n.kind == "placeholder" and n not in g.inputs:
                return "a call needs the input shapes"
            unknown = [i for i in n.input_nodes() if isinstance(i.spec, Spec)
                       and i.spec.shape is None and not _flat(i)]
            if n.kind != "call" or not unknown:
                continue
            keys = [k for k in n.params if any(r in k for r in _RANK_KEYS)]
            if keys:
                return (f"{n.op.__name__} (node {n.name}) takes {keys[0]}={n.params[keys[0]]!r}, "
                        f"fixed against an input of unknown rank")
    return None


def _flat(node) -> bool:
    """``x.reshape(-1)``: rank 1 whatever ``x``'s rank (the compiler reduces over it)."""
    return node.kind == "call" and node.op.__name__ == "Reshape" and \
        node.params.get("shape") == (-1,)


def script(obj, optimize=None, _frames_up: int = 0, _rcb=None, example_inputs=None):
    """Compile a function (or an ``nn.Module``'s ``forward``) from its source into a
    ``ScriptFunction``; usable as a decorator. Raises ``ScriptError`` at compile time
    for what it cannot translate."""
    if isinstance(obj, ScriptFunction):
        return obj
    if is_module(obj):
        sf = ScriptFunction(type(obj).forward, self_obj=obj)
    elif inspect.ismethod(obj):
        sf = ScriptFunction(obj.__func__, self_obj=obj.__self__)
    elif inspect.isfunction(obj):
        sf = ScriptFunction(obj)
    else:
        raise RuntimeError(f"graphgrad.jit.script: expected a function or an nn.Module, got "
                           f"{type(obj).__name__}")
    # as functools.update_wrapper(assigned=("__module__",)) would, but into __dict__: a
    # scripted module's state is the module's own (``_share_state``), so a Module set as
    # an attribute (update_wrapper's ``__wrapped__``) would become its submodule
    sf.__dict__["__module__"] = getattr(obj, "__module__", None)
    sf.__dict__["__wrapped__"] = obj
    return sf
