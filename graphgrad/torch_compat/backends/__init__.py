"""Layer ``torch_compat``: ``torch.backends.cuda``, ``.cudnn``, ``.mps`` and ``.mkldnn``
as a CPU-only PyTorch build has them: settable flags with PyTorch's defaults, and
availability probes that answer False (mkldnn: True, as PyTorch's CPU wheel ships oneDNN;
graphgrad computes with NumPy whatever it says). graphgrad.backends, the graph backends,
gets these as attributes so that ``torch.backends.cudnn`` works after ``import torch``."""

from . import cuda, cudnn, mkldnn, mps

__all__ = ["cuda", "cudnn", "mkldnn", "mps"]
