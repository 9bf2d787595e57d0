"""Layer ``jit``: ``ScriptError`` and the source text ``graphgrad.jit.script`` reads.

``Source`` holds one function's source as ``inspect`` gives it (file, first line, the
indentation ``textwrap.dedent`` removed) so that an AST node of the dedented text maps
back to the user's file line and column. Errors are formatted as TorchScript formats
them: the message, ``File "...", line N``, two lines of context either side and a
``~~~~ <--- HERE`` pointer under the offending code.
"""

from __future__ import annotations

import ast
import inspect
import re
import textwrap
from dataclasses import dataclass

__all__ = ["ScriptError", "Source", "source_of"]

_CONTEXT = 2  # lines shown before and after the offending one, as TorchScript does


class ScriptError(RuntimeError):
    """A construct ``graphgrad.jit.script`` cannot translate, found at compile time.

    ``filename`` and ``lineno`` name the user's source line; ``construct`` is the short
    reason (``"try blocks aren't supported"``)."""

    def __init__(self, construct: str, text: str, filename: str | None = None,
                 lineno: int | None = None):
        super().__init__(text)
        self.construct = construct
        self.filename = filename
        self.lineno = lineno


@dataclass
class Source:
    """One function's source: ``tree`` is its ``FunctionDef`` (dedented text)."""

    name: str
    filename: str
    first_line: int          # file line of the dedented text's line 1
    indent: int              # columns removed by dedent
    file_lines: list[str]    # the function's lines as they are in the file
    tree: ast.FunctionDef

    def file_line(self, node: ast.AST) -> int:
        return self.first_line + node.lineno - 1

    def error(self, construct: str, node: ast.AST, detail: str | None = None,
              calls: tuple = ()) -> ScriptError:
        """A ScriptError pointing at ``node``; ``calls`` is the chain of (Source, call
        node) through which this function was inlined, innermost first."""
        text = "\n" + (detail or construct) + ":\n" + self.pointer(node)
        callee = self.name
        for src, call in calls:
            text += (f"'{callee}' is being compiled since it was called from "
                     f"'{src.name}'\n" + src.pointer(call))
            callee = src.name
        return ScriptError(construct, text, self.filename, self.file_line(node))

    def pointer(self, node: ast.AST) -> str:
        """``File "f.py", line N``, the lines around it and ``~~~~ <--- HERE``."""
        k = node.lineno - 1                      # index into file_lines
        line = self.file_lines[k].rstrip("\n")
        col = node.col_offset + self.indent
        if getattr(node, "end_lineno", None) == node.lineno:
            end = node.end_col_offset + self.indent
        else:  # a compound statement: its keyword, as TorchScript points at "try"
            word = re.match(r"[A-Za-z_]*", line[col:]).group()
            end = col + len(word) if word else len(line)
        end = max(end, col + 1)
        out = [f'  File "{self.filename}", line {self.first_line + k}']
        out += [ln.rstrip("\n") for ln in self.file_lines[max(0, k - _CONTEXT):k]]
        out += [line, " " * col + "~" * (end - col) + " <--- HERE"]
        out += [ln.rstrip("\n") for ln in self.file_lines[k + 1:k + 1 + _CONTEXT]]
        return "\n".join(out) + "\n"


def source_of(fn) -> Source:
    """The parsed source of a Python function (``inspect.getsource`` + ``dedent``)."""
    name = getattr(fn, "__qualname__", getattr(fn, "__name__", repr(fn)))
    try:
        lines, first = inspect.getsourcelines(fn)
        filename = inspect.getsourcefile(fn) or inspect.getfile(fn)
    except (OSError, TypeError) as e:
        raise ScriptError("could not get source code",
                          f"\ncould not get source code for {name!r}: {e}. "
                          f"graphgrad.jit.script reads a function's source with inspect; "
                          f"define it in a file") from None
    text = "".join(lines)
    dedented = textwrap.dedent(text)
    first_text = next((ln for ln in lines if ln.strip()), "")
    first_ded = next((ln for ln in dedented.splitlines(True) if ln.strip()), "")
    indent = len(first_text) - len(first_ded)
    module = ast.parse(dedented)
    tree = module.body[0]
    if not isinstance(tree, ast.FunctionDef):
        kind = "async functions" if isinstance(tree, ast.AsyncFunctionDef) else \
            type(tree).__name__
        raise ScriptError(f"{kind} aren't supported",
                          f"\n{kind} aren't supported: graphgrad.jit.script compiles a "
                          f"plain function ({name!r})")
    return Source(name.split(".<locals>.")[-1], filename, max(first, 1), indent, list(lines),
                  tree)
