"""Layer ``nn``: ``graphgrad.nn.parallel`` (``torch.nn.parallel``): ``DataParallel`` and
``DistributedDataParallel`` (on graphgrad.distributed's MPI process groups)."""

from .data_parallel import DataParallel
from .distributed import DistributedDataParallel

__all__ = ["DataParallel", "DistributedDataParallel"]
