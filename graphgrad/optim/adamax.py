"""Layer ``optim``: Adamax, Adam with the infinity norm (Kingma & Ba 2014, section 7),
with PyTorch's update exactly:

    g = grad + weight_decay * p
    m = lerp(m, g, 1 - beta1);  u = max(beta2 * u, |g| + eps)
    p = p - lr / (1 - beta1^t) * m / u
"""

from __future__ import annotations

from collections.abc import Iterable

from graphgrad.backend import xp
from graphgrad.tensor import zeros_like

from .fused import axpy, lerp
from .adam import check_adam_args
from .optimizer import Optimizer, implementation

__all__ = ["Adamax"]


class Adamax(Optimizer):
    def __init__(self, params: Iterable, lr: float = 2e-3,
                 betas: tuple[float, float] = (0.9, 0.999), eps: float = 1e-8,
                 weight_decay: float = 0.0, foreach: bool | None = None, *,
                 maximize: bool = False, differentiable: bool = False,
                 capturable: bool = False) -> None:
        check_adam_args(lr, betas, eps, weight_decay)
        super().__init__(params, dict(lr=lr, betas=tuple(betas), eps=eps,
                                      weight_decay=weight_decay, maximize=maximize,
                                      **implementation(foreach=foreach,
                                                       differentiable=differentiable,
                                                       capturable=capturable)))

    def _update(self, p, group: dict) -> None:
        """One parameter's update in place; the state is PyTorch's ``step``, ``exp_avg``
        and ``exp_inf``."""
        lr, (beta1, beta2), eps = group["lr"], group["betas"], group["eps"]
        step, param, g, arrays = self._begin_update(p, group, exp_avg=zeros_like,
                                                    exp_inf=zeros_like)
        m, u = arrays["exp_avg"], arrays["exp_inf"]
        scratch = xp.empty_like(m)
        lerp(m, g, 1 - beta1, scratch)
        u *= beta2  # torch.maximum(exp_inf.mul_(beta2), grad.abs().add_(eps), out=exp_inf)
        xp.abs(g, out=scratch)
        scratch += eps
        xp.maximum(u, scratch, out=u)
        xp.divide(m, u, out=scratch)  # param.addcdiv_(exp_avg, exp_inf, value=-clr)
        axpy(param, -(lr / (1 - beta1 ** step)), scratch, scratch)
        self._end_update(p)
