"""Layer ``optim``: the in-place updates optimizers make, fused on the parameters' buffers.

An optimizer step runs under ``no_grad`` on leaf tensors: nothing is recorded, so each
update (``p.add_(g, alpha=-lr)``, ``v.mul_(beta2).addcmul_(g, g, value=1 - beta2)``...)
can be done directly on the arrays, with at most one scratch array per update and no
dispatch per elementwise op. In a small training step those dispatches are a sizeable
part of the time. Every write bumps the tensor's version counter, as the tensor
methods do, so a graph that saved a parameter before the step still refuses to
backward through it afterwards.
"""

from __future__ import annotations

from graphgrad.backend import xp
from graphgrad.tensor import Tensor

__all__ = ["buffer", "written", "new_state", "grad_array", "axpy", "lerp", "real_view",
           "decay"]


def buffer(t: Tensor, name: str = "optimizer step"):
    """The array of ``t``, to be written in place (call ``written`` afterwards)."""
    a = t._array
    if not a.flags.writeable:
        raise RuntimeError(f"{name}: unsupported operation: the tensor's memory is read-only "
                           "(it is an expanded view); clone() it first")
    return a


def written(*tensors: Tensor) -> None:
    """Bump the version counters of tensors whose buffers were changed in place."""
    for t in tensors:
        if t._version_counter is None:
            t._version_counter = [0]
        t._version_counter[0] += 1


def new_state(array) -> Tensor:
    """A state tensor (momentum buffer, moment estimate) owning ``array``."""
    return Tensor._make(array)


def grad_array(p: Tensor, maximize: bool):
    """The gradient of ``p`` as an array (negated for ``maximize``: a new array)."""
    g = p._grad._array
    return -g if maximize else g


def axpy(y, a: float, x, scratch=None) -> None:
    """``y += a * x`` in place; ``scratch`` (an array of y's shape) takes ``a * x``."""
    if a == 1:
        y += x
        return
    if scratch is None:
        y += a * x
        return
    xp.multiply(x, a, out=scratch)
    y += scratch


def lerp(y, end, weight: float, scratch) -> None:
    """``y.lerp_(end, weight)`` in place, with PyTorch's two formulas (the one that is
    exact at its end of the interval): ``y + w * (end - y)`` for ``w < 0.5``, else
    ``end - (end - y) * (1 - w)``."""
    xp.subtract(end, y, out=scratch)
    if weight < 0.5:
        axpy(y, weight, scratch, scratch)
    else:
        scratch *= 1 - weight
        xp.subtract(end, scratch, out=y)


def real_view(a):
    """A complex array as a real view with a trailing (real, imag) pair, as PyTorch's
    ``view_as_real``: optimizers update complex entries as two real ones. Real arrays
    are returned as they are."""
    if a.dtype.kind != "c":
        return a
    if not a.flags.c_contiguous:
        raise NotImplementedError("optimizers: complex parameters must be contiguous tensors")
    return a.view(a.real.dtype).reshape(*a.shape, 2)


def decay(param, g, lr: float, weight_decay: float, decoupled: bool = False):
    """PyTorch's weight decay; returns the gradient to use. Decoupled (AdamW's):
    ``param.mul_(1 - lr * weight_decay)`` in place, the gradient unchanged; otherwise
    ``grad.add(param, alpha=weight_decay)``, a new array."""
    if weight_decay == 0:
        return g
    if decoupled:
        param *= 1 - lr * weight_decay
        return g
    return g + weight_decay * param
