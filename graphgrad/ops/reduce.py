"""Layer ``ops``: reductions over ``dim`` (int, tuple or None) with ``keepdim``: sum, mean,
prod, amax/amin, argmax/argmin, norm, logsumexp (softmax/log_softmax in ``softmax``).

``max``/``min`` with a dim, ``all``/``any`` are built from these (``var``/``std`` in
``moments``).
"""

from __future__ import annotations

import builtins
from typing import NamedTuple

from graphgrad.backend import result_float_dtype, xp
from graphgrad.tensor import Value
from graphgrad.tensor.creation import invalid_arguments

from .base import Op, Spec, normalize_dim, normalize_dims, scalar_name
from .batching import to_front
from .compare import where
from .join import Pad
from .refusals import NOT_GIVEN, empty_check, no_bool
from . import taylor as ts
from .taylor_products import product_tree

__all__ = ["sum", "mean", "prod", "amax", "amin", "max", "min", "argmax", "argmin",
           "logsumexp", "all", "any", "count_nonzero",
           "cumsum", "nansum"]


def _kept_shape(shape: tuple, dims: tuple) -> tuple:
    return tuple(1 if i in dims else s for i, s in enumerate(shape))


def _inverse(perm: list) -> list:
    inverse = [0] * len(perm)
    for i, p in enumerate(perm):
        inverse[p] = i
    return inverse


def expand_back(g, shape: tuple, dims: tuple, keepdim: bool):
    """Broadcast a reduction's cotangent back over the reduced dims."""
    if not keepdim:
        g = g.reshape(_kept_shape(shape, dims))
    return g.expand(shape)


class _Reduce(Op):
    """Reduces ``dims`` (a normalized tuple) of input 0."""

    @classmethod
    def infer(cls, a, *rest, dim, keepdim, **params) -> Spec:
        shape = tuple(1 if i in dim else s for i, s in enumerate(a.shape)) if keepdim else \
            tuple(s for i, s in enumerate(a.shape) if i not in dim)
        probe = [xp.ones((1,) * a.ndim, a.dtype)] + [
            xp.ones((1,) * r.ndim, r.dtype) if isinstance(r, Spec) else r for r in rest]
        with xp.errstate(all="ignore"):
            dt = cls.forward(*probe, dim=dim, keepdim=keepdim, **params).dtype
        if cls.promotes:
            cast = result_float_dtype(dt, a.dtype)
            dt = cast if cast is not None else dt
        return Spec(shape, xp.dtype(dt))

    @classmethod
    def jvp(cls, dots, out, a, *, dim, keepdim, **params):
        # every reduction's vjp is expand(g) * W(a): W, the derivative of the output
        # w.r.t. each element of its slice, turns the tangent into (da * W).sum(dim)
        weight = cls.vjp(out.new_ones(tuple(out.shape)), out, a, dim=dim, keepdim=keepdim,
                         **params)[0]
        return (dots[0] * weight).sum(dim=dim, keepdim=keepdim)

    @classmethod
    def batch(cls, vals, bdims, *, dim, keepdim, **params):
        a = to_front(vals[0], bdims[0])
        return cls.apply(a, dim=tuple(d + 1 for d in dim), keepdim=keepdim, **params), 0


class Sum(_Reduce):
    holomorphic = True
    saves_inputs = ()
    promotes = False

    @staticmethod
    def forward(a, *, dim, keepdim, dtype=None):
        if dtype is None and a.dtype.kind in "bui":
            dtype = xp.int64  # PyTorch sums bools and ints as int64
        # the ufunc's own reduce: np.sum's wrapper costs twice the reduction on small arrays
        return xp.asarray(xp.add.reduce(a, axis=dim, dtype=dtype, keepdims=keepdim))

    @staticmethod
    def vjp(g, out, a, *, dim, keepdim, dtype=None):
        return (expand_back(g, a.shape, dim, keepdim),)

    @classmethod
    def jvp(cls, dots, out, a, **params):  # linear
        return cls.apply(dots[0], **params)

    taylor = classmethod(ts.linear_taylor)


class Mean(_Reduce):
    holomorphic = True
    saves_inputs = ()
    promotes = False

    @staticmethod
    def forward(a, *, dim, keepdim, dtype=None):
        _mean_dtype(a.dtype, dtype)
        if not a.size:  # the mean of nothing is NaN, without NumPy's warning (PyTorch has none)
            with xp.errstate(all="ignore"):
                return xp.asarray(xp.add.reduce(a, axis=dim, keepdims=keepdim, dtype=dtype) / 0)
        return xp.asarray(xp.mean(a, axis=dim, keepdims=keepdim, dtype=dtype))

    @staticmethod
    def vjp(g, out, a, *, dim, keepdim, dtype=None):
        n = 1
        for d in dim:
            n *= a.shape[d]
        # n is a 0-d Symbol where a dim is known only at run time (graph differentiation)
        n = n.clamp(min=1) if isinstance(n, Value) else builtins.max(n, 1)
        return (expand_back(g, a.shape, dim, keepdim) / n,)

    @classmethod
    def jvp(cls, dots, out, a, **params):  # linear
        return cls.apply(dots[0], **params)

    taylor = classmethod(ts.linear_taylor)


class Prod(_Reduce):
    holomorphic = True
    saves_output = True
    promotes = False

    @staticmethod
    def forward(a, *, dim, keepdim, dtype=None):
        if dtype is None and a.dtype.kind in "bui":
            dtype = xp.int64
        return xp.asarray(xp.prod(a, axis=dim, keepdims=keepdim, dtype=dtype))

    @staticmethod
    def vjp(g, out, a, *, dim, keepdim, dtype=None):
        # d prod / d a_i is the product of the others: the exclusive cumulative products
        # from the left and from the right, multiplied. No division (out / a_i), so it is
        # exact at any number of zeros, and it stays exact when differentiated again:
        # Cumprod's own vjp handles zeros (PyTorch's prod_safe_zeros_backward is this).
        shape = a.shape
        if a.ndim == 0:
            return (g,)
        kept = [d for d in range(a.ndim) if d not in dim]
        perm = kept + list(dim)
        moved = a.permute(*perm)
        flat = moved.reshape(*moved.shape[:len(kept)], -1)
        n = flat.shape[-1]  # a Symbol where the size is known only at run time
        if not isinstance(n, Value) and n == 0:  # an empty slice: nothing to differentiate
            return (expand_back(g, shape, dim, keepdim) * a,)
        before = Pad.apply(flat.cumprod(-1), pad=(1, -1), value=1.0)
        after = Pad.apply(flat.flip(-1).cumprod(-1).flip(-1), pad=(-1, 1), value=1.0)
        others = (before * after).reshape(moved.shape).permute(*_inverse(perm))
        return (expand_back(g, shape, dim, keepdim) * others,)

    @staticmethod
    def taylor(series, out, a, *, dim, keepdim, dtype=None):
        order = ts.order_of(series)
        if a.ndim == 0:
            return series[0]
        # the reduced dims moved last and flattened, then a product tree along them
        kept = [d for d in range(a.ndim) if d not in dim]
        perm = kept + list(dim)
        lead = tuple(a.shape[d] for d in kept)

        def flat(t):
            return None if t is None else t.permute(*perm).reshape(*lead, -1)
        y = product_tree(ts.full(flat(a), [flat(t) for t in series[0]], order), order)
        return [None if t is None else t.reshape(tuple(out.shape)) for t in y[1:]]


class _Extremum(_Reduce):
    """amax/amin: the gradient is shared evenly among the elements that attain it."""

    saves_output = True
    promotes = False

    @staticmethod
    def vjp(g, out, a, *, dim, keepdim):
        mask = (a == expand_back(out, a.shape, dim, keepdim)).to(g.dtype)
        share = mask / mask.sum(dim=dim, keepdim=True)
        return (expand_back(g, a.shape, dim, keepdim) * share,)

    # the series of the extreme element, averaged over ties as the vjp shares the
    # gradient: a convention (no two-sided jet exists at a tie), JAX's for reduce_max
    taylor = classmethod(ts.linear_taylor)


class Amax(_Extremum):
    @staticmethod
    def forward(a, *, dim, keepdim):
        empty_check("amax", a.shape, dim)
        return xp.asarray(xp.amax(a, axis=dim, keepdims=keepdim))


class Amin(_Extremum):
    @staticmethod
    def forward(a, *, dim, keepdim):
        empty_check("amin", a.shape, dim)
        return xp.asarray(xp.amin(a, axis=dim, keepdims=keepdim))


class _ArgExtremum(Op):
    """argmax/argmin over ``dim`` (None: of the flattened tensor), as int64."""

    differentiable = False
    promotes = False
    saves_inputs = ()
    _find = None  # NumPy's argmax or argmin

    @classmethod
    def forward(cls, a, *, dim, keepdim):
        empty_check(cls.__name__.lower(), a.shape, dim)
        if dim is None:
            return xp.asarray(cls._find(a), dtype=xp.int64)
        return cls._find(a, axis=dim, keepdims=keepdim).astype(xp.int64)

    @classmethod
    def batch(cls, vals, bdims, *, dim, keepdim):
        a = to_front(vals[0], bdims[0])
        if dim is None:
            out = cls.apply(a.reshape(a.shape[0], -1), dim=1, keepdim=False)
            return (out.reshape(a.shape[0], *([1] * (a.ndim - 1))) if keepdim else out), 0
        return cls.apply(a, dim=dim + 1, keepdim=keepdim), 0


class Argmax(_ArgExtremum):
    _find = staticmethod(xp.argmax)


class Argmin(_ArgExtremum):
    _find = staticmethod(xp.argmin)


class Logsumexp(_Reduce):
    holomorphic = True
    saves_output = True

    @staticmethod
    def forward(a, *, dim, keepdim):
        if a.dtype.kind not in "fc":
            a = a.astype(xp.float32)
        # shift by the largest real part (complex inputs: the complex step)
        re = xp.real(a)
        m = xp.amax(re, axis=dim, keepdims=True) if a.size else xp.zeros((1,) * a.ndim, re.dtype)
        m = xp.where(xp.isfinite(m), m, 0)
        r = xp.log(xp.sum(xp.exp(a - m), axis=dim, keepdims=True)) + m
        return xp.asarray(r if keepdim else xp.squeeze(r, axis=dim))

    @staticmethod
    def vjp(g, out, a, *, dim, keepdim):
        shape = a.shape
        return (expand_back(g, shape, dim, keepdim) * (a - expand_back(out, shape, dim,
                                                                       keepdim)).exp(),)

    @staticmethod
    def taylor(series, out, a, *, dim, keepdim):
        k = ts.order_of(series)
        e0 = (a - expand_back(out, a.shape, dim, keepdim)).exp()
        terms, _ = ts.logsumexp_series(series[0], e0, dim, k)
        return [t if t is None or keepdim else t.squeeze(dim) for t in terms]


class Cumsum(Op):
    holomorphic = True
    saves_inputs = ()
    promotes = False

    @staticmethod
    def forward(a, *, dim):
        dtype = xp.int64 if a.dtype.kind in "bui" else a.dtype
        if a.ndim == 0:  # NumPy's cumsum flattens a 0-d array to (1,); PyTorch keeps it 0-d
            return a.astype(dtype)
        if dtype == xp.float16:  # PyTorch accumulates half precision in float32
            return xp.cumsum(a, axis=dim, dtype=xp.float32).astype(xp.float16)
        return xp.cumsum(a, axis=dim, dtype=dtype)

    @staticmethod
    def vjp(g, out, a, *, dim):
        # reverse cumulative sum: flip, cumsum, flip
        return (g.flip(dim).cumsum(dim).flip(dim),)

    @staticmethod
    def jvp(dots, out, a, *, dim):
        return dots[0].cumsum(dim)

    taylor = classmethod(ts.linear_taylor)

    @classmethod
    def batch(cls, vals, bdims, *, dim):
        return along_dim_batched(cls, vals[0], bdims[0], dim), 0


# ---- user functions ------------------------------------------------------------------

def along_dim_batched(op, a, bdim, dim: int):
    """Apply an op along ``dim`` of each example: the batch goes first; a 0-d example
    gets a dim of its own for the op and loses it after."""
    a = to_front(a, bdim)
    if a.ndim == 1:
        return op.apply(a.unsqueeze(1), dim=1).squeeze(1)
    return op.apply(a, dim=dim + 1)


def _mean_dtype(a_dtype, dtype) -> None:
    if a_dtype.kind not in "fc" and dtype is None:
        raise RuntimeError(f"mean(): could not infer output dtype. Input dtype must be either a "
                           f"floating point or complex dtype. Got: {scalar_name(a_dtype)}")


def _dims_dtype_first(input, dim, name: str, check_dtype) -> tuple:
    """``_dims`` in PyTorch's order: a dtype the reduction refuses (``check_dtype()``
    raises) is reported before a dim out of range or repeated; the argument parser's
    TypeErrors still come first."""
    try:
        return _dims(input, dim, name)
    except (IndexError, RuntimeError):
        check_dtype()
        raise


def _dims(input, dim, name):
    if isinstance(dim, (list, tuple)) and not dim:
        dim = None  # PyTorch: an empty dim list reduces over every dim
    return normalize_dims(dim, input.ndim, name)


def sum(input, dim=None, keepdim: bool = False, *, dtype=None):
    from graphgrad.backend import to_dtype
    params = {"dim": _dims(input, dim, "sum"), "keepdim": keepdim}
    if dtype is not None:
        params["dtype"] = to_dtype(dtype).np
    return Sum.apply(input, **params)


def nansum(input, dim=None, keepdim: bool = False):
    return sum(where(input.isnan(), 0.0, input), dim, keepdim)


def mean(input, dim=None, keepdim: bool = False, *, dtype=None):
    from graphgrad.backend import to_dtype
    dims = _dims_dtype_first(input, dim, "mean",
                             lambda: _mean_dtype(input._array.dtype, dtype))
    params = {"dim": dims, "keepdim": keepdim}
    if dtype is not None:
        params["dtype"] = to_dtype(dtype).np
    return Mean.apply(input, **params)


_PROD_OVERLOADS = ("Tensor input, *, torch.dtype dtype = None",
                   "Tensor input, int dim, bool keepdim = False, *, torch.dtype dtype = None, "
                   "Tensor out = None")


def prod(input, dim=NOT_GIVEN, keepdim: bool = False, *, dtype=None):
    """The product of all elements, or over one dim: PyTorch's prod takes a single int dim
    (its argument parser refuses None, a tuple or a list; the reduction over several dims
    is ``Prod.apply`` with a tuple, which gradient rules use)."""
    from graphgrad.backend import to_dtype
    if dim is not NOT_GIVEN:
        if isinstance(dim, bool) or not isinstance(dim, int) and (
                not hasattr(dim, "__index__") or isinstance(dim, float)):
            raise invalid_arguments("prod", (input, dim), _PROD_OVERLOADS)
        dim = dim.__index__()
    params = {"dim": _dims(input, None if dim is NOT_GIVEN else dim, "prod"), "keepdim": keepdim}
    if dtype is not None:
        params["dtype"] = to_dtype(dtype).np
    return Prod.apply(input, **params)


def amax(input, dim=(), keepdim: bool = False, *, _name: str = "amax"):
    """Maximum over ``dim`` (all dims when ``dim`` is () or None); ties share the gradient."""
    if dim in ((), None, []):
        empty_check(_name, tuple(input.shape), None)
    return Amax.apply(input, dim=_dims(input, dim, "amax"),
                      keepdim=keepdim)


def amin(input, dim=(), keepdim: bool = False, *, _name: str = "amin"):
    if dim in ((), None, []):
        empty_check(_name, tuple(input.shape), None)
    return Amin.apply(input, dim=_dims(input, dim, "amin"),
                      keepdim=keepdim)


class MaxMin(NamedTuple):
    """``max(x, dim)`` returns ``(values, indices)`` (``torch.return_types.max``)."""

    values: object
    indices: object


def _select_extremum(input, dim, keepdim, arg, name):
    if not isinstance(dim, int):
        from graphgrad.tensor import Value
        if isinstance(dim, Value):  # max(x, other): elementwise
            from .arithmetic import maximum, minimum
            return (maximum if name == "max" else minimum)(input, dim)
        raise TypeError(f"{name}(): argument 'dim' must be int, not {type(dim).__name__}")
    d = normalize_dim(dim, input.ndim, name)  # a 0-d tensor takes dim 0 or -1
    if input.ndim == 0:
        return MaxMin(input, arg(input))
    empty_check(name, tuple(input.shape), d)
    indices = arg(input, d, True)
    # gather picks one element per slice, so the gradient goes to that index only,
    # as PyTorch's max(dim) does (amax shares among ties instead)
    values = input.gather(d, indices)
    if not keepdim:
        values, indices = values.squeeze(d), indices.squeeze(d)
    return MaxMin(values, indices)


_EXTREMUM_OVERLOADS = ("Tensor input, *, Tensor out = None",
                       "Tensor input, Tensor other, *, Tensor out = None",
                       "Tensor input, int dim, bool keepdim = False, *, tuple of Tensors out = "
                       "None")


def max(input, dim=NOT_GIVEN, keepdim: bool = False):
    """``max(x)``: the largest element; ``max(x, dim)``: (values, indices);
    ``max(x, other)``: elementwise maximum. (A dim of None is refused, as in PyTorch.)"""
    if dim is NOT_GIVEN:
        return amax(input, _name="max")
    if dim is None:
        raise invalid_arguments("max", (input, dim), _EXTREMUM_OVERLOADS)
    return _select_extremum(input, dim, keepdim, _argmax, "max")


def min(input, dim=NOT_GIVEN, keepdim: bool = False):
    if dim is NOT_GIVEN:
        return amin(input, _name="min")
    if dim is None:
        raise invalid_arguments("min", (input, dim), _EXTREMUM_OVERLOADS)
    return _select_extremum(input, dim, keepdim, _argmin, "min")


def argmax(input, dim=None, keepdim: bool = False):
    no_bool(input, "argmax")  # (max(x, dim) takes bools: it does not come this way)
    return _argmax(input, dim, keepdim)


def _arg_extremum(op, input, dim, keepdim: bool):
    d = None if dim is None else normalize_dim(dim, input.ndim, op.__name__.lower())
    if input.ndim == 0:
        d = None  # the one element: its index is 0 whatever the (valid) dim
    return op.apply(input, dim=d, keepdim=keepdim)


def _argmax(input, dim=None, keepdim: bool = False):
    return _arg_extremum(Argmax, input, dim, keepdim)


def _argmin(input, dim=None, keepdim: bool = False):
    return _arg_extremum(Argmin, input, dim, keepdim)


def argmin(input, dim=None, keepdim: bool = False):
    no_bool(input, "argmin")
    return _argmin(input, dim, keepdim)


def logsumexp(input, dim, keepdim: bool = False):
    if dim is None:  # PyTorch's argument parser: dim is required here
        raise TypeError("logsumexp(): argument 'dim' (position 2) must be tuple of ints, not "
                        "NoneType")
    return Logsumexp.apply(input, dim=_dims(input, dim, "logsumexp"), keepdim=keepdim)


def cumsum(input, dim: int, *, dtype=None):
    if dtype is not None:
        input = input.to(dtype)
    return Cumsum.apply(input, dim=normalize_dim(dim, input.ndim, "cumsum"))


def all(input, dim=None, keepdim: bool = False):
    if isinstance(dim, (list, tuple)) and not dim:  # PyTorch: no dim, no reduction here
        return input != 0
    return (input != 0).sum(dim, keepdim) == (
        input.numel() if dim is None else _count(input, dim))


def any(input, dim=None, keepdim: bool = False):
    if isinstance(dim, (list, tuple)) and not dim:
        return input != 0
    return (input != 0).sum(dim, keepdim) > 0


def _count(input, dim):
    n = 1
    for d in _dims(input, dim, "all"):
        n *= input.shape[d]
    return n


def count_nonzero(input, dim=None):
    return (input != 0).sum(dim)
