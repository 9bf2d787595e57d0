"""Layer ``backend``: PyTorch's type promotion, where it differs from NumPy's.

graphgrad computes with NumPy, whose promotion (NEP 50) differs from PyTorch's in three
ways:

* a 0-d array is as strong as any other array in NumPy; in PyTorch a 0-d tensor only
  counts when it is of a higher category (bool < integer < floating < complex) than the
  tensors with dimensions (``int8 tensor + int64 0-d`` is int8, ``float16 tensor +
  float64 0-d`` is float16, ``int64 tensor + float64 0-d`` is float64);
* integers with a float give a float wide enough for the integers in NumPy (int16 with
  float16 gives float32, int64 with a Python float gives float64); in PyTorch they give
  the float's own dtype (float16; the default dtype for a Python float);
* ops that make floats out of integers (``exp``, true division) give NumPy's narrowest
  float that holds the inputs (float16 for int8 and bool); PyTorch computes them in the
  default dtype.

``result_type`` is ``torch.result_type`` (dimensioned tensors, then 0-d tensors, then
Python numbers, each group counting only where it raises the category).
``torch_promotion`` says which dtype PyTorch gives an op whose NumPy result has a given
dtype, and ``promote_result`` reruns the op with its inputs cast to it, so that values
are computed as PyTorch computes them (``exp`` of int8 in float32, not in float16 and
cast afterwards). PyTorch's complex32 (float16 with a complex number) has no NumPy
counterpart: graphgrad gives complex64 there.
"""

from __future__ import annotations

import numpy as xp

__all__ = ["result_type", "promote_types", "torch_promotion", "promote_result",
           "result_float_dtype"]

_CATEGORY = {"b": 0, "u": 1, "i": 1, "f": 2, "c": 3}
_C64, _C128 = xp.dtype(xp.complex64), xp.dtype(xp.complex128)
_F64 = xp.dtype(xp.float64)
_I64, _BOOL = xp.dtype(xp.int64), xp.dtype(xp.bool_)
# a Python number as NumPy's weak promotion sees it, for xp.result_type
_PROBE = {bool: False, int: 0, float: 0.0, complex: 0j}
_ndarray = xp.ndarray
_cache: dict = {}  # (NumPy's result dtype, default dtype, operand signature) -> cast or None
_default_np: list = []  # filled by the package: [the default float dtype's NumPy dtype]


def _default_float() -> xp.dtype:
    return _default_np[0]


def _default_complex() -> xp.dtype:
    return _C128 if _default_np[0] == xp.float64 else _C64


def _complex_of(d: xp.dtype) -> xp.dtype:
    """The complex dtype with ``d``'s precision (complex64 for float16: PyTorch's
    complex32 has no NumPy counterpart)."""
    return _C128 if d == xp.float64 else _C64


def promote_types(a, b) -> xp.dtype:
    """``torch.promote_types``: the smallest dtype of the higher category that holds both,
    except that an integer with a float gives the float (NumPy widens the float)."""
    a, b = xp.dtype(a), xp.dtype(b)
    ca, cb = _CATEGORY[a.kind], _CATEGORY[b.kind]
    if ca == cb or ca + cb == 5:  # same category, or complex with float: NumPy agrees
        return xp.promote_types(a, b)
    return a if ca > cb else b


def _promote(a, b):
    return b if a is None else a if b is None else promote_types(a, b)


def _combine(higher, lower):
    """c10's ``combine_categories``: the result of a stronger operand group (``higher``)
    with a weaker one: the weaker group counts only when it is of a higher category."""
    if higher is None:
        return lower
    if lower is None or higher.kind == "c":
        return higher
    if lower.kind == "c":
        return _complex_of(higher) if higher.kind == "f" else lower
    if higher.kind == "f":
        return higher
    if higher.kind == "b" or lower.kind == "f":
        return promote_types(higher, lower)
    return higher


def _signature(a):
    """How an operand takes part in promotion: an array with dimensions by its dtype, a
    0-d array or NumPy scalar by ``(dtype,)``, a Python number by its type."""
    if type(a) is _ndarray:
        return a.dtype if a.ndim else (a.dtype,)
    if isinstance(a, xp.generic):
        return (a.dtype,)
    return type(a)


def _result_of(sig: tuple):
    dim = zero = number = None
    for s in sig:
        if isinstance(s, xp.dtype):
            dim = _promote(dim, s)
        elif type(s) is tuple:
            zero = _promote(zero, s[0])
        elif s in _PROBE:  # Python numbers: bool, int64, and the default float/complex
            number = _promote(number, _BOOL if s is bool else _I64 if s is int else
                              _default_float() if s is float else _default_complex())
    return _combine(dim, _combine(zero, number))


def result_type(*operands) -> xp.dtype:
    """``torch.result_type`` of arrays (with dimensions or 0-d) and Python numbers."""
    out = _result_of(tuple(_signature(a) for a in operands))
    if out is None:
        raise TypeError("result_type: expected at least one tensor or number")
    return out


def _want(out_dtype: xp.dtype, sig: tuple):
    """PyTorch's dtype for an op whose NumPy result is ``out_dtype`` (None: NumPy's)."""
    cat = _CATEGORY.get(out_dtype.kind)
    probes = [s if isinstance(s, xp.dtype) else s[0] if type(s) is tuple else _PROBE[s]
              for s in sig if isinstance(s, (xp.dtype, tuple)) or s in _PROBE]
    if cat is None or not probes:
        return None
    numpy_common = xp.result_type(*probes)
    if cat < _CATEGORY[numpy_common.kind]:
        return None  # the op lowered the category (comparisons, argmax, abs of complex)
    common = _result_of(sig)
    if out_dtype == numpy_common:  # the op follows promotion: PyTorch's promotion then
        want = common
    elif cat > _CATEGORY[numpy_common.kind]:  # the op made the category (exp(int), int / int)
        if out_dtype.kind == "f":
            want = common if common.kind == "f" else _default_float()
        elif out_dtype.kind == "c":
            want = common if common.kind == "c" else _complex_of(common) \
                if common.kind == "f" else _default_complex()
        else:
            return None
    else:
        return None  # the op has its own rule (sum of int8 is int64)
    return None if want == out_dtype else want


def _lookup(out_dtype, sig: tuple):
    key = (out_dtype, _default_np[0], sig)
    try:
        return _cache[key]
    except KeyError:
        want = _cache[key] = _want(out_dtype, sig)
        return want


def torch_promotion(out_dtype, arrays) -> xp.dtype | None:
    """The dtype PyTorch gives an op on ``arrays`` (arrays and Python numbers) whose NumPy
    result has ``out_dtype``, or None when NumPy's stands. Cached by the operands' dtypes,
    ranks (0-d or not) and number types: promotion never looks at values."""
    return _lookup(xp.dtype(out_dtype), tuple(_signature(a) for a in arrays))


def result_float_dtype(arr_dtype, *tensor_dtypes) -> xp.dtype | None:
    """``torch_promotion`` for an op on tensors with dimensions of ``tensor_dtypes``
    (cat, matmul, reductions), whose NumPy result has ``arr_dtype``."""
    return _lookup(xp.dtype(arr_dtype), tuple(xp.dtype(d) for d in tensor_dtypes))


def promote_result(fn, arrays, params: dict, out):
    """``out = fn(*arrays, **params)`` as PyTorch types it. Where NumPy computed in a
    float at least as precise as PyTorch's dtype, the result is rounded to it; otherwise
    ``fn`` runs again: integer results on the inputs cast to PyTorch's dtype (they wrap
    around as PyTorch's do: ``int8 + int64 0-d`` is computed in int8), float results made
    out of integers in float64 and then rounded (``exp`` of int8: NumPy's float16 is too
    coarse; rounding the float64 result gives PyTorch's values to the last bit)."""
    want = torch_promotion(out.dtype, arrays)
    if want is None:
        return out
    if want.kind in "fc":
        if out.dtype.kind == want.kind and out.dtype.itemsize >= want.itemsize:
            return out.astype(want)
        compute = _F64 if want.kind == "f" else _C128
    else:
        compute = want
    cast = [a.astype(compute) if isinstance(a, (_ndarray, xp.generic)) and a.dtype != compute
            else a for a in arrays]
    with xp.errstate(all="ignore"):  # the first run has warned already where it should
        out = xp.asarray(fn(*cast, **params))
    return out if out.dtype == want else out.astype(want)
