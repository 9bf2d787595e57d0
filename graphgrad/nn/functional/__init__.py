"""Layer ``nn``: ``graphgrad.nn.functional``, PyTorch's functional API: losses,
activations, normalization, convolution and pooling, attention, dropout, embedding and
vision helpers as compositions of graphgrad ops (so they differentiate to any order
with no rules of their own), or one op where PyTorch has one kernel.

The modules hold one topic each: ``activations``, ``dropouts``, ``losses``,
``distance``, ``linear_maps``, ``normalization``, ``convolution`` (on the N-d
convolution of ``nn.patches``), ``pooling``, ``attention``, ``sparse`` (embedding),
``vision`` (interpolate, pad, pixel shuffle).
"""

from graphgrad.ops import gelu, one_hot, sigmoid, softplus, tanh

from ..patches import conv2d, fold, unfold
from . import (activations, attention, convolution, distance, dropouts, linear_maps, losses,
               normalization, pooling, sparse, vision)
from .activations import *  # noqa: F403
from .attention import *  # noqa: F403
from .convolution import *  # noqa: F403
from .distance import *  # noqa: F403
from .dropouts import *  # noqa: F403
from .linear_maps import *  # noqa: F403
from .losses import *  # noqa: F403
from .normalization import *  # noqa: F403
from .pooling import *  # noqa: F403
from .sparse import *  # noqa: F403
from .vision import *  # noqa: F403

__all__ = ["gelu", "one_hot", "sigmoid", "softplus", "tanh", "conv2d", "fold", "unfold",
           *activations.__all__, *attention.__all__, *convolution.__all__, *distance.__all__,
           *dropouts.__all__, *linear_maps.__all__, *losses.__all__, *normalization.__all__,
           *pooling.__all__, *sparse.__all__, *vision.__all__]
