"""Layer ``optim``: NAdam, Adam with Nesterov momentum (Dozat 2016), with PyTorch's
update exactly (``mu_t = beta1 * (1 - 0.96^(t * momentum_decay) / 2)``):

    p = p * (1 - lr * weight_decay)       (decoupled_weight_decay), else
    g = grad + weight_decay * p
    m = lerp(m, g, 1 - beta1);  v = beta2 * v + (1 - beta2) * g * g
    denom = sqrt(v / (1 - beta2^t)) + eps
    p = p - lr * (1 - mu_t) / (1 - prod(mu_1..mu_t)) * g / denom
          - lr * mu_{t+1} / (1 - prod(mu_1..mu_{t+1})) * m / denom

The running product of the ``mu`` is PyTorch's float32 0-d ``mu_product`` state.
"""

from __future__ import annotations

from collections.abc import Iterable

import numpy as np

from graphgrad.backend import xp
from graphgrad.tensor import tensor, zeros_like

from .adam import check_adam_args, update_moments
from .fused import axpy
from .optimizer import Optimizer, check_nonnegative, implementation

__all__ = ["NAdam"]


class NAdam(Optimizer):
    def __init__(self, params: Iterable, lr: float = 2e-3,
                 betas: tuple[float, float] = (0.9, 0.999), eps: float = 1e-8,
                 weight_decay: float = 0.0, momentum_decay: float = 4e-3,
                 decoupled_weight_decay: bool = False, *, foreach: bool | None = None,
                 maximize: bool = False, capturable: bool = False,
                 differentiable: bool = False) -> None:
        check_adam_args(lr, betas, eps, weight_decay)
        check_nonnegative(momentum_decay=momentum_decay)
        super().__init__(params, dict(lr=lr, betas=tuple(betas), eps=eps,
                                      weight_decay=weight_decay, momentum_decay=momentum_decay,
                                      decoupled_weight_decay=decoupled_weight_decay,
                                      maximize=maximize,
                                      **implementation(foreach=foreach, capturable=capturable,
                                                       differentiable=differentiable)))

    def _update(self, p, group: dict) -> None:
        """One parameter's update in place; the state is PyTorch's ``step``,
        ``mu_product``, ``exp_avg`` and ``exp_avg_sq``."""
        lr, (beta1, beta2), eps = group["lr"], group["betas"], group["eps"]
        psi = group["momentum_decay"]
        step, param, g, arrays = self._begin_update(
            p, group, mu_product=lambda p: tensor(1.0), exp_avg=zeros_like,
            exp_avg_sq=zeros_like)
        bias_correction2 = 1 - beta2 ** step
        mu = beta1 * (1.0 - 0.5 * (0.96 ** (step * psi)))
        mu_next = beta1 * (1.0 - 0.5 * (0.96 ** ((step + 1) * psi)))
        # mu_product *= mu on a float32 0-d tensor: the product rounds to float32
        mu_product_t = arrays["mu_product"]
        mu_product_t[...] = mu_product_t * np.asarray(mu, dtype=mu_product_t.dtype)
        mu_product = float(mu_product_t)
        mu_product_next = mu_product * mu_next
        m, v = arrays["exp_avg"], arrays["exp_avg_sq"]
        scratch = xp.empty_like(m)
        update_moments(m, v, g, beta1, beta2, scratch)
        denom = xp.divide(v, bias_correction2)  # exp_avg_sq.div(bias_correction2).sqrt()
        xp.sqrt(denom, out=denom)
        denom += eps
        xp.divide(g, denom, out=scratch)
        axpy(param, -lr * (1.0 - mu) / (1.0 - mu_product), scratch, scratch)
        xp.divide(m, denom, out=scratch)
        axpy(param, (-lr * mu_next) / (1.0 - mu_product_next), scratch, scratch)
        self._end_update(p)
