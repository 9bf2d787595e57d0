"""Layer ``tensor``: ``SparseTensor``, a ``Tensor`` whose array is a ``SparseArray``
(the COO layout), and ``leaf_of``, the class a new leaf on an array gets.

Sparse tensors are graph nodes like any other: the same ``Value`` slots, the same
dispatch, the same engine. Only their class differs, so dense tensors pay nothing for
them: the methods that behave differently for the sparse layout (``@``, ``+``,
``repr``, ``numpy``...) are overridden here or installed on this class by
``ops.sparse_coo``; every other op reaches the ``SparseArray``, which refuses with a
``NotImplementedError`` naming the op and the layout.
"""

from __future__ import annotations

from graphgrad.backend import get_default_dtype, xp
from graphgrad.backend.sparse_array import SparseArray, sparse_coo

from .format import tensor_repr
from .grad_fn import op_backward_name
from .tensor import Tensor

__all__ = ["SparseTensor", "leaf_of"]

_NUMPY = "can't convert Sparse layout tensor to numpy. Use Tensor.to_dense() first."


class SparseTensor(Tensor):
    """A sparse COO tensor: make one with ``graphgrad.sparse_coo_tensor`` or
    ``Tensor.to_sparse()``."""

    __slots__ = ()

    @property
    def is_sparse(self) -> bool:
        return True

    @property
    def layout(self):
        return sparse_coo

    def sparse_dim(self) -> int:
        return self._array.sparse_dim

    def dense_dim(self) -> int:
        return self._array.values.ndim - 1

    def _nnz(self) -> int:
        return self._array.nnz

    def is_coalesced(self) -> bool:
        return self._array.coalesced

    def _indices(self) -> Tensor:
        """The index array as stored (duplicates and order kept), outside the graph."""
        return Tensor._make(self._array.indices)

    def _values(self) -> Tensor:
        """The values as stored, outside the graph (PyTorch: not differentiable)."""
        return Tensor._make(self._array.values)

    def indices(self) -> Tensor:
        if not self._array.coalesced:
            raise RuntimeError("Cannot get indices on an uncoalesced tensor, please call "
                               ".coalesce() first")
        return Tensor._make(self._array.indices)

    def is_contiguous(self, memory_format=None) -> bool:
        raise RuntimeError("Sparse CPU tensors do not have is_contiguous")

    def numpy(self, *, force: bool = False):
        raise TypeError(_NUMPY)

    def __array__(self, dtype=None, copy=None):
        raise TypeError(_NUMPY)

    def tolist(self):
        raise TypeError(_NUMPY)

    def detach(self) -> SparseTensor:
        t = SparseTensor._make(self._array)
        if self._version_counter is None:
            self._version_counter = [0]
        t._version_counter = self._version_counter
        return t

    @property
    def data(self) -> SparseTensor:
        return SparseTensor._make(self._array)

    @data.setter
    def data(self, value: Tensor) -> None:
        self._array = value._array

    def __repr__(self) -> str:
        """PyTorch's form: ``tensor(indices=..., values=..., size=..., nnz=...,
        layout=torch.sparse_coo)``, the parts aligned under their names and the suffixes
        wrapped at 80 columns as PyTorch's ``_add_suffixes`` does."""
        a = self._array
        ind = tensor_repr(Tensor._make(a.indices), False).replace("\n", "\n" + " " * 15)
        val = tensor_repr(Tensor._make(a.values), False).replace("\n", "\n" + " " * 14)
        suffixes = [f"size={a.shape}", f"nnz={a.nnz}"]
        if a.dtype != get_default_dtype().np and a.dtype not in (xp.int64, xp.bool_):
            suffixes.append(f"dtype={self.dtype!r}")
        suffixes.append(f"layout={sparse_coo!r}")
        if self.op is not None and self._requires_grad:
            suffixes.append(f"grad_fn=<{op_backward_name(self.op)}>")
        elif self._requires_grad:
            suffixes.append("requires_grad=True")
        text = f"tensor(indices={ind},\n       values={val}"
        line = len(text) - text.rfind("\n") + 1
        first = True  # the suffixes start on a line of their own
        for suffix in suffixes:
            if first or line + len(suffix) + 2 > 80:
                text += ",\n       " + suffix
                line = 7 + len(suffix)
                first = False
            else:
                text += ", " + suffix
                line += len(suffix) + 2
        return text + ")"

    __str__ = __repr__


def leaf_of(array) -> Tensor:
    """A new leaf on ``array``, sparse when the array is (the engine's ``.grad``)."""
    return (SparseTensor if type(array) is SparseArray else Tensor)._make(array)
