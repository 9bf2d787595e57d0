"""Layer ``torch_compat``: what lets unmodified PyTorch programs run on graphgrad.

* importer.py: the ``sys.meta_path`` finder that resolves ``import torch`` and every
  ``torch.*`` import to graphgrad's own modules (``graphgrad run``, ``install_as_torch``);
* CPU-only stand-ins, each answering as a CPU-only PyTorch 2.13 build does:
  accelerator.py, default_device.py, backends/ (cudnn, cuda, mps, mkldnn flags), cuda/
  (``torch.cuda`` as a module with ``amp``), grad_scaler.py and autocast.py (``torch.amp``,
  amp.py), typed_tensors.py (``torch.FloatTensor``...), benchmark.py
  (``torch.utils.benchmark``).

It sits above the capture frontends (it aliases them)
and below ``run`` and ``cli``, which use it."""

from . import accelerator, amp, backends, benchmark, cuda
from .autocast import autocast
from .default_device import get_default_device, set_default_device
from .importer import install_as_torch, uninstall_as_torch
from .typed_tensors import (BoolTensor, ByteTensor, CharTensor, DoubleTensor, FloatTensor,
                            HalfTensor, IntTensor, LongTensor, ShortTensor)

__all__ = ["accelerator", "amp", "backends", "benchmark", "cuda", "autocast",
           "get_default_device", "set_default_device", "install_as_torch",
           "uninstall_as_torch", "BoolTensor", "ByteTensor", "CharTensor", "DoubleTensor",
           "FloatTensor", "HalfTensor", "IntTensor", "LongTensor", "ShortTensor"]
