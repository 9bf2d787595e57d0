"""Layer ``ops``: binary cross entropy of probabilities, elementwise (PyTorch's
``binary_cross_entropy`` op with reduction 'none').

An op of its own for its gradient: composed as ``-(t log p + (1 - t) log(1 - p))`` the
derivative at a saturated probability (p exactly 0 or 1, e.g. a float32 sigmoid of a large
logit) is ``0 * inf = nan``; PyTorch's rule ``(p - t) / max(p (1 - p), 1e-12)`` stays
finite. The rules are graphgrad ops, so it differentiates to any order."""

from __future__ import annotations

from graphgrad.backend import xp

from .arithmetic import needs_grad
from .compare import where
from .elementwise import Elementwise
from . import taylor as ts

__all__: list[str] = []

# PyTorch's floor under p (1 - p) in the gradient: 1e-12 rounded to float32, whatever
# the dtype (as its kernel's constant)
_EPS = float(xp.float32(1e-12))
_LOG_FLOOR = float(xp.exp(-100.0))  # where log is clamped to -100


def _input_grad_factor(p, t):
    return (p - t) / (p * (1 - p)).clamp(min=_EPS)


def _target_grad_factor(p):
    return (1 - p).log() - p.log()  # -logit(p), as PyTorch's target gradient


class BinaryCrossEntropy(Elementwise):
    """``-(t max(log p, -100) + (1 - t) max(log(1 - p), -100))``, elementwise."""

    @staticmethod
    def forward(p, t):
        with xp.errstate(divide="ignore"):  # log(0) = -inf, then clamped as PyTorch
            log_p = xp.maximum(xp.log(p), -100)
            log_q = xp.maximum(xp.log(1 - p), -100)
        return -(t * log_p + (1 - t) * log_q)

    @staticmethod
    def vjp(g, out, p, t):
        gp = g * _input_grad_factor(p, t) if needs_grad(p) else None
        gt = g * _target_grad_factor(p) if needs_grad(t) else None
        return gp, gt

    @staticmethod
    def jvp(dots, out, p, t):
        dp, dt = dots
        total = dp * _input_grad_factor(p, t) if dp is not None else None
        if dt is not None:
            term = dt * _target_grad_factor(p)
            total = term if total is None else total + term
        return total

    @staticmethod
    def taylor(series, out, p, t):
        # -(t log p + (1 - t) log q), q = 1 - p, by the log and product rules. Where a log
        # is clamped at -100 (p or q below e^-100, saturated) its series is that of the
        # flat clamp, 0; PyTorch's first derivative there is (p - t) / 1e-12 instead
        order = ts.order_of(series)
        sp, st = series
        fp = ts.full(p, sp, order)
        fq = ts.full(1 - p, None if sp is None else ts.scale_series(sp, -1.0), order)

        def log_terms(f):
            floor = f[0] < _LOG_FLOOR
            safe = [where(floor, 1.0, f[0])] + f[1:]
            terms = ts.log_series(safe, 0.0, order)
            return [where(floor, -100.0, safe[0].log())] + [
                None if c is None else where(floor, 0.0, c) for c in terms]
        lp, lq = log_terms(fp), log_terms(fq)
        ft = ts.full(t, st, order)
        fu = ts.full(1 - t, None if st is None else ts.scale_series(st, -1.0), order)
        return [None if (c := ts.plus(x, y)) is None else -c for x, y in zip(
            ts.mul_series(ft, lp, order), ts.mul_series(fu, lq, order), strict=True)]
