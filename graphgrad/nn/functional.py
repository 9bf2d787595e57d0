"""Layer ``nn``: ``graphgrad.nn.functional``, losses and activations as compositions of
graphgrad ops (so they differentiate to any order with no rules of their own)."""

from __future__ import annotations

import warnings

from graphgrad import ops
from graphgrad.backend import xp
from graphgrad.ops import gelu, one_hot, sigmoid, softplus, tanh
from graphgrad.ops.linalg import Linear
from graphgrad.ops.bce import BinaryCrossEntropy
from graphgrad.ops.inplace import apply_inplace
from graphgrad.ops.nll import NllLoss
from graphgrad.tensor import Tensor, Value

from .patches import avg_pool2d, conv2d, fold, max_pool2d, unfold  # noqa: F401

__all__ = ["relu", "gelu", "softplus", "sigmoid", "tanh", "silu", "softmax", "log_softmax",
           "one_hot", "pad", "linear", "mse_loss", "l1_loss", "nll_loss", "cross_entropy",
           "binary_cross_entropy", "binary_cross_entropy_with_logits", "leaky_relu", "elu",
           "logsigmoid", "dropout", "normalize", "huber_loss", "smooth_l1_loss", "layer_norm",
           "embedding", "unfold", "fold", "conv2d", "max_pool2d", "avg_pool2d"]


def _legacy_reduction(size_average, reduce, reduction: str) -> str:
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


def linear(input, weight, bias=None):
    """``input @ weight.T + bias``: one fused op for a matrix of examples (the training
    case; PyTorch's addmm), the composite for other ranks."""
    if input.ndim == 2 and weight.ndim == 2:
        return Linear.apply(input, weight) if bias is None else Linear.apply(input, weight, bias)
    out = input @ weight.mT if weight.ndim > 1 else input @ weight
    return out + bias if bias is not None else out


def _activation(input, fn, inplace: bool, name: str):
    """``fn(input)``; with ``inplace=True`` written over ``input`` as an in-place op whose
    backward still sees the old value (a ``copy_`` of ``fn(input)`` would bump the version
    of a tensor ``fn``'s backward reads)."""
    return apply_inplace(input, fn, name=name) if inplace else fn(input)


def relu(input, inplace: bool = False):
    return input.relu_() if inplace else ops.relu(input)


def silu(input, inplace: bool = False):
    return _activation(input, ops.silu, inplace, "silu_")


def leaky_relu(input, negative_slope: float = 0.01, inplace: bool = False):
    return _activation(input, lambda x: ops.where(x > 0, x, x * negative_slope), inplace,
                       "leaky_relu_")


def elu(input, alpha: float = 1.0, inplace: bool = False):
    return _activation(input, lambda x: ops.where(x > 0, x, alpha * ops.expm1(
        ops.clamp(x, max=0.0))), inplace, "elu_")


def _implicit_dim(name: str, ndim: int, stacklevel: int) -> int:
    warnings.warn(f"Implicit dimension choice for {name} has been deprecated. Change the call "
                  f"to include dim=X as an argument.", UserWarning, stacklevel=stacklevel)
    return 0 if ndim in (0, 1, 3) else 1


def softmax(input, dim: int | None = None, _stacklevel: int = 3, dtype=None):
    """``ops.softmax``; without ``dim``, PyTorch's deprecated implicit choice (with its
    warning): dim 0 for 0-, 1- and 3-d inputs, else 1."""
    if dim is None:
        dim = _implicit_dim("softmax", input.ndim, _stacklevel)
    return ops.softmax(input, dim, dtype=dtype)


def log_softmax(input, dim: int | None = None, _stacklevel: int = 3, dtype=None):
    if dim is None:
        dim = _implicit_dim("log_softmax", input.ndim, _stacklevel)
    return ops.log_softmax(input, dim, dtype=dtype)


def logsigmoid(input):
    return -softplus(-input)


def dropout(input, p: float = 0.5, training: bool = True, inplace: bool = False):
    """Zero each element with probability ``p`` and scale the rest by ``1/(1-p)``."""
    if p < 0.0 or p > 1.0:
        raise ValueError(f"dropout probability has to be between 0 and 1, but got {p}")
    if not training or p == 0.0:
        return input
    return _drop(input, p, tuple(input.shape), inplace)


def _drop(input, p: float, mask_shape: tuple, inplace: bool):
    """``input`` times a random mask of ``mask_shape`` (broadcast over the rest) that
    keeps with probability ``1 - p``, scaled by ``1/(1-p)``."""
    if p == 1.0:
        return _activation(input, lambda x: x * 0.0, inplace, "dropout_")
    from graphgrad.tensor.creation import random_tensor
    keep = random_tensor(lambda rng, s: rng.random(s), mask_shape, input._array.dtype) >= p
    scale = ops.where(keep, 1.0 / (1.0 - p), 0.0)
    return _activation(input, lambda x: x * scale, inplace, "dropout_")


def normalize(input, p: float = 2.0, dim: int = 1, eps: float = 1e-12):
    n = ops.norm(input, p, dim, keepdim=True)
    return input / ops.clamp(n, min=eps)


def mse_loss(input, target, size_average=None, reduce=None, reduction: str = "mean"):
    reduction = _legacy_reduction(size_average, reduce, reduction)
    _warn_size(input, target, "mse_loss")
    d = input - target
    return _reduce(d * d, reduction, "mse_loss")


def l1_loss(input, target, size_average=None, reduce=None, reduction: str = "mean"):
    reduction = _legacy_reduction(size_average, reduce, reduction)
    _warn_size(input, target, "l1_loss")
    return _reduce((input - target).abs(), reduction, "l1_loss")


def huber_loss(input, target, reduction: str = "mean", delta: float = 1.0):
    if delta <= 0:
        raise RuntimeError("huber_loss does not support non-positive values for delta.")
    d = (input - target).abs()
    loss = ops.where(d < delta, 0.5 * d * d, delta * (d - 0.5 * delta))
    return _reduce(loss, reduction, "huber_loss")


def smooth_l1_loss(input, target, size_average=None, reduce=None, reduction: str = "mean",
                   beta: float = 1.0):
    reduction = _legacy_reduction(size_average, reduce, reduction)
    if beta < 0:
        raise RuntimeError("smooth_l1_loss does not support negative values for beta.")
    if beta == 0:  # L1 (the quadratic branch, 0/0 in its gradient, is never taken)
        return l1_loss(input, target, reduction=reduction)
    d = (input - target).abs()
    loss = ops.where(d < beta, 0.5 * d * d / beta, d - 0.5 * beta)
    return _reduce(loss, reduction, "smooth_l1_loss")


def _class_dim_last(t):
    """(N, C, d1, ...) -> (N*d1*..., C); (C,) -> (1, C)."""
    if t.ndim == 1:
        return t.unsqueeze(0)
    if t.ndim == 2:
        return t
    return ops.movedim(t, 1, -1).reshape(-1, t.shape[1])


def nll_loss(input, target, weight=None, size_average=None, ignore_index: int = -100,
             reduce=None, reduction: str = "mean"):
    """Negative log likelihood of class indices ``target`` under log-probabilities
    ``input`` (N, C) or (N, C, d1, ...)."""
    reduction = _legacy_reduction(size_average, reduce, reduction)
    if not isinstance(target, Value) or target._array.dtype.kind not in "iu":
        raise RuntimeError(f"nll_loss: expected target of integer dtype (class indices), got "
                           f"{getattr(target, 'dtype', type(target).__name__)}")
    n_expected = 1 if input.ndim == 1 else input.shape[0]
    n_target = 1 if target.ndim == 0 else target.shape[0]
    if n_expected != n_target:
        raise ValueError(f"Expected input batch_size ({n_expected}) to match target batch_size "
                         f"({n_target}).")
    if _plain_classification(input, target, weight, ignore_index, reduction, 0.0):
        return NllLoss.apply(input, target)  # the training case: one op, as in PyTorch
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
    reduction = _legacy_reduction(size_average, reduce, reduction)
    class_dim = 0 if input.ndim == 1 else 1
    if _plain_classification(input, target, weight, ignore_index, reduction, label_smoothing):
        return NllLoss.apply(ops.log_softmax(input, dim=1), target)
    logp = ops.log_softmax(input, dim=class_dim)
    c = input.shape[class_dim]
    if isinstance(target, Value) and target._array.dtype.kind == "f":  # probabilities
        if tuple(target.shape) != tuple(input.shape):
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


def _plain_classification(input, target, weight, ignore_index, reduction, smoothing) -> bool:
    """The training-loop case: (N, C) logits, N class indices, all in range and none
    ignored, mean, no weights or smoothing. (Out-of-range targets take the general
    path, which raises nll_loss's error.)"""
    if (input.ndim != 2 or weight is not None or smoothing or reduction != "mean"
            or not isinstance(target, Value) or target.ndim != 1
            or target._array.dtype.kind not in "iu" or target.shape[0] != input.shape[0]
            or target.shape[0] == 0):
        return False
    t = target._array
    lo, hi = int(xp.minimum.reduce(t)), int(xp.maximum.reduce(t))  # (no np.min wrapper)
    if lo < 0 or hi >= input.shape[1]:
        return False
    return not (lo <= ignore_index <= hi and bool((t == ignore_index).any()))


def binary_cross_entropy(input, target, weight=None, size_average=None, reduce=None,
                         reduction: str = "mean"):
    """``-(t log p + (1 - t) log(1 - p))`` with the logs clamped at -100 as in PyTorch."""
    reduction = _legacy_reduction(size_average, reduce, reduction)
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
    reduction = _legacy_reduction(size_average, reduce, reduction)
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


def layer_norm(input, normalized_shape, weight=None, bias=None, eps: float = 1e-5):
    """Normalise over the trailing ``normalized_shape`` dims (biased variance), then
    scale and shift."""
    dims = _normalized_dims(input, normalized_shape, "*, ")
    centered = input - input.mean(dim=dims, keepdim=True)
    var = (centered * centered).mean(dim=dims, keepdim=True)
    out = centered * ops.rsqrt(var + eps)
    if weight is not None:
        out = out * weight
    if bias is not None:
        out = out + bias
    return out


def _normalized_dims(input, normalized_shape, star: str) -> tuple:
    """The trailing dims that ``normalized_shape`` names, checked against the input
    (``star``: how PyTorch's message for this norm writes the leading dims)."""
    shape = (normalized_shape,) if isinstance(normalized_shape, int) else tuple(normalized_shape)
    if tuple(input.shape[input.ndim - len(shape):]) != shape:
        raise RuntimeError(f"Given normalized_shape={list(shape)}, expected input with shape "
                           f"[{star}{', '.join(map(str, shape))}], but got input of size"
                           f"{list(input.shape)}")
    return tuple(range(input.ndim - len(shape), input.ndim))


def embedding(input, weight, padding_idx: int | None = None, max_norm=None,
              norm_type: float = 2.0, scale_grad_by_freq: bool = False, sparse: bool = False):
    """Rows of ``weight`` picked by the integer ``input``; no gradient reaches the
    ``padding_idx`` row."""
    if max_norm is not None or scale_grad_by_freq or sparse:
        raise NotImplementedError("embedding: max_norm, scale_grad_by_freq and sparse are not "
                                  "supported")
    if not isinstance(input, Value) or input._array.dtype.kind not in "iu":
        raise RuntimeError("Expected tensor for argument #1 'indices' to have one of the "
                           "following scalar types: Long, Int")
    out = weight[input]
    if padding_idx is not None:
        if padding_idx < 0:
            padding_idx += weight.shape[0]
        # the padding row's values as they are, without a gradient path to them
        out = ops.where((input == padding_idx).unsqueeze(-1), out.detach(), out)
    return out


# ---- normalisation, similarity, divergence, adaptive pooling ------------------------------
__all__ += ["batch_norm", "group_norm", "cosine_similarity", "kl_div", "adaptive_avg_pool2d",
            "dropout2d"]


def _verify_batch_size(size: tuple) -> None:
    """PyTorch's check that each channel (group) sees more than one value in training."""
    n = size[0]
    for s in size[2:]:
        n *= s
    if n == 1:
        raise ValueError(f"Expected more than 1 value per channel when training, got input "
                         f"size graphgrad.Size({list(size)})")


def _per_channel(t, ndim: int):
    """A (C,) tensor shaped (1, C, 1, ...) to broadcast over an ``ndim``-d (N, C, ...)."""
    return t.reshape((1, -1) + (1,) * (ndim - 2))


def batch_norm(input, running_mean, running_var, weight=None, bias=None,
               training: bool = False, momentum: float = 0.1, eps: float = 1e-5):
    """Normalise each channel (dim 1) over the batch and the other dims, then scale and
    shift. In training the batch statistics are used and the running ones (if given) move
    towards them in place, ``r <- (1 - momentum) r + momentum s`` with the unbiased batch
    variance; otherwise the running statistics are used. Composed of graphgrad ops, so it
    differentiates to any order."""
    c = input.shape[1] if input.ndim > 1 else None
    if training:
        _verify_batch_size(tuple(input.shape))
    elif running_mean is None:
        raise RuntimeError("running_mean must be defined in evaluation mode")
    for name, t in (("weight", weight), ("bias", bias), ("running_mean", running_mean),
                    ("running_var", running_var)):
        if t is not None and t.numel() != c:
            raise RuntimeError(f"{name} should contain {c} elements not {t.numel()}")
    dims = (0, *range(2, input.ndim))
    if training:
        mean = input.mean(dim=dims, keepdim=True)
        centered = input - mean
        var = (centered * centered).mean(dim=dims, keepdim=True)
        if running_mean is not None or running_var is not None:
            _update_running_stats(running_mean, running_var, mean, var,
                                  input.numel() // c, momentum)
    else:
        centered = input - _per_channel(running_mean, input.ndim)
        var = _per_channel(running_var, input.ndim)
    out = centered * ops.rsqrt(var + eps)
    if weight is not None:
        out = out * _per_channel(weight, input.ndim)
    if bias is not None:
        out = out + _per_channel(bias, input.ndim)
    return out


def _update_running_stats(running_mean, running_var, mean, var, n: int, momentum: float):
    """The in-place moving averages of ``batch_norm`` (no graph: buffers are not trained)."""
    from graphgrad.autograd import no_grad
    with no_grad():
        if running_mean is not None:
            running_mean.copy_(momentum * mean.detach().reshape(-1)
                               + (1 - momentum) * running_mean)
        if running_var is not None:
            unbiased = var.detach().reshape(-1) * (n / (n - 1))
            running_var.copy_(momentum * unbiased + (1 - momentum) * running_var)


def group_norm(input, num_groups: int, weight=None, bias=None, eps: float = 1e-5):
    """Normalise each sample over the channels of each of ``num_groups`` groups (and all
    other dims), then scale and shift per channel."""
    if input.ndim < 2:
        raise RuntimeError(f"Expected at least 2 dimensions for input tensor but received "
                           f"{input.ndim}")
    n, c = input.shape[0], input.shape[1]
    if c % num_groups:
        raise RuntimeError(f"Expected number of channels in input to be divisible by "
                           f"num_groups, but got input of shape {list(input.shape)} and "
                           f"num_groups={num_groups}")
    _verify_batch_size((n * c // num_groups, num_groups, *input.shape[2:]))
    x = input.reshape(n, num_groups, -1)
    centered = x - x.mean(dim=2, keepdim=True)
    var = (centered * centered).mean(dim=2, keepdim=True)
    out = (centered * ops.rsqrt(var + eps)).reshape(tuple(input.shape))
    if weight is not None:
        out = out * _per_channel(weight, input.ndim)
    if bias is not None:
        out = out + _per_channel(bias, input.ndim)
    return out


def cosine_similarity(x1, x2, dim: int = 1, eps: float = 1e-8):
    """``sum(x1/max(|x1|, eps) * x2/max(|x2|, eps), dim)`` after broadcasting, each
    vector divided by its own norm first (PyTorch's order, kinder to precision)."""
    x1, x2 = ops.broadcast_tensors(x1, x2)
    n1 = ops.clamp(ops.vector_norm(x1, 2, dim, keepdim=True), min=eps)
    n2 = ops.clamp(ops.vector_norm(x2, 2, dim, keepdim=True), min=eps)
    return ((x1 / n1) * (x2 / n2)).sum(dim=dim)


def kl_div(input, target, size_average=None, reduce=None, reduction: str = "mean",
           log_target: bool = False):
    """Pointwise ``target * (log target - input)`` for log-probabilities ``input``
    (0 where target is 0), reduced; ``"batchmean"`` divides the sum by the batch size."""
    if size_average is not None or reduce is not None:
        reduction = _legacy_reduction(size_average, reduce, reduction)
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


def adaptive_avg_pool2d(input, output_size):
    """Average over PyTorch's adaptive windows: output row i covers input rows
    ``floor(i H / oh)`` to ``ceil((i + 1) H / oh)``, and so for columns."""
    oh, ow = _adaptive_size(input, output_size, "adaptive_avg_pool2d")
    h, w = input.shape[-2], input.shape[-1]
    if h % oh == 0 and w % ow == 0 and input.ndim == 4:  # equal windows: a plain pooling
        return avg_pool2d(input, (h // oh, w // ow))
    return _adaptive_2d(input, oh, ow, lambda x, d: x.mean(dim=d, keepdim=True))


def adaptive_max_pool2d(input, output_size, return_indices: bool = False):
    """Max over PyTorch's adaptive windows (see ``adaptive_avg_pool2d``)."""
    if return_indices:
        raise NotImplementedError("adaptive_max_pool2d(return_indices=True) is not supported")
    oh, ow = _adaptive_size(input, output_size, "adaptive_max_pool2d")
    return _adaptive_2d(input, oh, ow, lambda x, d: ops.max(x, dim=d, keepdim=True).values)


def _adaptive_size(input, output_size, name: str) -> tuple[int, int]:
    if input.ndim not in (3, 4):
        raise RuntimeError(f"{name}(): Expected 3D or 4D tensor, but got {list(input.shape)}")
    size = (output_size, output_size) if isinstance(output_size, int) else tuple(output_size)
    return (input.shape[-2] if size[0] is None else size[0],
            input.shape[-1] if size[1] is None else size[1])


def _adaptive_2d(input, oh: int, ow: int, reduce):
    """``reduce`` over each adaptive window. A window is a product of a row range and a
    column range, and mean and max are separable, so the rows are reduced first, then
    the columns: ``oh + ow`` slices in all."""
    h, w = input.shape[-2], input.shape[-1]
    rows = [reduce(input[..., (i * h) // oh:-(-(i + 1) * h // oh), :], -2) for i in range(oh)]
    x = ops.cat(rows, dim=-2)
    cols = [reduce(x[..., (j * w) // ow:-(-(j + 1) * w // ow)], -1) for j in range(ow)]
    return ops.cat(cols, dim=-1)


def adaptive_avg_pool1d(input, output_size):
    return adaptive_avg_pool2d(input.unsqueeze(-2), (1, _single(output_size))).squeeze(-2)


def max_pool1d(input, kernel_size, stride=None, padding=0, dilation=1,
               ceil_mode: bool = False, return_indices: bool = False):
    """``max_pool2d`` over a height-1 image."""
    stride = kernel_size if stride is None or stride == [] else stride
    out = max_pool2d(input.unsqueeze(-2), (1, _single(kernel_size)), (1, _single(stride)),
                     (0, _single(padding)), (1, _single(dilation)), ceil_mode, return_indices)
    return out.squeeze(-2)


def avg_pool1d(input, kernel_size, stride=None, padding=0, ceil_mode: bool = False,
               count_include_pad: bool = True):
    if input.ndim == 2:  # unbatched (C, L)
        return avg_pool1d(input.unsqueeze(0), kernel_size, stride, padding, ceil_mode,
                          count_include_pad).squeeze(0)
    stride = kernel_size if stride is None or stride == [] else stride
    out = avg_pool2d(input.unsqueeze(-2), (1, _single(kernel_size)), (1, _single(stride)),
                     (0, _single(padding)), ceil_mode, count_include_pad)
    return out.squeeze(-2)


def dropout2d(input, p: float = 0.5, training: bool = True, inplace: bool = False):
    """Zero whole channels (each (H, W) plane of an (N, C, H, W) input) with
    probability ``p``, scaling the rest by ``1/(1-p)``."""
    if p < 0.0 or p > 1.0:
        raise ValueError(f"dropout probability has to be between 0 and 1, but got {p}")
    if input.ndim not in (3, 4):
        warnings.warn(f"dropout2d: Received a {input.ndim}-D input to dropout2d, which is "
                      f"deprecated and will result in an error in a future release. To retain "
                      f"the behavior and silence this warning, please use dropout instead. Note "
                      f"that dropout2d exists to provide channel-wise dropout on inputs with 2 "
                      f"spatial dimensions, a channel dimension, and an optional batch dimension "
                      f"(i.e. 3D or 4D inputs).", UserWarning, stacklevel=2)
    if input.ndim == 3:
        warnings.warn("dropout2d: Received a 3D input to dropout2d and assuming that "
                      "channel-wise 1D dropout behavior is desired - input is interpreted as "
                      "shape (N, C, L), where C is the channel dim. This behavior will change in "
                      "a future release to interpret the input as one without a batch dimension, "
                      "i.e. shape (C, H, W). To maintain the 1D channel-wise dropout behavior, "
                      "please switch to using dropout1d instead.", UserWarning, stacklevel=2)
    if not training or p == 0.0:
        return input
    # one draw per (sample, channel), as PyTorch's feature_dropout (a 3-D input is (N, C, L))
    return _drop(input, p, tuple(input.shape[:2]) + (1,) * (input.ndim - 2), inplace)


# ---- more activations, RMS norm, attention, 1-d convolution -------------------------------
__all__ += ["hardtanh", "relu6", "hardsigmoid", "hardswish", "mish", "prelu", "glu", "softmin",
            "selu", "celu", "softsign", "tanhshrink", "rms_norm", "scaled_dot_product_attention",
            "conv1d", "adaptive_max_pool2d", "adaptive_avg_pool1d", "max_pool1d", "avg_pool1d"]


def hardtanh(input, min_val: float = -1.0, max_val: float = 1.0, inplace: bool = False):
    """``input`` clipped to [min_val, max_val], with gradient 0 at the clip points (as
    PyTorch's, where ``clamp`` would pass it)."""
    if min_val > max_val:
        raise ValueError("min_val cannot be greater than max_val")
    return _activation(input, lambda x: ops.where(x <= min_val, min_val, ops.where(
        x >= max_val, max_val, x)), inplace, "hardtanh_")


def relu6(input, inplace: bool = False):
    return hardtanh(input, 0.0, 6.0, inplace)


def hardsigmoid(input, inplace: bool = False):
    """``relu6(x + 3) / 6``."""
    return _activation(input, lambda x: ops.where(x <= -3.0, 0.0, ops.where(
        x >= 3.0, 1.0, x / 6 + 0.5)), inplace, "hardsigmoid_")


def hardswish(input, inplace: bool = False):
    """``x * relu6(x + 3) / 6``; at -3 and 3 the gradient is that of the outer pieces (0
    and 1), as PyTorch's."""
    return _activation(input, lambda x: ops.where(x <= -3.0, 0.0, ops.where(
        x >= 3.0, x, x * (x + 3) / 6)), inplace, "hardswish_")


def mish(input, inplace: bool = False):
    return _activation(input, lambda x: x * tanh(softplus(x)), inplace, "mish_")


def prelu(input, weight):
    """``x`` where positive, ``weight * x`` elsewhere; ``weight`` has one value or one per
    channel (dim 1)."""
    channels = input.shape[1] if input.ndim >= 2 else 1
    if weight.numel() != 1 and weight.numel() != channels:
        raise RuntimeError(f"Mismatch of parameter numbers and input channel size. Found "
                           f"parameter numbers = {weight.numel()} and channel size = "
                           f"{channels}.")
    w = weight.reshape((-1,) + (1,) * (input.ndim - 2)) if input.ndim >= 2 else weight
    return ops.where(input > 0, input, w * input)


def glu(input, dim: int = -1):
    """``a * sigmoid(b)`` for the two halves ``a, b`` of ``input`` along ``dim``."""
    if input.shape[dim] % 2:
        raise RuntimeError(f"Halving dimension must be even, but dimension "
                           f"{dim % input.ndim} is size {input.shape[dim]}")
    a, b = ops.chunk(input, 2, dim)
    return a * sigmoid(b)


def softmin(input, dim: int | None = None, _stacklevel: int = 3, dtype=None):
    if dim is None:
        dim = _implicit_dim("softmin", input.ndim, _stacklevel)
    return ops.softmax(-input, dim, dtype=dtype)


_SELU_ALPHA = 1.6732632423543772848170429916717
_SELU_SCALE = 1.0507009873554804934193349852946


def selu(input, inplace: bool = False):
    return _activation(input, lambda x: _SELU_SCALE * elu(x, _SELU_ALPHA), inplace, "selu_")


def celu(input, alpha: float = 1.0, inplace: bool = False):
    """``max(0, x) + min(0, alpha (exp(x / alpha) - 1))``."""
    if alpha == 0:
        raise RuntimeError("ZeroDivisionError: alpha cannot be 0 for CELU")
    return _activation(input, lambda x: ops.where(x > 0, x, alpha * ops.expm1(
        ops.clamp(x, max=0.0) / alpha)), inplace, "celu_")


def softsign(input):
    return input / (1 + input.abs())


def tanhshrink(input):
    return input - tanh(input)


def rms_norm(input, normalized_shape, weight=None, eps: float | None = None):
    """``x / sqrt(mean(x^2) + eps)`` over the trailing ``normalized_shape`` dims, times
    ``weight``; ``eps`` None is the machine epsilon of the input's dtype."""
    dims = _normalized_dims(input, normalized_shape, "*")
    if eps is None:
        eps = float(xp.finfo(input._array.dtype).eps)
    out = input * ops.rsqrt((input * input).mean(dim=dims, keepdim=True) + eps)
    return out * weight if weight is not None else out


def scaled_dot_product_attention(query, key, value, attn_mask=None, dropout_p: float = 0.0,
                                 is_causal: bool = False, scale: float | None = None,
                                 enable_gqa: bool = False):
    """``softmax(q k^T * scale + mask) v`` over the last two dims, as PyTorch's reference
    implementation: a boolean mask keeps where True, a float mask is added, ``is_causal``
    keeps ``j <= i``; ``enable_gqa`` repeats key/value heads (dim -3) to the query's."""
    if is_causal and attn_mask is not None:
        raise RuntimeError("_scaled_dot_product_attention: Explicit attn_mask should not be "
                           "set when is_causal=True")
    import math

    from graphgrad.tensor.creation import arange
    n_q, n_k = query.shape[-2], key.shape[-2]
    if enable_gqa and key.shape[-3] != query.shape[-3]:
        reps = query.shape[-3] // key.shape[-3]
        key = _repeat_heads(key, reps)
        value = _repeat_heads(value, reps)
    scale = 1 / math.sqrt(query.shape[-1]) if scale is None else scale
    scores = (query @ key.transpose(-2, -1)) * scale
    if is_causal:
        attn_mask = arange(n_q).unsqueeze(1) >= arange(n_k).unsqueeze(0)
    if attn_mask is not None:
        if attn_mask._array.dtype.kind == "b":
            scores = ops.where(attn_mask, scores, float("-inf"))
        else:
            scores = scores + attn_mask
    weights = ops.softmax(scores, -1)
    if dropout_p > 0.0:
        weights = dropout(weights, dropout_p)
    return weights @ value


def _repeat_heads(t, reps: int):
    """Each head (dim -3) ``reps`` times in a row: ``repeat_interleave(reps, dim=-3)``."""
    shape = tuple(t.shape)
    expanded = t.unsqueeze(-3).expand(*shape[:-2], reps, *shape[-2:])
    return expanded.reshape(*shape[:-3], shape[-3] * reps, *shape[-2:])


def conv1d(input, weight, bias=None, stride=1, padding=0, dilation=1, groups: int = 1):
    """1-D cross-correlation over (N, C, L) or (C, L): ``conv2d`` on a height-1 image."""
    unbatched = input.ndim == 2
    x = input.unsqueeze(0) if unbatched else input
    if x.shape[1] != weight.shape[1] * groups:
        raise RuntimeError(f"Given groups={groups}, weight of size {list(weight.shape)}, "
                           f"expected input{list(x.shape)} to have {weight.shape[1] * groups} "
                           f"channels, but got {x.shape[1]} channels instead")
    padding = padding if isinstance(padding, str) else (0, _single(padding))
    out = conv2d(x.unsqueeze(2), weight.unsqueeze(2), bias, (1, _single(stride)), padding,
                 (1, _single(dilation)), groups).squeeze(2)
    return out.squeeze(0) if unbatched else out


def _single(v) -> int:
    """An int, or the one int of a 1-tuple (PyTorch's ``_single``)."""
    if isinstance(v, int):
        return v
    (v,) = tuple(v)
    return int(v)


# ---- resampling ---------------------------------------------------------------------------
__all__ += ["interpolate"]


def interpolate(input, size=None, scale_factor=None, mode: str = "nearest",
                align_corners: bool | None = None, recompute_scale_factor: bool | None = None,
                antialias: bool = False):
    """Resize the spatial dims (all after N, C) by ``mode`` "nearest", "linear" (3-D) or
    "bilinear" (4-D), with PyTorch's source-index rules. Separable: one gather (or two
    and a blend) per spatial dim, so it differentiates like any composite."""
    if mode in ("nearest", "area", "nearest-exact"):
        if align_corners is not None:
            raise ValueError("align_corners option can only be set with the interpolating "
                             "modes: linear | bilinear | bicubic | trilinear")
    elif align_corners is None:
        align_corners = False
    if mode not in ("nearest", "linear", "bilinear") or antialias:
        raise NotImplementedError(f"interpolate: mode={mode!r} (antialias={antialias}) is not "
                                  f"supported; nearest, linear and bilinear are")
    dim = input.ndim - 2
    if (mode, dim) in (("linear", 2), ("bilinear", 1)) or dim not in (1, 2):
        raise NotImplementedError(f"Got {input.ndim}D input, but {mode} mode needs "
                                  f"{3 if mode == 'linear' else 4}D input")
    in_sizes = tuple(input.shape[2:])
    if size is not None and scale_factor is not None:
        raise ValueError("only one of size or scale_factor should be defined")
    if size is not None:
        out_sizes = tuple(size) if isinstance(size, (list, tuple)) else (size,) * dim
        if len(out_sizes) != dim:
            raise ValueError(f"Input and output must have the same number of spatial "
                             f"dimensions, but got input with spatial dimensions of "
                             f"{list(in_sizes)} and output size of {size}. Please provide "
                             f"input tensor in (N, C, d1, d2, ...,dK) format and output size in "
                             f"(o1, o2, ...,oK) format.")
        scales = (None,) * dim
    elif scale_factor is not None:
        factors = tuple(scale_factor) if isinstance(scale_factor, (list, tuple)) \
            else (scale_factor,) * dim
        out_sizes = tuple(int(s * f) for s, f in zip(in_sizes, factors, strict=True))
        scales = (None,) * dim if recompute_scale_factor else factors
    else:
        raise ValueError("either size or scale_factor should be defined")
    out = input
    for axis, n_in, n_out, sf in zip(range(2, input.ndim), in_sizes, out_sizes, scales,
                                      strict=True):
        out = _resample(out, axis, n_in, n_out, sf, mode, align_corners)
    return out


def _resample(x, axis: int, n_in: int, n_out: int, scale_factor, mode: str, align_corners):
    """One spatial dim of ``interpolate``: ``n_in`` -> ``n_out`` along ``axis``."""
    from graphgrad.tensor import tensor
    dst = xp.arange(n_out, dtype=xp.float64)
    if mode == "nearest":
        # PyTorch computes the scale and the product in float32 (floorf)
        scale = xp.float32(1.0 / scale_factor if scale_factor else n_in / n_out)
        idx = xp.minimum(xp.floor(dst.astype(xp.float32) * scale).astype(xp.int64), n_in - 1)
        return ops.index_select(x, axis, tensor(idx))
    if align_corners:
        src = dst * ((n_in - 1) / (n_out - 1) if n_out > 1 else 0.0)
    else:
        scale = 1.0 / scale_factor if scale_factor else n_in / n_out
        src = xp.maximum(scale * (dst + 0.5) - 0.5, 0.0)
    i0 = src.astype(xp.int64)
    i1 = xp.minimum(i0 + 1, n_in - 1)
    shape = [1] * x.ndim
    shape[axis] = n_out
    lam = tensor((src - i0).reshape(shape), dtype=x.dtype)
    return ops.index_select(x, axis, tensor(i0)) * (1 - lam) + \
        ops.index_select(x, axis, tensor(i1)) * lam


__all__ += ["conv_transpose2d"]


def conv_transpose2d(input, weight, bias=None, stride=1, padding=0, output_padding=0,
                     groups: int = 1, dilation=1):
    """The transpose of ``conv2d`` (its vjp with respect to the input), with ``weight``
    (in_channels, out_channels / groups, kh, kw) as PyTorch's. Computed as that vjp,
    recorded, so it differentiates in input and weight to any order."""
    from .patches import _pair, linear_transpose
    unbatched = input.ndim == 3
    x = input.unsqueeze(0) if unbatched else input
    if x.shape[1] != weight.shape[0]:
        raise RuntimeError(f"Given transposed=1, weight of size {list(weight.shape)}, expected "
                           f"input{list(x.shape)} to have {weight.shape[0]} channels, but got "
                           f"{x.shape[1]} channels instead")
    (sh, sw), (ph, pw) = _pair(stride, "stride"), _pair(padding, "padding")
    (oph, opw), (dh, dw) = _pair(output_padding, "output_padding"), _pair(dilation, "dilation")
    if not (oph < sh or oph < dh) or not (opw < sw or opw < dw):
        raise RuntimeError(f"output padding must be smaller than either stride or dilation, "
                           f"but got output_padding_height: {oph} output_padding_width: {opw} "
                           f"stride_height: {sh} stride_width: {sw} dilation_height: {dh} "
                           f"dilation_width: {dw}")
    kh, kw = weight.shape[2], weight.shape[3]
    out_h = (x.shape[2] - 1) * sh - 2 * ph + dh * (kh - 1) + oph + 1
    out_w = (x.shape[3] - 1) * sw - 2 * pw + dw * (kw - 1) + opw + 1
    out = linear_transpose(lambda p: conv2d(p, weight, None, stride, padding, dilation, groups),
                           (x.shape[0], weight.shape[1] * groups, out_h, out_w), x)
    if bias is not None:
        out = out + bias.reshape(1, -1, 1, 1)
    return out.squeeze(0) if unbatched else out


__all__ += ["instance_norm"]


def instance_norm(input, running_mean=None, running_var=None, weight=None, bias=None,
                  use_input_stats: bool = True, momentum: float = 0.1, eps: float = 1e-5):
    """``batch_norm`` of each (sample, channel) on its own, as PyTorch computes it: the
    input seen as (1, N*C, ...), the running statistics (if any) repeated per sample and
    then averaged back over the samples."""
    if use_input_stats:
        size = tuple(input.shape)
        spatial = 1
        for s in size[2:]:
            spatial *= s
        if spatial == 1:
            raise ValueError(f"Expected more than 1 spatial element when training, got input "
                             f"size graphgrad.Size({list(size)})")
    n, c = input.shape[0], input.shape[1]
    x = input.reshape(1, n * c, *input.shape[2:])
    rm = None if running_mean is None else running_mean.repeat(n)
    rv = None if running_var is None else running_var.repeat(n)
    out = batch_norm(x, rm, rv, None if weight is None else weight.repeat(n),
                     None if bias is None else bias.repeat(n), use_input_stats, momentum, eps)
    if use_input_stats:
        from graphgrad.autograd import no_grad
        with no_grad():
            if running_mean is not None:
                running_mean.copy_(rm.reshape(n, c).mean(dim=0))
            if running_var is not None:
                running_var.copy_(rv.reshape(n, c).mean(dim=0))
    return out.reshape(tuple(input.shape))


# ---- more losses and distances -----------------------------------------------------------
__all__ += ["pairwise_distance", "margin_ranking_loss", "hinge_embedding_loss",
            "soft_margin_loss", "cosine_embedding_loss", "multilabel_soft_margin_loss",
            "poisson_nll_loss", "gaussian_nll_loss", "triplet_margin_loss"]


def pairwise_distance(x1, x2, p: float = 2.0, eps: float = 1e-6, keepdim: bool = False):
    """``||x1 - x2 + eps||_p`` over the last dim (PyTorch adds ``eps`` to the difference,
    which keeps the norm's gradient finite at 0)."""
    dim = max(x1.ndim, x2.ndim) - 1
    return ops.vector_norm(x1 - x2 + eps, p, dim, keepdim=keepdim)


def margin_ranking_loss(input1, input2, target, margin: float = 0.0, size_average=None,
                        reduce=None, reduction: str = "mean"):
    """``max(0, -y (x1 - x2) + margin)``."""
    reduction = _legacy_reduction(size_average, reduce, reduction)
    loss = ops.clamp(-target * (input1 - input2) + margin, min=0.0)
    return _reduce(loss, reduction, "margin_ranking_loss")


def hinge_embedding_loss(input, target, margin: float = 1.0, size_average=None, reduce=None,
                         reduction: str = "mean"):
    """``x`` where the target is 1, ``max(0, margin - x)`` where it is -1."""
    reduction = _legacy_reduction(size_average, reduce, reduction)
    loss = ops.where(target != 1, ops.clamp(margin - input, min=0.0), 0.0) \
        + ops.where(target != -1, input, 0.0)
    return _reduce(loss, reduction, "hinge_embedding_loss")


def soft_margin_loss(input, target, size_average=None, reduce=None, reduction: str = "mean"):
    """``log(1 + exp(-y x))``."""
    reduction = _legacy_reduction(size_average, reduce, reduction)
    return _reduce(ops.log1p(ops.exp(-input * target)), reduction, "soft_margin_loss")


def cosine_embedding_loss(input1, input2, target, margin: float = 0.0, size_average=None,
                          reduce=None, reduction: str = "mean"):
    """``1 - cos(x1, x2)`` where the target is 1, ``max(0, cos - margin)`` where it is -1
    (the cosine over the last dim, with PyTorch's 1e-12 in each squared magnitude)."""
    reduction = _legacy_reduction(size_average, reduce, reduction)
    d = input1.ndim - 1
    mag = ((input1 * input1).sum(dim=d) + 1e-12) * ((input2 * input2).sum(dim=d) + 1e-12)
    cos = (input1 * input2).sum(dim=d) / ops.sqrt(mag)
    loss = ops.where(target == 1, 1 - cos, 0.0) \
        + ops.where(target == -1, ops.clamp(cos - margin, min=0.0), 0.0)
    return _reduce(loss, reduction, "cosine_embedding_loss")


def multilabel_soft_margin_loss(input, target, weight=None, size_average=None, reduce=None,
                                reduction: str = "mean"):
    """Binary cross entropy with logits per class, averaged over the classes (last dim)."""
    reduction = _legacy_reduction(size_average, reduce, reduction)
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
    reduction = _legacy_reduction(size_average, reduce, reduction)
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
    reduction = _legacy_reduction(size_average, reduce, reduction)
    d_pos = pairwise_distance(anchor, positive, p, eps)
    d_neg = pairwise_distance(anchor, negative, p, eps)
    if swap:
        d_neg = ops.minimum(d_neg, pairwise_distance(positive, negative, p, eps))
    return _reduce(ops.clamp(margin + d_pos - d_neg, min=0.0), reduction, "triplet_margin_loss")


# ---- padding, pixel shuffle, bilinear, thresholds -----------------------------------------
__all__ += ["pixel_shuffle", "pixel_unshuffle", "bilinear", "threshold", "hardshrink",
            "softshrink", "dropout1d"]

_PAD_SIZES = ("\nSupported combinations for non-constant padding:\n"
              "  - 2D or 3D input: padding size = 2 (pads last dimension)\n"
              "  - 3D or 4D input: padding size = 4 (pads last 2 dimensions)\n"
              "  - 4D or 5D input: padding size = 6 (pads last 3 dimensions)")


def pad(input, pad, mode: str = "constant", value=None):
    """``torch.nn.functional.pad``: ``pad`` = (left, right) pairs from the last dim on.
    "constant" is the op; "reflect", "replicate" and "circular" gather the source index
    of every output position (``index_select``, whose gradient sums the copies back)."""
    if len(pad) % 2:
        raise RuntimeError("Padding length must be divisible by 2")
    if mode == "constant":
        return ops.pad(input, pad, value=value)
    if mode not in ("reflect", "replicate", "circular"):
        raise NotImplementedError(f"Unrecognised padding mode {mode}")
    k = len(pad) // 2
    if k > 3 or input.ndim not in (k + 1, k + 2):
        raise NotImplementedError(f"Padding size {len(pad)} is not supported for {input.ndim}D "
                                  f"input tensor.{_PAD_SIZES}")
    from graphgrad.tensor import tensor
    out = input
    for i in range(k):
        dim, (left, right) = input.ndim - 1 - i, pad[2 * i:2 * i + 2]
        n = input.shape[dim]
        if mode == "reflect" and (left >= n or right >= n):
            raise RuntimeError(f"Argument #4: Padding size should be less than the "
                               f"corresponding input dimension, but got: padding ({left}, "
                               f"{right}) at dimension {dim} of input {list(input.shape)}")
        if mode == "circular" and (left > n or right > n):
            raise RuntimeError("Padding value causes wrapping around more than once.")
        at = xp.arange(-left, n + right)
        if mode == "reflect":
            at = xp.abs(at)
            at = xp.where(at >= n, 2 * (n - 1) - at, at)
        elif mode == "replicate":
            at = xp.clip(at, 0, n - 1)
        else:  # circular wraps within what negative pads leave (crop first, as PyTorch)
            lo, kept = max(0, -left), n - max(0, -left) - max(0, -right)
            at = xp.arange(-max(left, 0), kept + max(right, 0)) % kept + lo
        out = ops.index_select(out, dim, tensor(at))
    return out


def pixel_shuffle(input, upscale_factor: int):
    """(*, C r^2, H, W) -> (*, C, H r, W r)."""
    r = upscale_factor
    *lead, c, h, w = input.shape
    if c % (r * r):
        raise RuntimeError(f"pixel_shuffle expects its input's 'channel' dimension to be "
                           f"divisible by the square of upscale_factor, but input.size(-3)={c} "
                           f"is not divisible by {r * r}")
    x = input.reshape(*lead, c // (r * r), r, r, h, w)
    n = len(lead)
    x = x.permute(*range(n), n, n + 3, n + 1, n + 4, n + 2)
    return x.reshape(*lead, c // (r * r), h * r, w * r)


def pixel_unshuffle(input, downscale_factor: int):
    """(*, C, H r, W r) -> (*, C r^2, H, W), the inverse of ``pixel_shuffle``."""
    r = downscale_factor
    *lead, c, h, w = input.shape
    if h % r or w % r:
        side, size = ("height", h) if h % r else ("width", w)
        raise RuntimeError(f"pixel_unshuffle expects {side} to be divisible by "
                           f"downscale_factor, but input.size({-2 if side == 'height' else -1})"
                           f"={size} is not divisible by {r}")
    x = input.reshape(*lead, c, h // r, r, w // r, r)
    n = len(lead)
    x = x.permute(*range(n), n, n + 2, n + 4, n + 1, n + 3)
    return x.reshape(*lead, c * r * r, h // r, w // r)


def bilinear(input1, input2, weight, bias=None):
    """``y_k = x1^T W_k x2 + b_k`` for weight (out, in1, in2)."""
    # (..., 1, 1, in1) @ (out, in1, in2) -> (..., out, 1, in2), then dot with x2
    left = input1.unsqueeze(-2).unsqueeze(-2) @ weight
    out = (left.squeeze(-2) * input2.unsqueeze(-2)).sum(dim=-1)
    return out + bias if bias is not None else out


def threshold(input, threshold: float, value: float, inplace: bool = False):
    """``x`` where ``x > threshold``, else ``value``."""
    return _activation(input, lambda x: ops.where(x > threshold, x, value), inplace,
                       "threshold_")


def hardshrink(input, lambd: float = 0.5):
    return ops.where((input > lambd) | (input < -lambd), input, 0.0)


def softshrink(input, lambd: float = 0.5):
    return ops.where(input > lambd, input - lambd, ops.where(input < -lambd, input + lambd, 0.0))


def dropout1d(input, p: float = 0.5, training: bool = True, inplace: bool = False):
    """Zero whole channels of (N, C, L) or (C, L) inputs."""
    if p < 0.0 or p > 1.0:
        raise ValueError(f"dropout probability has to be between 0 and 1, but got {p}")
    if input.ndim not in (2, 3):
        raise RuntimeError(f"dropout1d: Expected 2D or 3D input, but received a {input.ndim}D "
                           f"input. Note that dropout1d exists to provide channel-wise dropout "
                           f"on inputs with 1 spatial dimension, a channel dimension, and an "
                           f"optional batch dimension (i.e. 2D or 3D inputs).")
    if not training or p == 0.0:
        return input
    mask_shape = tuple(input.shape[:-1]) + (1,)
    return _drop(input, p, mask_shape, inplace)
