"""Layer ``optim``: Adam (Kingma & Ba 2014) and AdamW (decoupled weight decay,
Loshchilov & Hutter 2019), with PyTorch's update exactly:

    p = p * (1 - lr * weight_decay)                       (AdamW only)
    g = grad + weight_decay * p                           (Adam only)
    m = m + (1 - beta1) * (g - m);  v = beta2 * v + (1 - beta2) * g * g
    vmax = max(vmax, v)                                   (amsgrad: use vmax for v)
    p = p - lr / (1 - beta1^t) * m / (sqrt(v) / sqrt(1 - beta2^t) + eps)
"""

from __future__ import annotations

from collections.abc import Callable, Iterable

from graphgrad.autograd import no_grad
from graphgrad.backend import xp
from graphgrad.tensor import tensor, zeros_like

from .fused import axpy, buffer, grad_array, written
from .optimizer import Optimizer

__all__ = ["Adam", "AdamW"]


class Adam(Optimizer):
    _decoupled = False

    def __init__(self, params: Iterable, lr: float = 1e-3,
                 betas: tuple[float, float] = (0.9, 0.999), eps: float = 1e-8,
                 weight_decay: float = 0.0, amsgrad: bool = False, *,
                 maximize: bool = False) -> None:
        if lr < 0.0:
            raise ValueError(f"Invalid learning rate: {lr}")
        if eps < 0.0:
            raise ValueError(f"Invalid epsilon value: {eps}")
        for i, b in enumerate(betas):
            if not 0.0 <= b < 1.0:
                raise ValueError(f"Invalid beta parameter at index {i}: {b}")
        if weight_decay < 0.0:
            raise ValueError(f"Invalid weight_decay value: {weight_decay}")
        super().__init__(params, dict(lr=lr, betas=tuple(betas), eps=eps,
                                      weight_decay=weight_decay, amsgrad=amsgrad,
                                      maximize=maximize))

    def step(self, closure: Callable | None = None):
        loss = self._closure_loss(closure)
        with no_grad():
            for group in self.param_groups:
                for p in group["params"]:
                    if p._grad is not None:
                        self._update(p, group)
        return loss

    def _update(self, p, group: dict) -> None:
        """One parameter's update on the buffers in place (see ``fused``), in PyTorch's
        order of operations (its single-tensor path), with one scratch array."""
        lr, (beta1, beta2), eps = group["lr"], group["betas"], group["eps"]
        wd, amsgrad = group["weight_decay"], group["amsgrad"]
        param = buffer(p, f"{type(self).__name__}.step")
        g = grad_array(p, group["maximize"])
        state = self.state[p]
        if not state:
            state["step"] = tensor(0.0)  # a float32 0-d tensor, as PyTorch keeps it
            state["exp_avg"] = zeros_like(p)
            state["exp_avg_sq"] = zeros_like(p)
            if amsgrad:
                state["max_exp_avg_sq"] = zeros_like(p)
        step_t, m_t, v_t = state["step"], state["exp_avg"], state["exp_avg_sq"]
        step_t._array += 1
        step = float(step_t._array)
        if wd != 0:
            if self._decoupled:
                param *= 1 - lr * wd
            else:
                g = g + wd * param  # grad.add(param, alpha=weight_decay)
        m, v = buffer(m_t), buffer(v_t)
        if param.dtype.kind == "c":  # as PyTorch (view_as_real): real and imaginary parts
            param, m, v = _as_real(param), _as_real(m), _as_real(v)  # are separate entries
            g = _as_real(xp.ascontiguousarray(g))
        scratch = xp.subtract(g, m)  # exp_avg.lerp_(grad, 1 - beta1)
        axpy(m, 1 - beta1, scratch, scratch)
        v *= beta2  # exp_avg_sq.mul_(beta2).addcmul_(grad, grad, value=1 - beta2)
        xp.multiply(g, g, out=scratch)
        axpy(v, 1 - beta2, scratch, scratch)
        written(step_t, m_t, v_t)
        if amsgrad:
            vmax_t = state["max_exp_avg_sq"]
            vmax = buffer(vmax_t)
            vmax = _as_real(vmax) if vmax.dtype.kind == "c" else vmax
            xp.maximum(vmax, v, out=vmax)
            written(vmax_t)
            v = vmax
        bias_correction1 = 1 - beta1 ** step
        bias_correction2_sqrt = (1 - beta2 ** step) ** 0.5
        denom = xp.sqrt(v, out=scratch)  # (sqrt(v) / bias_correction2_sqrt).add_(eps)
        denom /= bias_correction2_sqrt
        denom += eps
        xp.divide(m, denom, out=scratch)  # param.addcdiv_(m, denom, value=-step_size)
        axpy(param, -lr / bias_correction1, scratch, scratch)
        written(p)


def _as_real(a):
    """A contiguous complex array as a real view with a trailing (real, imag) pair."""
    if not a.flags.c_contiguous:
        raise NotImplementedError("Adam: complex parameters must be contiguous tensors")
    return a.view(a.real.dtype).reshape(*a.shape, 2)


class AdamW(Adam):
    """Adam with the weight decay applied to the parameters, not the gradient
    (default ``weight_decay=1e-2``)."""

    _decoupled = True

    def __init__(self, params: Iterable, lr: float = 1e-3,
                 betas: tuple[float, float] = (0.9, 0.999), eps: float = 1e-8,
                 weight_decay: float = 1e-2, amsgrad: bool = False, *,
                 maximize: bool = False) -> None:
        super().__init__(params, lr, betas, eps, weight_decay, amsgrad, maximize=maximize)
