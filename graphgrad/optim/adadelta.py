"""Layer ``optim``: Adadelta (Zeiler 2012), with PyTorch's update exactly:

    g = grad + weight_decay * p
    v = rho * v + (1 - rho) * g * g
    delta = sqrt(u + eps) / sqrt(v + eps) * g
    u = rho * u + (1 - rho) * delta * delta
    p = p - lr * delta
"""

from __future__ import annotations

from collections.abc import Iterable

from graphgrad.backend import xp
from graphgrad.tensor import zeros_like

from .fused import axpy
from .optimizer import Optimizer, check_nonnegative, implementation

__all__ = ["Adadelta"]


class Adadelta(Optimizer):
    def __init__(self, params: Iterable, lr: float = 1.0, rho: float = 0.9, eps: float = 1e-6,
                 weight_decay: float = 0.0, foreach: bool | None = None, *,
                 capturable: bool = False, maximize: bool = False,
                 differentiable: bool = False) -> None:
        check_nonnegative(lr=lr)
        if not 0.0 <= rho <= 1.0:
            raise ValueError(f"Invalid rho value: {rho}")
        check_nonnegative(eps=eps, weight_decay=weight_decay)
        super().__init__(params, dict(lr=lr, rho=rho, eps=eps, weight_decay=weight_decay,
                                      maximize=maximize,
                                      **implementation(foreach=foreach, capturable=capturable,
                                                       differentiable=differentiable)))

    def _update(self, p, group: dict) -> None:
        """One parameter's update in place; the state is PyTorch's ``step``,
        ``square_avg`` and ``acc_delta``."""
        lr, rho, eps = group["lr"], group["rho"], group["eps"]
        _, param, g, arrays = self._begin_update(p, group, square_avg=zeros_like,
                                                 acc_delta=zeros_like)
        v, u = arrays["square_avg"], arrays["acc_delta"]
        scratch = xp.empty_like(v)
        v *= rho  # square_avg.mul_(rho).addcmul_(grad, grad, value=1 - rho)
        xp.multiply(g, g, out=scratch)
        axpy(v, 1 - rho, scratch, scratch)
        std = xp.add(v, eps)  # square_avg.add(eps).sqrt_()
        xp.sqrt(std, out=std)
        delta = xp.add(u, eps)  # acc_delta.add(eps).sqrt_().div_(std).mul_(grad)
        xp.sqrt(delta, out=delta)
        delta /= std
        delta *= g
        u *= rho  # acc_delta.mul_(rho).addcmul_(delta, delta, value=1 - rho)
        xp.multiply(delta, delta, out=scratch)
        axpy(u, 1 - rho, scratch, scratch)
        axpy(param, -lr, delta, scratch)
        self._end_update(p)
