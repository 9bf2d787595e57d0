"""Layer ``backend``: the array namespace, graphgrad's dtypes and PyTorch's type
promotion (``promotion.py``).

Everything above this layer reaches NumPy through ``xp`` so a GPU array
library with NumPy's API could be swapped in at this one place.
"""

from __future__ import annotations

import numpy as xp

from .promotion import (_default_np, promote_result, promote_types, result_float_dtype,
                        result_type, torch_promotion)

__all__ = [
    "xp", "dtype", "float16", "float32", "float64", "int8", "int16", "int32", "int64",
    "uint8", "bool_", "complex64", "complex128", "bfloat16", "MissingDtype", "to_dtype",
    "from_numpy_dtype",
    "get_default_dtype", "set_default_dtype", "result_float_dtype", "torch_promotion",
    "result_type", "promote_types", "promote_result", "stand_in",
]


_STAND_INS: dict = {}


def stand_in(shape: tuple, dtype, *, own: bool = False) -> xp.ndarray:
    """A read-only, zero-stride array of ``shape`` and NumPy ``dtype`` holding no memory
    (every element is the one zero), shared per (shape, dtype) unless ``own`` (then it
    shares memory with no other array, for holders that ``may_share_memory`` must tell
    apart). It stands in for values whose shape and dtype matter but whose data does
    not: shape rules run ``forward`` on it, freed graph nodes keep it, vmap's batched
    tensors show their logical shape with it, symbolic tensors carry it."""
    if own:
        return xp.broadcast_to(xp.zeros((), dtype), shape)
    key = (shape, dtype)
    a = _STAND_INS.get(key)
    if a is None:
        if len(_STAND_INS) > 4096:  # shapes seen once (e.g. varying batch sizes) do not pile up
            _STAND_INS.clear()
        a = _STAND_INS[key] = xp.broadcast_to(xp.zeros((), dtype), shape)
    return a


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



class MissingDtype:
    """A dtype PyTorch has and graphgrad does not (NumPy has no bfloat16): programs may
    name it (nanoGPT's table of dtypes does), and any use of it raises, naming it."""

    __slots__ = ("name", "itemsize")
    is_floating_point, is_complex, is_signed = True, False, True

    def __init__(self, name: str, itemsize: int):
        self.name, self.itemsize = name, itemsize

    def __repr__(self) -> str:
        return f"graphgrad.{self.name}"

    def error(self) -> NotImplementedError:
        return NotImplementedError(f"graphgrad.{self.name}: graphgrad has no {self.name} "
                                   f"tensors yet (NumPy has no such type); use float32")


bfloat16 = MissingDtype("bfloat16", 2)

_ALL = (float16, float32, float64, int8, int16, int32, int64, uint8, bool_, complex64, complex128)
_BY_NP = {d.np: d for d in _ALL}
_BY_NAME = {d.name: d for d in _ALL}
_BY_NAME.update({"float": float32, "double": float64, "long": int64, "int": int32,
                 "half": float16, "cfloat": complex64, "cdouble": complex128})

_default = [float32]
_default_np.append(float32.np)  # promotion's view of the default dtype


def get_default_dtype() -> dtype:
    return _default[0]


def set_default_dtype(d: dtype) -> None:
    d = to_dtype(d)
    if not d.is_floating_point:
        raise TypeError(f"only floating-point types are supported as the default type, got {d}")
    _default[0] = d
    _default_np[0] = d.np


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
    if isinstance(d, MissingDtype):
        raise d.error()
    if isinstance(d, str):
        try:
            return _BY_NAME[d]
        except KeyError:
            if d == bfloat16.name:
                raise bfloat16.error() from None
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

