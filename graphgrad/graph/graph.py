"""Layer ``graph``: ``Graph``, the one IR: a flat list of nodes in topological order.

Nodes are appended as they are built, so the list order is a topological order for
data and control edges alike (the verifier checks it). ``inputs`` lists the
placeholders in call order; the ``output`` node, when set, is always last.
"""

from __future__ import annotations

import re
from collections.abc import Iterable

from graphgrad.backend import xp

from .node import Node
from .spec import Spec, short

__all__ = ["Graph"]

_IDENT = re.compile(r"[^0-9a-zA-Z_]")


class Graph:
    """A computational graph: nodes, placeholders (``inputs``), an ``output`` node."""

    def __init__(self, name: str = "graph"):
        self.name = name
        self.nodes: list[Node] = []
        self.inputs: list[Node] = []
        self.header: list[str] = []   # printed above the code: which pass made it
        self._names: dict[str, int] = {}

    # ---- building ----------------------------------------------------------------------

    def unique_name(self, base: str) -> str:
        base = _IDENT.sub("_", base) or "node"
        n = self._names.get(base)
        if n is None:
            self._names[base] = 0
            return base
        while True:
            n += 1
            name = f"{base}_{n}"
            if name not in self._names:
                self._names[base] = n
                self._names[name] = 0
                return name

    def add(self, kind: str, name: str | None = None, **kw) -> Node:
        node = Node(self, kind, self.unique_name(name or kind), **kw)
        out = self.output_node
        if out is not None and kind != "output":
            self.nodes.insert(len(self.nodes) - 1, node)
        else:
            self.nodes.append(node)
        return node

    def placeholder(self, spec: Spec, name: str = "x") -> Node:
        node = self.add("placeholder", name, spec=spec)
        self.inputs.append(node)
        return node

    def constant(self, value, name: str = "const") -> Node:
        arr = value._array if hasattr(value, "_array") else xp.asarray(value)
        return self.add("constant", name, value=arr, spec=Spec(arr.shape, arr.dtype))

    def call(self, op, inputs: Iterable, params: dict, spec, *, deps: Iterable = (),
             nargs: int | None = None, name: str | None = None) -> Node:
        return self.add("call", name or op.__name__.lower(), op=op, inputs=tuple(inputs),
                        params=params, spec=spec, deps=tuple(deps), nargs=nargs)

    @property
    def output_node(self) -> Node | None:
        if self.nodes and self.nodes[-1].kind == "output":
            return self.nodes[-1]
        return None

    @property
    def outputs(self) -> tuple:
        out = self.output_node
        return () if out is None else out.inputs

    def set_outputs(self, values: Iterable) -> Node:
        """Make (or replace) the output node; values are nodes of this graph or literals."""
        values = tuple(getattr(v, "_node", v) for v in values)  # Symbols stand for nodes
        for v in values:
            if isinstance(v, Node) and v.graph is not self:
                raise ValueError(f"output {v.name!r} belongs to graph {v.graph.name!r}, not "
                                 f"{self.name!r}")
        if self.output_node is not None:
            self.nodes.pop()
        specs = tuple(v.spec if isinstance(v, Node) else None for v in values)
        return self.add("output", "output", inputs=values, spec=specs)

    # ---- reading -----------------------------------------------------------------------

    def __iter__(self):
        return iter(self.nodes)

    def __len__(self) -> int:
        return len(self.nodes)

    def node(self, name: str) -> Node:
        for n in self.nodes:
            if n.name == name:
                return n
        raise KeyError(f"no node named {name!r} in graph {self.name!r}")

    def users(self) -> dict[Node, list[Node]]:
        """For each node, the nodes that take it as a data or control input."""
        users: dict[Node, list[Node]] = {n: [] for n in self.nodes}
        for n in self.nodes:
            for i in (*n.input_nodes(), *n.deps):
                if i in users:
                    users[i].append(n)
        return users

    def count(self, recursive: bool = True) -> int:
        """Number of nodes, sub-graphs included."""
        total, todo = 0, [self]
        while todo:
            g = todo.pop()
            total += len(g.nodes)
            if recursive:
                for n in g.nodes:
                    todo.extend(n.subgraphs.values())
        return total

    def __repr__(self) -> str:
        return f"<Graph {self.name}: {len(self.nodes)} nodes>"

    # ---- the views (each in its own module) ---------------------------------------------

    def print_tabular(self) -> None:
        from .printer import tabular
        print(tabular(self))

    def tabular(self) -> str:
        from .printer import tabular
        return tabular(self)

    @property
    def code(self) -> str:
        from .printer import python_code
        return python_code(self).src

    def to_dot(self) -> str:
        from .dot import to_dot
        return to_dot(self)

    def verify(self) -> Graph:
        from .verify import verify
        verify(self)
        return self

    def spec_text(self, node: Node) -> str:
        return short(node.spec)
