"""Layer ``optim``: stochastic gradient descent with momentum, dampening, Nesterov
momentum and weight decay, PyTorch's update exactly:

    g = grad + weight_decay * p
    buf = g (first step), else momentum * buf + (1 - dampening) * g
    g = g + momentum * buf (nesterov), else buf
    p = p - lr * g
"""

from __future__ import annotations

from collections.abc import Callable, Iterable

from graphgrad.autograd import no_grad

from .fused import axpy, buffer, grad_array, new_state, written
from .optimizer import Optimizer

__all__ = ["SGD"]


class SGD(Optimizer):
    def __init__(self, params: Iterable, lr: float = 1e-3, momentum: float = 0.0,
                 dampening: float = 0.0, weight_decay: float = 0.0, nesterov: bool = False,
                 *, maximize: bool = False) -> None:
        if lr < 0.0:
            raise ValueError(f"Invalid learning rate: {lr}")
        if momentum < 0.0:
            raise ValueError(f"Invalid momentum value: {momentum}")
        if weight_decay < 0.0:
            raise ValueError(f"Invalid weight_decay value: {weight_decay}")
        if nesterov and (momentum <= 0 or dampening != 0):
            raise ValueError("Nesterov momentum requires a momentum and zero dampening")
        super().__init__(params, dict(lr=lr, momentum=momentum, dampening=dampening,
                                      weight_decay=weight_decay, nesterov=nesterov,
                                      maximize=maximize))

    def step(self, closure: Callable | None = None):
        """One update of every parameter with a gradient, on the buffers in place (see
        ``fused``): the formulas of the module docstring, in PyTorch's order."""
        loss = self._closure_loss(closure)
        with no_grad():
            for group in self.param_groups:
                for p in group["params"]:
                    if p._grad is not None:
                        self._update(p, group)
        return loss

    def _update(self, p, group: dict) -> None:
        lr, momentum = group["lr"], group["momentum"]
        dampening, wd = group["dampening"], group["weight_decay"]
        param = buffer(p, "SGD.step")
        g = grad_array(p, group["maximize"])
        if wd != 0:
            g = g + wd * param  # grad.add(param, alpha=weight_decay): a new array
        if momentum != 0:
            state = self.state[p]
            buf = state.get("momentum_buffer")
            if buf is None:
                buf = state["momentum_buffer"] = new_state(g.copy())
            else:
                b = buffer(buf)
                b *= momentum
                axpy(b, 1 - dampening, g)
                written(buf)
            g = g + momentum * buf._array if group["nesterov"] else buf._array
        axpy(param, -lr, g)
        written(p)
