"""Layer ``optim``: optimizers (``SGD``, ``Adam``, ``AdamW``, ``RMSprop``, ``Adagrad``,
``Adadelta``, ``Adamax``, ``NAdam``, ``RAdam``, ``Rprop``, ``LBFGS``) and learning-rate
schedules (``lr_scheduler``), with PyTorch's update formulas, state layouts and error
messages."""

from . import lr_scheduler
from .adadelta import Adadelta
from .adagrad import Adagrad
from .adam import Adam, AdamW
from .adamax import Adamax
from .lbfgs import LBFGS
from .nadam import NAdam
from .optimizer import Optimizer
from .radam import RAdam
from .rmsprop import RMSprop
from .rprop import Rprop
from .sgd import SGD

__all__ = ["Optimizer", "SGD", "Adam", "AdamW", "RMSprop", "Adagrad", "Adadelta", "Adamax",
           "NAdam", "RAdam", "Rprop", "LBFGS", "lr_scheduler"]
