"""Layer ``torch_compat``: the legacy typed constructors ``torch.FloatTensor``,
``DoubleTensor``, ``LongTensor``... ``FloatTensor(2, 3)`` is an uninitialized 2x3 float32
tensor, ``FloatTensor([1, 2])`` holds the data, and ``isinstance(x, torch.FloatTensor)`` is
True for any float32 (CPU) tensor, as in PyTorch. They are not subclasses: what they make
is a plain graphgrad Tensor."""

from __future__ import annotations

from graphgrad import backend
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
                    raise TypeError(f"expected {cls._type_name} (got "
                                    f"{_TYPE_NAMES[data.dtype]})")
                return data
            return tensor(data, dtype=cls.dtype)
        raise TypeError(f"new() received an invalid combination of arguments - got "
                        f"({', '.join(type(a).__name__ for a in args)})")


def _typed(name: str, dtype: backend.dtype, type_name: str) -> type:
    return _TypedTensorMeta(name, (), {"dtype": dtype, "_type_name": type_name,
                                       "__doc__": f"``torch.{name}``: {dtype} tensors"})


_TYPE_NAMES = {backend.float32: "Float", backend.float64: "Double", backend.float16: "Half",
               backend.int64: "Long", backend.int32: "Int", backend.int16: "Short",
               backend.int8: "Char", backend.uint8: "Byte", backend.bool_: "Bool"}

FloatTensor = _typed("FloatTensor", backend.float32, "Float")
DoubleTensor = _typed("DoubleTensor", backend.float64, "Double")
HalfTensor = _typed("HalfTensor", backend.float16, "Half")
LongTensor = _typed("LongTensor", backend.int64, "Long")
IntTensor = _typed("IntTensor", backend.int32, "Int")
ShortTensor = _typed("ShortTensor", backend.int16, "Short")
CharTensor = _typed("CharTensor", backend.int8, "Char")
ByteTensor = _typed("ByteTensor", backend.uint8, "Byte")
BoolTensor = _typed("BoolTensor", backend.bool_, "Bool")
