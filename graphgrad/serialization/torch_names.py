"""Layer ``serialization``: the names a ``torch.save`` pickle uses, and what each is in
graphgrad.

``ALLOWED_GLOBALS`` is exactly the set of globals PyTorch's ``weights_only=True``
unpickler allows by default (torch 2.13, ``_get_allowed_globals``: 144 names), each
mapped to graphgrad's object for it. Names of things graphgrad lacks (bfloat16, float8,
quantized and sparse tensors) are allowed as PyTorch allows them and stand for objects
that raise, naming the dtype or feature, when a tensor is built from them.
"""

from __future__ import annotations

from collections import Counter, OrderedDict
from typing import Any

from graphgrad.backend import MissingDtype, to_dtype, xp
from graphgrad.nn.parameter import Parameter
from graphgrad.tensor import Size, Tensor
from graphgrad.tensor.device import device

__all__ = ["ALLOWED_GLOBALS", "STORAGE_DTYPES", "StorageType", "storage_name", "numpy_dtype",
           "TorchFeature"]

# The legacy typed storage classes torch still writes (torch.FloatStorage...) and the
# dtype each holds; UntypedStorage holds bytes.
STORAGE_DTYPES = {
    "DoubleStorage": "float64", "FloatStorage": "float32", "HalfStorage": "float16",
    "LongStorage": "int64", "IntStorage": "int32", "ShortStorage": "int16",
    "CharStorage": "int8", "ByteStorage": "uint8", "BoolStorage": "bool",
    "BFloat16Storage": "bfloat16", "ComplexDoubleStorage": "complex128",
    "ComplexFloatStorage": "complex64", "QInt8Storage": "qint8", "QInt32Storage": "qint32",
    "QUInt8Storage": "quint8", "QUInt4x2Storage": "quint4x2", "QUInt2x4Storage": "quint2x4",
}
_CUDA_STORAGES = ("Double", "Float", "Half", "Long", "Int", "Short", "Char", "Byte", "Bool",
                  "BFloat16", "ComplexDouble", "ComplexFloat")
_TENSOR_CLASSES = ("Double", "Float", "Half", "Long", "Int", "Short", "Char", "Byte", "Bool",
                   "BFloat16")
_SPARSE_TENSOR_CLASSES = ("Double", "Float", "Half", "Long", "Int", "Short", "Char", "Byte",
                          "BFloat16")
# torch dtypes graphgrad has no NumPy type for: allowed names, unusable values
_MISSING_DTYPES = {
    "bfloat16": 2, "complex32": 4, "float8_e4m3fn": 1, "float8_e4m3fnuz": 1,
    "float8_e5m2": 1, "float8_e5m2fnuz": 1, "float8_e8m0fnu": 1, "float4_e2m1fn_x2": 1,
    "qint8": 1, "qint32": 4, "quint8": 1, "quint4x2": 1, "quint2x4": 1, "bits1x8": 1,
    "bits2x4": 1, "bits4x2": 1, "bits8": 1, "bits16": 2, "uint16": 2, "uint32": 4,
    "uint64": 8, **{f"int{k}": 1 for k in range(1, 8)}, **{f"uint{k}": 1 for k in range(1, 8)},
}
_DTYPES = ("float64", "float32", "float16", "int64", "int32", "int16", "int8", "uint8", "bool",
           "complex128", "complex64")
_QSCHEMES = ("per_tensor_affine", "per_tensor_symmetric", "per_channel_affine",
             "per_channel_symmetric", "per_channel_affine_float_qparams")
_REBUILDS = ("_rebuild_parameter", "_rebuild_parameter_with_state", "_rebuild_qtensor",
             "_rebuild_tensor", "_rebuild_tensor_v2", "_rebuild_tensor_v3",
             "_rebuild_sparse_tensor", "_rebuild_meta_tensor_no_storage",
             "_rebuild_nested_tensor", "_rebuild_wrapper_subclass",
             "_rebuild_device_tensor_from_numpy", "_rebuild_device_tensor_from_cpu_tensor")


class StorageType:
    """What a storage class global (``torch.FloatStorage``) stands for: its dtype name
    (PyTorch's own loader wraps legacy storage classes the same way)."""

    __slots__ = ("name", "dtype")

    def __init__(self, name: str, dtype: str):
        self.name, self.dtype = name, dtype

    def __repr__(self) -> str:
        return f"StorageType(dtype={self.dtype})"


class TorchFeature:
    """An allowed global naming something graphgrad does not have (a quantization scheme,
    a sparse tensor class, a rebuild function of quantized, sparse, nested or meta
    tensors): loading it is allowed, using it raises, naming it."""

    __slots__ = ("path",)

    def __init__(self, path: str):
        self.path = path

    def __call__(self, *args: Any, **kwargs: Any):
        raise NotImplementedError(f"graphgrad.load: the file uses {self.path}, which graphgrad "
                                  f"does not have (dense CPU tensors only)")

    def __repr__(self) -> str:
        return f"<{self.path}: not in graphgrad>"


def _missing(name: str) -> MissingDtype:
    from graphgrad import backend
    existing = getattr(backend, name, None)
    return existing if isinstance(existing, MissingDtype) else MissingDtype(name,
                                                                            _MISSING_DTYPES[name])


def _allowed() -> dict[str, Any]:
    rc: dict[str, Any] = {
        "collections.OrderedDict": OrderedDict, "collections.Counter": Counter,
        "torch.nn.parameter.Parameter": Parameter, "torch.Size": Size,
        "torch.Tensor": Tensor, "torch.device": device,
        "torch.serialization._get_layout": TorchFeature("torch.serialization._get_layout"),
        "_codecs.encode": _encode_bytes, "builtins.bytearray": _bytearray,
        "builtins.set": set, "builtins.complex": complex,
    }
    for name in _DTYPES:
        rc[f"torch.{name}"] = to_dtype(name)
    for name in _MISSING_DTYPES:
        rc[f"torch.{name}"] = _missing(name)
    for cls, dt in STORAGE_DTYPES.items():
        rc[f"torch.{cls}"] = StorageType(cls, dt)
    for kind in _CUDA_STORAGES:
        rc[f"torch.cuda.{kind}Storage"] = StorageType(f"{kind}Storage",
                                                      STORAGE_DTYPES[f"{kind}Storage"])
    rc["torch.storage.TypedStorage"] = TorchFeature("torch.storage.TypedStorage")
    rc["torch.storage.UntypedStorage"] = StorageType("UntypedStorage", "uint8")
    for prefix in ("torch.", "torch.cuda."):
        for kind in _TENSOR_CLASSES:
            rc[f"{prefix}{kind}Tensor"] = TorchFeature(f"{prefix}{kind}Tensor")
        for kind in _SPARSE_TENSOR_CLASSES:
            rc[f"{prefix}sparse.{kind}Tensor"] = TorchFeature(f"{prefix}sparse.{kind}Tensor")
    for q in _QSCHEMES:
        rc[f"torch.{q}"] = TorchFeature(f"torch.{q}")
    for f in _REBUILDS:
        rc[f"torch._utils.{f}"] = TorchFeature(f"torch._utils.{f}")
    rc["torch._tensor._rebuild_from_type_v2"] = TorchFeature("torch._tensor._rebuild_from_type_v2")
    return rc


def _encode_bytes(obj: str, encoding: str = "utf-8", errors: str = "strict") -> bytes:
    """``_codecs.encode``, how protocol 2 pickles ``bytes``: only str -> bytes here."""
    if not isinstance(obj, str):
        raise TypeError(f"_codecs.encode: expected str, got {type(obj).__name__}")
    return obj.encode(encoding, errors)


def _bytearray(source: Any = b"", *args: Any) -> bytearray:
    """``bytearray`` from data only: ``bytearray(n)`` from a file would allocate n bytes."""
    if isinstance(source, int):
        raise TypeError("graphgrad.load: bytearray(int) in a pickle is refused (it allocates "
                        "memory the file does not hold)")
    return bytearray(source, *args)


ALLOWED_GLOBALS: dict[str, Any] = _allowed()
def storage_name(np_dtype) -> str:
    """``FloatStorage`` for float32...: the class name torch writes for a dtype."""
    name = to_dtype(np_dtype).name
    for cls, dt in STORAGE_DTYPES.items():
        if dt == name:
            return cls
    raise TypeError(f"no torch storage class for dtype {name}")


def numpy_dtype(storage: StorageType) -> xp.dtype:
    """The NumPy dtype of a storage class; a clear error for dtypes graphgrad lacks."""
    if storage.dtype in _MISSING_DTYPES:
        raise TypeError(f"graphgrad.load: the file holds a {storage.name} ({storage.dtype} "
                        f"data): graphgrad has no {storage.dtype} tensors (NumPy has no such "
                        f"type); convert it in PyTorch first, e.g. to float32")
    return to_dtype(storage.dtype).np
