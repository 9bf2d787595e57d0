"""Layer ``nn``: ``nn.functional``'s dropout of elements and of whole channels, one
mechanism (``_drop``: a random keep mask of the broadcast shape, scaled by ``1/(1-p)``)."""

from __future__ import annotations

import warnings

from graphgrad.ops.base import scalar_name
from graphgrad.ops.dropout import NativeDropout

from .activations import _activation

__all__ = ["dropout", "dropout2d", "dropout1d"]


def dropout(input, p: float = 0.5, training: bool = True, inplace: bool = False):
    """Zero each element with probability ``p`` and scale the rest by ``1/(1-p)``."""
    _check_probability(p)
    if not training or p == 0.0:
        return input
    return _drop(input, p, tuple(input.shape), inplace)


def _check_probability(p: float) -> None:
    if p < 0.0 or p > 1.0:
        raise ValueError(f"dropout probability has to be between 0 and 1, but got {p}")
    if p != p:  # NaN passes PyTorch's Python check; its kernel refuses it
        raise RuntimeError(f"dropout probability has to be between 0 and 1, but got {p}")


def _drop(input, p: float, mask_shape: tuple, inplace: bool):
    """``input`` times a random mask of ``mask_shape`` (broadcast over the rest) that
    keeps with probability ``1 - p``, scaled by ``1/(1-p)``."""
    if p == 1.0:  # zeros of input's dtype
        return _activation(input, lambda x: (x * 0).to(x.dtype), inplace, "dropout_")
    if input._array.dtype.kind not in "fc":  # the float scale cannot be stored back
        raise RuntimeError(f"result type Float can't be cast to the desired output type "
                           f"{scalar_name(input._array.dtype)}")
    from graphgrad.tensor.creation import random_tensor
    keep = random_tensor(lambda rng, s: rng.random(s), mask_shape, input._array.dtype) >= p
    # one op keeping the boolean mask (the scale in input's dtype: float16 stays float16)
    return _activation(input, lambda x: NativeDropout.apply(x, keep, p=p), inplace, "dropout_")


def dropout2d(input, p: float = 0.5, training: bool = True, inplace: bool = False):
    """Zero whole channels (each (H, W) plane of an (N, C, H, W) input) with
    probability ``p``, scaling the rest by ``1/(1-p)``."""
    _check_probability(p)
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


def dropout1d(input, p: float = 0.5, training: bool = True, inplace: bool = False):
    """Zero whole channels of (N, C, L) or (C, L) inputs."""
    _check_probability(p)
    if input.ndim not in (2, 3):
        raise RuntimeError(f"dropout1d: Expected 2D or 3D input, but received a {input.ndim}D "
                           f"input. Note that dropout1d exists to provide channel-wise dropout "
                           f"on inputs with 1 spatial dimension, a channel dimension, and an "
                           f"optional batch dimension (i.e. 2D or 3D inputs).")
    if not training or p == 0.0:
        return input
    mask_shape = tuple(input.shape[:-1]) + (1,)
    return _drop(input, p, mask_shape, inplace)
