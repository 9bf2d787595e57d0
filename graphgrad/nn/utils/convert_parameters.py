"""Layer ``nn``: a model's parameters as one flat vector and back, as
``torch.nn.utils.convert_parameters`` (what second-order and evolutionary methods use)."""

from __future__ import annotations

from collections.abc import Iterable

from graphgrad import ops
from graphgrad.tensor import Tensor

__all__ = ["parameters_to_vector", "vector_to_parameters"]


def parameters_to_vector(parameters: Iterable[Tensor]) -> Tensor:
    """The parameters flattened and concatenated, in order (differentiable)."""
    return ops.cat([p.reshape(-1) for p in parameters])


def vector_to_parameters(vec: Tensor, parameters: Iterable[Tensor]) -> None:
    """Give each parameter, in order, the next ``numel`` values of ``vec`` (through
    ``.data``, so autograd does not see the change, as in PyTorch)."""
    if not isinstance(vec, Tensor):
        raise TypeError(f"expected torch.Tensor, but got: {_typename(vec)}")
    pointer = 0
    for param in parameters:
        n = param.numel()
        param.data = vec[pointer:pointer + n].view_as(param).data
        pointer += n


def _typename(obj) -> str:
    """``torch.typename``: the qualified class name of a non-tensor."""
    cls = type(obj)
    return cls.__qualname__ if cls.__module__ == "builtins" else \
        f"{cls.__module__}.{cls.__qualname__}"
