"""Layer ``optim``: Adagrad (Duchi, Hazan & Singer 2011), with PyTorch's update exactly:

    g = grad + weight_decay * p
    clr = lr / (1 + (t - 1) * lr_decay)
    sum = sum + g * g                    (sum starts at initial_accumulator_value)
    p = p - clr * g / (sqrt(sum) + eps)
"""

from __future__ import annotations

from collections.abc import Iterable

from graphgrad.backend import xp
from graphgrad.tensor import full_like

from .fused import axpy
from .optimizer import Optimizer, check_nonnegative, implementation

__all__ = ["Adagrad"]


class Adagrad(Optimizer):
    def __init__(self, params: Iterable, lr: float = 1e-2, lr_decay: float = 0.0,
                 weight_decay: float = 0.0, initial_accumulator_value: float = 0.0,
                 eps: float = 1e-10, foreach: bool | None = None, *, maximize: bool = False,
                 differentiable: bool = False, fused: bool | None = None) -> None:
        check_nonnegative(lr=lr, lr_decay=lr_decay, weight_decay=weight_decay,
                          initial_accumulator_value=initial_accumulator_value, eps=eps)
        super().__init__(params, dict(lr=lr, lr_decay=lr_decay, eps=eps,
                                      weight_decay=weight_decay,
                                      initial_accumulator_value=initial_accumulator_value,
                                      maximize=maximize,
                                      **implementation(foreach=foreach,
                                                       differentiable=differentiable,
                                                       fused=fused)))

    def _update(self, p, group: dict) -> None:
        """One parameter's update in place; the state is PyTorch's ``step`` and ``sum``.
        As in PyTorch, the accumulator starts from the *optimizer's* default
        ``initial_accumulator_value`` (complex parameters: that value in both parts)."""
        lr, lr_decay, eps = group["lr"], group["lr_decay"], group["eps"]
        init = self.defaults["initial_accumulator_value"]
        step, param, g, arrays = self._begin_update(p, group, sum=lambda p: full_like(
            p, complex(init, init) if p.is_complex() else init))
        clr = lr / (1 + (step - 1) * lr_decay)
        total = arrays["sum"]
        scratch = xp.multiply(g, g)  # state_sum.addcmul_(grad, grad, value=1)
        total += scratch
        std = xp.sqrt(total)
        std += eps
        xp.divide(g, std, out=scratch)  # param.addcdiv_(grad, std, value=-clr)
        axpy(param, -clr, scratch, scratch)
        self._end_update(p)
