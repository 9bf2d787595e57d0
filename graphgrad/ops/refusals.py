"""Layer ``ops``: PyTorch's refusals of bad arguments, shared by several ops: indices out
of range (index_select, embedding, gather, scatter), narrow's bounds, extrema over
nothing, dtypes without a kernel, and the list that is read as a tuple of indices.
Each raises PyTorch's exception type with PyTorch's message."""

from __future__ import annotations

from graphgrad.backend import xp
from graphgrad.tensor import Value

from graphgrad.tensor.creation import invalid_arguments

from .base import normalize_dim, scalar_name

__all__ = ["NOT_GIVEN", "SEQUENCE_AS_TUPLE", "sequence_as_tuple", "check_index_range",
           "check_along_dim", "is_int", "int_tuple_arg", "SEQUENCES", "sequence_operand",
           "narrow_dim", "narrow_start", "empty_check", "no_kernel", "no_bool"]

# the default of an argument PyTorch has an overload without, where passing None is refused
# (``prod(x)`` reduces everything; ``prod(x, None)`` is no overload of PyTorch's)
NOT_GIVEN = object()

SEQUENCE_AS_TUPLE = (
    "Using a non-tuple sequence for multidimensional indexing is deprecated and will be "
    "changed in pytorch 2.9; use x[tuple(seq)] instead of x[seq]. In pytorch 2.9 this will be "
    "interpreted as tensor index, x[torch.tensor(seq)], which will result either in an error or "
    "a different result")


def sequence_as_tuple(index) -> bool:
    """PyTorch's (and old NumPy's) rule: a list shorter than 32 holding a sequence, slice,
    tensor, None or Ellipsis is a tuple of indices, one per dim (deprecated)."""
    return isinstance(index, list) and len(index) < 32 and any(
        isinstance(i, (Value, list, tuple, slice, range, str)) or i is None or i is Ellipsis
        for i in index)


def check_index_range(index, size: int, dim: int | None = None) -> None:
    """PyTorch's index_select/embedding refuse an index outside ``[0, size)`` (a negative
    index does not count from the end there, unlike ``x[i]``). ``dim`` is given for a
    tensor of two or more dims: an empty one has its own message, and dim 1 takes
    PyTorch's other kernel, with its other message."""
    arr = index._array
    if type(arr) is not xp.ndarray or not arr.size:
        return  # a symbolic index (a graph being built): its values are not known yet
    bad = (arr < 0) | (arr >= size)
    if bad.any():
        if dim is not None and size == 0:
            raise RuntimeError("index_select(): self indexing axis dim should be positive")
        if dim == 1:
            raise RuntimeError(f"INDICES element is out of DATA bounds, id={int(arr[bad][0])} "
                               f"axis_dim={size}")
        raise IndexError("index out of range in self")


def check_along_dim(index, shape: tuple, dim: int) -> None:
    """gather/scatter: every index within ``[0, shape[dim])`` (no counting from the end)."""
    if index.size:
        size = shape[dim] if shape else 1
        bad = (index < 0) | (index >= size)
        if bad.any():
            raise RuntimeError(f"index {int(index[bad].flat[0])} is out of bounds for dimension "
                               f"{dim} with size {size}")


SEQUENCES = (list, tuple, type(None))  # what a binary op's other may not be
_OUT = "*, Tensor out = None"
# the overloads of the binary ops whose argument parser lists them when refusing ``other``
_NUMBER_OVERLOADS = {
    "floor_divide": (f"Tensor input, Tensor other, {_OUT}", "Tensor input, Number other"),
    "remainder": (f"Tensor input, Tensor other, {_OUT}", "Number self, Tensor other",
                  f"Tensor input, Number other, {_OUT}"),
    "fmod": (f"Tensor input, Tensor other, {_OUT}", f"Tensor input, Number other, {_OUT}"),
    "pow": (f"Tensor input, Tensor exponent, {_OUT}", f"Number self, Tensor exponent, {_OUT}",
            f"Tensor input, Number exponent, {_OUT}"),
}


def sequence_operand(name: str, input, other) -> TypeError:
    """PyTorch's argument parser refuses a list, tuple or None as a binary op's second
    operand (NumPy would make an array of it); callers test ``type(other) in SEQUENCES``
    first."""
    if name in _NUMBER_OVERLOADS:
        return invalid_arguments(name, (input, other), _NUMBER_OVERLOADS[name])
    return TypeError(f"{name}(): argument 'other' (position 2) must be Tensor, not "
                     f"{type(other).__name__}")


def is_int(v) -> bool:
    """Whether PyTorch's argument parser takes ``v`` as an int: an int or an integer-like
    (a NumPy integer, a tensor), never a bool or a float."""
    return not isinstance(v, (bool, float)) and (
        isinstance(v, int) or hasattr(type(v), "__index__"))


def int_tuple_arg(value, op: str, arg: str, position: int, single: bool = True) -> tuple:
    """``value`` (a sequence of ints, or one int where ``single``) as a tuple, or PyTorch's
    argument-parser TypeError naming ``arg`` (its wording for a bad first element differs
    from that for a later one)."""
    if isinstance(value, (tuple, list)):
        for i, v in enumerate(value):
            if not is_int(v):
                if i == 0:
                    raise TypeError(f"{op}(): argument '{arg}' (position {position}) must be "
                                    f"tuple of ints, but found element of type "
                                    f"{type(v).__name__} at pos 0")
                raise TypeError(f"{op}(): argument '{arg}' failed to unpack the object at pos "
                                f"{position} with error \"type must be tuple of ints,but got "
                                f"{type(v).__name__}\"")
        return tuple(value)
    if single and is_int(value):
        return (value,)
    raise TypeError(f"{op}(): argument '{arg}' (position {position}) must be tuple of ints, "
                    f"not {type(value).__name__}")


_NARROW_OVERLOADS = ("Tensor input, int dim, Tensor start, int length",
                     "Tensor input, int dim, int start, int length")


def narrow_dim(input, dim: int, start: int, length: int) -> int:
    """narrow's first checks, in PyTorch's order; the normalized dim."""
    if not (is_int(dim) and is_int(start) and is_int(length)):
        raise invalid_arguments("narrow", (input, dim, start, length), _NARROW_OVERLOADS)
    if input.ndim == 0:
        raise RuntimeError("narrow() cannot be applied to a 0-dim tensor.")
    if length < 0:
        raise RuntimeError("narrow(): length must be non-negative.")
    return normalize_dim(dim, input.ndim, "narrow")


def narrow_start(start: int, length: int, size: int) -> int:
    """narrow's ``start`` from the front (a negative one counts from the end), checked."""
    if not -size <= start <= size:
        raise IndexError(f"start out of range (expected to be in range of [{-size}, {size}], "
                         f"but got {start})")
    if start < 0:
        start += size
    if start > size - length:
        raise RuntimeError(f"start ({start}) + length ({length}) exceeds dimension size "
                           f"({size}).")
    return start


def empty_check(name: str, shape: tuple, dim) -> None:
    """PyTorch's refusal to take an extremum over nothing: ``dim`` None is a reduction of
    the whole tensor that the user asked for without naming a dim."""
    if dim is None:
        if 0 in shape:
            if name.startswith("arg"):
                raise IndexError(f"{name}(): Expected reduction dim to be specified for "
                                 f"input.numel() == 0.")
            raise RuntimeError(f"{name}(): Expected reduction dim to be specified for "
                               f"input.numel() == 0. Specify the reduction dim with the 'dim' "
                               f"argument.")
        return
    for d in (dim,) if isinstance(dim, int) else dim:
        if shape[d] == 0:
            raise IndexError(f"{name}(): Expected reduction dim {d} to have non-zero size.")


def no_kernel(name: str, a, dim: int):
    """PyTorch has no softmax kernel for integer and bool tensors; its message names the
    kernel (the last dim has its own)."""
    kernel = f"{name}_lastdim_kernel_impl" if dim == a.ndim - 1 or a.ndim == 0 else \
        f"{name}_kernel_impl"
    raise NotImplementedError(f'"{kernel}" not implemented for \'{scalar_name(a.dtype)}\'')


def no_bool(input, name: str) -> None:
    if input._array.dtype == xp.bool_:
        raise RuntimeError(f"{name}(): does not support bool input")
