"""Layer ``torch_compat``: the legacy typed constructors ``torch.FloatTensor``,
``DoubleTensor``, ``LongTensor``... ``FloatTensor(2, 3)`` is an uninitialized 2x3 float32
tensor, ``FloatTensor([1, 2])`` holds the data, and ``isinstance(x, torch.FloatTensor)`` is
True for any float32 (CPU) tensor, as in PyTorch. They are not subclasses: what they make
is a plain graphgrad Tensor."""

from __future__ import annotations

from graphgrad import backend
from graphgrad.ops.base import scalar_name
from graphgrad.tensor import Size, Tensor
from graphgrad.tensor.creation import empty, tensor

__all__ = ["FloatTensor", "DoubleTensor", "HalfTensor", "LongTensor", "IntTensor",
           "ShortTensor", "CharTensor", "ByteTensor", "BoolTensor"]


class _TypedTensorMeta(type):
    dtype: backend.dtype

    def __instancecheck__(cls, obj) -> bool:
        return isinstance(obj, Tensor) and obj.dtype == cls.dtype

    def __call__(cls, *args) -> Tensor:
        if all(isinstance(a, int) and not isinstance(a, bool) for a in args):
            return empty(*(args or (0,)), dtype=cls.dtype)  # sizes; none: 0 elements
        if len(args) == 1 and isinstance(args[0], Size):
            return empty(*args[0], dtype=cls.dtype)
        if len(args) == 1:
            data = args[0]
            if isinstance(data, Tensor):
                if data.dtype != cls.dtype:  # PyTorch refuses to convert here
                    raise TypeError(f"expected {scalar_name(cls.dtype.np)} (got "
                                    f"{scalar_name(data._array.dtype)})")
                return data
            return tensor(data, dtype=cls.dtype)
        raise TypeError(f"new() received an invalid combination of arguments - got "
                        f"({', '.join(type(a).__name__ for a in args)})")


def _typed(dtype: backend.dtype) -> type:
    name = f"{scalar_name(dtype.np)}Tensor"  # PyTorch's ScalarType name: FloatTensor...
    return _TypedTensorMeta(name, (), {"dtype": dtype,
                                       "__doc__": f"``torch.{name}``: {dtype} tensors"})


FloatTensor = _typed(backend.float32)
DoubleTensor = _typed(backend.float64)
HalfTensor = _typed(backend.float16)
LongTensor = _typed(backend.int64)
IntTensor = _typed(backend.int32)
ShortTensor = _typed(backend.int16)
CharTensor = _typed(backend.int8)
ByteTensor = _typed(backend.uint8)
BoolTensor = _typed(backend.bool_)
