"""Layer ``nn``: ``nn.functional``'s loss functions with PyTorch's reductions, legacy
``size_average``/``reduce`` arguments and warnings."""

from __future__ import annotations

import warnings

from graphgrad import ops
from graphgrad.backend import bool_, xp
from graphgrad.ops import softplus
from graphgrad.ops.base import scalar_name
from graphgrad.ops.bce import BinaryCrossEntropy
from graphgrad.ops.base import Residuals
from graphgrad.ops.cross_entropy import CrossEntropy, _CrossEntropyStep
from graphgrad.ops.nll import NllLoss
from graphgrad.tensor import Tensor, Value, current_mode

from .activations import logsigmoid
from .distance import pairwise_distance

__all__ = ["mse_loss", "l1_loss", "huber_loss", "smooth_l1_loss", "nll_loss", "cross_entropy",
           "binary_cross_entropy", "binary_cross_entropy_with_logits", "kl_div",
           "margin_ranking_loss", "hinge_embedding_loss", "soft_margin_loss",
           "cosine_embedding_loss", "multilabel_soft_margin_loss", "poisson_nll_loss",
           "gaussian_nll_loss", "triplet_margin_loss"]


def legacy_reduction(size_average, reduce, reduction: str) -> str:
    """``reduction``, or what the deprecated ``size_average``/``reduce`` flags say when
    either is given (PyTorch's ``_Reduction.legacy_get_string``, with its warning)."""
    if size_average is None and reduce is None:
        return reduction
    size_average = True if size_average is None else size_average
    reduce = True if reduce is None else reduce
    out = "mean" if size_average and reduce else "sum" if reduce else "none"
    warnings.warn(f"size_average and reduce args will be deprecated, please use "
                  f"reduction='{out}' instead.", UserWarning, stacklevel=3)
    return out


def _reduce(loss: Tensor, reduction: str, name: str) -> Tensor:
    if reduction == "mean":
        return loss.mean()
    if reduction == "sum":
        return loss.sum()
    if reduction == "none":
        return loss
    raise ValueError(f"{reduction} is not a valid value for reduction")


def _warn_size(input, target, name: str) -> None:
    a, b = tuple(input.shape), tuple(target.shape)
    if None in a or None in b:
        return  # a graph's symbolic size (graphgrad.compile, dynamic): nothing to compare
    if a != b:
        warnings.warn(f"Using a target size ({target.shape!r}) that is different to the input "
                      f"size ({input.shape!r}). This will likely lead to incorrect results due "
                      f"to broadcasting. Please ensure they have the same size.", UserWarning,
                      stacklevel=3)


def _difference(input, target):
    """``input - target`` for the losses whose PyTorch kernels take a bool operand beside
    a float one (mse, huber, smooth_l1: the bool side is cast; ``-`` refuses bools)."""
    if input.dtype is bool_ and target.dtype is not bool_:
        input = input.to(target.dtype)
    elif target.dtype is bool_ and input.dtype is not bool_:
        target = target.to(input.dtype)
    return input - target


def mse_loss(input, target, size_average=None, reduce=None, reduction: str = "mean"):
    reduction = legacy_reduction(size_average, reduce, reduction)
    _warn_size(input, target, "mse_loss")
    d = _difference(input, target)
    if d._array.dtype.kind not in "fc":
        raise NotImplementedError(f'"mse_cpu" not implemented for '
                                  f"'{scalar_name(d._array.dtype)}'")
    return _reduce(d * d, reduction, "mse_loss")


def l1_loss(input, target, size_average=None, reduce=None, reduction: str = "mean"):
    reduction = legacy_reduction(size_average, reduce, reduction)
    _warn_size(input, target, "l1_loss")
    return _reduce((input - target).abs(), reduction, "l1_loss")


def huber_loss(input, target, reduction: str = "mean", delta: float = 1.0):
    if delta <= 0:
        raise RuntimeError("huber_loss does not support non-positive values for delta.")
    if input.dtype is bool_ and target.dtype is not bool_:  # its kernel writes into input's dtype
        raise RuntimeError(f"result type {scalar_name(target._array.dtype)} can't be cast to "
                           f"the desired output type Bool")
    d = _difference(input, target).abs()
    loss = ops.where(d < delta, 0.5 * d * d, delta * (d - 0.5 * delta))
    return _reduce(loss, reduction, "huber_loss")


def smooth_l1_loss(input, target, size_average=None, reduce=None, reduction: str = "mean",
                   beta: float = 1.0):
    reduction = legacy_reduction(size_average, reduce, reduction)
    if beta < 0:
        raise RuntimeError("smooth_l1_loss does not support negative values for beta.")
    if beta == 0:  # L1 (the quadratic branch, 0/0 in its gradient, is never taken)
        return l1_loss(input, target, reduction=reduction)
    d = _difference(input, target).abs()
    loss = ops.where(d < beta, 0.5 * d * d / beta, d - 0.5 * beta)
    return _reduce(loss, reduction, "smooth_l1_loss")


def _class_dim_last(t):
    """(N, C, d1, ...) -> (N*d1*..., C); (C,) -> (1, C)."""
    if t.ndim == 1:
        return t.unsqueeze(0)
    if t.ndim == 2:
        return t
    return ops.movedim(t, 1, -1).reshape(-1, t.shape[1])


def _check_batch_size(n_input: int, n_target: int) -> None:
    if n_input != n_target:
        raise ValueError(f"Expected input batch_size ({n_input}) to match target batch_size "
                         f"({n_target}).")


def nll_loss(input, target, weight=None, size_average=None, ignore_index: int = -100,
             reduce=None, reduction: str = "mean"):
    """Negative log likelihood of class indices ``target`` under log-probabilities
    ``input`` (N, C) or (N, C, d1, ...)."""
    reduction = legacy_reduction(size_average, reduce, reduction)
    if not isinstance(target, Value) or target._array.dtype.kind not in "iu":
        raise RuntimeError(f"nll_loss: expected target of integer dtype (class indices), got "
                           f"{getattr(target, 'dtype', type(target).__name__)}")
    _check_batch_size(1 if input.ndim == 1 else input.shape[0],
                      1 if target.ndim == 0 else target.shape[0])
    if _plain_classification(input, target, weight, reduction):
        # the training case: one op, as in PyTorch
        return NllLoss.apply(input, target, ignore_index=ignore_index)
    logp = _class_dim_last(input)
    tgt = target.reshape(-1)
    c = logp.shape[1]
    valid = tgt != ignore_index
    safe = ops.where(valid, tgt, 0)
    bad = (safe._array < 0) | (safe._array >= c)
    if bad.any():
        raise IndexError(f"nll_loss: Target {int(safe._array[bad][0])} is out of bounds "
                         f"(number of classes: {c}).")
    picked = -logp.gather(1, safe.unsqueeze(1)).squeeze(1)
    w = valid.to(logp.dtype)
    if weight is not None:
        w = w * weight[safe]
    loss = picked * w
    if reduction == "mean":
        return _weighted_mean(loss.sum(), w.sum(), valid)
    if reduction == "none":
        return loss.reshape(tuple(target.shape))
    return _reduce(loss, reduction, "nll_loss")


def _weighted_mean(total, weight, valid):
    """``total / weight``. When every target is ignored (``valid`` all false) PyTorch's
    loss is nan and its gradient zero, not the nan that ``0 * d(1/0)`` would give (kept
    targets whose class weights sum to 0 do give nan gradients, in PyTorch too)."""
    empty = valid.sum() == 0
    return ops.where(empty, float("nan"), total / ops.where(empty, 1.0, weight))


def cross_entropy(input, target, weight=None, size_average=None, ignore_index: int = -100,
                  reduce=None, reduction: str = "mean", label_smoothing: float = 0.0):
    """Softmax cross entropy of logits ``input`` (N, C) against class indices (or class
    probabilities, a float tensor of the input's shape)."""
    reduction = legacy_reduction(size_average, reduce, reduction)
    if reduction not in ("none", "mean", "sum"):
        raise ValueError(f"{reduction} is not a valid value for reduction")
    if not 0.0 <= label_smoothing <= 1.0:
        raise RuntimeError(f"label_smoothing must be between 0.0 and 1.0. Got: "
                           f"{label_smoothing}")
    # each shape read once: ``Tensor.shape`` makes a Size per read, and this is the
    # training step's loss (None: an argument that is not a tensor)
    ishape = tuple(input.shape) if isinstance(input, Value) else None
    tshape = tuple(target.shape) if isinstance(target, Value) else None
    _check_cross_entropy_target(input, target, ishape, tshape)
    if _class_indices(input, target, weight, ishape, tshape):
        # one op, keeping only the logits for backward (not their log-softmax too)
        params = {"ignore_index": ignore_index, "reduction": reduction,
                  "label_smoothing": label_smoothing}
        x = input if len(ishape) == 2 else _class_dim_last(input)
        tgt = target if len(tshape) == 1 else target.reshape(-1)
        args = (x, tgt) if weight is None else (x, tgt, weight)
        if current_mode() is None:   # plain eager: the op keeps what its backward reads
            loss = _CrossEntropyStep.apply(*args, run=Residuals(), **params)
        else:
            loss = CrossEntropy.apply(*args, **params)
        return loss if reduction != "none" or len(ishape) == 2 else loss.reshape(tshape)
    class_dim = 0 if input.ndim == 1 else 1
    logp = ops.log_softmax(input, dim=class_dim)
    c = input.shape[class_dim]
    if isinstance(target, Value) and target._array.dtype.kind == "f":  # probabilities
        if tuple(target.shape) != tuple(input.shape):
            if input.ndim >= 2 and target.ndim >= 1:  # PyTorch reads it as class indices
                _check_batch_size(input.shape[0], target.shape[0])
            raise RuntimeError(f"cross_entropy: expected target of shape {tuple(input.shape)} "
                               f"for class probabilities, got {tuple(target.shape)}")
        t = target * (1 - label_smoothing) + label_smoothing / c if label_smoothing else target
        per = logp * t
        if weight is not None:
            shape = [1] * input.ndim
            shape[class_dim] = c
            per = per * weight.reshape(shape)
        return _reduce(-per.sum(dim=class_dim), reduction, "cross_entropy")
    nll = nll_loss(logp, target, weight, ignore_index=ignore_index, reduction=reduction)
    if not label_smoothing:
        return nll
    lp = _class_dim_last(logp)
    tgt = target.reshape(-1)
    valid = (tgt != ignore_index).to(lp.dtype)
    smooth = -(lp * weight if weight is not None else lp).sum(dim=1) * valid
    if reduction == "mean":
        denom = (valid * weight[ops.where(tgt != ignore_index, tgt, 0)]).sum() \
            if weight is not None else valid.sum()
        smooth = _weighted_mean(smooth.sum(), denom, valid)
    elif reduction == "sum":
        smooth = smooth.sum()
    else:
        smooth = smooth.reshape(tuple(target.shape))
    return (1 - label_smoothing) * nll + (label_smoothing / c) * smooth


def _check_cross_entropy_target(input, target, ishape: tuple | None,
                                tshape: tuple | None) -> None:
    """PyTorch's first checks, in its order: a target of the input's shape holds class
    probabilities (floating point); otherwise the batch sizes must match, and a 1-D
    input takes a 0-D or 1-D target. ``ishape``/``tshape``: the shapes (None: not a
    tensor)."""
    if ishape is None or tshape is None:
        return
    if tshape == ishape:
        if target._array.dtype.kind != "f":
            raise RuntimeError(f"Expected floating point type for target with class "
                               f"probabilities, got {scalar_name(target._array.dtype)}")
    elif input._array.dtype.kind not in "fc":
        return  # PyTorch's log_softmax refuses it first (as graphgrad's does, next)
    elif len(ishape) > 1:
        _check_batch_size(ishape[0], tshape[0] if tshape else 0)
    elif len(ishape) == 1 and len(tshape) > 1:
        raise RuntimeError("0D or 1D target tensor expected, multi-target not supported")


def _class_indices(input, target, weight, ishape: tuple | None, tshape: tuple | None) -> bool:
    """Logits (C,), (N, C) or (N, C, d1, ...) with class indices of the matching shape and
    a class weight that is not differentiated: one ``CrossEntropy`` op. It reads no target
    value (the op checks them), so the decision holds for a graph's symbolic targets."""
    if ishape is None or tshape is None or \
            target._array.dtype.kind not in "iu" or input._array.dtype.kind not in "fc":
        return False
    if weight is not None and (not isinstance(weight, Value) or weight._requires_grad):
        return False  # (graphgrad differentiates a class weight through the gathers)
    if len(ishape) == 1:
        return len(tshape) == 0
    return len(ishape) >= 2 and tshape == (ishape[0], *ishape[2:])


def _plain_classification(input, target, weight, reduction) -> bool:
    """nll_loss's training case: (N, C) log-probabilities, N class indices, mean, no
    weights: one ``NllLoss`` op. It reads no target value (the op checks them and leaves
    out the ignored ones), so the decision holds for a graph's symbolic targets."""
    return not (input.ndim != 2 or weight is not None or reduction != "mean"
                or not isinstance(target, Value) or target.ndim != 1
                or target._array.dtype.kind not in "iu" or target.shape[0] != input.shape[0])


def binary_cross_entropy(input, target, weight=None, size_average=None, reduce=None,
                         reduction: str = "mean"):
    """``-(t log p + (1 - t) log(1 - p))`` with the logs clamped at -100 as in PyTorch."""
    reduction = legacy_reduction(size_average, reduce, reduction)
    if tuple(input.shape) != tuple(target.shape):
        raise ValueError(f"Using a target size ({target.shape!r}) that is different to the "
                         f"input size ({input.shape!r}) is deprecated. Please ensure they have "
                         f"the same size.")
    arr = input._array
    if arr.size and (xp.any(arr < 0) or xp.any(arr > 1)):
        raise RuntimeError("all elements of input should be between 0 and 1")
    loss = BinaryCrossEntropy.apply(input, target)
    if weight is not None:
        loss = loss * weight
    return _reduce(loss, reduction, "binary_cross_entropy")


def binary_cross_entropy_with_logits(input, target, weight=None, size_average=None,
                                     reduce=None, reduction: str = "mean", pos_weight=None):
    """BCE on logits, computed stably: ``(1 - t) x + (1 + (w - 1) t) softplus(-x)``."""
    reduction = legacy_reduction(size_average, reduce, reduction)
    if tuple(input.shape) != tuple(target.shape):
        raise ValueError(f"Target size ({target.shape!r}) must be the same as input size "
                         f"({input.shape!r})")
    if pos_weight is None:
        loss = (1 - target) * input + softplus(-input)
    else:
        log_weight = (pos_weight - 1) * target + 1
        loss = (1 - target) * input + log_weight * softplus(-input)
    if weight is not None:
        loss = loss * weight
    return _reduce(loss, reduction, "binary_cross_entropy_with_logits")


def kl_div(input, target, size_average=None, reduce=None, reduction: str = "mean",
           log_target: bool = False):
    """Pointwise ``target * (log target - input)`` for log-probabilities ``input``
    (0 where target is 0), reduced; ``"batchmean"`` divides the sum by the batch size."""
    if size_average is not None or reduce is not None:
        reduction = legacy_reduction(size_average, reduce, reduction)
    elif reduction == "mean":
        warnings.warn("reduction: 'mean' divides the total loss by both the batch size and the "
                      "support size.'batchmean' divides only by the batch size, and aligns with "
                      "the KL div math definition.'mean' will be changed to behave the same as "
                      "'batchmean' in the next major release.", UserWarning, stacklevel=2)
    if log_target:
        loss = ops.exp(target) * (target - input)
    else:  # xlogy(t, t) - t * input, with 0 log 0 = 0
        zero = target == 0
        loss = ops.where(zero, 0.0, target * ops.where(zero, 1.0, target).log()) - target * input
    if reduction == "batchmean":
        total = loss.sum()
        return total / input.shape[0] if input.ndim else total
    return _reduce(loss, reduction, "kl_div")


def margin_ranking_loss(input1, input2, target, margin: float = 0.0, size_average=None,
                        reduce=None, reduction: str = "mean"):
    """``max(0, -y (x1 - x2) + margin)``."""
    reduction = legacy_reduction(size_average, reduce, reduction)
    loss = ops.clamp(-target * (input1 - input2) + margin, min=0.0)
    return _reduce(loss, reduction, "margin_ranking_loss")


def hinge_embedding_loss(input, target, margin: float = 1.0, size_average=None, reduce=None,
                         reduction: str = "mean"):
    """``x`` where the target is 1, ``max(0, margin - x)`` where it is -1."""
    reduction = legacy_reduction(size_average, reduce, reduction)
    loss = ops.where(target != 1, ops.clamp(margin - input, min=0.0), 0.0) \
        + ops.where(target != -1, input, 0.0)
    return _reduce(loss, reduction, "hinge_embedding_loss")


def soft_margin_loss(input, target, size_average=None, reduce=None, reduction: str = "mean"):
    """``log(1 + exp(-y x))``."""
    reduction = legacy_reduction(size_average, reduce, reduction)
    return _reduce(ops.log1p(ops.exp(-input * target)), reduction, "soft_margin_loss")


def cosine_embedding_loss(input1, input2, target, margin: float = 0.0, size_average=None,
                          reduce=None, reduction: str = "mean"):
    """``1 - cos(x1, x2)`` where the target is 1, ``max(0, cos - margin)`` where it is -1
    (the cosine over the last dim, with PyTorch's 1e-12 in each squared magnitude)."""
    reduction = legacy_reduction(size_average, reduce, reduction)
    d = input1.ndim - 1
    mag = ((input1 * input1).sum(dim=d) + 1e-12) * ((input2 * input2).sum(dim=d) + 1e-12)
    cos = (input1 * input2).sum(dim=d) / ops.sqrt(mag)
    loss = ops.where(target == 1, 1 - cos, 0.0) \
        + ops.where(target == -1, ops.clamp(cos - margin, min=0.0), 0.0)
    return _reduce(loss, reduction, "cosine_embedding_loss")


def multilabel_soft_margin_loss(input, target, weight=None, size_average=None, reduce=None,
                                reduction: str = "mean"):
    """Binary cross entropy with logits per class, averaged over the classes (last dim)."""
    reduction = legacy_reduction(size_average, reduce, reduction)
    loss = -(target * logsigmoid(input) + (1 - target) * logsigmoid(-input))
    if weight is not None:
        loss = loss * weight
    loss = loss.sum(dim=input.ndim - 1) / input.shape[-1]
    return _reduce(loss, reduction, "multilabel_soft_margin_loss")


def poisson_nll_loss(input, target, log_input: bool = True, full: bool = False,
                     size_average=None, eps: float = 1e-8, reduce=None,
                     reduction: str = "mean"):
    """Negative log likelihood of ``target`` under Poisson(rate): rate ``exp(input)``
    (``log_input``) or ``input``; ``full`` adds Stirling's term where target > 1."""
    reduction = legacy_reduction(size_average, reduce, reduction)
    if log_input:
        loss = ops.exp(input) - target * input
    else:
        loss = input - target * ops.log(input + eps)
    if full:
        import math
        big = target > 1
        t = ops.where(big, target, 2.0)  # a safe value where the term is not used
        stirling = t * ops.log(t) - t + 0.5 * ops.log(2 * math.pi * t)
        loss = loss + ops.where(big, stirling, 0.0)
    if reduction not in ("none", "mean", "sum"):
        raise ValueError(f"{reduction} is not a valid value for reduction")
    return _reduce(loss, reduction, "poisson_nll_loss")


def gaussian_nll_loss(input, target, var, full: bool = False, eps: float = 1e-6,
                      reduction: str = "mean"):
    """``0.5 (log var + (x - t)^2 / var)``, ``var`` clamped at ``eps`` in value only (its
    gradient passes the clamp, as PyTorch's in-place clamp under no_grad)."""
    import math
    if isinstance(var, float):
        if var < 0:
            raise ValueError("var has negative entry/entries")
        from graphgrad.tensor import full_like
        var = full_like(input, var)
    elif bool((var < 0).any()):
        raise ValueError("var has negative entry/entries")
    in_shape, var_shape = tuple(input.shape), tuple(var.shape)
    if var_shape != in_shape:
        if in_shape[:-1] == var_shape:
            var = var.unsqueeze(-1)
        elif not (input.ndim == var.ndim and sum(
                y for x, y in zip(in_shape, var_shape, strict=True) if x != y) == 1):
            raise ValueError("var is of incorrect size")
    if reduction not in ("none", "mean", "sum"):
        raise ValueError(reduction + " is not valid")
    held = var.detach()
    var = var + (ops.clamp(held, min=eps) - held)
    loss = 0.5 * (ops.log(var) + (input - target) ** 2 / var)
    if full:
        loss = loss + 0.5 * math.log(2 * math.pi)
    return _reduce(loss, reduction, "gaussian_nll_loss")


def triplet_margin_loss(anchor, positive, negative, margin: float = 1.0, p: float = 2,
                        eps: float = 1e-6, swap: bool = False, size_average=None, reduce=None,
                        reduction: str = "mean"):
    """``max(0, margin + d(a, p) - d(a, n))`` with ``pairwise_distance``; ``swap`` uses
    ``min(d(a, n), d(p, n))``."""
    reduction = legacy_reduction(size_average, reduce, reduction)
    d_pos = pairwise_distance(anchor, positive, p, eps)
    d_neg = pairwise_distance(anchor, negative, p, eps)
    if swap:
        d_neg = ops.minimum(d_neg, pairwise_distance(positive, negative, p, eps))
    return _reduce(ops.clamp(margin + d_pos - d_neg, min=0.0), reduction, "triplet_margin_loss")
