"""Layer ``optim``: the learning-rate schedulers under PyTorch's module name
(``graphgrad.optim.lr_scheduler.StepLR``...); each lives in the file of its kind:
``scheduler`` (the base), ``schedules`` (epoch-wise), ``cyclic``, ``plateau`` and
``composite``."""

from __future__ import annotations

from .composite import ChainedScheduler, SequentialLR
from .cyclic import CosineAnnealingWarmRestarts, CyclicLR, OneCycleLR
from .plateau import ReduceLROnPlateau
from .scheduler import EPOCH_DEPRECATION_WARNING, LRScheduler, _LRScheduler
from .schedules import (ConstantLR, CosineAnnealingLR, ExponentialLR, LambdaLR, LinearLR,
                        MultiplicativeLR, MultiStepLR, PolynomialLR, StepLR)

__all__ = ["LRScheduler", "LambdaLR", "MultiplicativeLR", "StepLR", "MultiStepLR",
           "ConstantLR", "LinearLR", "ExponentialLR", "PolynomialLR", "CosineAnnealingLR",
           "SequentialLR", "ChainedScheduler", "ReduceLROnPlateau", "CyclicLR",
           "CosineAnnealingWarmRestarts", "OneCycleLR", "EPOCH_DEPRECATION_WARNING",
           "_LRScheduler"]
