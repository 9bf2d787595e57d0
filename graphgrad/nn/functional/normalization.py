"""Layer ``nn``: ``nn.functional``'s batch, layer, group, instance and RMS normalization
(running statistics updated as PyTorch does)."""

from __future__ import annotations


from graphgrad import ops
from graphgrad.backend import xp

__all__ = ["layer_norm", "batch_norm", "group_norm", "rms_norm", "instance_norm"]


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
    _check_known_dims(input, training and (running_mean is not None or running_var is not None))
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


def _check_known_dims(input, updates: bool) -> None:
    """A symbolic input (a static-graph placeholder) may have dims known only at run time
    (None). batch_norm reads two of them while the graph is built: the channels (dim 1),
    to match weight, bias and the running statistics, and - when the running statistics
    move - the values per channel, for the unbiased variance. Say which, instead of
    failing later on a None (or on the placeholder's stand-in size)."""
    shape = tuple(input.shape) if input.shape is not None else None
    if shape is None or (shape[1:2] != (None,) and not (updates and None in shape)):
        return
    shown = "[" + ", ".join("?" if d is None else str(d) for d in shape) + "]"
    if shape[1] is None:
        need = ("the number of channels (dim 1), to check it against weight, bias and the "
                "running statistics")
        fix = "give dim 1 a size, e.g. placeholder(float32, shape=(None, C))"
    else:
        need = ("the number of values per channel (every dim but 1), for the unbiased batch "
                "variance that updates running_var in training")
        fix = ("give those dims sizes, or call the module in eval mode (module.eval()) or "
               "with track_running_stats=False so that no running statistics are updated")
    raise RuntimeError(f"batch_norm: the input of shape {shown} has dims known only at run "
                       f"time ('?'), and batch_norm needs {need} when the graph is built; "
                       f"{fix}")


def _update_running_stats(running_mean, running_var, mean, var, n: int, momentum):
    """The in-place moving averages of ``batch_norm`` (no graph: buffers are not trained).
    ``momentum`` may be a 0-d float64 tensor (BatchNorm's cumulative average, computed
    in the graph from its batch counter): each coefficient is then rounded once to the
    statistics' dtype, as PyTorch rounds its Python float."""
    from graphgrad.autograd import no_grad
    keep = 1 - momentum
    if not isinstance(momentum, (int, float)):
        momentum, keep = momentum.to(mean.dtype), keep.to(mean.dtype)
    with no_grad():
        if running_mean is not None:
            running_mean.copy_(momentum * mean.detach().reshape(-1) + keep * running_mean)
        if running_var is not None:
            unbiased = var.detach().reshape(-1) * (n / (n - 1))
            running_var.copy_(momentum * unbiased + keep * running_var)


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


def rms_norm(input, normalized_shape, weight=None, eps: float | None = None):
    """``x / sqrt(mean(x^2) + eps)`` over the trailing ``normalized_shape`` dims, times
    ``weight``; ``eps`` None is the machine epsilon of the input's dtype."""
    dims = _normalized_dims(input, normalized_shape, "*")
    if eps is None:
        eps = float(xp.finfo(input._array.dtype).eps)
    out = input * ops.rsqrt((input * input).mean(dim=dims, keepdim=True) + eps)
    return out * weight if weight is not None else out


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
