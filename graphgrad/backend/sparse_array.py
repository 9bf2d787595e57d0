"""Layer ``backend``: ``SparseArray``, the array behind a sparse COO tensor, its NumPy
kernels, and the tensor layouts (``strided``, ``sparse_coo``).

A sparse COO array is ``indices`` (int64, sparse_dim x nnz), ``values`` (nnz, *dense
dims: a hybrid tensor when there are any) and the dense ``shape``; ``coalesced`` says
that the indices are unique and sorted. It has ``shape``, ``dtype``, ``ndim`` and
``size`` as an ndarray does, so the tensor layer's metadata works unchanged. Whatever
else NumPy would do with it (ufuncs, array functions, methods, conversion) raises
``NotImplementedError``: that is how a dense op applied to a sparse tensor fails, with
the op's name added by ``Op.explain_failure``. Only the sparse ops' kernels below read
its fields.
"""

from __future__ import annotations

import math
from types import SimpleNamespace

import numpy as xp

__all__ = ["layout", "strided", "sparse_coo", "SparseArray", "coalesce", "to_dense",
           "from_dense", "sparse_mm", "values_at", "add"]


class layout:  # noqa: N801 - PyTorch spells it in lower case
    """How a tensor's elements are stored; ``repr`` reads ``graphgrad.sparse_coo`` like
    ``torch.sparse_coo``."""

    __slots__ = ("name",)

    def __init__(self, name: str):
        self.name = name

    def __repr__(self) -> str:
        return f"graphgrad.{self.name}"

    def __reduce__(self):
        return self.name  # pickles as the module attribute of that name


strided = layout("strided")
sparse_coo = layout("sparse_coo")

REFUSAL = ("not supported for a tensor with layout graphgrad.sparse_coo: graphgrad has no "
           "'SparseCPU' kernel for it (call .to_dense() first)")


def _refuse(*args, **kwargs):
    raise NotImplementedError(REFUSAL)


class SparseArray:
    """The COO storage of a sparse tensor (see the module docstring)."""

    __slots__ = ("indices", "values", "shape", "coalesced")
    # never written in place (the engine then adds gradients out of place), and its data
    # lives in ``values``
    flags = SimpleNamespace(writeable=False, c_contiguous=False)

    def __init__(self, indices, values, shape: tuple, coalesced: bool = False):
        self.indices = indices
        self.values = values
        self.shape = tuple(shape)
        self.coalesced = coalesced

    @property
    def dtype(self):
        return self.values.dtype

    @property
    def ndim(self) -> int:
        return len(self.shape)

    @property
    def size(self) -> int:  # numel counts the dense elements, as PyTorch does
        return math.prod(self.shape)

    @property
    def itemsize(self) -> int:
        return self.values.itemsize

    @property
    def base(self):
        return self.values

    @property
    def sparse_dim(self) -> int:
        return self.indices.shape[0]

    @property
    def nbytes(self) -> int:  # the memory it holds (the autograd engine's release rule)
        return self.indices.nbytes + self.values.nbytes

    @property
    def nnz(self) -> int:
        return self.indices.shape[1]

    def copy(self) -> SparseArray:
        return SparseArray(self.indices.copy(), self.values.copy(), self.shape, self.coalesced)

    def __add__(self, other):
        """Raw accumulation (the engine's ``.grad += g``): sparse + sparse stays sparse."""
        if type(other) is SparseArray:
            return add(self, other)
        return to_dense(self) + other

    __radd__ = __add__

    def __array_ufunc__(self, ufunc, method, *inputs, **kwargs):
        if ufunc is xp.add and method == "__call__" and not kwargs and len(inputs) == 2:
            a, b = inputs  # dense + sparse: a dense sum (the engine's mixed accumulation)
            return (to_dense(a) if type(a) is SparseArray else a) + \
                (to_dense(b) if type(b) is SparseArray else b)
        raise NotImplementedError(REFUSAL)

    __array_function__ = _refuse
    __array__ = _refuse

    def __getattr__(self, name: str):  # reshape, astype, sum, T...: a dense op's forward
        if name.startswith("__"):  # protocol probes (copy, pickle, NumPy) look for these
            raise AttributeError(name)
        raise NotImplementedError(REFUSAL)


# Operators other than + are dense ops' forwards on a sparse array: refused the same way.
for _name in ("sub", "mul", "truediv", "floordiv", "mod", "pow", "matmul", "and", "or", "xor",
              "lt", "le", "gt", "ge"):
    setattr(SparseArray, f"__{_name}__", _refuse)
    if _name not in ("lt", "le", "gt", "ge"):
        setattr(SparseArray, f"__r{_name}__", _refuse)
for _name in ("neg", "pos", "abs", "invert", "getitem", "setitem", "iter", "len", "float",
              "int", "bool", "index"):
    setattr(SparseArray, f"__{_name}__", _refuse)


# ---- kernels --------------------------------------------------------------------------

def _linear(indices, shape: tuple):
    """Each index column as one integer (row-major over the sparse dims)."""
    if indices.shape[0] == 0:
        return xp.zeros(indices.shape[1], xp.int64)
    return xp.ravel_multi_index(tuple(indices), shape[:indices.shape[0]])


def coalesce(a: SparseArray) -> SparseArray:
    """Duplicates summed, indices sorted (row-major), as PyTorch's ``coalesce``."""
    if a.coalesced:
        return a
    sd = a.sparse_dim
    lin = _linear(a.indices, a.shape)
    uniq, inv = xp.unique(lin, return_inverse=True)
    values = xp.zeros((len(uniq),) + a.values.shape[1:], a.values.dtype)
    xp.add.at(values, inv.reshape(-1), a.values)
    if sd == 0:
        indices = xp.zeros((0, len(uniq)), xp.int64)
    else:
        indices = xp.stack(xp.unravel_index(uniq, a.shape[:sd])).astype(xp.int64)
        indices = indices.reshape(sd, len(uniq))
    return SparseArray(indices, values, a.shape, True)


def to_dense(a: SparseArray):
    out = xp.zeros(a.shape, a.values.dtype)
    if a.sparse_dim == 0:
        out += a.values.sum(0)
    else:
        xp.add.at(out, tuple(a.indices), a.values)
    return out


def from_dense(a, sparse_dim: int) -> SparseArray:
    """The nonzeros of ``a`` over its first ``sparse_dim`` dims (a slice of the trailing
    dims is stored when any element of it is nonzero), coalesced."""
    if sparse_dim == 0:
        return SparseArray(xp.zeros((0, 1), xp.int64), a[None].copy(), a.shape, True)
    mask = a != 0
    if a.ndim > sparse_dim:
        mask = mask.any(axis=tuple(range(sparse_dim, a.ndim)))
    where = xp.nonzero(mask)
    indices = xp.stack(where).astype(xp.int64).reshape(sparse_dim, -1)
    return SparseArray(indices, a[where].copy(), a.shape, True)


def sparse_mm(a: SparseArray, dense, transpose: bool):
    """``a @ dense`` (``a.T @ dense`` when ``transpose``) for a 2-d ``a`` without dense
    dims: one scatter-add of the scaled rows of ``dense`` that the nonzeros pick."""
    rows, cols = a.indices
    n_out = a.shape[0]
    if transpose:
        rows, cols, n_out = cols, rows, a.shape[1]
    dtype = xp.result_type(a.values.dtype, dense.dtype)
    out = xp.zeros((n_out, dense.shape[1]), dtype)
    xp.add.at(out, rows, a.values[:, None] * dense[cols])
    return out


def values_at(a: SparseArray, indices):
    """The values of ``a`` (duplicates summed) at each index column of ``indices``; zero
    where ``a`` has none."""
    c = coalesce(a)
    out = xp.zeros((indices.shape[1],) + c.values.shape[1:], c.values.dtype)
    if c.nnz == 0 or indices.shape[1] == 0:
        return out
    have, want = _linear(c.indices, c.shape), _linear(indices, c.shape)
    pos = xp.minimum(xp.searchsorted(have, want), len(have) - 1)
    found = have[pos] == want
    out[found] = c.values[pos[found]]
    return out


def add(a: SparseArray, b: SparseArray) -> SparseArray:
    """The entries of both; coalesced when both are, as PyTorch's sparse + sparse."""
    out = SparseArray(xp.concatenate([a.indices, b.indices], axis=1),
                      xp.concatenate([a.values, b.values]), a.shape)
    return coalesce(out) if a.coalesced and b.coalesced else out
