"""Layer ``ops``: picking and adding along one dim by an index of the input's rank:
``gather``/``take_along_dim`` (``out[i][j] = input[index[i][j]][j]`` for dim 0) and
``scatter_add``, each the other's vjp; ``one_hot``. The other scatters (``scatter``,
``scatter_reduce``, ``index_add``...) build their rules from these in ``scattering``.
"""

from __future__ import annotations

from graphgrad.backend import xp
from graphgrad.tensor import Value

from .arithmetic import needs_grad
from .base import Op, broadcast_shapes, int_arg, normalize_dim, scalar_name
from .batching import all_to_front, to_front
from .index import IndexPut
from .refusals import check_along_dim
from . import taylor as ts

__all__ = ["gather", "scatter_add", "one_hot", "take_along_dim"]


def along_axis_index(index, dim: int) -> tuple:
    """The full NumPy index that picks ``index`` along ``dim`` (gather/scatter)."""
    grids = list(xp.indices(index.shape, sparse=True))
    grids[dim] = index
    return tuple(grids)


class Gather(Op):
    """``out[i][j] = input[index[i][j]][j]`` for dim 0 (``torch.gather``)."""

    holomorphic = True
    saves_inputs = ()
    promotes = False

    @staticmethod
    def forward(a, index, *, dim):
        if index.dtype != xp.int64 and (index.dtype.kind in "iu" or not index.size):
            index = index.astype(xp.int64)
        if index.dtype != xp.int64:
            raise RuntimeError("gather(): Expected dtype int32/int64 for index")
        if index.ndim != a.ndim:
            raise RuntimeError("Index tensor must have the same number of dimensions as input "
                               "tensor")
        for d in range(a.ndim):
            if d != dim and index.shape[d] > a.shape[d]:
                raise RuntimeError(f"Size does not match at dimension {d} expected index "
                                   f"{list(index.shape)} to be smaller than self "
                                   f"{list(a.shape)} apart from dimension {dim}")
        check_along_dim(index, a.shape, dim)
        return a[along_axis_index(index, dim)]

    @staticmethod
    def vjp(g, out, a, index, *, dim):
        zeros = g.new_zeros(tuple(a.shape))
        return ScatterAdd.apply(zeros, index, g, dim=dim), None

    @staticmethod
    def jvp(dots, out, a, index, *, dim):
        return Gather.apply(dots[0], index, dim=dim)

    taylor = classmethod(ts.linear_taylor)

    @classmethod
    def batch(cls, vals, bdims, *, dim):
        a, index = all_to_front(vals, bdims)
        return cls.apply(a, index, dim=dim + 1), 0


class ScatterAdd(Op):
    """``out = base.clone(); out[index[i][j]][j] += src[i][j]`` for dim 0."""

    holomorphic = True
    saves_inputs = ()
    promotes = False

    @staticmethod
    def forward(base, index, src, *, dim):
        if index.dtype.kind not in "iu":
            raise RuntimeError("scatter(): Expected dtype int32/int64 for index")
        check_along_dim(index, base.shape, dim)
        out = base.copy()
        src = src[tuple(slice(0, s) for s in index.shape)] if src.shape != index.shape else src
        xp.add.at(out, along_axis_index(index, dim), src)
        return out

    @staticmethod
    def vjp(g, out, base, index, src, *, dim):
        gs = None
        if needs_grad(src):
            gs = Gather.apply(g, index, dim=dim)
            if tuple(src.shape) != tuple(index.shape):
                # only src's leading index.shape block is scattered: the rest gets zero
                block = tuple(("slice", 0, s, None) for s in index.shape)
                gs = IndexPut.apply(g.new_zeros(tuple(src.shape)), gs, spec=block,
                                    accumulate=False)
        return g, None, gs

    @staticmethod
    def jvp(dots, out, base, index, src, *, dim):
        db, ds = dots[0], dots[2]
        if db is None:
            db = out.new_zeros(tuple(out.shape))
        if ds is None:
            return db
        return ScatterAdd.apply(db, index, ds, dim=dim)

    taylor = classmethod(ts.linear_taylor)

    @classmethod
    def batch(cls, vals, bdims, *, dim):
        base, index, src = all_to_front(vals, bdims)
        return cls.apply(base, index, src, dim=dim + 1), 0


def gather(input, dim: int, index, *, sparse_grad: bool = False):
    return Gather.apply(input, index, dim=normalize_dim(dim, input.ndim, "gather"))


def take_along_dim(input, indices, dim=None):
    if not isinstance(indices, Value):
        raise TypeError(f"take_along_dim(): argument 'indices' (position 2) must be Tensor, "
                        f"not {type(indices).__name__}")
    if dim is None:
        return gather(input.reshape(-1), 0, indices.reshape(-1))
    dim = int_arg(dim, "take_along_dim", "dim", 3)
    if input.ndim != indices.ndim:
        raise RuntimeError(f"torch.take_along_dim(): input and indices should have the same "
                           f"number of dimensions, but got {input.ndim} dimensions for input, "
                           f"and {indices.ndim} dimensions for indices")
    if indices._array.dtype != xp.int64:
        raise RuntimeError(f"torch.take_along_dim(): dtype of indices should be Long but got "
                           f"{scalar_name(indices._array.dtype)}")
    d = normalize_dim(dim, input.ndim, "take_along_dim")
    # the other dims broadcast, as PyTorch's take_along_dim does (gather's do not)
    shape = list(broadcast_shapes("take_along_dim", _without(input.shape, d),
                                  _without(indices.shape, d)))
    input = input.expand(*shape[:d], input.shape[d], *shape[d:])
    indices = indices.expand(*shape[:d], indices.shape[d], *shape[d:])
    return gather(input, d, indices)


def _without(shape: tuple, d: int) -> tuple:
    return tuple(shape[:d]) + tuple(shape[d + 1:])


def scatter_add(input, dim: int, index, src):
    return ScatterAdd.apply(input, index, src, dim=normalize_dim(dim, input.ndim, "scatter_add"))


class OneHot(Op):
    differentiable = False
    promotes = False
    saves_inputs = ()

    @staticmethod
    def forward(a, *, num_classes):
        if a.dtype.kind not in "iu":
            raise RuntimeError("one_hot is only applicable to index tensor of type LongTensor.")
        if a.size and a.min() < 0:
            raise RuntimeError("Class values must be non-negative.")
        n = num_classes if num_classes >= 0 else (int(a.max()) + 1 if a.size else 0)
        if a.size and a.max() >= n:
            raise RuntimeError("Class values must be smaller than num_classes.")
        return (a[..., None] == xp.arange(n)).astype(xp.int64)

    @classmethod
    def batch(cls, vals, bdims, *, num_classes):
        if num_classes < 0:
            raise NotImplementedError("vmap: one_hot needs an explicit num_classes inside vmap "
                                      "(the class count would differ between examples)")
        return cls.apply(to_front(vals[0], bdims[0]), num_classes=num_classes), 0


def one_hot(tensor, num_classes: int = -1):
    """``nn.functional.one_hot``: int64 tensor with a trailing class dim."""
    return OneHot.apply(tensor, num_classes=num_classes)
