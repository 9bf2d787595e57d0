"""Layer ``passes``: ``value_key``, a hashable stand-in for a node's params and literal
inputs such that two values get the same key only if an op cannot tell them apart.

Python's ``==`` is too generous for that: ``1 == 1.0 == True`` (but ``x * 1`` and
``x * 1.0`` differ for an int tensor), ``0.0 == -0.0`` (but ``1 / -0.0`` is ``-inf``),
``(1, 2) == [1, 2]``. So a key carries the value's type, floats are compared by their
bits, containers element by element; arrays, op classes, functions and anything else
by identity (an array is never compared by value here: see ``constant_key`` for the
one place that does, for small constants). NaN keys equal when the bits do, which is
exactly when the values behave the same.
"""

from __future__ import annotations

import struct
from numbers import Number

from graphgrad.backend import xp

__all__ = ["value_key", "constant_key", "SMALL_CONSTANT"]

# constants up to this many elements are compared by value (dtype, shape, bytes): the
# scalars and short vectors that capture frontends bake in many times over
SMALL_CONSTANT = 64

_PLAIN = (type(None), bool, int, str, bytes, type(Ellipsis))


def _float_bits(x: float) -> bytes:
    return struct.pack("<d", x)


def value_key(value) -> tuple:
    """The key of a param value or literal input (see the module docstring)."""
    t = type(value)
    if t in _PLAIN:
        return (t, value)
    if t is float:
        return (t, _float_bits(value))
    if t is complex:
        return (t, _float_bits(value.real), _float_bits(value.imag))
    if isinstance(value, xp.generic):  # a NumPy scalar: its dtype and bytes
        return (t, value.dtype.str, value.tobytes())
    if isinstance(value, Number):  # other number types: exact type, then value
        return (t, "id", id(value))
    if isinstance(value, (tuple, list)):  # NamedTuples (Dyn, Spec) keep their type
        return (t, tuple(value_key(v) for v in value))
    if t is dict:  # insertion order counts: equal dicts in another order just never merge
        return (t, tuple((value_key(k), value_key(v)) for k, v in value.items()))
    if t is slice:
        return (t, value_key(value.start), value_key(value.stop), value_key(value.step))
    if isinstance(value, xp.dtype):
        return (xp.dtype, value.str, value.name)
    return (t, "id", id(value))


def constant_key(array) -> tuple:
    """The key of a constant node's value: small arrays by dtype, shape and bytes (equal
    bits, equal behaviour), larger ones by identity."""
    if isinstance(array, xp.ndarray) and array.size <= SMALL_CONSTANT and \
            array.dtype.kind in "biufc":
        return ("array", array.dtype.str, array.shape, xp.ascontiguousarray(array).tobytes())
    return ("id", id(array))
