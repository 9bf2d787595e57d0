"""Layer ``optim``: stochastic gradient descent with momentum, dampening, Nesterov
momentum and weight decay, PyTorch's update exactly:

    g = grad + weight_decay * p
    buf = g (first step), else momentum * buf + (1 - dampening) * g
    g = g + momentum * buf (nesterov), else buf
    p = p - lr * g
"""

from __future__ import annotations

from collections.abc import Iterable

from .fused import axpy, buffer, decay, grad_array, new_state, written
from .optimizer import Optimizer, check_nonnegative, implementation

__all__ = ["SGD"]


class SGD(Optimizer):
    def __init__(self, params: Iterable, lr: float = 1e-3, momentum: float = 0.0,
                 dampening: float = 0.0, weight_decay: float = 0.0, nesterov: bool = False,
                 *, maximize: bool = False, foreach: bool | None = None,
                 differentiable: bool = False, fused: bool | None = None) -> None:
        check_nonnegative(lr=lr, momentum=momentum, weight_decay=weight_decay)
        if nesterov and (momentum <= 0 or dampening != 0):
            raise ValueError("Nesterov momentum requires a momentum and zero dampening")
        super().__init__(params, dict(lr=lr, momentum=momentum, dampening=dampening,
                                      weight_decay=weight_decay, nesterov=nesterov,
                                      maximize=maximize,
                                      **implementation(foreach=foreach,
                                                       differentiable=differentiable,
                                                       fused=fused)))

    def _update_group(self, group: dict) -> None:
        """Plain SGD (no momentum, no weight decay) as one loop over the group, each
        update ``p += (-lr) * grad`` (``p.add_(grad, alpha=-lr)``) on the arrays: the
        per-parameter calls of ``_update`` are a third of a small model's step."""
        if group["momentum"] != 0 or group["weight_decay"] != 0 or \
                type(self)._update is not SGD._update:   # (a subclass's own rule)
            super()._update_group(group)
            return
        alpha = group["lr"] if group["maximize"] else -group["lr"]
        for p in group["params"]:
            g = p._grad
            if g is None:
                continue
            param = p._array
            if not param.flags.writeable:
                buffer(p, "SGD.step")   # (raises the read-only error)
            if alpha == 1:   # (axpy's rule: no product by one)
                param += g._array
            else:
                param += alpha * g._array
            vc = p._version_counter
            if vc is None:
                p._version_counter = [1]
            else:
                vc[0] += 1

    def _update(self, p, group: dict) -> None:
        """One update of ``p`` on the buffers in place (see ``fused``): the formulas of
        the module docstring, in PyTorch's order."""
        lr, momentum = group["lr"], group["momentum"]
        dampening, wd = group["dampening"], group["weight_decay"]
        param = buffer(p, "SGD.step")
        g = grad_array(p, group["maximize"])
        g = decay(param, g, lr, wd)
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
