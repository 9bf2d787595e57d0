"""Layer ``optim``: Rprop, resilient backpropagation (Riedmiller & Braun 1993), with
PyTorch's update exactly. Only the signs of the gradients are used; each entry has its
own step size (starting at ``lr``):

    s = sign(g * g_prev) -> etaplus where > 0, etaminus where < 0, 1 where 0
    step_size = clamp(step_size * s, *step_sizes)
    g = 0 where the sign flipped (s == etaminus);  p = p - sign(g) * step_size
    g_prev = g
"""

from __future__ import annotations

from collections.abc import Iterable

from graphgrad.backend import xp
from graphgrad.tensor import full_like, zeros_like

from .optimizer import Optimizer, check_nonnegative, implementation

__all__ = ["Rprop"]


class Rprop(Optimizer):
    def __init__(self, params: Iterable, lr: float = 1e-2,
                 etas: tuple[float, float] = (0.5, 1.2),
                 step_sizes: tuple[float, float] = (1e-6, 50), *, capturable: bool = False,
                 foreach: bool | None = None, maximize: bool = False,
                 differentiable: bool = False) -> None:
        check_nonnegative(lr=lr)
        if not 0.0 < etas[0] < 1.0 < etas[1]:
            raise ValueError(f"Invalid eta values: {etas[0]}, {etas[1]}")
        super().__init__(params, dict(lr=lr, etas=tuple(etas), step_sizes=tuple(step_sizes),
                                      maximize=maximize,
                                      **implementation(capturable=capturable, foreach=foreach,
                                                       differentiable=differentiable)))

    def _update(self, p, group: dict) -> None:
        """One parameter's update in place; the state is PyTorch's ``step``, ``prev``
        and ``step_size`` (which starts at the group's ``lr``; a later change of ``lr``
        has no effect, as in PyTorch)."""
        etaminus, etaplus = group["etas"]
        step_size_min, step_size_max = group["step_sizes"]
        lr = group["lr"]
        _, param, g, arrays = self._begin_update(p, group, prev=zeros_like, step_size=lambda p:
                                                 full_like(p, complex(lr, lr) if p.is_complex()
                                                           else lr))
        prev, step_size = arrays["prev"], arrays["step_size"]
        product = xp.multiply(g, prev)
        factor = xp.where(product > 0, etaplus, xp.where(product < 0, etaminus, 1.0))
        step_size *= factor.astype(step_size.dtype)
        xp.clip(step_size, step_size_min, step_size_max, out=step_size)
        g = xp.where(factor == etaminus, 0, g).astype(g.dtype)
        param -= xp.sign(g) * step_size  # param.addcmul_(grad.sign(), step_size, value=-1)
        prev[...] = g
        self._end_update(p)
