"""Layer ``ops``: the negative log likelihood of class indices averaged over a batch
(``nll_loss``'s training case, behind ``cross_entropy``) and its adjoint, PyTorch's
``NllLossBackward0`` pair.

As a gather, picking ``logp[i, t_i]`` would backpropagate through a scatter-add
(``np.add.at``, slow) and take four ops in a training step; here the forward is one op
and its gradient one write into zeros: each row holds exactly one target. Each op is
linear in its first input, so each one's vjp is the other and its jvp itself."""

from __future__ import annotations

from graphgrad.backend import xp

from .base import Op, Spec
from .batching import to_front
from .index import Gather, OneHot
from . import taylor as ts

__all__: list[str] = []


def _check_targets(n: int, classes: int, target) -> None:
    if target.dtype.kind not in "iu":
        raise RuntimeError(f"nll_loss: expected target of integer dtype (class indices), got "
                           f"{target.dtype}")
    if target.shape != (n,):
        raise ValueError(f"nll_loss: expected target of shape ({n},), got {target.shape}")
    if n:
        lo, hi = xp.minimum.reduce(target), xp.maximum.reduce(target)
        if lo < 0 or hi >= classes:
            raise IndexError(f"nll_loss: Target {int(lo if lo < 0 else hi)} is out of bounds "
                             f"(number of classes: {classes}).")


class NllLoss(Op):
    """``-mean_i logp[i, target[i]]`` of log-probabilities (N, C) and class indices (N,)
    in range: ``nll_loss(logp, target)`` with no weights, nothing ignored, reduction
    mean. An empty batch gives nan, as the mean of nothing does in PyTorch."""

    holomorphic = True
    promotes = False
    saves_inputs = (1,)  # the vjp reads the targets only

    @staticmethod
    def forward(logp, target):
        if logp.ndim != 2:
            raise ValueError(f"nll_loss: expected log-probabilities of shape (N, C), got "
                             f"{logp.shape}")
        if logp.dtype.kind not in "fc":
            raise RuntimeError(f"nll_loss: expected a floating point input, got {logp.dtype}")
        n = logp.shape[0]
        _check_targets(n, logp.shape[1], target)
        if not n:  # the mean of nothing (without NumPy's division warning)
            return xp.full((), xp.nan, logp.dtype)
        return xp.asarray(-xp.add.reduce(logp[xp.arange(n), target]) / logp.dtype.type(n))

    @staticmethod
    def vjp(g, out, logp, target):
        return NllLossBackward.apply(g, target, classes=logp.shape[1]), None

    @staticmethod
    def jvp(dots, out, logp, target):
        return NllLoss.apply(dots[0], target)

    taylor = classmethod(ts.linear_taylor)

    @classmethod
    def infer(cls, logp, target) -> Spec:
        return Spec((), logp.dtype)

    @classmethod
    def batch(cls, vals, bdims):
        """Per example, the mean of a gather (the targets broadcast when unbatched)."""
        logp, target = to_front(vals[0], bdims[0]), to_front(vals[1], bdims[1])
        if bdims[0] is None:
            logp = logp.expand(target.shape[0], *logp.shape)
        index = target.expand(*logp.shape[:2]).unsqueeze(2)
        return -Gather.apply(logp, index, dim=2).mean(dim=(1, 2)), 0


class NllLossBackward(Op):
    """The gradient of ``NllLoss`` for an incoming gradient ``g`` (0-d): zeros of shape
    (N, classes) with ``-g / N`` at each row's target."""

    holomorphic = True
    promotes = False
    saves_inputs = (1,)

    @staticmethod
    def forward(g, target, *, classes):
        n = target.shape[0]
        _check_targets(n, classes, target)
        out = xp.zeros((n, classes), g.dtype)
        if n:
            out[xp.arange(n), target] = -g / g.dtype.type(n)
        return out

    @staticmethod
    def vjp(gg, out, g, target, *, classes):
        return NllLoss.apply(gg, target), None

    @staticmethod
    def jvp(dots, out, g, target, *, classes):
        return NllLossBackward.apply(dots[0], target, classes=classes)

    taylor = classmethod(ts.linear_taylor)

    @classmethod
    def infer(cls, g, target, *, classes) -> Spec:
        return Spec((target.shape[0], classes), g.dtype)

    @classmethod
    def batch(cls, vals, bdims, *, classes):
        """``one_hot(target) * (-g / N)``, with a batched ``g`` as (B, 1, 1)."""
        g, target = to_front(vals[0], bdims[0]), to_front(vals[1], bdims[1])
        if bdims[0] is not None:
            g = g.reshape(g.shape[0], 1, 1)
        n = target.shape[-1]
        return OneHot.apply(target, num_classes=classes) * (g * (-1.0 / n)), 0
