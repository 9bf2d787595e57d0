"""Layer ``optim``: RAdam, Adam with the variance of the adaptive step rectified
(Liu et al. 2019), with PyTorch's update exactly:

    p = p * (1 - lr * weight_decay)       (decoupled_weight_decay), else
    g = grad + weight_decay * p
    m = lerp(m, g, 1 - beta1);  v = beta2 * v + (1 - beta2) * g * g
    rho_inf = 2 / (1 - beta2) - 1;  rho_t = rho_inf - 2 t beta2^t / (1 - beta2^t)
    p = p - lr * m / (1 - beta1^t) * sqrt(1 - beta2^t) / (sqrt(v) + eps) * r_t
                                                         (rho_t > 5), else
    p = p - lr * m / (1 - beta1^t)
    with r_t = sqrt((rho_t - 4)(rho_t - 2) rho_inf / ((rho_inf - 4)(rho_inf - 2) rho_t))
"""

from __future__ import annotations

from collections.abc import Iterable

from graphgrad.backend import xp
from graphgrad.tensor import zeros_like

from .adam import check_adam_args, update_moments
from .optimizer import Optimizer, implementation

__all__ = ["RAdam"]


class RAdam(Optimizer):
    def __init__(self, params: Iterable, lr: float = 1e-3,
                 betas: tuple[float, float] = (0.9, 0.999), eps: float = 1e-8,
                 weight_decay: float = 0.0, decoupled_weight_decay: bool = False, *,
                 foreach: bool | None = None, maximize: bool = False, capturable: bool = False,
                 differentiable: bool = False) -> None:
        check_adam_args(lr, betas, eps, weight_decay)
        super().__init__(params, dict(lr=lr, betas=tuple(betas), eps=eps,
                                      weight_decay=weight_decay,
                                      decoupled_weight_decay=decoupled_weight_decay,
                                      maximize=maximize,
                                      **implementation(foreach=foreach, capturable=capturable,
                                                       differentiable=differentiable)))

    def _update(self, p, group: dict) -> None:
        """One parameter's update in place; the state is PyTorch's ``step``, ``exp_avg``
        and ``exp_avg_sq``."""
        lr, (beta1, beta2), eps = group["lr"], group["betas"], group["eps"]
        step, param, g, arrays = self._begin_update(p, group, exp_avg=zeros_like,
                                                    exp_avg_sq=zeros_like)
        m, v = arrays["exp_avg"], arrays["exp_avg_sq"]
        scratch = xp.empty_like(m)
        update_moments(m, v, g, beta1, beta2, scratch)
        bias_correction1 = 1 - beta1 ** step
        bias_correction2 = 1 - beta2 ** step
        update = xp.divide(m, bias_correction1)  # bias_corrected_exp_avg * lr
        update *= lr
        rho_inf = 2 / (1 - beta2) - 1
        rho_t = rho_inf - 2 * step * (beta2 ** step) / bias_correction2
        if rho_t > 5.0:
            xp.sqrt(v, out=scratch)  # bias_correction2 ** 0.5 / (exp_avg_sq.sqrt() + eps)
            scratch += eps
            xp.divide(bias_correction2 ** 0.5, scratch, out=scratch)
            update *= scratch
            update *= ((rho_t - 4) * (rho_t - 2) * rho_inf
                       / ((rho_inf - 4) * (rho_inf - 2) * rho_t)) ** 0.5
        param -= update  # param.add_(update, alpha=-1.0)
        self._end_update(p)
