"""Layer ``nn``: neural-network building blocks in PyTorch's shape: ``Module`` and its
layers, ``Parameter``, ``init`` and ``functional``."""

from . import functional, init, utils
from .modules import *  # noqa: F401,F403
from .modules import __all__ as _modules_all
from .parameter import Buffer, Parameter
from . import parallel
from .parallel import DataParallel

__all__ = ["functional", "init", "utils", "parallel", "Parameter", "Buffer", "DataParallel",
           *_modules_all]
