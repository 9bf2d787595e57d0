"""Layer ``jit``: what ``jit.script``'s compiler carries through a function: ``Frame``
(one function being compiled: its source, variables and call chain) and ``Ret`` (the
value a ``return`` produced)."""

from __future__ import annotations

import ast
from dataclasses import dataclass

from .script_errors import ScriptError, Source

__all__ = ["Frame", "Ret", "ReturnTypeUnknownError"]


class ReturnTypeUnknownError(Exception):
    """A loop's first compile met a ``return``: the loop compiles again, carrying a
    ``$return_value`` of the returned value's type."""

    def __init__(self, value):
        super().__init__("return in a loop")
        self.value = value


class Ret:
    """The value a ``return`` produced (propagates out of the blocks)."""

    def __init__(self, value):
        self.value = value


@dataclass
class Frame:
    """One function being compiled: its source, variables and where it was called."""

    src: Source
    env: dict
    globals: dict
    closure: dict
    calls: tuple = ()                 # (caller Source, call node), innermost first
    loops: int = 0                    # depth of loops around the current statement
    graph_loops: int = 0              # of which while_loop nodes (not unrolled)

    def child(self, env: dict, loops: int = 0, graph_loops: int = 0) -> Frame:
        """The frame of a branch or loop body: the same function, its own variables."""
        return Frame(self.src, env, self.globals, self.closure, self.calls,
                     self.loops + loops, self.graph_loops + graph_loops)

    def error(self, construct: str, node: ast.AST, detail: str | None = None) -> ScriptError:
        return self.src.error(construct, node, detail, self.calls)
