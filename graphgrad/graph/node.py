"""Layer ``graph``: ``Node``, one operation of the IR, and ``Dyn``, a parameter bound at
run time.

A node has a kind (what it does), a name, data inputs (nodes or Python scalar
literals), control-dependency inputs (nodes that must run first although no data
flows), keyword params, sub-graphs (for ``cond``/``while_loop``) and its output's
metadata: a ``Spec`` (shape with None for an unknown dim, NumPy dtype), or a tuple of
Specs for the multi-output control-flow kinds, whose outputs ``item`` nodes select.
"""

from __future__ import annotations

from typing import Any, NamedTuple

__all__ = ["Node", "Dyn", "KINDS", "MULTI_KINDS", "IMPURE_KINDS", "is_impure"]

# placeholder: a graph input; constant: a value baked in; variable: read a state slot;
# call: an op of graphgrad.ops.REGISTRY; cond / while_loop / while_grad: control flow
# with sub-graphs (multi-output); item: output k of a multi-output node; shape: the
# shape of the input as an int64 vector (reads no data); vjp: an op's vjp rule run at
# run time (graph/vjp_node.py); assign: write a state slot; random: samples drawn each
# run (graph/random_node.py);
# group: a no-op that only orders (control inputs); output: the graph's results;
# call_module: a module called as one opaque node (graphgrad.fx's leaf modules), the
# module found in the interpreter's state under params["target"], its qualified name;
# call_function / call_method: a Python call made when the graph runs, recorded where the
# inputs' ranks were unknown at capture (graph/python_call.py).
KINDS = ("placeholder", "constant", "variable", "call", "cond", "while_loop", "while_grad",
         "vjp", "item", "shape", "assign", "group", "output", "call_module", "random",
         "call_function", "call_method")
MULTI_KINDS = frozenset({"cond", "while_loop", "while_grad", "vjp"})
# nodes whose value is not a function of their inputs, or that change state: passes
# must keep them (dead-code elimination) and never merge two (CSE)
IMPURE_KINDS = frozenset({"random", "assign"})


class Dyn(NamedTuple):
    """In a call node's params: "the int value of data input ``index``", bound at run
    time (as TF's Reshape takes its shape from a tensor). The op sees plain ints."""

    index: int

    def __repr__(self) -> str:
        return f"Dyn({self.index})"


class Node:
    """One operation of a ``Graph``. Hashed by identity."""

    __slots__ = ("name", "kind", "op", "inputs", "deps", "params", "spec", "subgraphs",
                 "value", "graph", "nargs", "target")

    def __init__(self, graph, kind: str, name: str, *, op=None, inputs: tuple = (),
                 deps: tuple = (), params: dict | None = None, spec: Any = None,
                 subgraphs: dict | None = None, value: Any = None, nargs: int | None = None,
                 target: Node | None = None):
        if kind not in KINDS:
            raise ValueError(f"unknown node kind {kind!r} (one of {', '.join(KINDS)})")
        self.graph = graph
        self.kind = kind
        self.name = name
        self.op = op                      # the op class, for kind "call"
        self.inputs = tuple(inputs)       # data inputs: Nodes and Python scalars
        self.deps = tuple(deps)           # control-dependency inputs: Nodes
        self.params = params or {}
        self.spec = spec                  # Spec, or a tuple of Specs (MULTI_KINDS)
        self.subgraphs = subgraphs or {}  # name -> Graph
        self.value = value                # constant: the array; variable: initial value
        self.nargs = len(self.inputs) if nargs is None else nargs  # op args; the rest: Dyn
        self.target = target              # assign: the variable node written

    @property
    def target_name(self) -> str:
        if self.kind == "call":
            return self.op.__name__
        if self.kind == "vjp":
            return f"{self.params['op'].__name__}Backward"
        if self.kind == "assign":
            return f"{self.params.get('mode', 'assign')}({self.target.name})"
        if self.kind == "call_module":
            return self.params["target"]
        if self.kind == "random":
            return f"random_{self.params['dist']}"
        if self.kind == "call_function":
            target = self.params["target"]   # a function, or a module called as one
            return getattr(target, "__name__", None) or type(target).__name__
        if self.kind == "call_method":
            return self.params["target"]
        return self.kind

    def input_nodes(self) -> list[Node]:
        return [i for i in self.inputs if isinstance(i, Node)]

    def __repr__(self) -> str:
        return f"<Node {self.name}: {self.kind} {self.target_name}>"


def is_impure(node: Node) -> bool:
    """Whether ``node`` draws random numbers or touches state, itself or anywhere in its
    sub-graphs (a cond whose branch draws is impure too)."""
    todo = [node]
    while todo:
        n = todo.pop()
        if n.kind in IMPURE_KINDS or getattr(n.op, "impure", False):
            return True
        for g in n.subgraphs.values():
            todo.extend(g.nodes)
    return False
