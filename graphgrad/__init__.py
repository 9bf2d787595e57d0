"""graphgrad: a deep-learning framework on NumPy whose machinery is open to inspection.

``import graphgrad as torch`` runs PyTorch programs for the features graphgrad has:
tensors with reverse-mode autodiff that extends the graph (so derivatives of
derivatives work), and the op set under PyTorch's names.
"""

from . import backend
from .backend import (bfloat16, bool_ as bool, complex64, complex128, dtype, float16, float32,
                      float64, get_default_dtype, int8, int16, int32, int64, set_default_dtype,
                      uint8)
from .tensor import *  # noqa: F401,F403
from .tensor import Size, Tensor, Value, is_grad_enabled
from . import ops
from .ops import *  # noqa: F401,F403
from .backend.sparse_array import layout, sparse_coo, strided
from . import sparse
from . import autograd
from .autograd import enable_grad, inference_mode, no_grad, set_grad_enabled
from . import func
from . import numdiff
from . import nn
from . import optim
from . import distributed
from . import utils
from .serialization import load, save
from . import graph
# drawing the eager graph needs the IR (a layer above autograd): the root joins them
autograd.draw = graph.eager_graph.draw
from . import static
from . import torch_compat
from .torch_compat import (BoolTensor, ByteTensor, CharTensor, DoubleTensor, FloatTensor,
                           HalfTensor, IntTensor, LongTensor, ShortTensor, accelerator, amp,
                           autocast, cuda, get_default_device, install_as_torch,
                           set_default_device)
from . import backends  # the graph backends (~2 ms); torch.backends' flags join them below

# gradcheck lives in numdiff (above autograd); PyTorch users look for it in autograd
autograd.gradcheck = numdiff.gradcheck
autograd.gradgradcheck = numdiff.gradgradcheck
# torch.backends.cudnn & co (torch_compat/backends) next to graphgrad's graph backends, so
# `torch.backends.cudnn.benchmark = True` works after `import graphgrad as torch`; and the
# CPU build's utils.benchmark where PyTorch has it
backends.cuda = torch_compat.backends.cuda
backends.cudnn = torch_compat.backends.cudnn
backends.mps = torch_compat.backends.mps
backends.mkldnn = torch_compat.backends.mkldnn
utils.benchmark = torch_compat.benchmark

half = float16
float = float32  # noqa: A001 - PyTorch's aliases
double = float64
long = int64
int = int32  # noqa: A001
cfloat = complex64
cdouble = complex128

__version__ = "0.1.0"


def is_tensor(obj) -> "builtins.bool":
    return isinstance(obj, Tensor)


def numel(input: Tensor) -> "builtins.int":
    return input.numel()


def result_type(tensor, other) -> dtype:
    """``torch.result_type``: the dtype an arithmetic op on these operands gives."""
    return backend.from_numpy_dtype(backend.result_type(
        *(a._array if isinstance(a, Value) else a for a in (tensor, other))))


def promote_types(type1: dtype, type2: dtype) -> dtype:
    """``torch.promote_types``: the smallest dtype both promote to."""
    return backend.from_numpy_dtype(backend.promote_types(type1.np, type2.np))


import builtins  # noqa: E402
import importlib as _importlib  # noqa: E402

# The capture frontends sit above everything else and are loaded on first use, which
# keeps ``import graphgrad`` fast: graphgrad.fx, .jit, .dynamo, .compiler, .capture; the
# graph passes and ONNX export too (graphgrad.passes, graphgrad.onnx).
_LAZY_MODULES = ("fx", "jit", "dynamo", "compiler", "capture", "passes", "onnx")


def __getattr__(name: str):
    if name in _LAZY_MODULES:
        return _importlib.import_module(f".{name}", __name__)
    if name == "compile":
        return _importlib.import_module(".dynamo", __name__).compile
    raise AttributeError(f"module 'graphgrad' has no attribute '{name}'")
