"""Layer ``backend``: the array namespace and graphgrad's dtypes.

Everything above this layer reaches NumPy through ``xp`` so a GPU array
library with NumPy's API could be swapped in at this one place.
"""

from __future__ import annotations

import numpy as xp

__all__ = [
    "xp", "dtype", "float16", "float32", "float64", "int8", "int16", "int32", "int64",
    "uint8", "bool_", "complex64", "complex128", "to_dtype", "from_numpy_dtype",
    "get_default_dtype", "set_default_dtype", "result_float_dtype", "torch_promotion",
]


class dtype:  # noqa: N801 - PyTorch spells it in lower case
    """A tensor element type; ``repr`` reads ``graphgrad.float32`` like ``torch.float32``."""

    __slots__ = ("name", "np", "is_floating_point", "is_complex", "is_signed", "itemsize")

    def __init__(self, name: str, np_dtype: xp.dtype):
        self.name = name
        self.np = xp.dtype(np_dtype)
        self.is_floating_point = self.np.kind == "f"
        self.is_complex = self.np.kind == "c"
        self.is_signed = self.np.kind in "ifc"
        self.itemsize = self.np.itemsize

    def __repr__(self) -> str:
        return f"graphgrad.{self.name}"

    def __reduce__(self):
        return (to_dtype, (self.name,))


float16 = dtype("float16", xp.float16)
float32 = dtype("float32", xp.float32)
float64 = dtype("float64", xp.float64)
int8 = dtype("int8", xp.int8)
int16 = dtype("int16", xp.int16)
int32 = dtype("int32", xp.int32)
int64 = dtype("int64", xp.int64)
uint8 = dtype("uint8", xp.uint8)
bool_ = dtype("bool", xp.bool_)
complex64 = dtype("complex64", xp.complex64)
complex128 = dtype("complex128", xp.complex128)

_ALL = (float16, float32, float64, int8, int16, int32, int64, uint8, bool_, complex64, complex128)
_BY_NP = {d.np: d for d in _ALL}
_BY_NAME = {d.name: d for d in _ALL}
_BY_NAME.update({"float": float32, "double": float64, "long": int64, "int": int32,
                 "half": float16, "cfloat": complex64, "cdouble": complex128})

_default = [float32]


def get_default_dtype() -> dtype:
    return _default[0]


def set_default_dtype(d: dtype) -> None:
    d = to_dtype(d)
    if not d.is_floating_point:
        raise TypeError(f"only floating-point types are supported as the default type, got {d}")
    _default[0] = d


def from_numpy_dtype(np_dtype) -> dtype:
    """The graphgrad dtype of a NumPy dtype (raises TypeError for unsupported kinds)."""
    try:
        return _BY_NP[np_dtype]
    except KeyError:
        pass
    try:
        return _BY_NP[xp.dtype(np_dtype)]
    except (KeyError, TypeError):
        raise TypeError(f"can't convert np.ndarray of type {np_dtype}. The only supported types "
                        "are: float64, float32, float16, complex64, complex128, int64, int32, "
                        "int16, int8, uint8, and bool.") from None


def to_dtype(d) -> dtype:
    """Accept a graphgrad dtype, a name (``"float32"``), a NumPy dtype or a Python type."""
    if isinstance(d, dtype):
        return d
    if isinstance(d, str):
        try:
            return _BY_NAME[d]
        except KeyError:
            raise TypeError(f"unknown dtype {d!r}") from None
    if d is float:
        return get_default_dtype()
    if d is int:
        return int64
    if d is bool:
        return bool_
    if d is complex:
        return complex64 if get_default_dtype() is not float64 else complex128
    if hasattr(d, "dtype") and not isinstance(d, type):  # a torch dtype-like object or array
        d = d.dtype
    return from_numpy_dtype(d)


_CATEGORY = {"b": 0, "u": 1, "i": 1, "f": 2, "c": 3}


def torch_promotion(out_dtype, arrays) -> xp.dtype | None:
    """PyTorch's type promotion where it differs from NumPy's, for an op whose NumPy
    result has ``out_dtype`` (float64, complex128 or int64: the only cases that differ).
    A 0-d tensor counts only when it is of a higher category (bool < int < float <
    complex) than the other tensors, and then gives that category's default dtype; no
    float64 comes out of inputs without float64. Returns the dtype to cast to, or None."""
    same = False  # fast path: every array input already has out_dtype, so it stands
    for a in arrays:
        if isinstance(a, xp.ndarray):
            if a.dtype != out_dtype:
                break
            same = True
    else:
        if same:
            return None
    full = [a.dtype for a in arrays if isinstance(a, xp.ndarray) and a.ndim]
    zero = [a.dtype for a in arrays if isinstance(a, xp.ndarray) and not a.ndim]
    top_in = max((_CATEGORY[d.kind] for d in full + zero), default=0)
    if _CATEGORY[out_dtype.kind] > top_in:  # the op made the category (int / int, exp(int))
        want = _default[0].np if out_dtype.kind == "f" else xp.dtype(
            xp.complex64 if _default[0] is float32 else xp.complex128)
        return None if want == out_dtype else want
    if full and zero:
        want = xp.result_type(*full)
        top = max(zero, key=lambda d: _CATEGORY[d.kind])
        if _CATEGORY[top.kind] > _CATEGORY[want.kind]:
            want = {1: xp.dtype(xp.int64), 2: _default[0].np,
                    3: xp.dtype(xp.complex64 if _default[0] is float32 else xp.complex128)
                    }[_CATEGORY[top.kind]]
        return None if want == out_dtype else want
    return result_float_dtype(out_dtype, *(full or zero))


def result_float_dtype(arr_dtype, *tensor_dtypes) -> xp.dtype | None:
    """PyTorch's promotion, where it differs from NumPy's: an op whose inputs hold no
    float64 tensor never produces float64 (int / int and int * 1.5 give the default dtype).
    Returns the dtype to cast to, or None when NumPy's answer stands."""
    if arr_dtype == xp.float64 and not any(t == xp.float64 for t in tensor_dtypes):
        return _default[0].np
    if arr_dtype == xp.complex128 and not any(t in (xp.float64, xp.complex128)
                                              for t in tensor_dtypes):
        return xp.dtype(xp.complex64)
    return None
