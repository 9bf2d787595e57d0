"""Layer ``ops``: the negative log likelihood of class indices averaged over a batch
(``nll_loss``'s training case, behind ``cross_entropy``) and its adjoint, PyTorch's
``NllLossBackward0`` pair.

As a gather, picking ``logp[i, t_i]`` would backpropagate through a scatter-add
(``np.add.at``, slow) and take four ops in a training step; here the forward is one op
and its gradient one write into zeros: each row holds exactly one target. Each op is
linear in its first input, so each one's vjp is the other and its jvp itself.

Rows whose target is ``ignore_index`` count for nothing, as in ``nll_loss``: the mean is
over the others (nan when none is left, with a zero gradient). Deciding that from the
targets' values in ``forward`` (not in the loss function) keeps the op one graph node
when the targets are a graph value."""

from __future__ import annotations

from graphgrad.backend import xp

from .base import Op, Spec
from .batching import to_front
from .compare import where
from .gathering import Gather, OneHot
from . import taylor as ts

__all__: list[str] = []


def _check_targets(n: int, classes: int, target, ignore_index: int):
    """The rows to count (a boolean mask; None: all of them), after the checks."""
    if target.dtype.kind not in "iu":
        raise RuntimeError(f"nll_loss: expected target of integer dtype (class indices), got "
                           f"{target.dtype}")
    if target.shape != (n,):
        raise ValueError(f"nll_loss: expected target of shape ({n},), got {target.shape}")
    if not n:
        return None
    lo, hi = xp.minimum.reduce(target), xp.maximum.reduce(target)
    keep = None
    if lo <= ignore_index <= hi:
        keep = target != ignore_index
        if keep.all():
            keep = None
        else:
            kept = target[keep]
            lo = xp.minimum.reduce(kept) if kept.size else 0
            hi = xp.maximum.reduce(kept) if kept.size else 0
    if lo < 0 or hi >= classes:
        raise IndexError(f"nll_loss: Target {int(lo if lo < 0 else hi)} is out of bounds "
                         f"(number of classes: {classes}).")
    return keep


class NllLoss(Op):
    """``-mean_i logp[i, target[i]]`` of log-probabilities (N, C) and class indices (N,)
    in range, over the rows whose target is not ``ignore_index``: ``nll_loss(logp,
    target)`` with no weights, reduction mean. An empty batch gives nan, as the mean of
    nothing does in PyTorch."""

    holomorphic = True
    promotes = False
    saves_inputs = (1,)  # the vjp reads the targets only

    @staticmethod
    def forward(logp, target, *, ignore_index=-100):
        if logp.ndim != 2:
            raise ValueError(f"nll_loss: expected log-probabilities of shape (N, C), got "
                             f"{logp.shape}")
        if logp.dtype.kind not in "fc":
            raise RuntimeError(f"nll_loss: expected a floating point input, got {logp.dtype}")
        n = logp.shape[0]
        keep = _check_targets(n, logp.shape[1], target, ignore_index)
        rows = xp.arange(n)
        if keep is not None:
            rows, target = rows[keep], target[keep]
        if not rows.size:  # the mean of nothing (without NumPy's division warning)
            return xp.full((), xp.nan, logp.dtype)
        return xp.asarray(-xp.add.reduce(logp[rows, target]) / logp.dtype.type(rows.size))

    @staticmethod
    def vjp(g, out, logp, target, *, ignore_index=-100):
        return NllLossBackward.apply(g, target, classes=logp.shape[1],
                                     ignore_index=ignore_index), None

    @staticmethod
    def jvp(dots, out, logp, target, *, ignore_index=-100):
        return NllLoss.apply(dots[0], target, ignore_index=ignore_index)

    taylor = classmethod(ts.linear_taylor)

    @classmethod
    def infer(cls, logp, target, *, ignore_index=-100) -> Spec:
        return Spec((), logp.dtype)

    @classmethod
    def batch(cls, vals, bdims, *, ignore_index=-100):
        """Per example, the mean of a gather over the rows kept (the targets broadcast
        when unbatched)."""
        logp, target = to_front(vals[0], bdims[0]), to_front(vals[1], bdims[1])
        if bdims[0] is None:
            logp = logp.expand(target.shape[0], *logp.shape)
        target = target.expand(*logp.shape[:2])
        keep, safe = _kept(target, ignore_index)
        picked = Gather.apply(logp, safe.unsqueeze(2), dim=2).squeeze(2)
        w = keep.to(logp.dtype)
        return -(picked * w).sum(dim=1) / w.sum(dim=1), 0


def _kept(target, ignore_index: int) -> tuple:
    """The rows kept (bool) and the targets with the ignored ones replaced by class 0."""
    keep = target != ignore_index
    return keep, where(keep, target, 0)


class NllLossBackward(Op):
    """The gradient of ``NllLoss`` for an incoming gradient ``g`` (0-d): zeros of shape
    (N, classes) with ``-g / K`` at each kept row's target (``K`` rows kept)."""

    holomorphic = True
    promotes = False
    saves_inputs = (1,)

    @staticmethod
    def forward(g, target, *, classes, ignore_index=-100):
        n = target.shape[0]
        keep = _check_targets(n, classes, target, ignore_index)
        out = xp.zeros((n, classes), g.dtype)
        rows = xp.arange(n)
        if keep is not None:
            rows, target = rows[keep], target[keep]
        if rows.size:
            out[rows, target] = -g / g.dtype.type(rows.size)
        return out

    @staticmethod
    def vjp(gg, out, g, target, *, classes, ignore_index=-100):
        return NllLoss.apply(gg, target, ignore_index=ignore_index), None

    @staticmethod
    def jvp(dots, out, g, target, *, classes, ignore_index=-100):
        return NllLossBackward.apply(dots[0], target, classes=classes,
                                     ignore_index=ignore_index)

    taylor = classmethod(ts.linear_taylor)

    @classmethod
    def infer(cls, g, target, *, classes, ignore_index=-100) -> Spec:
        return Spec((target.shape[0], classes), g.dtype)

    @classmethod
    def batch(cls, vals, bdims, *, classes, ignore_index=-100):
        """``one_hot(target) * (-g / K)`` on the kept rows, with a batched ``g`` as
        (B, 1, 1)."""
        g, target = to_front(vals[0], bdims[0]), to_front(vals[1], bdims[1])
        if bdims[0] is not None:
            g = g.reshape(g.shape[0], 1, 1)
        keep, safe = _kept(target, ignore_index)
        w = keep.to(g.dtype).unsqueeze(-1)
        count = w.sum(dim=-2, keepdim=True)
        count = where(count == 0, 1.0, count)   # nothing kept: a zero gradient, not nan
        return OneHot.apply(safe, num_classes=classes).to(g.dtype) * w * (-g / count), 0
