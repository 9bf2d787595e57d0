"""Layer ``graph``: how the IR writes Specs and dtypes (``f32[8, ?]``, TF's ``float``)."""

from __future__ import annotations

from graphgrad.backend import xp
from graphgrad.ops import Spec

__all__ = ["Spec", "short", "tf_dtype_name", "tf_shape", "merge_specs"]

_SHORT = {"float32": "f32", "float64": "f64", "float16": "f16", "int64": "i64",
          "int32": "i32", "int16": "i16", "int8": "i8", "uint8": "u8", "bool": "b8",
          "complex64": "c64", "complex128": "c128"}
_TF = {"float32": "float", "float64": "double", "float16": "half", "int32": "int32",
       "int64": "int64", "bool": "bool", "complex64": "complex64", "complex128": "complex128",
       "uint8": "uint8", "int8": "int8", "int16": "int16"}


def short(spec) -> str:
    """``f32[8, ?]``; a tuple of Specs prints as a tuple."""
    if isinstance(spec, tuple) and not isinstance(spec, Spec):
        return "(" + ", ".join(short(s) for s in spec) + ")"
    if spec is None:
        return "-"
    name = xp.dtype(spec.dtype).name
    if spec.shape is None:
        return f"{_SHORT.get(name, name)}[*]"
    dims = ", ".join("?" if d is None else str(d) for d in spec.shape)
    return f"{_SHORT.get(name, name)}[{dims}]"


def tf_dtype_name(dtype) -> str:
    name = xp.dtype(dtype).name
    return _TF.get(name, name)


def tf_shape(shape) -> str:
    """TF1's static shape text: ``(?, 3)``, ``()``, ``(3,)``; None: ``<unknown>``."""
    if shape is None:
        return "<unknown>"
    inner = ", ".join("?" if d is None else str(d) for d in shape)
    return "(" + inner + ("," if len(shape) == 1 else "") + ")"


def merge_specs(a: Spec, b: Spec) -> Spec:
    """The Spec both fit: dims that differ become unknown (ranks must agree)."""
    if a.shape is None or b.shape is None:
        return Spec(None, a.dtype)
    if len(a.shape) != len(b.shape):
        raise ValueError(f"shapes {tf_shape(a.shape)} and {tf_shape(b.shape)} have different "
                         f"ranks")
    return Spec(tuple(x if x == y else None for x, y in zip(a.shape, b.shape, strict=True)),
                a.dtype)
