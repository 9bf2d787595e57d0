"""Layer ``tensor``: the objects autograd shows of the graph: ``tensor.grad_fn``
(``BackwardNode``, named like PyTorch's ``MulBackward0``, with ``next_functions``),
``AccumulateGrad`` for leaves, and the handle ``register_hook`` returns."""

from __future__ import annotations

from collections.abc import Callable

from .value import Value

__all__ = ["BackwardNode", "AccumulateGrad", "RemovableHandle", "op_backward_name"]


class RemovableHandle:
    """Returned by ``register_hook``; ``remove()`` takes the hook out again."""

    __slots__ = ("_hooks", "_hook")

    def __init__(self, hooks: list, hook: Callable):
        self._hooks = hooks
        self._hook = hook

    def remove(self) -> None:
        try:
            self._hooks.remove(self._hook)
        except ValueError:
            pass

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.remove()


def op_backward_name(op) -> str:
    """``MulBackward0`` for graphgrad's ops; a custom ``autograd.Function`` names its own
    (``ExpBackward``, as PyTorch)."""
    return getattr(op, "backward_name", None) or f"{op.__name__}Backward0"


class BackwardNode:
    """What ``tensor.grad_fn`` returns: a view of the node from autograd's side, named
    like PyTorch's (``MulBackward0``) with ``next_functions``."""

    __slots__ = ("_value",)

    def __init__(self, value: Value):
        self._value = value

    def name(self) -> str:
        return op_backward_name(self._value.op)

    @property
    def next_functions(self) -> tuple:
        out = []
        for a in self._value.inputs:
            if not isinstance(a, Value) or not a._requires_grad:
                out.append((None, 0))
            elif a.op is None:
                out.append((AccumulateGrad(a), 0))
            else:
                out.append((BackwardNode(a), 0))
        return tuple(out)

    @property
    def metadata(self) -> dict:
        return {}

    def __eq__(self, other) -> bool:
        return isinstance(other, BackwardNode) and other._value is self._value

    def __hash__(self) -> int:
        return id(self._value)

    def __repr__(self) -> str:
        return f"<{self.name()} object at {hex(id(self._value))}>"


class AccumulateGrad:
    """The node a leaf's gradient lands in (``next_functions`` shows it)."""

    __slots__ = ("variable",)

    def __init__(self, variable: Value):
        self.variable = variable

    def name(self) -> str:
        return "torch::autograd::AccumulateGrad"

    @property
    def next_functions(self) -> tuple:
        return ()  # a leaf's node leads nowhere (graph walkers iterate it)

    def __repr__(self) -> str:
        return f"<AccumulateGrad object at {hex(id(self.variable))}>"
