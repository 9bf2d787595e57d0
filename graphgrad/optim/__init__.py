"""Layer ``optim``: optimizers (``SGD``, ``Adam``, ``AdamW``, ``LBFGS``) and learning-rate
schedules, with PyTorch's update formulas."""

from . import lr_scheduler
from .adam import Adam, AdamW
from .lbfgs import LBFGS
from .optimizer import Optimizer
from .sgd import SGD

__all__ = ["Optimizer", "SGD", "Adam", "AdamW", "LBFGS", "lr_scheduler"]
