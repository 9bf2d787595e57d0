"""Layer ``graph``: a Graph printed as a table (like torch.fx's ``print_tabular``) and as
runnable Python (user argument names, ``t0, t1, ...`` for intermediates, ``# f32[8, 2]``
comments). ``python_code(graph).fn`` is the printed program, exec'd: tests compare it
with the interpreter.
"""

from __future__ import annotations

import math

import keyword
import operator
import sys
from typing import Any, NamedTuple

from graphgrad.backend import xp
from graphgrad.ops import REGISTRY

from .graph import Graph
from .interpreter import as_tensor
from .python_call import call_arguments_text
from .random_node import draw
from .vjp_node import run_vjp_rule, while_grad_replay
from .node import Dyn, Node
from .spec import short

__all__ = ["tabular", "python_code", "PythonCode", "Emitter", "run_while", "literal_text"]


def literal_text(a) -> str:
    """Python source for a literal input of a node (``repr`` of ``-inf`` is not Python)."""
    if type(a) is float and not math.isfinite(a):
        return f"float({repr(a)!r})"
    return repr(a)


def _arg_text(a, names: dict) -> str:
    return names[a] if isinstance(a, Node) else literal_text(a)


def is_dynamic(param) -> bool:
    """Whether a param tuple holds run-time entries (``Dyn``: an index into the inputs)."""
    return isinstance(param, tuple) and any(isinstance(e, Dyn) for e in param)


def dynamic_tuple_text(param: tuple, args: list) -> str:
    """Python source for a param tuple with run-time entries: ``(int(t3), 4)``, each
    ``Dyn`` read from the argument text it points at."""
    inner = ", ".join(f"int({args[e.index]})" if isinstance(e, Dyn) else repr(e)
                      for e in param)
    return f"({inner}{',' if len(param) == 1 else ''})"


def tabular(graph: Graph) -> str:
    """One row per node: kind, name, target, args, kwargs, control inputs, spec."""
    rows = [("opcode", "name", "target", "args", "kwargs", "deps", "spec")]
    names = {n: n.name for n in graph.nodes}
    for n in graph.nodes:
        args = "(" + ", ".join(_arg_text(a, names) for a in n.inputs) + (
            "," if len(n.inputs) == 1 else "") + ")"
        kwargs = dict(n.params)
        if n.subgraphs:
            kwargs.update({k: f"<{g.name}>" for k, g in n.subgraphs.items()})
        rows.append((n.kind, n.name, n.target_name, args, repr(kwargs) if kwargs else "{}",
                     ", ".join(d.name for d in n.deps) or "-", short(n.spec)))
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    lines = ["  ".join(c.ljust(w) for c, w in zip(r, widths, strict=True)).rstrip()
             for r in rows]
    lines.insert(1, "  ".join("-" * w for w in widths))
    return "\n".join(lines)


class PythonCode(NamedTuple):
    src: str
    globals: dict
    fn: Any   # the top-level function, exec'd from src
    # what the code reads as ``self.<name>`` that its module must hold (readable_code's
    # large constants, as torch.fx keeps ``_tensor_constant<k>``)
    attributes: dict | None = None


def _ident(name: str, used: set) -> str:
    base = "".join(c if c.isalnum() or c == "_" else "_" for c in name) or "x"
    if base[0].isdigit() or keyword.iskeyword(base) or base in used:
        base = "_" + base
    k, out = 0, base
    while out in used:
        k += 1
        out = f"{base}_{k}"
    used.add(out)
    return out


class Emitter:
    def __init__(self, state: dict | None):
        self.glb: dict[str, Any] = {"dtype": xp.dtype,
                                    "_state": state if state is not None else {}}
        self.glb["_var"] = self._var
        self.glb["_assign"] = self._assign
        self.glb["_shape"] = lambda x: as_tensor(xp.asarray(x.shape, dtype=xp.int64))
        self.funcs: list[str] = []
        self.printed: dict[int, str] = {}
        self.count = 0

    def _var(self, name):
        for k, v in self.glb["_state"].items():
            if getattr(k, "name", k) == name:
                return v
        raise RuntimeError(f"Attempting to use uninitialized value {name}")

    def _assign(self, name, value, mode):
        for k in list(self.glb["_state"]):
            if getattr(k, "name", k) == name:
                old = self.glb["_state"][k]
                new = value if mode == "assign" else (old + value if mode == "add"
                                                      else old - value)
                self.glb["_state"][k] = new
                return new
        raise RuntimeError(f"Attempting to use uninitialized value {name}")

    def pooled(self, value, prefix: str) -> str:
        text = repr(value)
        try:
            if eval(text, dict(self.glb)) == value:  # noqa: S307 - our own repr
                return text
        except Exception:  # noqa: BLE001 - not a literal: keep the object itself
            pass
        name = f"_{prefix}{self.count}"
        self.count += 1
        self.glb[name] = value
        return name

    def function_name(self, fn) -> str:
        """A function as the printed code names it: by its public path where graphgrad
        exports it (``graphgrad.sum``, ``graphgrad.nn.functional.softmax``), else as a
        global of the program."""
        root = sys.modules.get("graphgrad")
        name = getattr(fn, "__name__", "")
        if getattr(operator, name, None) is fn:   # x @ y recorded as torch.fx records it
            self.glb["operator"] = operator
            return f"operator.{name}"
        for path in ("", ".nn.functional", ".linalg", ".special", ".fft"):
            ns = sys.modules.get("graphgrad" + path)
            if root is not None and ns is not None and getattr(ns, name, None) is fn:
                self.glb["graphgrad"] = root   # the package: runtime lookup, not an import
                return f"graphgrad{path}.{name}"
        return self.pooled(fn, "f")

    def leading_params(self, fname: str) -> list[str]:
        """Parameters before the graph's inputs (readable_code's ``self``)."""
        return []

    def input_read(self, p: Node, fname: str) -> str | None:
        """The expression an input is read from instead of being a parameter (None: a
        parameter): readable_code reads a module's state as ``self.lin.weight``."""
        return None

    def function(self, graph: Graph, fname: str) -> None:
        used = {"dtype"} | set(self.glb)
        names: dict[Node, str] = {}
        params, body = [], []
        read_by = {i for n in graph.nodes for i in (*n.input_nodes(), *n.deps)}
        for p in graph.inputs:
            names[p] = _ident(p.name, used)
            read = self.input_read(p, fname)
            if read is None:
                params.append(names[p])
            elif p in read_by:   # a module attribute the graph does not read: not printed
                body.append(f"{names[p]} = {read}")
        params = [*self.leading_params(fname), *params]
        k = 0
        for n in graph.nodes:
            if n.kind == "placeholder":
                if n not in names:  # a placeholder that is not an input: cannot be run
                    names[n] = _ident(n.name, used)
                    body.append(f"{names[n]} = _missing({n.name!r})")
                continue
            if n.kind == "output":
                outs = ", ".join(_arg_text(a, names) for a in n.inputs)
                body.append(f"return ({outs}{',' if len(n.inputs) == 1 else ''})")
                continue
            target = f"t{k}"
            k += 1
            used.add(target)
            names[n] = target
            body.append(f"{target} = {self.expr(n, names)}  # {short(n.spec)}"
                        + (f"; after {', '.join(names.get(d, d.name) for d in n.deps)}"
                           if n.deps else ""))
        if graph.output_node is None:
            body.append("return ()")
        self.funcs.append(f"def {fname}({', '.join(params)}):\n"
                          + "".join(f"    {line}\n" for line in body))

    def expr(self, n: Node, names: dict) -> str:
        args = [_arg_text(a, names) for a in n.inputs]
        if n.kind == "constant":
            return self.pooled(as_tensor(n.value), "c")
        if n.kind == "variable":
            return f"_var({(n.target or n).name!r})"
        if n.kind == "call":
            op = n.op.__name__
            if REGISTRY.get(op) is not n.op:  # a custom autograd.Function's own op
                op += "Function"
            self.glb[op] = n.op.apply
            parts = args[:n.nargs]
            for key, v in n.params.items():
                if is_dynamic(v):
                    parts.append(f"{key}={dynamic_tuple_text(v, args)}")
                else:
                    parts.append(f"{key}={self.pooled(v, 'p')}")
            return f"{op}({', '.join(parts)})"
        if n.kind == "call_method":
            text = call_arguments_text(n.params, args, lambda v: self.pooled(v, "p"))
            head, _, rest = text.partition(", ")
            return f"{head}.{n.params['target']}({rest})"
        if n.kind == "call_function":
            text = call_arguments_text(n.params, args, lambda v: self.pooled(v, "p"))
            return f"{self.function_name(n.params['target'])}({text})"
        if n.kind == "item":
            return f"{args[0]}[{n.params['index']}]"
        if n.kind == "call_module":  # the module is a state slot, read like a variable
            self.glb["_module"] = self._var
            return f"_module({n.params['target']!r})({', '.join(args)})"
        if n.kind == "shape":
            return f"_shape({args[0]})"
        if n.kind == "assign":
            return f"_assign({n.target.name!r}, {args[0]}, {n.params.get('mode', 'assign')!r})"
        if n.kind == "group":
            return "None"
        if n.kind == "random":
            self.glb["_random"] = draw
            return f"_random({self.pooled(n, 'n')}, _state, [{', '.join(args)}])"
        if n.kind == "vjp":
            self.glb["_vjp"] = run_vjp_rule
            return f"_vjp({self.pooled(n.params, 'p')}, [{', '.join(args)}])"
        sub = {}
        for key, g in n.subgraphs.items():
            fname = self.printed.get(id(g))
            if fname is None:  # a sub-graph shared by two nodes is printed once
                fname = self.printed[id(g)] = _ident(f"{n.name}_{key}", set(self.glb))
                self.glb[fname] = None
                self.function(g, fname)
            sub[key] = fname
        if n.kind == "cond":
            return f"({sub['then']} if bool({args[0]}) else {sub['else']})({', '.join(args[1:])})"
        if n.kind == "while_loop":
            self.glb["_while"] = run_while
            nv = n.params["n"]
            return (f"_while({sub['cond']}, {sub['body']}, ({', '.join(args[:nv])},), "
                    f"({', '.join(args[nv:])}{',' if len(args) > nv else ''}))")
        if n.kind == "while_grad":
            self.glb["_while_grad"] = while_grad_replay
            nv, m = n.params["n"], n.params["m"]
            return (f"_while_grad({sub['cond']}, {sub['body']}, {sub['vjp']}, "
                    f"[{', '.join(args[:nv])}], [{', '.join(args[nv:nv + m])}], "
                    f"[{', '.join(args[nv + m:])}])")
        raise ValueError(f"cannot print node kind {n.kind!r}")


def run_while(cond, body, state, caps):
    while bool(cond(*state, *caps)[0]):
        state = body(*state, *caps)
    return tuple(state)


def python_code(graph: Graph, state: dict | None = None, name: str = "forward") -> PythonCode:
    """The graph as a Python program (sub-graphs as functions defined before it)."""
    e = Emitter(state)
    e.function(graph, name)
    head = [f"# graph {graph.name!r}: {graph.count()} nodes"] + [f"# {h}" for h in graph.header]
    head += [f"# {op} = graphgrad.ops.REGISTRY[{op!r}].apply" for op in sorted(
        k for k in e.glb if k in REGISTRY)]
    head += [f"# {op} = {e.glb[op].__self__.function.__qualname__}.apply (autograd.Function)"
             for op in sorted(k for k in e.glb if k.endswith("Function") and k not in REGISTRY
                              and hasattr(getattr(e.glb[k], "__self__", None), "function"))]
    src = "\n".join(head) + "\n" + "\n\n".join(e.funcs)
    glb = dict(e.glb)
    exec(compile(src, f"<graph {graph.name}>", "exec"), glb)  # noqa: S102 - our own program
    return PythonCode(src, glb, glb[name])
