"""Layer ``ops``: installs the op functions as ``Tensor`` methods and operators.

This is the one place Tensor learns about particular ops (the documented upward edge
from ``tensor`` to ``ops`` runs the other way: ops fill in the class).
"""

from __future__ import annotations

from numbers import Number

from graphgrad.backend import to_dtype, xp
from graphgrad.tensor import Tensor, Value, dispatch, set_grad_mode
from graphgrad.tensor.creation import invalid_arguments, is_number
from graphgrad.tensor.device import check_device

from . import arithmetic as A
from . import compare as C
from . import gathering as G
from . import index as I
from . import index_order as O
from . import join as J
from . import linalg as L
from . import moments as MO
from . import norms as NO
from . import reduce as R
from . import shape as S
from . import softmax as SM
from . import unary as U
from . import compound as CO
from .base import dtype_of_type_name, tensor_type_name
from . import cumulative as CU
from . import diagonals as D
from . import logarithmic as LG
from . import shifts as SH
from . import sorting as SO
from . import triangular as TR
from . import random as RA
from . import repeats as RP
from . import scattering as SC
from . import signs as SG
from .aliases import with_numpy_aliases
from .base import NO_PARAMS, normalize_dim
from .inplace import apply_inplace, fill_inplace
from .inplace_shape import SHAPE_INPLACE_METHODS
from .refusals import int_tuple_arg

_Add, _Sub, _Mul, _Div, _Pow = A.Add, A.Sub, A.Mul, A.Div, A.Pow


def _foreign(other) -> bool:
    """An operand no op takes (a string, a list, None, an object of another library): the
    operator returns NotImplemented, so Python tries the other side and then raises its own
    TypeError ("unsupported operand type(s) for +: 'Tensor' and 'str'"), as PyTorch does."""
    return not isinstance(other, _OPERANDS) and not hasattr(type(other), "__float__")


_OPERANDS = (Value, Number, xp.ndarray)
# the operand types of nearly every call: one set lookup, before the ABC check (which
# costs as much as a tenth of a small op)
_COMMON = frozenset({Tensor, float, int, bool, xp.ndarray})


def _rev(op):
    def method(self, other):
        if type(other) not in _COMMON and _foreign(other):
            return NotImplemented
        return dispatch(op, (other, self), NO_PARAMS)
    return method


def _fwd(op):
    def method(self, other):
        if type(other) not in _COMMON and _foreign(other):
            return NotImplemented
        return dispatch(op, (self, other), NO_PARAMS)
    return method


def _eq(self, other):
    if other is None or isinstance(other, str):  # not comparable: PyTorch says False
        return False
    return dispatch(C.Eq, (self, other), NO_PARAMS)


def _ne(self, other):
    if other is None or isinstance(other, str):
        return True
    return dispatch(C.Ne, (self, other), NO_PARAMS)


def _logical_or_bitwise(logical, bitwise):
    def method(self, other):
        if _foreign(other):
            return NotImplemented
        a = self._array.dtype == xp.bool_
        b = other._array.dtype == xp.bool_ if isinstance(other, Value) else isinstance(other, bool)
        return dispatch(logical if a and b else bitwise, (self, other), NO_PARAMS)
    return method


def _is_contiguous(self, memory_format=None) -> bool:
    return bool(self._array.flags.c_contiguous)


def _contiguous(self, memory_format=None):
    """``self`` when its elements are laid out in row-major order; otherwise a copy (as in
    PyTorch: writes into the result must not reach the tensor it came from)."""
    return self if self._array.flags.c_contiguous else U.Clone.apply(self, contiguous=True)


def _invert(self):
    op = C.LogicalNot if self._array.dtype == xp.bool_ else C.BitwiseNot
    return dispatch(op, (self,), NO_PARAMS)


def _to(self, *args, **kwargs):
    """``to(dtype)``, ``to(device)``, ``to(device, dtype)``, ``to(other)``; only the CPU
    device exists."""
    dtype = kwargs.pop("dtype", None)
    kwargs.pop("device", None)
    kwargs.pop("non_blocking", None)
    copy = kwargs.pop("copy", False)
    for a in args:
        if isinstance(a, Tensor):
            dtype = a.dtype
        elif isinstance(a, str) or a is None:
            if a not in (None, "cpu") and not str(a).startswith("cpu"):
                raise RuntimeError(f"graphgrad runs on the CPU only; device {a!r} is not "
                                   "available")
        else:
            dtype = a
    out = self if dtype is None else U.cast(self, dtype)
    return U.clone(out) if copy and out is self else out  # copy=True: never an alias


def _new(self, arr, requires_grad=False):
    t = Tensor._make(arr)
    if requires_grad:
        t.requires_grad_(True)
    return t


def _new_zeros(self, *size, dtype=None, device=None, requires_grad=False):
    size = size[0] if len(size) == 1 and isinstance(size[0], (tuple, list)) else size
    dt = to_dtype(dtype).np if dtype is not None else self._array.dtype
    return _new(self, xp.zeros(tuple(size), dt), requires_grad)


def _new_ones(self, *size, dtype=None, device=None, requires_grad=False):
    size = size[0] if len(size) == 1 and isinstance(size[0], (tuple, list)) else size
    dt = to_dtype(dtype).np if dtype is not None else self._array.dtype
    return _new(self, xp.ones(tuple(size), dt), requires_grad)


def _new_full(self, size, fill_value, *, dtype=None, device=None, requires_grad=False):
    dt = to_dtype(dtype).np if dtype is not None else self._array.dtype
    return _new(self, xp.full(tuple(size), fill_value, dt), requires_grad)


def _new_tensor(self, data, dtype=None, device=None, requires_grad=False):
    from graphgrad.tensor.creation import as_array
    arr = as_array(data, dtype if dtype is not None else self.dtype)
    return _new(self, arr, requires_grad)


def _inplace(fn, name):
    def method(self, *args, **kwargs):
        return apply_inplace(self, fn, *args, name=name, **kwargs)
    method.__name__ = name
    method.__doc__ = f"In-place version of ``{fn.__name__}``."
    return method


def _zero_(self):
    return fill_inplace(self, 0, "zero_")


def _fill_(self, value):
    if not (isinstance(value, Value) or is_number(value)):
        raise invalid_arguments("fill_", (value,), ("Tensor value", "Number value"))
    if isinstance(value, Value) and value.ndim:
        raise RuntimeError(f"fill_ only supports 0-dimension value tensor but got tensor with "
                           f"{value.ndim} dimensions.")
    return fill_inplace(self, value, "fill_")


def _copy_(self, src, non_blocking=False):
    return fill_inplace(self, src, "copy_")


def _uniform_(self, a=0.0, b=1.0, *, generator=None):
    from graphgrad.tensor.creation import rng_of
    return fill_inplace(self, Tensor._make(rng_of(generator).uniform(a, b, self._array.shape)
                                    .astype(self._array.dtype)), "uniform_")


def _tensor_where(self, condition, other):
    return C.where(condition, self, other)


def _type_as(self, other):
    return U.cast(self, other.dtype)


def _type(self, dtype=None, non_blocking: bool = False, **kwargs):
    """``x.type()``: the legacy type name; ``x.type(t)``: ``x`` cast to dtype or legacy
    type ``t`` (a name such as ``"torch.DoubleTensor"`` or a typed constructor)."""
    if dtype is None:
        return tensor_type_name(self._array.dtype)
    if isinstance(dtype, str):
        np_dtype = dtype_of_type_name(dtype)
        if np_dtype is None:
            raise ValueError(f"invalid type: '{dtype}'")
        dtype = np_dtype
    dtype = getattr(dtype, "dtype", dtype)  # torch.FloatTensor & co carry their dtype
    return U.cast(self, dtype)


def _T(self):
    return S.permute(self, *reversed(range(self.ndim))) if self.ndim > 1 else self


def _mT(self):
    if self.ndim < 2:
        raise RuntimeError(f"tensor.mT is only supported on matrices or batches of matrices. "
                           f"Got {self.ndim}-D tensor.")
    return S.transpose(self, -2, -1)


def _chunk_method(self, chunks, dim=0):
    return J.chunk(self, chunks, dim)


def _flip_method(self, *dims):
    """``x.flip(0, 1)`` or ``x.flip((0, 1))`` (``torch.flip`` takes only the sequence)."""
    if len(dims) == 1:
        if isinstance(dims[0], (tuple, list)):
            dims = dims[0]
        else:
            dims = int_tuple_arg(dims[0], "flip", "dims", 1)
    return S.flip(self, tuple(dims))


def _split_method(self, split_size, dim=0):
    return J.split(self, split_size, dim)


def _unbind_method(self, dim=0):
    return J.unbind(self, dim)


_METHODS = {
    # operators
    "__add__": _fwd(_Add), "__radd__": _rev(_Add),
    "__sub__": _fwd(_Sub), "__rsub__": _rev(_Sub),
    "__mul__": _fwd(_Mul), "__rmul__": _rev(_Mul),
    "__truediv__": _fwd(_Div), "__rtruediv__": _rev(_Div),
    "__floordiv__": _fwd(A.FloorDivide), "__rfloordiv__": _rev(A.FloorDivide),
    "__mod__": _fwd(A.Remainder), "__rmod__": _rev(A.Remainder),
    "__pow__": _fwd(_Pow), "__rpow__": _rev(_Pow),
    "__matmul__": _fwd(L.Matmul), "__rmatmul__": _rev(L.Matmul),
    "__neg__": A.neg, "__pos__": lambda self: self, "__abs__": U.abs,
    "__eq__": _eq, "__ne__": _ne,
    "__lt__": _fwd(C.Lt), "__le__": _fwd(C.Le), "__gt__": _fwd(C.Gt), "__ge__": _fwd(C.Ge),
    "__and__": _logical_or_bitwise(C.LogicalAnd, C.BitwiseAnd),
    "__or__": _logical_or_bitwise(C.LogicalOr, C.BitwiseOr),
    "__xor__": _logical_or_bitwise(C.LogicalXor, C.BitwiseXor),
    "__rand__": _logical_or_bitwise(C.LogicalAnd, C.BitwiseAnd),
    "__ror__": _logical_or_bitwise(C.LogicalOr, C.BitwiseOr),
    "__invert__": _invert,
    "__getitem__": O.getitem, "__setitem__": O.setitem,
    "__iadd__": _inplace(A.add, "add_"), "__isub__": _inplace(A.sub, "sub_"),
    "__imul__": _inplace(A.mul, "mul_"), "__itruediv__": _inplace(A.div, "div_"),
    "__ipow__": _inplace(A.pow, "pow_"), "__ifloordiv__": _inplace(A.floor_divide, "floor_divide_"),
    "__imod__": _inplace(A.remainder, "remainder_"),
    "__iand__": _inplace(_logical_or_bitwise(C.LogicalAnd, C.BitwiseAnd), "bitwise_and_"),
    "__ior__": _inplace(_logical_or_bitwise(C.LogicalOr, C.BitwiseOr), "bitwise_or_"),
    "__ixor__": _inplace(_logical_or_bitwise(C.LogicalXor, C.BitwiseXor), "bitwise_xor_"),
    # arithmetic
    "add": A.add, "sub": A.sub, "subtract": A.sub, "mul": A.mul, "multiply": A.mul,
    "div": A.div, "divide": A.div, "true_divide": A.div, "floor_divide": A.floor_divide,
    "remainder": A.remainder, "fmod": A.fmod, "pow": A.pow, "neg": A.neg, "negative": A.neg,
    "maximum": A.maximum, "minimum": A.minimum, "atan2": A.atan2,
    "matmul": L.matmul, "mm": L.mm, "bmm": L.bmm, "mv": L.mv, "dot": L.dot, "outer": L.outer,
    # unary
    **{n: getattr(U, n) for n in (
        "exp", "log", "log1p", "expm1", "log2", "log10", "sin", "cos", "tan", "tanh", "sinh",
        "cosh", "asin", "acos", "atan", "arcsin", "arccos", "arctan", "sigmoid", "relu",
        "abs", "absolute", "sign", "sqrt", "rsqrt", "reciprocal", "erf", "clamp", "clip",
        "floor", "ceil", "trunc", "round", "clone", "square")},
    # comparisons
    "eq": C.eq, "ne": C.ne, "lt": C.lt, "le": C.le, "gt": C.gt, "ge": C.ge,
    "logical_and": C.logical_and, "logical_or": C.logical_or, "logical_xor": C.logical_xor,
    "logical_not": C.logical_not, "isnan": C.isnan, "isinf": C.isinf,
    "isfinite": C.isfinite, "equal": C.equal, "allclose": C.allclose, "isclose": C.isclose,
    "where": _tensor_where,
    # reductions
    **{n: getattr(R, n) for n in (
        "sum", "mean", "prod", "amax", "amin", "max", "min", "argmax", "argmin",
        "logsumexp", "all", "any", "cumsum", "nansum", "count_nonzero")},
    "softmax": SM.softmax, "log_softmax": SM.log_softmax,
    "norm": NO.norm,
    # shape
    **{n: getattr(S, n) for n in (
        "reshape", "flatten", "unflatten", "squeeze", "unsqueeze", "transpose", "swapaxes",
        "swapdims", "permute", "t", "expand", "expand_as", "broadcast_to", "repeat", "tile",
        "movedim", "ravel", "sum_to_size")},
    "flip": _flip_method,
    **SHAPE_INPLACE_METHODS,
    "view": S.view, "view_as": lambda self, other: S.view(self, *other.shape),
    "reshape_as": lambda self, other: S.reshape(self, *other.shape),
    "contiguous": _contiguous, "is_contiguous": _is_contiguous,
    # indexing and joining
    "gather": G.gather, "scatter_add": G.scatter_add, "index_select": I.index_select,
    "masked_fill": I.masked_fill, "masked_select": I.masked_select, "nonzero": I.nonzero,
    "var": MO.var, "std": MO.std,
    "take_along_dim": G.take_along_dim, "select": I.select, "narrow": I.narrow,
    "split": _split_method, "chunk": _chunk_method, "unbind": _unbind_method,
    # dtype and construction
    "to": _to, "type": _type, "type_as": _type_as,
    "float": lambda self: U.cast(self, "float32"), "double": lambda self: U.cast(self, "float64"),
    "half": lambda self: U.cast(self, "float16"), "long": lambda self: U.cast(self, "int64"),
    "bfloat16": lambda self: U.cast(self, "bfloat16"),  # raises: no bfloat16 tensors
    "int": lambda self: U.cast(self, "int32"), "bool": lambda self: U.cast(self, "bool"),
    "cpu": lambda self: self,
    "new_zeros": _new_zeros, "new_ones": _new_ones, "new_full": _new_full,
    "new_tensor": _new_tensor, "new_empty": _new_zeros,
    # in place
    "add_": _inplace(A.add, "add_"), "sub_": _inplace(A.sub, "sub_"),
    "mul_": _inplace(A.mul, "mul_"), "div_": _inplace(A.div, "div_"),
    "pow_": _inplace(A.pow, "pow_"), "neg_": _inplace(A.neg, "neg_"),
    "exp_": _inplace(U.exp, "exp_"), "log_": _inplace(U.log, "log_"),
    "sqrt_": _inplace(U.sqrt, "sqrt_"), "abs_": _inplace(U.abs, "abs_"),
    "sigmoid_": _inplace(U.sigmoid, "sigmoid_"), "tanh_": _inplace(U.tanh, "tanh_"),
    "relu_": _inplace(U.relu, "relu_"), "clamp_": _inplace(U.clamp, "clamp_"),
    "clip_": _inplace(U.clamp, "clip_"),
    "masked_fill_": _inplace(I.masked_fill, "masked_fill_"),
    "scatter_add_": _inplace(G.scatter_add, "scatter_add_"),
    "index_put_": _inplace(I.index_put, "index_put_"),
    "zero_": _zero_, "fill_": _fill_, "copy_": _copy_, "uniform_": _uniform_,
    "normal_": RA.normal_, "bernoulli_": RA.bernoulli_,
    "bernoulli": RA.bernoulli, "multinomial": RA.multinomial,
}

# sorting, triangles and diagonals, shifts, cumulative and compound arithmetic
_METHODS.update({
    "sort": SO.sort, "argsort": SO.argsort, "topk": SO.topk, "msort": SO.msort,
    "tril": TR.tril, "triu": TR.triu, "diagonal": D.diagonal, "trace": D.trace,
    "roll": SH.roll, "diff": SH.diff, "cumprod": CU.cumprod,
    "addmm": CO.addmm, "addcmul": CO.addcmul, "addcdiv": CO.addcdiv, "lerp": CO.lerp,
    "nan_to_num": CO.nan_to_num, "addmv": CO.addmv, "addbmm": CO.addbmm,
    "baddbmm": CO.baddbmm, "kthvalue": SO.kthvalue, "median": SO.median, "diag": D.diag,
    "diag_embed": D.diag_embed, "cummax": CU.cummax, "cummin": CU.cummin,
    "rot90": SH.rot90, "logaddexp": LG.logaddexp, "xlogy": LG.xlogy,
})


def _stride(self, dim: int | None = None):
    """Element strides (NumPy's byte strides over the item size)."""
    strides = tuple(s // self._array.itemsize for s in self._array.strides)
    if dim is None:
        return strides
    return strides[normalize_dim(dim, self.ndim, "stride")] if self.ndim else 1


def _storage_offset(self) -> int:
    """Elements from the start of the buffer the tensor's memory lies in."""
    root = self._array
    while isinstance(root.base, xp.ndarray):
        root = root.base
    start = self._array.__array_interface__["data"][0]
    return (start - root.__array_interface__["data"][0]) // self._array.itemsize


def _untracked_inplace(fn, name):
    """An in-place op autograd does not record (PyTorch's logical_and_...): the values
    change, the tensor's history stays, and a leaf that requires grad may be written."""
    def method(self, *args, **kwargs):
        previous = set_grad_mode(False)
        try:
            return apply_inplace(self, fn, *args, name=name, **kwargs)
        finally:
            set_grad_mode(previous)
    method.__name__ = name
    return method


def _inplace_all(**pairs) -> dict:
    """``name_ -> in-place method`` for each out-of-place function ``name``."""
    return {f"{name}_": _inplace(fn, f"{name}_") for name, fn in pairs.items()}


# shifts and reflected bitwise operators, the peer-suite math, scatter, repeats
_METHODS.update({
    "__lshift__": _fwd(C.BitwiseLeftShift), "__rlshift__": _rev(C.BitwiseLeftShift),
    "__rshift__": _fwd(C.BitwiseRightShift), "__rrshift__": _rev(C.BitwiseRightShift),
    "__ilshift__": _inplace(C.bitwise_left_shift, "bitwise_left_shift_"),
    "__irshift__": _inplace(C.bitwise_right_shift, "bitwise_right_shift_"),
    "__rxor__": _logical_or_bitwise(C.LogicalXor, C.BitwiseXor),
    "bitwise_left_shift": C.bitwise_left_shift, "bitwise_right_shift": C.bitwise_right_shift,
    "bitwise_and": C.bitwise_and, "bitwise_or": C.bitwise_or, "bitwise_xor": C.bitwise_xor,
    "bitwise_not": C.bitwise_not,
    **{n: getattr(U, n) for n in (
        "asinh", "acosh", "atanh", "arcsinh", "arccosh", "arctanh", "exp2")},
    "copysign": SG.copysign, "logcumsumexp": CU.logcumsumexp,
    "repeat_interleave": RP.repeat_interleave,
    "unfold": RP.unfold, "scatter": SC.scatter, "scatter_reduce": SC.scatter_reduce,
    "index_add": SC.index_add, "index_copy": SC.index_copy, "index_fill": SC.index_fill,
    "index_put": I.index_put, "tensor_split": J.tensor_split, "inner": L.inner,
    "vdot": L.vdot, "cfloat": lambda self: U.cast(self, "complex64"),
    "cdouble": lambda self: U.cast(self, "complex128"),
    "stride": _stride, "storage_offset": _storage_offset,
    # a CPU-only build: PyTorch's AssertionError, "Torch not compiled with CUDA enabled"
    "cuda": lambda self, *args, **kwargs: check_device("cuda"),
})

# the in-place variants of out-of-place ops, through the one in-place mechanism
_METHODS.update(_inplace_all(
    **{n: getattr(U, n) for n in (
        "absolute", "acos", "arccos", "asin", "arcsin", "atan", "arctan", "ceil", "cos", "cosh",
        "erf", "expm1", "floor", "log10", "log1p", "log2", "reciprocal", "rsqrt", "sign",
        "sin", "sinh", "square", "tan", "trunc", "round")},
    **{n: getattr(U, n) for n in (
        "asinh", "acosh", "atanh", "arcsinh", "arccosh", "arctanh", "exp2")},
    copysign=SG.copysign,
    **{n: getattr(C, n) for n in (
        "eq", "ne", "lt", "le", "gt", "ge", "bitwise_and", "bitwise_or", "bitwise_xor",
        "bitwise_not")},
    bitwise_left_shift=C.bitwise_left_shift, bitwise_right_shift=C.bitwise_right_shift,
    atan2=A.atan2, divide=A.div, multiply=A.mul, subtract=A.sub, true_divide=A.div,
    negative=A.neg, floor_divide=A.floor_divide, fmod=A.fmod, remainder=A.remainder,
    addbmm=CO.addbmm, addcdiv=CO.addcdiv, addcmul=CO.addcmul, addmm=CO.addmm, addmv=CO.addmv,
    baddbmm=CO.baddbmm, lerp=CO.lerp, nan_to_num=CO.nan_to_num, xlogy=LG.xlogy,
    cumsum=R.cumsum, cumprod=CU.cumprod, tril=TR.tril,
    triu=TR.triu, scatter=SC.scatter, scatter_reduce=SC.scatter_reduce,
    index_add=SC.index_add, index_copy=SC.index_copy, index_fill=SC.index_fill,
))

_METHODS.update({f"{n}_": _untracked_inplace(getattr(C, n), f"{n}_") for n in (
    "logical_and", "logical_or", "logical_xor", "logical_not")})

_PROPERTIES = {"T": _T, "mT": _mT, "itemsize": lambda self: self._array.itemsize,
               "nbytes": lambda self: self._array.nbytes}


def install() -> None:
    for name, fn in _METHODS.items():
        setattr(Tensor, name, with_numpy_aliases(fn))  # axis=/keepdims= as PyTorch takes
    for name, fn in _PROPERTIES.items():
        setattr(Tensor, name, property(fn))
    Tensor.__array_ufunc__ = None  # ndarray OP tensor -> Tensor's reflected operator
