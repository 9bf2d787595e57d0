"""Layer ``optim``: RMSprop (Hinton's lecture 6e; centered after Graves 2013), with
PyTorch's update exactly:

    g = grad + weight_decay * p
    v = alpha * v + (1 - alpha) * g * g
    avg = sqrt(v - gbar * gbar) with gbar = lerp(gbar, g, 1 - alpha)     (centered)
          sqrt(v)                                                         (otherwise)
    buf = momentum * buf + g / (avg + eps);  p = p - lr * buf            (momentum > 0)
    p = p - lr * g / (avg + eps)                                          (otherwise)
"""

from __future__ import annotations

from collections.abc import Iterable

from graphgrad.backend import xp
from graphgrad.tensor import zeros_like

from .fused import axpy, lerp
from .optimizer import Optimizer, check_nonnegative, implementation

__all__ = ["RMSprop"]


class RMSprop(Optimizer):
    def __init__(self, params: Iterable, lr: float = 1e-2, alpha: float = 0.99,
                 eps: float = 1e-8, weight_decay: float = 0.0, momentum: float = 0.0,
                 centered: bool = False, capturable: bool = False, foreach: bool | None = None,
                 maximize: bool = False, differentiable: bool = False) -> None:
        check_nonnegative(lr=lr, eps=eps, momentum=momentum, weight_decay=weight_decay,
                          alpha=alpha)
        super().__init__(params, dict(lr=lr, momentum=momentum, alpha=alpha, eps=eps,
                                      centered=centered, weight_decay=weight_decay,
                                      maximize=maximize,
                                      **implementation(capturable=capturable, foreach=foreach,
                                                       differentiable=differentiable)))

    def _update(self, p, group: dict) -> None:
        """One parameter's update on the buffers in place, in PyTorch's order (its
        single-tensor path); the state is PyTorch's: ``step``, ``square_avg``,
        ``momentum_buffer`` (momentum > 0), ``grad_avg`` (centered)."""
        lr, alpha, eps = group["lr"], group["alpha"], group["eps"]
        momentum, centered = group["momentum"], group["centered"]
        init = dict(square_avg=zeros_like)
        if momentum > 0:
            init["momentum_buffer"] = zeros_like
        if centered:
            init["grad_avg"] = zeros_like
        _, param, g, arrays = self._begin_update(p, group, **init)
        v = arrays["square_avg"]
        scratch = xp.empty_like(v)
        v *= alpha  # square_avg.mul_(alpha).addcmul_(grad, grad, value=1 - alpha)
        xp.multiply(g, g, out=scratch)
        axpy(v, 1 - alpha, scratch, scratch)
        avg = xp.empty_like(v)
        if centered:
            gbar = arrays["grad_avg"]
            lerp(gbar, g, 1 - alpha, scratch)
            xp.multiply(gbar, gbar, out=scratch)  # square_avg.addcmul(grad_avg, grad_avg, -1)
            xp.subtract(v, scratch, out=avg)
            xp.sqrt(avg, out=avg)
        else:
            xp.sqrt(v, out=avg)
        avg += eps
        xp.divide(g, avg, out=scratch)
        if momentum > 0:
            buf = arrays["momentum_buffer"]
            buf *= momentum  # buf.mul_(momentum).addcdiv_(grad, avg)
            buf += scratch
            axpy(param, -lr, buf, scratch)
        else:
            axpy(param, -lr, scratch, scratch)  # param.addcdiv_(grad, avg, value=-lr)
        self._end_update(p)
