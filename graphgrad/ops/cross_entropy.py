"""Layer ``ops``: softmax cross entropy of logits (N, C) against class indices as one op,
with PyTorch's class weights, ``ignore_index``, label smoothing and reductions, and its
gradient as one array kernel.

As ``log_softmax`` then ``nll_loss`` a language model's step keeps the logits and the
log-probabilities (two (tokens, vocabulary) arrays) through the backward pass, and the
backward makes two more. Here the op keeps only its input, and the gradient
``G_i (A_i softmax(x)_i - a_i)`` is computed into one buffer: the softmax is recomputed
from the logits (one exp), the price of not keeping a second array of their size.

Row ``i`` of the loss is ``-sum_c a_ic log_softmax(x)_ic`` with the target weights
``a_ic = (1 - eps) w_i [c = t_i] + (eps / C) v_i w_c`` (``w_i`` the target's class
weight on kept rows, 0 on ignored ones; ``v_i`` whether the row is kept) and ``A_i =
sum_c a_ic``. The mean divides by ``sum_i w_i``; a batch whose targets are all ignored
has a nan loss and a zero gradient, as in PyTorch."""

from __future__ import annotations

from graphgrad.backend import xp
from graphgrad.tensor import Tensor

from . import taylor as ts
from .base import Op, Residuals, Spec
from .batching import by_example
from .compare import where
from .fused import array_backward
from .gathering import OneHot
from .nll import _check_targets
from .softmax import Softmax

__all__: list[str] = []

_BLOCK = 1 << 17  # elements of a row block (512 KiB of float32: in cache, few calls)
_WEIGHT_GRAD = "the derivative for 'weight' is not implemented."


def _kept_rows(x, target, weight, ignore_index: int):
    """The kept rows, their targets and their class weights (None: unweighted), after
    PyTorch's checks."""
    n, c = x.shape
    if weight is not None and (weight.ndim != 1 or weight.shape[0] != c):
        raise RuntimeError(f"weight tensor should be defined either for all {c} classes or "
                           f"no classes but got weight tensor of shape: {list(weight.shape)}")
    keep = _check_targets(n, c, target, ignore_index)
    rows = xp.arange(n)
    if keep is not None:
        rows, target = rows[keep], target[keep]
    w = None if weight is None else weight.astype(x.dtype, copy=False)[target]
    return rows, target, w


def _row_max(x, out=None):
    """Each row's largest (real part), the shift that keeps exp finite."""
    return xp.maximum.reduce(x if x.dtype.kind == "f" else x.real, axis=1, keepdims=True,
                             initial=-xp.inf, out=out)


def _rows_per_block(c: int) -> int:
    """Rows of a block of (N, C) logits that the kernels keep in cache."""
    return max(1, _BLOCK // max(c, 1))


class CrossEntropy(Op):
    """``cross_entropy(x, target, weight)`` for logits (N, C), class indices (N,) and an
    optional class weight (C,) that is not differentiated (PyTorch's is not either)."""

    holomorphic = True  # log-softmax and linear maps: the complex step goes through
    promotes = False
    backward_name = "NllLossBackward0"  # what PyTorch's cross_entropy shows as grad_fn
    saves_inputs = True  # the gradient recomputes the softmax from the logits

    @staticmethod
    def forward(x, target, weight=None, *, ignore_index=-100, reduction="mean",
                label_smoothing=0.0):
        return _loss(x, target, weight, ignore_index, reduction, label_smoothing, None)

    @staticmethod
    def vjp(g, out, x, target, weight=None, *, ignore_index=-100, reduction="mean",
            label_smoothing=0.0):
        if array_backward():
            # a plain eager backward: one buffer, where the ops below make several arrays
            # of the logits' size (a language model's (tokens, vocabulary))
            kernel = CrossEntropy.kernel_vjp(g, out, x, target, weight,
                                             ignore_index=ignore_index, reduction=reduction,
                                             label_smoothing=label_smoothing)
            if kernel is not None:
                return kernel
        if weight is not None and weight.requires_grad:
            raise RuntimeError(_WEIGHT_GRAD)
        rest = (None,) if weight is None else (None, None)
        a, w, valid = _target_weights(x, target, weight, ignore_index, label_smoothing)
        residual = Softmax.apply(x, dim=1) * a.sum(dim=1, keepdim=True) - a
        if reduction == "none":
            scale = g.unsqueeze(1)
        elif reduction == "sum":
            scale = g
        else:  # all rows ignored: a zero gradient (the residual is zero), not nan
            total = w.sum()
            scale = g / where(valid.sum() == 0, 1.0, total)
        return (residual * scale, *rest)

    @staticmethod
    def kernel_vjp(g, out, x, target, weight=None, *, ignore_index=-100, reduction="mean",
                   label_smoothing=0.0):
        """The vjp as one ``CrossEntropyBackward`` (ops/fused.py): eager backward and the
        compiled backward. In a compiled backward it beats the fused composite rule (a
        one-hot of the targets, a softmax per row block): 41 -> 24 ms for a
        forward+backward on (4096, 1024) float32 (bench/compile_fusion.py)."""
        if weight is not None and weight.requires_grad:
            raise RuntimeError(_WEIGHT_GRAD)
        if g._array.dtype.kind not in "fc":   # (a Symbol's stand-in array has its dtype)
            return None
        params = {"ignore_index": ignore_index, "reduction": reduction,
                  "label_smoothing": label_smoothing}
        args = (g, x, target) if weight is None else (g, x, target, weight)
        rest = (None,) if weight is None else (None, None)
        return (CrossEntropyBackward.apply(*args, **params), *rest)

    @staticmethod
    def jvp(dots, out, x, target, weight=None, *, ignore_index=-100, reduction="mean",
            label_smoothing=0.0):
        if len(dots) > 2 and dots[2] is not None:
            raise RuntimeError(_WEIGHT_GRAD)
        d = dots[0]
        if d is None:
            return None
        lp = d - (Softmax.apply(x, dim=1) * d).sum(dim=1, keepdim=True)  # log_softmax's jvp
        return _weighted_loss([lp], x, target, weight, ignore_index, reduction,
                              label_smoothing)[0]

    @staticmethod
    def taylor(series, out, x, target, weight=None, *, ignore_index=-100, reduction="mean",
               label_smoothing=0.0):
        k = ts.order_of(series)
        if len(series) > 2 and series[2] is not None:
            raise RuntimeError(_WEIGHT_GRAD)
        if series[0] is None:
            return [None] * k
        lse, _ = ts.logsumexp_series(series[0], Softmax.apply(x, dim=1), 1, k)
        lps = [ts.plus(xk, None if t is None else -t)
               for xk, t in zip(series[0], lse, strict=True)]
        return _weighted_loss(lps, x, target, weight, ignore_index, reduction, label_smoothing)

    @classmethod
    def infer(cls, x, target, weight=None, *, ignore_index=-100, reduction="mean",
              label_smoothing=0.0) -> Spec:
        return Spec((x.shape[0],) if reduction == "none" else (), x.dtype)

    @classmethod
    def batch(cls, vals, bdims, **params):
        return by_example(cls, vals, bdims, **params)



class _CrossEntropyStep(CrossEntropy):
    """``CrossEntropy`` as ``F.cross_entropy`` records it in plain eager mode (no mode
    on the dispatch stack): a batch of one row block (a training step's) keeps the
    forward's exp(x - max) and its row sums in ``run`` (``Residuals``), so a plain eager
    backward does not compute them again, and runs the kernel without a dispatch. Any
    other backward (``create_graph``, a transform, a second pass with
    ``retain_graph``) is ``CrossEntropy``'s; ``run`` never reaches a mode or a graph.
    Its leading underscore keeps it out of the op registry: no mode ever sees it."""

    @classmethod
    def explain_failure(cls, err: Exception, args: tuple, params: dict) -> Exception:
        params = {k: v for k, v in params.items() if k != "run"}
        return CrossEntropy.explain_failure(err, args, params)   # (its name in the message)

    @staticmethod
    def forward(x, target, weight=None, *, run: Residuals, ignore_index=-100,
                reduction="mean", label_smoothing=0.0):
        return _loss(x, target, weight, ignore_index, reduction, label_smoothing, run)

    @staticmethod
    def vjp(g, out, x, target, weight=None, *, run: Residuals, ignore_index=-100,
            reduction="mean", label_smoothing=0.0):
        saved, run.values = run.values, None   # released, as eager backward frees them
        if saved is not None and g._array.dtype.kind in "fc" and array_backward():
            args = (g._array, x._array, target._array, None, ignore_index, reduction,
                    label_smoothing, saved)
            if weight is None:   # (row sums of exp are at least 1: no division warns)
                return (Tensor._make(_gradient(*args)), None)
            # kept targets whose class weights sum to 0: a nan gradient (PyTorch's)
            with xp.errstate(divide="ignore", invalid="ignore"):
                buf = _gradient(*args[:3], weight._array, *args[4:])
            return (Tensor._make(buf), None, None)
        return CrossEntropy.vjp(g, out, x, target, weight, ignore_index=ignore_index,
                                reduction=reduction, label_smoothing=label_smoothing)


def _loss(x, target, weight, ignore_index: int, reduction: str, label_smoothing: float,
          run: Residuals | None):
    """``CrossEntropy``'s forward; given ``run``, a batch of one row block leaves there
    what the gradient reads (``_gradient``'s ``saved``)."""
    if x.ndim != 2:
        raise ValueError(f"cross_entropy: expected logits of shape (N, C), got {x.shape}")
    if x.dtype.kind not in "fc":
        raise RuntimeError(f"cross_entropy: expected a floating point input, got {x.dtype}")
    if reduction not in ("none", "mean", "sum"):
        raise RuntimeError(f"cross_entropy: {reduction} is not a valid value for "
                           f"reduction")
    if not 0.0 <= label_smoothing <= 1.0:
        raise RuntimeError(f"cross_entropy: label_smoothing must be between 0.0 and 1.0. "
                           f"Got: {label_smoothing}")
    n, c = x.shape
    rows, t, w = _kept_rows(x, target, weight, ignore_index)
    dt = x.dtype.type
    # row block by row block, the block's shifted logits (x - max) in a buffer that
    # stays in cache: one read of x from memory, where whole arrays made five passes.
    # Each row is reduced as NumPy reduces a C-contiguous whole array: the same bits
    # (a strided x's rows are now summed pairwise, and with weight and label
    # smoothing BLAS's product on a block may round a last bit differently)
    step = _rows_per_block(c)
    buf = xp.empty((min(step, n), c), x.dtype)
    picked = None
    if n <= step and not label_smoothing:   # one block: the loop's operations, on x whole
        m = _row_max(x)
        xp.subtract(x, m, out=buf)
        picked = buf[rows, t]   # x - max at the targets, before the exp
        xp.exp(buf, out=buf)
        total = xp.add.reduce(buf, axis=1)
    else:
        m = xp.empty((n, 1), xp.real(x[:0]).dtype)
        total = xp.empty(n, x.dtype)
    if label_smoothing:  # sum_c w_c (x - max)_ic, read before the exp overwrites it
        spread = xp.empty(n, x.dtype)
        wc = None if weight is None else weight.astype(x.dtype)
    for i in range(0, n, step) if n > step or label_smoothing else ():
        xb, sb = x[i:i + step], buf[:min(step, n - i)]
        xp.subtract(xb, _row_max(xb, out=m[i:i + step]), out=sb)
        if label_smoothing:
            spread[i:i + step] = sb.sum(axis=1) if wc is None else sb @ wc
        xp.exp(sb, out=sb)
        xp.add.reduce(sb, axis=1, out=total[i:i + step])
    if run is not None and n <= step:   # buf holds exp(x - max) of every row
        run.values = (rows, t, w, buf, total)
    del buf
    every = rows.size == n   # (no row ignored: rows is arange(n), no gathers by it)
    if picked is None:
        picked = x[rows, t] - (m[:, 0] if every else m[rows, 0])
    log_total = xp.log(total)
    lt = log_total if every else log_total[rows]
    loss = lt - picked          # -log_softmax at the target
    if w is not None:
        loss *= w
    if label_smoothing:
        total_w = c if weight is None else weight.astype(x.dtype).sum()
        loss *= dt(1 - label_smoothing)
        loss += dt(label_smoothing / c) * (total_w * lt - spread[rows])
    if reduction == "none":
        out = xp.zeros(n, x.dtype)
        out[rows] = loss
        return out
    total = xp.add.reduce(loss)
    if reduction == "sum":
        return xp.asarray(total, x.dtype)
    if not rows.size:  # the mean of nothing (without NumPy's division warning)
        return xp.full((), xp.nan, x.dtype)
    if w is None:
        return xp.asarray(total / dt(rows.size), x.dtype)
    with xp.errstate(divide="ignore", invalid="ignore"):  # weights summing to 0: nan
        return xp.asarray(total / (dt(rows.size) if w is None else xp.add.reduce(w)),
                          x.dtype)


def _target_weights(x, target, weight, ignore_index: int, label_smoothing: float):
    """As graphgrad ops: the target weights ``a`` (N, C), each row's target class weight
    (N, 1; 0 on ignored rows) and which rows are kept (N,)."""
    c = x.shape[1]
    valid = target != ignore_index
    kept = valid.to(x.dtype).unsqueeze(1)
    onehot = OneHot.apply(where(valid, target, 0), num_classes=c).to(x.dtype)
    if weight is None:
        w, spread = kept, kept
    else:
        weight = weight.to(x.dtype)
        w = (onehot * weight).sum(dim=1, keepdim=True) * kept
        spread = kept * weight
    if not label_smoothing:
        return onehot * w, w, valid
    return onehot * (w * (1 - label_smoothing)) + spread * (label_smoothing / c), w, valid


def _weighted_loss(lps: list, x, target, weight, ignore_index: int, reduction: str,
                   label_smoothing: float) -> list:
    """The loss's terms for terms ``lps`` of the log-probabilities (a tangent, a Taylor
    coefficient; None is zero): the reduction of ``-sum_c a_ic lp_ic``, linear in lp."""
    a, w, _ = _target_weights(x, target, weight, ignore_index, label_smoothing)
    out = []
    for lp in lps:
        if lp is None:
            out.append(None)
            continue
        per = -(a * lp).sum(dim=1)
        if reduction == "sum":
            per = per.sum()
        elif reduction == "mean":
            per = per.sum() / w.sum()  # all rows ignored: nan, as the loss
        out.append(per)
    return out


class CrossEntropyBackward(Op):
    """``CrossEntropy``'s vjp on arrays in one buffer: ``G_i (A_i softmax(x)_i - a_i)``.
    Only a plain eager backward (``array_backward``) and a compiled backward run it
    (``kernel_vjp``), so it carries no gradient."""

    holomorphic = True
    differentiable = False
    promotes = False
    saves_inputs = ()

    @staticmethod
    def forward(g, x, target, weight=None, *, ignore_index=-100, reduction="mean",
                label_smoothing=0.0):
        # kept targets whose class weights sum to 0: a nan gradient (PyTorch's), silently
        with xp.errstate(divide="ignore", invalid="ignore"):
            return _gradient(g, x, target, weight, ignore_index, reduction, label_smoothing)

    @classmethod
    def infer(cls, g, x, target, weight=None, **params) -> Spec:
        return Spec(x.shape, x.dtype)

    @classmethod
    def batch(cls, vals, bdims, **params):
        return by_example(cls, vals, bdims, **params)


def _gradient(g, x, target, weight, ignore_index: int, reduction: str, label_smoothing: float,
              saved: tuple | None = None):
    """``CrossEntropyBackward``'s kernel; ``saved``: what the forward of a batch of one
    row block left (``_loss``): the kept rows, their targets and weights, exp(x - max)
    and its row sums, which are not computed again (the same bits)."""
    n, c = x.shape
    rows, t, w = _kept_rows(x, target, weight, ignore_index) if saved is None else saved[:3]
    dt = x.dtype.type
    g = g.astype(x.dtype, copy=False)
    simple = w is None and not label_smoothing and reduction != "none" and rows.size == n
    if saved is None and simple and n <= _rows_per_block(c):
        # one block (a compiled step's loss): the loop's exp and sums on x whole, as the
        # forward keeps them, then the saved values' path below (the same bits)
        e = xp.empty((n, c), x.dtype)
        xp.exp(xp.subtract(x, _row_max(x), out=e), out=e)
        saved = (rows, t, w, e, xp.add.reduce(e, axis=1))
    if saved is not None and simple:   # a training step's: the ops below on scalars
        part = g if reduction == "sum" else g / dt(n)   # each row's target_part
        buf = xp.multiply(saved[3], ((part + 0) / saved[4])[:, None])
        buf[rows, t] -= part
        return buf
    if reduction == "none":
        scale = g[rows]
    elif reduction == "sum" or not rows.size:
        scale = xp.full(rows.size, g, x.dtype)
    else:
        scale = xp.full(rows.size, g / (dt(rows.size) if w is None else xp.add.reduce(w)),
                        x.dtype)
    target_part = scale * dt(1 - label_smoothing) if w is None else \
        scale * w * dt(1 - label_smoothing)
    spread_part = scale * dt(label_smoothing / c) if label_smoothing else None
    total_w = c if weight is None else weight.astype(x.dtype).sum()
    coef = xp.zeros((n, 1), x.dtype)   # A_i G_i / sum_c exp: ignored rows get zero
    coef[rows, 0] = target_part + (spread_part * total_w if label_smoothing else 0)
    if label_smoothing:
        spread = xp.zeros((n, 1), x.dtype)
        spread[rows, 0] = spread_part
        wc = None if weight is None else weight.astype(x.dtype)
    # row block by row block, each written once while in cache (whole arrays made five
    # passes over memory); the same operations in the same order on each element, so the
    # same bits. The kept rows of a block are a run of ``rows`` (sorted)
    if saved is not None:   # the loop's one block, its exp and sums from the forward
        coef /= saved[4][:, None]
        buf = xp.multiply(saved[3], coef)
        buf[rows, t] -= target_part
        if label_smoothing:
            buf -= spread if wc is None else spread * wc
        return buf
    step = _rows_per_block(c)
    cuts = xp.searchsorted(rows, xp.arange(0, n + step, step)) if n else ()
    buf = xp.empty((n, c), x.dtype)
    for k, i in enumerate(range(0, n, step)):
        xb, ob = x[i:i + step], buf[i:i + step]
        xp.subtract(xb, _row_max(xb), out=ob)
        xp.exp(ob, out=ob)
        cb = coef[i:i + step]
        cb /= xp.add.reduce(ob, axis=1, keepdims=True)
        ob *= cb
        lo, hi = cuts[k], cuts[k + 1]
        ob[rows[lo:hi] - i, t[lo:hi]] -= target_part[lo:hi]
        if label_smoothing:
            ob -= spread[i:i + step] if wc is None else spread[i:i + step] * wc
    return buf
