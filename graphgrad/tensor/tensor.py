"""Layer ``tensor``: ``Tensor``, the user's class: a ``Value`` (graph node) with
PyTorch's API for metadata, conversion and autograd state.

Ops install the arithmetic methods on Tensor (layer ``ops``); ``backward`` reaches
the ``autograd`` layer lazily. Those are the two documented upward edges.
"""

from __future__ import annotations

import warnings
from collections.abc import Callable
from typing import Any

from graphgrad.backend import dtype as _dtype
from graphgrad.backend import from_numpy_dtype, xp
from graphgrad.backend import get_default_dtype as _default_dtype
from graphgrad.backend.sparse_array import strided as _strided

from .device import device as _device
from .grad_fn import BackwardNode, RemovableHandle
from .modes import current_mode
from .size import Size
from .value import Value
from .views import refresh_if_stale

__all__ = ["Tensor"]
_lazy: dict = {}   # functions of upper layers, imported at their first use

_CPU = _device("cpu")  # what every tensor's .device is


class Tensor(Value):
    """A multi-dimensional array that records how it was computed.

    Create one with ``graphgrad.tensor(data, dtype=None, requires_grad=False)``.
    """

    __slots__ = ()
    __array_priority__ = 1000  # ndarray OP tensor defers to Tensor's reflected method

    def __init__(self, data: Any = None, *size: int, dtype=None, requires_grad: bool = False):
        """PyTorch's legacy constructor: ``Tensor([1, 2])`` is a float tensor of the default
        dtype, ``Tensor(2, 3)`` a (2, 3) one (zeros: PyTorch leaves it uninitialised). An
        array or tensor keeps its dtype (graphgrad wraps arrays with it)."""
        from .creation import as_array  # tensor(...)'s conversion rules, in one place
        if isinstance(data, int) and not isinstance(data, bool) or size:
            dims = (data, *size) if data is not None else size
            if not all(isinstance(d, int) and not isinstance(d, bool) for d in dims):
                raise TypeError(f"Tensor(): sizes must be ints, got {dims}")
            data = xp.zeros(dims, dtype if dtype is not None else _default_dtype().np)
        elif dtype is None and not isinstance(data, (xp.ndarray, xp.generic, Value)):
            dtype = _default_dtype()
        self._init(as_array(data if data is not None else [], dtype))
        if requires_grad:
            self.requires_grad_(True)

    # ---- metadata -------------------------------------------------------------
    @property
    def shape(self) -> Size:
        return Size(self._array.shape)

    def size(self, dim: int | None = None):
        if dim is None:
            return Size(self._array.shape)
        return self._array.shape[dim]

    @property
    def dtype(self) -> _dtype:
        return from_numpy_dtype(self._array.dtype)

    @property
    def ndim(self) -> int:
        return self._array.ndim

    def dim(self) -> int:
        return self._array.ndim

    ndimension = dim

    def numel(self) -> int:
        return int(self._array.size)

    nelement = numel

    def element_size(self) -> int:
        return self._array.itemsize

    def is_floating_point(self) -> bool:
        return self._array.dtype.kind == "f"

    def is_complex(self) -> bool:
        return self._array.dtype.kind == "c"

    @property
    def device(self) -> str:
        return _CPU

    @property
    def is_cuda(self) -> bool:
        return False

    @property
    def is_sparse(self) -> bool:  # SparseTensor says True
        return False

    @property
    def layout(self):
        return _strided

    def __len__(self) -> int:
        if self._array.ndim == 0:
            raise TypeError("len() of a 0-d tensor")
        return self._array.shape[0]

    def __hash__(self) -> int:  # __eq__ is elementwise; identity hashing as in PyTorch
        return id(self)

    # ---- conversion -----------------------------------------------------------
    def numpy(self, *, force: bool = False):
        if self._requires_grad and not force:
            raise RuntimeError("Can't call numpy() on Tensor that requires grad. "
                               "Use tensor.detach().numpy() instead.")
        return self._array

    def __array__(self, dtype=None, copy=None):
        if self._requires_grad:
            raise RuntimeError("Can't call numpy() on Tensor that requires grad. "
                               "Use tensor.detach().numpy() instead.")
        a = self._array
        return a if dtype is None else a.astype(dtype, copy=False)

    def item(self):
        if self._array.size != 1:
            raise RuntimeError(f"a Tensor with {self._array.size} elements cannot be converted "
                               "to Scalar")
        return self._array.reshape(()).item()

    def tolist(self):
        return self._array.tolist()

    def _scalar(self, kind: str):
        if self._array.size != 1:
            raise RuntimeError(f"a Tensor with {self._array.size} elements cannot be converted "
                               "to Scalar" if kind != "bool" else
                               "Boolean value of Tensor with more than one value is ambiguous")
        return self._array.reshape(()).item()

    def __bool__(self) -> bool:
        top = current_mode()
        if top is not None:
            return bool(top.to_python(self, "bool"))
        return bool(self._scalar("bool"))

    def __float__(self) -> float:
        top = current_mode()
        if top is not None:
            return float(top.to_python(self, "float"))
        return float(self._scalar("float"))

    def __int__(self) -> int:
        top = current_mode()
        if top is not None:
            return int(top.to_python(self, "int"))
        return int(self._scalar("int"))

    def __index__(self) -> int:
        if self._array.dtype.kind not in "iub" or self._array.size != 1:
            raise TypeError("only integer tensors of a single element can be converted to an "
                            "index")
        return int(self._array.reshape(()).item())

    def __iter__(self):
        if self._array.ndim == 0:
            raise TypeError("iteration over a 0-d tensor")
        return (self[i] for i in range(self._array.shape[0]))

    def __repr__(self) -> str:
        from .format import tensor_repr
        return tensor_repr(self)

    __str__ = __repr__

    def __format__(self, spec: str) -> str:
        """As PyTorch: a 0-d tensor formats as its number (``f"{loss}"`` is ``1.5``), any
        other as ``str`` (and a format spec is an error)."""
        if self._array.ndim == 0 and type(self) is Tensor:
            return format(self.item(), spec)
        return object.__format__(self, spec)

    # ---- autograd state -------------------------------------------------------
    @property
    def requires_grad(self) -> bool:
        refresh_if_stale(self)
        return self._requires_grad

    @requires_grad.setter
    def requires_grad(self, flag: bool) -> None:
        if self.op is not None:
            msg = "you can only change requires_grad flags of leaf variables."
            if not flag:
                msg += (" If you want to use a computed variable in a subgraph that doesn't "
                        "require differentiation use var_no_grad = var.detach().")
            raise RuntimeError(msg)
        if flag and self._array.dtype.kind not in "fc":
            raise RuntimeError("only Tensors of floating point and complex dtype can require "
                               "gradients")
        self._requires_grad = bool(flag)

    def requires_grad_(self, requires_grad: bool = True) -> Tensor:
        if self.op is not None and not requires_grad:
            self.requires_grad = requires_grad  # raises PyTorch's message
        if requires_grad and self._array.dtype.kind not in "fc":
            raise RuntimeError("only Tensors of floating point dtype can require gradients")
        if self.op is None:
            self._requires_grad = bool(requires_grad)
        return self

    @property
    def is_leaf(self) -> bool:
        return self.op is None

    @property
    def grad(self) -> Tensor | None:
        g = self._grad
        if g is None and self.op is not None and self._requires_grad and not (
                self._extras is not None and self._extras.retains_grad):
            warnings.warn(
                "The .grad attribute of a Tensor that is not a leaf Tensor is being accessed. "
                "Its .grad attribute won't be populated during autograd.backward(). If you "
                "indeed want the .grad field to be populated for a non-leaf Tensor, use "
                ".retain_grad() on the non-leaf Tensor. If you access the non-leaf Tensor by "
                "mistake, make sure you access the leaf Tensor instead.", UserWarning,
                stacklevel=2)
        return g

    @grad.setter
    def grad(self, value: Tensor | None) -> None:
        if value is not None:
            if not isinstance(value, Tensor):
                raise TypeError(f"assigned grad expected to be a Tensor or None but got grad "
                                f"of type {type(value).__name__}")
            if value.shape != self.shape:
                raise RuntimeError(f"attempting to assign a gradient of size "
                                   f"'{list(value.shape)}' to a tensor of size "
                                   f"'{list(self.shape)}'. Please ensure that the gradient and "
                                   f"the tensor are the same size")
        self._grad = value

    @property
    def retains_grad(self) -> bool:
        return self._extras is not None and self._extras.retains_grad

    def retain_grad(self) -> None:
        if not self._requires_grad:
            raise RuntimeError("can't retain_grad on Tensor that has requires_grad=False")
        if self.op is not None:
            self._ensure_extras().retains_grad = True

    @property
    def grad_fn(self):
        refresh_if_stale(self)
        if self.op is None:
            return None
        return BackwardNode(self)

    def register_hook(self, hook: Callable) -> RemovableHandle:
        """``hook(grad) -> Tensor | None`` runs when the gradient w.r.t. this tensor is
        computed; a returned tensor replaces the gradient."""
        if not self._requires_grad:
            raise RuntimeError("cannot register a hook on a tensor that doesn't require gradient")
        ext = self._ensure_extras()
        if ext.hooks is None:
            ext.hooks = []
        ext.hooks.append(hook)
        return RemovableHandle(ext.hooks, hook)

    def register_post_accumulate_grad_hook(self, hook: Callable) -> RemovableHandle:
        if not self._requires_grad:
            raise RuntimeError("cannot register a hook on a tensor that doesn't require gradient")
        if self.op is not None:
            raise RuntimeError("post accumulate grad hooks cannot be registered on non-leaf "
                               "tensors")
        ext = self._ensure_extras()
        if ext.post_hooks is None:
            ext.post_hooks = []
        ext.post_hooks.append(hook)
        return RemovableHandle(ext.post_hooks, hook)

    def detach(self) -> Tensor:
        """A new leaf sharing storage and version counter, outside the graph."""
        t = Tensor._make(self._array)
        if self._version_counter is None:
            self._version_counter = [0]
        t._version_counter = self._version_counter
        return t

    def detach_(self) -> Tensor:
        if self._extras is not None and self._extras.base is not None:
            raise RuntimeError("Can't detach views in-place. Use detach() instead.")
        self.op = None
        self.inputs = ()
        self.params = None
        self._requires_grad = False
        return self

    @property
    def data(self) -> Tensor:
        """The array behind this tensor as a new leaf (own version counter: changes
        through ``.data`` are invisible to autograd, as in PyTorch)."""
        return Tensor._make(self._array)

    @data.setter
    def data(self, value: Tensor) -> None:
        self._array = value._array if isinstance(value, Value) else xp.asarray(value)

    def backward(self, gradient=None, retain_graph: bool | None = None,
                 create_graph: bool = False, inputs=None) -> None:
        """Compute the gradient of this tensor w.r.t. graph leaves (see
        ``graphgrad.autograd.backward``)."""
        backward = _lazy.get("backward")
        if backward is None:   # the documented lazy upward edge, imported once
            from graphgrad.autograd import backward
            _lazy["backward"] = backward
        backward(self, gradient, retain_graph, create_graph, inputs=inputs)

