"""Layer ``graph``: ``call_function`` and ``call_method`` nodes, a Python call made when the
graph runs.

graphgrad's op nodes fix their dims against their inputs' ranks when they are built
(``dim=-1`` becomes ``dim=1``). Where a capture frontend records a call whose inputs have
a rank unknown at capture time (``fx.symbolic_trace`` and ``jit.script`` without example
inputs), the call cannot become op nodes yet. It is recorded as torch.fx records every
call: the public function (``graphgrad.sum``) or the method name (``"sum"``) with its
arguments, and the output's rank is unknown. When the graph runs, the call is made on the
actual values, so the ops' shape rules are applied then (on Symbols, while a graph is
built from this one, it records the op nodes it stands for).

The node's data inputs are the nodes among the call's arguments, in order; ``params``
holds ``target`` and the ``args``/``kwargs`` structures (tuples, lists, dicts) with an
``Arg(k)`` where data input ``k`` goes.
"""

from __future__ import annotations

from typing import Any, NamedTuple

__all__ = ["Arg", "PYTHON_CALL_KINDS", "split_call", "bind_call", "run_python_call",
           "call_arguments_text"]

PYTHON_CALL_KINDS = frozenset({"call_function", "call_method"})


class Arg(NamedTuple):
    """In a Python call node's ``args``/``kwargs``: the value of data input ``index``."""

    index: int

    def __repr__(self) -> str:
        return f"Arg({self.index})"


def _map(value: Any, leaf) -> Any:
    """``value`` with ``leaf`` applied to each non-container item (the structures of call
    arguments are shallow, so recursion is bounded by the user's own nesting)."""
    if isinstance(value, tuple) and not hasattr(value, "_fields"):
        return tuple(_map(v, leaf) for v in value)
    if isinstance(value, list):
        return [_map(v, leaf) for v in value]
    if isinstance(value, dict):
        return {k: _map(v, leaf) for k, v in value.items()}
    return leaf(value)


def split_call(args: tuple, kwargs: dict, is_value) -> tuple[list, tuple, dict]:
    """(the values ``is_value`` picks, in order; ``args`` and ``kwargs`` with ``Arg(k)``
    in their place)."""
    values: list = []

    def leaf(v):
        if is_value(v):
            values.append(v)
            return Arg(len(values) - 1)
        return v

    return values, _map(tuple(args), leaf), _map(dict(kwargs), leaf)


def bind_call(params: dict, values: list) -> tuple[tuple, dict]:
    """The call's ``args`` and ``kwargs`` with each ``Arg(k)`` replaced by ``values[k]``."""
    def leaf(v):
        return values[v.index] if isinstance(v, Arg) else v

    return _map(params["args"], leaf), _map(params["kwargs"], leaf)


def run_python_call(kind: str, params: dict, values: list) -> Any:
    """Make the recorded call on ``values`` (tensors, or Symbols while building a graph)."""
    args, kwargs = bind_call(params, values)
    if kind == "call_method":
        return getattr(args[0], params["target"])(*args[1:], **kwargs)
    return params["target"](*args, **kwargs)


def call_arguments_text(params: dict, names: list, literal) -> str:
    """The call's argument list as source: ``x, dim=0``; ``names[k]`` is data input k's
    text and ``literal(v)`` any other value's."""
    def text(v) -> str:
        if isinstance(v, Arg):
            return names[v.index]
        if isinstance(v, tuple) and not hasattr(v, "_fields"):
            inner = ", ".join(text(e) for e in v)
            return f"({inner}{',' if len(v) == 1 else ''})"
        if isinstance(v, list):
            return "[" + ", ".join(text(e) for e in v) + "]"
        if isinstance(v, dict):
            return "{" + ", ".join(f"{k!r}: {text(e)}" for k, e in v.items()) + "}"
        return literal(v)

    parts = [text(a) for a in params["args"]]
    parts += [f"{k}={text(v)}" for k, v in params["kwargs"].items()]
    return ", ".join(parts)
