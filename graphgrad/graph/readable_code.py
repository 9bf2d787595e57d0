"""Layer ``graph``: a Graph printed as PyTorch-style code, the ``.code`` of a GraphModule.

``readable_code(graph)`` prints what ``printer.python_code`` prints, but as a module a
PyTorch user reads and runs: it starts with ``import graphgrad``; an op call is its public
function (``graphgrad.add(x, 1.0)``, ``graphgrad.sum(t0, dim=(0,), keepdim=False)``,
``graphgrad.nn.functional.gelu(t1)``) wherever calling that function with the node's
inputs and parameters records exactly this node again (checked once per op, input specs
and parameters, by building it in a scratch graph); otherwise the op's own ``apply``,
bound to its name on a line of the module (``Sum = graphgrad.ops.REGISTRY['Sum'].apply``).
``forward`` takes ``self``: parameters, buffers and submodules are read as
``self.lin.weight`` and called as ``self.lin(x)`` (torch.fx's get_attr/call_module; an input
that jit.trace/jit.script binds to a module attribute is read the same way), small
constants are written out (``graphgrad.tensor([...], dtype=graphgrad.float64)``).

A constant too large to write out is read as ``self._code_constant<k>`` (as torch.fx
reads a tensor constant by get_attr; ``PythonCode.attributes`` holds the values its module
must have). What the module cannot print otherwise is kept as a global of the exec'd program
and named in its header ("not self-contained: ..."): a random node's draw, a
graph-differentiation rule, a custom ``autograd.Function``'s op, a large constant inside a
branch or loop function (``_random``, ``_vjp``, ``_c0``).
"""

from __future__ import annotations

import re
import sys
from typing import Any

from graphgrad.backend import xp
from graphgrad.ops import REGISTRY

from .builder import GraphBuilder
from .interpreter import as_tensor
from .graph import Graph
from .node import Node
from .printer import Emitter, PythonCode
from .spec import Spec
from .symbol import Symbol, symbol

__all__ = ["readable_code", "public_function", "snake_name", "attribute_path",
           "attribute_input", "probe_call", "single_call"]

_SMALL = 64          # constants with at most this many elements are written out
_CHECKED: dict = {}  # (op, input specs, params) -> whether its public function records it
_IDENT = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
_IMPORTED = {"_while": "from graphgrad.graph.printer import run_while as _while",
             "_while_grad": "from graphgrad.graph.vjp_node import while_grad_replay as "
                            "_while_grad"}


def snake_name(name: str) -> str:
    """``LogSoftmax`` -> ``log_softmax``."""
    return re.sub(r"(?<!^)(?=[A-Z])", "_", name).lower()


def public_function(op: type) -> tuple[Any, str] | tuple[None, None]:
    """The public graphgrad function named like ``op`` and its printed path."""
    for name in dict.fromkeys((snake_name(op.__name__), op.__name__.lower())):
        for path in ("graphgrad", "graphgrad.nn.functional"):
            ns = sys.modules.get(path)   # the API, as loaded: looked up, not imported
            fn = getattr(ns, name, None) if ns is not None else None
            if callable(fn) and not isinstance(fn, type) and \
                    getattr(fn, "__module__", "").startswith("graphgrad."):
                return fn, f"{path}.{name}"
    return None, None


def probe_call(fn: Any, args: tuple, kwargs: dict) -> tuple[Graph, Any] | None:
    """``fn(*args, **kwargs)`` built in a scratch graph, each Node among ``args`` (not in
    containers) a placeholder of its Spec: (the scratch graph, the result), or None where
    that fails."""
    g = Graph("probe")
    values = []
    for a in args:
        if isinstance(a, Node):
            if not isinstance(a.spec, Spec):
                return None
            values.append(symbol(g.placeholder(a.spec, f"x{len(values)}")))
        else:
            values.append(a)
    try:
        with GraphBuilder(g).active():
            return g, fn(*values, **kwargs)
    except Exception:  # noqa: BLE001 - the function takes other arguments: no such node
        return None


def single_call(probe: tuple[Graph, Any] | None, args: tuple) -> Node | None:
    """The one op node a probe made, if it made exactly one, returned it, and reads the
    probe's inputs in the places ``args`` had them."""
    if probe is None:
        return None
    g, out = probe
    made = [m for m in g.nodes if m.kind != "placeholder"]
    if len(made) != 1 or not isinstance(out, Symbol) or out._node is not made[0]:
        return None
    m, phs = made[0], iter(g.inputs)
    want = [next(phs) if isinstance(a, Node) else a for a in args]
    same = m.kind == "call" and len(m.inputs) == len(want) and all(
        a is b or (not isinstance(a, Node) and not isinstance(b, Node) and a == b)
        for a, b in zip(m.inputs, want, strict=True))
    return m if same else None


def _records_itself(fn, node: Node) -> bool:
    """Whether ``fn(*inputs, **params)`` builds exactly ``node`` again (same op, same
    params, same inputs in the same places) in a scratch graph."""
    m = single_call(probe_call(fn, node.inputs, node.params), node.inputs)
    return m is not None and m.op is node.op and m.params == node.params


def _key(node: Node):
    specs = tuple((tuple(i.spec.shape) if i.spec.shape is not None else None, str(i.spec.dtype))
                  if isinstance(i, Node) and isinstance(i.spec, Spec) else repr(i)
                  for i in node.inputs)
    return node.op, specs, repr(sorted(node.params.items()))


def attribute_input(p: Node) -> str | None:
    """The qualified name of the module attribute an input of the graph is bound to at each
    call (a traced or scripted module's parameter or buffer: torch.fx's ``get_attr``), or
    None for an argument of the user's function."""
    return p.params.get("target") if p.kind == "placeholder" else None


def attribute_path(qualname: str, root: str = "self") -> str:
    """``self.lin.weight``; ``getattr(self.layers, '0')`` where a part is no identifier."""
    expr = root
    for part in qualname.split(".") if qualname else ():   # "": the module itself
        expr = f"{expr}.{part}" if _IDENT.match(part) else f"getattr({expr}, {part!r})"
    return expr


class ReadableEmitter(Emitter):
    def __init__(self, state: dict | None, top: str, self_param: bool):
        super().__init__(state)
        self.top = top if self_param else None
        self.glb["graphgrad"] = sys.modules["graphgrad"]
        self.lines: dict[str, str] = {}   # name -> the line of the module that defines it
        self.attributes: dict = {}        # self.<name> the code reads -> its value
        self.current: list[str] = []      # the functions being printed, innermost last

    def function(self, graph: Graph, fname: str) -> None:
        self.current.append(fname)
        try:
            super().function(graph, fname)
        finally:
            self.current.pop()

    def leading_params(self, fname: str) -> list[str]:
        return ["self"] if fname == self.top else []

    def input_read(self, p: Node, fname: str) -> str | None:
        target = attribute_input(p)
        return attribute_path(target) if target is not None and fname == self.top else None

    def expr(self, n: Node, names: dict) -> str:
        args = [names[a] if isinstance(a, Node) else repr(a) for a in n.inputs]
        if n.kind == "call" and n.nargs == len(n.inputs):
            fn, path = public_function(n.op)
            if fn is not None:
                key = _key(n)
                ok = _CHECKED.get(key)
                if ok is None:
                    ok = _CHECKED[key] = _records_itself(fn, n)
                if ok:
                    parts = args + [f"{k}={self.pooled(v, 'p')}" for k, v in n.params.items()]
                    return f"{path}({', '.join(parts)})"
        if n.kind == "call" and REGISTRY.get(n.op.__name__) is n.op:
            name = n.op.__name__
            self.lines[name] = f"{name} = graphgrad.ops.REGISTRY[{name!r}].apply"
        if n.kind == "constant":
            text = self.literal(n.value)
            if text is not None:
                return text
            if self.top is not None and self.current[-1] == self.top:
                # too large to write out: an attribute of the module, as torch.fx keeps a
                # tensor constant (branch and loop functions have no ``self``)
                name = f"_code_constant{len(self.attributes)}"
                self.attributes[name] = as_tensor(n.value)
                return f"self.{name}"
        if n.kind == "variable" and "target" in n.params:
            return attribute_path(n.params["target"])
        if n.kind == "call_module":
            return f"{attribute_path(n.params['target'])}({', '.join(args)})"
        if n.kind == "shape":
            return f"graphgrad.tensor(tuple({args[0]}.shape), dtype=graphgrad.int64)"
        text = super().expr(n, names)
        for helper, line in _IMPORTED.items():
            if text.startswith(helper + "("):
                self.lines[helper] = line
        return text

    def literal(self, value) -> str | None:
        """A small constant as ``graphgrad.tensor(...)``, if graphgrad names its dtype."""
        arr = xp.asarray(value)
        name = arr.dtype.name
        if arr.size > _SMALL or arr.dtype.kind not in "biuf" or \
                not hasattr(self.glb["graphgrad"], name):
            return None
        text = f"graphgrad.tensor({arr.tolist()!r}, dtype=graphgrad.{name})"
        try:  # the text must give the same tensor back
            back = eval(text, {"graphgrad": self.glb["graphgrad"]})  # noqa: S307 - our text
        except Exception:  # noqa: BLE001
            return None
        return text if xp.array_equal(back._array, arr) and back._array.shape == arr.shape \
            else None


def readable_code(graph: Graph, state: dict | None = None, name: str = "forward", *,
                  self_param: bool = True) -> PythonCode:
    """``graph`` as PyTorch-style Python (see the module docstring); ``fn(self, *inputs)``
    (``fn(*inputs)`` without ``self_param``: a graph that reads no module attributes)."""
    e = ReadableEmitter(state, name, self_param)
    e.function(graph, name)
    head = [f"# graph {graph.name!r}: {graph.count()} nodes"] + [f"# {h}" for h in graph.header]
    body = "\n\n".join(e.funcs)

    def used(k: str) -> bool:   # read by the code (not a keyword argument's name)
        return re.search(rf"(?<![\w.]){re.escape(k)}\b(?!\s*=[^=])", body) is not None

    if used("dtype"):   # a dtype parameter prints as NumPy's repr: dtype('float64')
        e.lines["dtype"] = "dtype = graphgrad.backend.xp.dtype"
    defined = {"graphgrad", "operator", name, *e.lines, *e.printed.values(), *_IMPORTED}
    held = sorted(k for k in e.glb if k not in defined and used(k))
    if held:   # a random draw, a derivative rule, a custom Function, a constant in a branch
        head.append(f"# not self-contained: exec of this text alone lacks {', '.join(held)} "
                    f"(objects of the program that made it, in its globals)")
    head.append("import graphgrad")
    if "operator" in e.glb:
        head.append("import operator")
    head += [e.lines[k] for k in sorted(e.lines)]
    src = "\n".join(head) + "\n\n\n" + body
    glb = dict(e.glb)
    exec(compile(src, f"<graph {graph.name}>", "exec"), glb)  # noqa: S102 - our own program
    return PythonCode(src, glb, glb[name], e.attributes)
