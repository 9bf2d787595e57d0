"""Layer ``ops``: sparse COO tensors: construction, ``coalesce``, ``to_dense``,
``to_sparse``, ``values()``, the sparse-dense matrix product and sparse + sparse.

Each is an op like any other (forward on arrays, a vjp in graphgrad ops), whose sparse
inputs and results hold a ``SparseArray`` (``backend.sparse_array`` has the kernels).
The gradient of a sparse tensor is sparse where PyTorch's is: ``to_dense`` and
``torch.sparse.mm`` give the gradient at the nonzeros only (masked), while ``torch.mm``,
``torch.spmm`` and ``@`` give a dense one. A sparse tensor made from a ``values``
tensor that requires grad passes its gradient on to those values, so a graph network's
edge weights train through the same engine as its dense weights, to any order.

The op classes start with ``_``, which keeps them out of ``ops.REGISTRY``: the
registry's ops promise jvp and batching rules, graph IR and complex-step support, none
of which the sparse layout has (the functions below refuse sparse tensors under a
transform or tracer). ``SPARSE_OPS`` lists them.
"""

from __future__ import annotations

from graphgrad.backend import xp
from graphgrad.backend import sparse_array as K
from graphgrad.tensor import SparseTensor, Tensor, Value, current_mode, tensor, zeros

from .arithmetic import needs_grad
from .base import Op, fmt_shape, normalize_dim, scalar_name
from .unary import cast

__all__ = ["sparse_coo_tensor", "spmm"]  # sparse_mm, sparse_sum: graphgrad.sparse


def _gather(g, indices):
    """The entries of the dense ``g`` at each index column (a slice for dense dims)."""
    sd = indices.shape[0]
    if sd == 0:
        return g.unsqueeze(0).expand(indices.shape[1], *g.shape)
    return g[tuple(indices[k] for k in range(sd))]


def _masked(g, s):
    """The gradient ``g`` (dense or sparse) of sparse ``s`` kept at ``s``'s nonzeros."""
    idx = _SparseIndices.apply(s)
    values = _SparseValuesAt.apply(g, idx) if g.is_sparse else _gather(g, idx)
    return _SparseCooTensor.apply(idx, values, size=tuple(s.shape), coalesced=False)


class _SparseCooTensor(Op):
    backward_name = "SparseCooTensorWithDimsAndTensorsBackward0"
    """``sparse_coo_tensor(indices, values, size)`` once the arguments are checked."""

    promotes = False
    saves_inputs = (0,)

    @staticmethod
    def forward(indices, values, *, size, coalesced):
        return K.SparseArray(indices, values, size, coalesced)

    @staticmethod
    def vjp(g, out, indices, values, *, size, coalesced):
        if g.is_sparse:
            return None, _SparseValuesAt.apply(g, indices)
        return None, _gather(g, indices)


class _SparseValuesAt(Op):
    backward_name = "SparseValuesAtBackward0"
    """The values of a sparse tensor (duplicates summed) at given index columns: the
    gradient of the values a sparse tensor was built from, given its sparse gradient."""

    promotes = False
    saves_inputs = (1,)

    @staticmethod
    def forward(s, indices):
        return K.values_at(s, indices)

    @staticmethod
    def vjp(g, out, s, indices):
        return _SparseCooTensor.apply(indices, g, size=tuple(s.shape), coalesced=False), None


class _SparseIndices(Op):
    backward_name = "SparseIndicesBackward0"
    """The unique, sorted index columns of a sparse tensor (where its gradient lives)."""

    differentiable = False
    promotes = False

    @staticmethod
    def forward(s):
        return K.coalesce(s).indices


class _Coalesce(Op):
    backward_name = "CoalesceBackward0"
    """Duplicates summed, indices sorted: the same tensor, so the gradient passes as is."""

    promotes = False
    saves_inputs = ()

    @staticmethod
    def forward(s):
        return K.coalesce(s)

    @staticmethod
    def vjp(g, out, s):
        return (g,)


class _ToDense(Op):
    backward_name = "ToDenseBackward0"
    promotes = False

    @staticmethod
    def forward(s):
        return K.to_dense(s)

    @staticmethod
    def vjp(g, out, s):
        return (_masked(g, s),)


class _ToSparse(Op):
    backward_name = "ToSparseBackward0"
    promotes = False
    saves_inputs = ()

    @staticmethod
    def forward(a, *, sparse_dim):
        return K.from_dense(a, sparse_dim)

    @staticmethod
    def vjp(g, out, a, *, sparse_dim):
        return (_ToDense.apply(g) if g.is_sparse else g,)


class _Values(Op):
    backward_name = "ValuesBackward0"
    """``values()`` of a coalesced sparse tensor, differentiable (``_values()`` is not)."""

    promotes = False

    @staticmethod
    def forward(s):
        return s.values

    @staticmethod
    def vjp(g, out, s):
        return (_SparseCooTensor.apply(_SparseIndices.apply(s), g, size=tuple(s.shape),
                                      coalesced=True),)


class _SparseMm(Op):
    backward_name = "SparseMmBackward0"
    """``s @ d`` for a 2-d sparse ``s`` and a dense matrix ``d`` (``s.T @ d`` when
    ``transpose``). ``masked``: ``s``'s gradient is sparse, at its nonzeros
    (``torch.sparse.mm``), else dense (``torch.mm``)."""

    promotes = False

    @staticmethod
    def forward(s, d, *, transpose, masked):
        return K.sparse_mm(s, d, transpose)

    @staticmethod
    def vjp(g, out, s, d, *, transpose, masked):
        gs = gd = None
        if needs_grad(d):
            gd = _SparseMm.apply(s, g, transpose=not transpose, masked=masked)
        if needs_grad(s):
            if not masked:
                gs = d @ g.mT if transpose else g @ d.mT
            else:
                idx = _SparseIndices.apply(s)
                rows, cols = idx[0], idx[1]
                if transpose:
                    rows, cols = cols, rows
                values = (g.index_select(0, rows) * d.index_select(0, cols)).sum(-1)
                gs = _SparseCooTensor.apply(idx, values, size=tuple(s.shape), coalesced=False)
        return gs, gd


class _SparseAdd(Op):
    backward_name = "AddBackward0"
    promotes = False
    saves_inputs = ()

    @staticmethod
    def forward(a, b):
        return K.add(a, b)

    @staticmethod
    def vjp(g, out, a, b):
        return g, g


SPARSE_OPS = (_SparseCooTensor, _SparseValuesAt, _SparseIndices, _Coalesce, _ToDense,
              _ToSparse, _Values, _SparseMm, _SparseAdd)


# ---- the functions ---------------------------------------------------------------------

def _no_transforms(name: str) -> None:
    if current_mode() is not None:
        raise NotImplementedError(f"{name}: sparse COO tensors are not supported under "
                                  f"{type(current_mode()).__name__} (graphgrad's transforms "
                                  "and tracers run dense tensors only)")


def _check_bounds(idx, size: tuple) -> None:
    """PyTorch's invariant checks (``check_invariants=True``), always on: the kernels
    index with these, so a bad index must not get that far."""
    if idx.shape[1] == 0:
        return
    lo, hi = idx.min(axis=1), idx.max(axis=1)
    for d in range(idx.shape[0]):
        if lo[d] < 0:
            raise RuntimeError(f"found negative index {lo[d]} for dim {d}")
        if hi[d] >= size[d]:
            raise RuntimeError(f"size is inconsistent with indices: for dim {d}, size is "
                               f"{size[d]} but found index {hi[d]}")


def sparse_coo_tensor(indices, values, size=None, *, dtype=None, device=None,
                      pin_memory: bool = False, requires_grad: bool = False,
                      check_invariants: bool | None = None,
                      is_coalesced: bool | None = None) -> SparseTensor:
    """A sparse tensor with ``values[k]`` at ``indices[:, k]`` (``torch.sparse_coo_tensor``);
    ``size`` defaults to the smallest that holds the indices."""
    _no_transforms("sparse_coo_tensor")
    if not isinstance(indices, Value):
        indices = tensor(indices)
    if not isinstance(values, Value):
        values = tensor(values, dtype=dtype)
    elif dtype is not None:
        values = cast(values, dtype)
    if indices.ndim != 2:
        raise RuntimeError(f"indices must be sparse_dim x nnz, but got: {list(indices.shape)}")
    if values.ndim == 0:
        raise RuntimeError("values must have at least one dimension (nnz), but got a 0-d "
                           "tensor")
    idx = indices._array.astype(xp.int64, copy=False)
    sd, nnz = idx.shape
    if values.shape[0] != nnz:
        raise RuntimeError(f"indices and values must have same nnz, but got nnz from indices: "
                           f"{nnz}, nnz from values: {values.shape[0]}")
    dense_shape = tuple(values.shape[1:])
    if size is None:
        _check_bounds(idx, (float("inf"),) * sd)  # negative indices
        size = tuple(int(m) + 1 for m in idx.max(axis=1)) if nnz else (0,) * sd
        size += dense_shape
    size = tuple(int(n) for n in size)
    if len(size) != sd + len(dense_shape):
        raise RuntimeError(f"'len(size) == sparse_dim + dense_dim' is not satisfied: len(size) "
                           f"= {len(size)}, sparse_dim = {sd}, dense_dim = {len(dense_shape)}")
    if size[sd:] != dense_shape:
        raise RuntimeError(f"values has incorrect size, expected {[nnz, *size[sd:]]}, got "
                           f"{[nnz, *dense_shape]}")
    _check_bounds(idx, size)
    out = _SparseCooTensor.apply(Tensor._make(idx), values, size=size,
                                coalesced=bool(is_coalesced) or nnz <= 1)
    if requires_grad:
        out.requires_grad_(True)
    return out


def _check_mm(name: str, s, d) -> None:
    if not (isinstance(s, SparseTensor) and s.sparse_dim() == 2 and s.dense_dim() == 0):
        raise NotImplementedError(f"{name}: the first argument must be a 2-d sparse COO tensor "
                                  "without dense dimensions")
    if isinstance(d, SparseTensor):
        raise NotImplementedError(f"{name}: sparse @ sparse is not supported by graphgrad")
    if d.ndim != 2:
        raise RuntimeError(f"addmm: matrices expected, got {d.ndim}D tensor")
    if d.shape[0] != s.shape[1]:
        raise RuntimeError(f"addmm: Argument #3 (dense): Expected dim 0 size {s.shape[1]}, got "
                           f"{d.shape[0]}")
    if d.dtype != s.dtype:
        raise RuntimeError(f"expected scalar type {scalar_name(s._array.dtype)} but found "
                           f"{scalar_name(d._array.dtype)}")
    _no_transforms(name)


def sparse_mm(sparse, dense) -> Tensor:
    """``torch.sparse.mm``: a dense result; ``sparse``'s gradient is sparse."""
    _check_mm("sparse.mm", sparse, dense)
    return _SparseMm.apply(sparse, dense, transpose=False, masked=True)


def spmm(input, mat2) -> Tensor:
    """``torch.spmm`` (also ``torch.mm``, ``@`` with a sparse left side): a dense
    result; ``input``'s gradient is dense, as PyTorch's."""
    _check_mm("mm", input, mat2)
    return _SparseMm.apply(input, mat2, transpose=False, masked=False)


def sparse_sum(input, dim=None, dtype=None) -> Tensor:
    """``torch.sparse.sum`` over every dim (a 0-d dense tensor)."""
    if dim is not None:
        raise NotImplementedError("sparse.sum: summing over some dims (a sparse result) is not "
                                  "supported by graphgrad; sum over all dims or call "
                                  ".to_dense() first")
    total = _values(coalesce(input)).sum()
    return total if dtype is None else cast(total, dtype)


def sparse_softmax(input, dim: int, dtype=None, *, log: bool = False) -> SparseTensor:
    """``torch.sparse.softmax`` (``log``: ``log_softmax``) along a sparse ``dim``: over
    the stored entries only (the others count as -inf); the result holds the input's
    coalesced indices. A composite: its gradient is that of exp, scatter_add and index."""
    name = "log_softmax" if log else "softmax"
    if not isinstance(input, SparseTensor):
        raise NotImplementedError(f"sparse.{name}: expected a sparse COO tensor")
    dim = normalize_dim(dim, input.ndim, name)
    if dim >= input.sparse_dim() or input.dense_dim():
        raise NotImplementedError(f"sparse.{name}: graphgrad supports a sparse dim of a tensor "
                                  "without dense dims")
    c = coalesce(input)
    values = _values(c)
    if dtype is not None:
        values = cast(values, dtype)
    idx = c._array.indices
    # the entries that share every index but ``dim``'s are normalized together
    others = xp.delete(idx, dim, axis=0)
    keys = xp.ravel_multi_index(tuple(others), tuple(xp.delete(c.shape, dim))) \
        if len(others) else xp.zeros(idx.shape[1], xp.int64)
    _, inv = xp.unique(keys, return_inverse=True)
    n_groups = int(inv.max()) + 1 if inv.size else 0
    # a per-group shift for stability: a constant, so the gradient is unchanged
    top = xp.full(n_groups, -xp.inf, values._array.dtype)
    xp.maximum.at(top, inv, values._array)
    group = Tensor._make(inv.reshape(-1).astype(xp.int64))
    z = values - Tensor._make(top[inv])
    e = z.exp()
    total = zeros(n_groups, dtype=values.dtype).scatter_add(0, group, e)
    out = z - total.log().index_select(0, group) if log else e / total.index_select(0, group)
    return _SparseCooTensor.apply(Tensor._make(idx), out, size=tuple(c.shape), coalesced=True)


# ---- the methods -----------------------------------------------------------------------

def coalesce(self) -> SparseTensor:
    if not self.is_sparse:
        raise RuntimeError("coalesce expected sparse coordinate tensor layout but got Strided")
    if self._array.coalesced:
        return self
    _no_transforms("coalesce")
    return _Coalesce.apply(self)


def _values(self) -> Tensor:
    if not self._array.coalesced:
        raise RuntimeError("Cannot get values on an uncoalesced tensor, please call "
                           ".coalesce() first")
    return _Values.apply(self)


def to_dense(self, dtype=None, *, masked_grad: bool = True) -> Tensor:
    if not self.is_sparse:
        return self if dtype is None else cast(self, dtype)
    if dtype is not None:
        raise RuntimeError("dtype argument is not supported by sparse_to_dense")
    _no_transforms("to_dense")
    return _ToDense.apply(self)


def to_sparse(self, sparse_dim: int | None = None, *, layout=None) -> SparseTensor:
    if layout is not None and layout is not K.sparse_coo:
        raise NotImplementedError(f"to_sparse: layout {layout!r} is not supported by graphgrad "
                                  "(only graphgrad.sparse_coo)")
    if self.is_sparse:
        if sparse_dim is not None and sparse_dim != self.sparse_dim():
            raise RuntimeError("to_sparse: conversion from Sparse to Sparse with sparse_dim "
                               "argument !=self.sparse_dim() is not supported")
        return self
    if sparse_dim is None:
        sparse_dim = self.ndim
    if not 0 <= sparse_dim <= self.ndim:
        raise RuntimeError(f"dense_to_sparse: sparse_dim argument must be in [0,{self.ndim}] "
                           f"range, but {sparse_dim} is given")
    _no_transforms("to_sparse")
    return _ToSparse.apply(self, sparse_dim=sparse_dim)


def _sparse_add(self, other):
    """sparse + sparse is sparse; sparse + dense (either side) is dense."""
    if isinstance(other, SparseTensor):
        if other.shape != self.shape:
            raise RuntimeError(f"add: expected 'self' and 'other' to have same size, but self "
                               f"has size {list(self.shape)} while other has size "
                               f"{list(other.shape)} (FYI: dense-sparse addition does not "
                               "currently support broadcasting)")
        return _SparseAdd.apply(self, other)
    if isinstance(other, Value):
        return _ToDense.apply(self) + other
    raise NotImplementedError(f"add: sparse {fmt_shape(tuple(self.shape))} + "
                              f"{type(other).__name__}: {K.REFUSAL}")


def _rebuilt(self, values_of, indices_of, size: tuple, coalesced: bool) -> SparseTensor:
    """A sparse tensor from this one's coalesced entries: ``values_of(values)`` at
    ``indices_of(indices)`` (graphgrad ops on the values, so gradients reach them)."""
    c = coalesce(self)
    return _SparseCooTensor.apply(Tensor._make(indices_of(c._array.indices)),
                                  values_of(_Values.apply(c)), size=size, coalesced=coalesced)


def _sparse_mul(self, other):
    """sparse * number (or 0-d tensor) is sparse: the values scaled."""
    if isinstance(other, SparseTensor) or isinstance(other, Value) and other.ndim:
        raise NotImplementedError(f"mul: sparse {fmt_shape(tuple(self.shape))} * "
                                  f"{type(other).__name__}: {K.REFUSAL}")
    _no_transforms("mul")
    return _rebuilt(self, lambda v: v * other, lambda i: i, tuple(self.shape), True)


def _sparse_t(self):
    """The transpose of a 2-D sparse tensor (its index rows swapped)."""
    if self.ndim != 2 or self._array.values.ndim != 1:
        raise NotImplementedError(f"t: sparse {fmt_shape(tuple(self.shape))} with dense "
                                  f"dims or not 2-D: {K.REFUSAL}")
    _no_transforms("t")
    return _rebuilt(self, lambda v: v, lambda i: i[::-1].copy(), tuple(self.shape)[::-1],
                    False)


def _sparse_matmul(self, other):
    return spmm(self, other)


def _dense_only(name: str, backend: str = "CPU"):
    def method(self, *args, **kwargs):
        raise NotImplementedError(f"Could not run 'aten::{name}' with arguments from the "
                                  f"'{backend}' backend: {name}() needs a sparse tensor")
    return method


def _strided_error(name: str):
    def method(self, *args, **kwargs):
        raise RuntimeError(f"{name} expected sparse coordinate tensor layout but got Strided")
    return method


def _values_dense(self):
    raise RuntimeError("values expected sparse tensor layout but got Strided")


def _sum(self, dim=None, keepdim: bool = False, *, dtype=None):
    if keepdim:
        raise NotImplementedError("sum: keepdim=True is not supported for sparse COO tensors")
    return sparse_sum(self, dim, dtype)


_SPARSE_METHODS = {
    "coalesce": coalesce, "values": _values, "to_dense": to_dense, "to_sparse": to_sparse,
    "__add__": _sparse_add, "__radd__": _sparse_add, "add": _sparse_add,
    "__matmul__": _sparse_matmul, "mm": _sparse_matmul, "matmul": _sparse_matmul,
    "sum": _sum, "__mul__": _sparse_mul, "__rmul__": _sparse_mul, "mul": _sparse_mul,
    "t": _sparse_t,
}
_DENSE_METHODS = {
    "coalesce": coalesce, "to_dense": to_dense, "to_sparse": to_sparse,
    "is_coalesced": _strided_error("is_coalesced"), "values": _values_dense,
    "indices": _dense_only("indices"), "_indices": _dense_only("_indices"),
    "_values": _dense_only("_values"), "_nnz": _dense_only("_nnz"),
    "sparse_dim": lambda self: 0, "dense_dim": lambda self: self.ndim,
}


def install() -> None:
    for name, fn in _SPARSE_METHODS.items():
        setattr(SparseTensor, name, fn)
    for name, fn in _DENSE_METHODS.items():
        setattr(Tensor, name, fn)
