"""Layer ``optim``: Adam (Kingma & Ba 2014) and AdamW (decoupled weight decay,
Loshchilov & Hutter 2019), with PyTorch's update exactly:

    p = p * (1 - lr * weight_decay)           (AdamW, or decoupled_weight_decay=True)
    g = grad + weight_decay * p               (otherwise)
    m = m + (1 - beta1) * (g - m);  v = beta2 * v + (1 - beta2) * g * g
    vmax = max(vmax, v)                                   (amsgrad: use vmax for v)
    p = p - lr / (1 - beta1^t) * m / (sqrt(v) / sqrt(1 - beta2^t) + eps)
"""

from __future__ import annotations

from collections.abc import Iterable

from graphgrad.backend import xp
from graphgrad.tensor import zeros_like

from .fused import axpy, lerp
from .optimizer import Optimizer, check_nonnegative, implementation

__all__ = ["Adam", "AdamW", "check_adam_args", "update_moments"]


def check_adam_args(lr: float, betas, eps: float, weight_decay: float) -> None:
    """The hyperparameter checks of the Adam family, with PyTorch's messages."""
    check_nonnegative(lr=lr, eps=eps)
    for i, b in enumerate(betas):
        if not 0.0 <= b < 1.0:
            raise ValueError(f"Invalid beta parameter at index {i}: {b}")
    check_nonnegative(weight_decay=weight_decay)


def update_moments(m, v, g, beta1: float, beta2: float, scratch) -> None:
    """The Adam family's moment estimates, in place and in PyTorch's order:
    ``exp_avg.lerp_(grad, 1 - beta1)``;
    ``exp_avg_sq.mul_(beta2).addcmul_(grad, grad, value=1 - beta2)``."""
    lerp(m, g, 1 - beta1, scratch)
    v *= beta2
    xp.multiply(g, g, out=scratch)
    axpy(v, 1 - beta2, scratch, scratch)


class Adam(Optimizer):
    def __init__(self, params: Iterable, lr: float = 1e-3,
                 betas: tuple[float, float] = (0.9, 0.999), eps: float = 1e-8,
                 weight_decay: float = 0.0, amsgrad: bool = False, *,
                 foreach: bool | None = None, maximize: bool = False, capturable: bool = False,
                 differentiable: bool = False, fused: bool | None = None,
                 decoupled_weight_decay: bool = False) -> None:
        check_adam_args(lr, betas, eps, weight_decay)
        super().__init__(params, dict(
            lr=lr, betas=tuple(betas), eps=eps, weight_decay=weight_decay, amsgrad=amsgrad,
            maximize=maximize, decoupled_weight_decay=decoupled_weight_decay,
            **implementation(foreach=foreach, capturable=capturable,
                             differentiable=differentiable, fused=fused)))

    def _update(self, p, group: dict) -> None:
        """One parameter's update on the buffers in place (see ``fused``), in PyTorch's
        order of operations (its single-tensor path), with one scratch array."""
        lr, (beta1, beta2), eps = group["lr"], group["betas"], group["eps"]
        init = dict(exp_avg=zeros_like, exp_avg_sq=zeros_like)
        if group["amsgrad"]:
            init["max_exp_avg_sq"] = zeros_like
        step, param, g, arrays = self._begin_update(p, group, **init)
        m, v = arrays["exp_avg"], arrays["exp_avg_sq"]
        scratch = xp.empty_like(m)
        update_moments(m, v, g, beta1, beta2, scratch)
        if group["amsgrad"]:
            vmax = arrays["max_exp_avg_sq"]
            xp.maximum(vmax, v, out=vmax)
            v = vmax
        bias_correction1 = 1 - beta1 ** step
        bias_correction2_sqrt = (1 - beta2 ** step) ** 0.5
        denom = xp.sqrt(v, out=scratch)  # (sqrt(v) / bias_correction2_sqrt).add_(eps)
        denom /= bias_correction2_sqrt
        denom += eps
        xp.divide(m, denom, out=scratch)  # param.addcdiv_(m, denom, value=-step_size)
        axpy(param, -lr / bias_correction1, scratch, scratch)
        self._end_update(p)


class AdamW(Adam):
    """Adam with the weight decay applied to the parameters, not the gradient
    (default ``weight_decay=1e-2``)."""

    def __init__(self, params: Iterable, lr: float = 1e-3,
                 betas: tuple[float, float] = (0.9, 0.999), eps: float = 1e-8,
                 weight_decay: float = 1e-2, amsgrad: bool = False, *,
                 maximize: bool = False, foreach: bool | None = None,
                 capturable: bool = False, differentiable: bool = False,
                 fused: bool | None = None) -> None:
        super().__init__(params, lr, betas, eps, weight_decay, amsgrad, foreach=foreach,
                         maximize=maximize, capturable=capturable,
                         differentiable=differentiable, fused=fused,
                         decoupled_weight_decay=True)

    def load_state_dict(self, state_dict: dict) -> None:
        """As PyTorch's AdamW: the decay stays decoupled whatever the checkpoint says."""
        super().load_state_dict(state_dict)
        for group in self.param_groups:
            group["decoupled_weight_decay"] = True
