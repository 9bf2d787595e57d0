"""Layer ``serialization``: writing ``torch.save``'s zip format with NumPy only, so
``torch.load(f, weights_only=True)`` reads what graphgrad wrote.

The pickle names torch's globals (``torch._utils._rebuild_tensor_v2``,
``torch.FloatStorage``, ``torch.float32``, ``torch.Size``), which the C pickler cannot
emit without torch installed; the pure-Python pickler can, through a stand-in object
(``_Global``) whose dispatch entry writes the ``GLOBAL`` opcode. Tensors that share memory
(views of one NumPy array) are written as views of one storage, as PyTorch does.
Members are 64-byte aligned, as in PyTorch's files (the padding is a ``0x4146`` extra
field), so a loader may map storages straight from the file.
"""

from __future__ import annotations

import io
import pickle
import struct
import sys
import zipfile
from collections import OrderedDict
from typing import IO, Any

from graphgrad.backend import dtype as DType
from graphgrad.backend import xp
from graphgrad.nn.parameter import Parameter
from graphgrad.tensor import Size, Tensor
from graphgrad.tensor.device import device

from .torch_names import storage_name

__all__ = ["write_torch_zip"]

_ALIGN = 64


class _Global:
    """Pickles as ``GLOBAL module name``; callable only so ``save_reduce`` accepts it."""

    __slots__ = ("module", "name")

    def __init__(self, module: str, name: str):
        self.module, self.name = module, name

    def __call__(self, *args: Any) -> Any:
        raise TypeError(f"{self.module}.{self.name} is a name to pickle, not to call")


class _StorageRef:
    """One storage to write: a C-contiguous NumPy array and its key."""

    __slots__ = ("array", "key")

    def __init__(self, array, key: str):
        self.array, self.key = array, key


class _ParameterData:
    """The data of a Parameter, pickled as a plain tensor inside _rebuild_parameter."""

    __slots__ = ("tensor",)

    def __init__(self, tensor: Tensor):
        self.tensor = tensor


def _root(a):
    while isinstance(a.base, xp.ndarray):
        a = a.base
    return a


class _TorchPickler(pickle._Pickler):  # the pure-Python pickler: see the module docstring
    dispatch = dict(pickle._Pickler.dispatch)

    def __init__(self, file: IO[bytes], protocol: int):
        super().__init__(file, protocol=protocol)
        self.storages: dict[int, _StorageRef] = {}
        self.keep: list = []  # the roots whose ids key self.storages stay alive
        self.globals: dict[tuple[str, str], _Global] = {}

    def global_(self, module: str, name: str) -> _Global:
        key = (module, name)
        if key not in self.globals:
            self.globals[key] = _Global(module, name)
        return self.globals[key]

    def save_standin(self, obj: _Global) -> None:
        self.write(pickle.GLOBAL + f"{obj.module}\n{obj.name}\n".encode())
        self.memoize(obj)

    dispatch[_Global] = save_standin

    def save_dtype(self, obj: DType) -> None:
        self.save(self.global_("torch", obj.name))

    dispatch[DType] = save_dtype

    def persistent_id(self, obj: Any) -> Any:
        if isinstance(obj, _StorageRef):
            return ("storage", self.global_("torch", storage_name(obj.array.dtype)), obj.key,
                    "cpu", obj.array.size)
        return None

    def storage_of(self, a) -> tuple[_StorageRef, int, tuple]:
        """The storage ``a`` lies in, its offset and strides there (elements). A view of a
        C-contiguous array of its dtype is written as a view of that array, so shared
        memory stays shared; anything else (a reversed view, a view with another dtype)
        gets a storage of its own."""
        root = _root(a)
        item = a.itemsize
        start = a.__array_interface__["data"][0] - root.__array_interface__["data"][0]
        if (root.dtype == a.dtype and root.dtype.isnative and root.flags.c_contiguous
                and all(s >= 0 and s % item == 0 for s in a.strides) and start % item == 0
                and start >= 0):
            ref = self.storages.get(id(root))
            if ref is None:
                ref = self.storages[id(root)] = _StorageRef(root.reshape(-1), str(
                    len(self.storages)))
                self.keep.append(root)
            return ref, start // item, tuple(s // item for s in a.strides)
        own = xp.array(a, dtype=a.dtype.newbyteorder("="), order="C")  # keeps 0-d as 0-d
        ref = _StorageRef(own.reshape(-1), str(len(self.storages)))
        self.storages[id(own)] = ref
        self.keep.append(own)
        return ref, 0, tuple(s // item for s in own.strides)

    def tensor_reduce(self, t: Tensor, requires_grad: bool) -> tuple:
        ref, offset, stride = self.storage_of(t._array)
        return (self.global_("torch._utils", "_rebuild_tensor_v2"),
                (ref, offset, tuple(int(n) for n in t._array.shape), stride, requires_grad,
                 OrderedDict()))

    def reducer_override(self, obj: Any) -> Any:
        if isinstance(obj, Parameter):
            return (self.global_("torch._utils", "_rebuild_parameter"),
                    (_ParameterData(obj), bool(obj.requires_grad), OrderedDict()))
        if isinstance(obj, _ParameterData):
            return self.tensor_reduce(obj.tensor, False)
        if isinstance(obj, Tensor):
            return self.tensor_reduce(obj, bool(obj.requires_grad))
        if isinstance(obj, Size):
            return (self.global_("torch", "Size"), (tuple(obj),))
        if isinstance(obj, device):
            return (self.global_("torch", "device"), (str(obj),))
        return NotImplemented


def _write_member(zf: zipfile.ZipFile, name: str, data) -> None:
    """One STORED member whose data starts at a multiple of 64 bytes in the file."""
    info = zipfile.ZipInfo(name, date_time=(1980, 1, 1, 0, 0, 0))
    info.compress_type = zipfile.ZIP_STORED
    view = memoryview(data).cast("B")
    info.file_size = view.nbytes
    header = 30 + len(name.encode("utf-8")) + 4  # fixed header, name, the extra's own head
    pad = -(zf.fp.tell() + header) % _ALIGN
    info.extra = struct.pack("<HH", 0x4146, pad) + b"Z" * pad
    with zf.open(info, "w") as out:
        out.write(view)


def write_torch_zip(obj: Any, fh: IO[bytes], top: str, protocol: int = 2,
                    byteorder_record: bool = True) -> None:
    """Write ``obj`` to the binary file ``fh`` as ``torch.save`` does (top folder ``top``)."""
    buf = io.BytesIO()
    pickler = _TorchPickler(buf, protocol)
    pickler.dump(obj)
    with zipfile.ZipFile(fh, "w", zipfile.ZIP_STORED) as zf:
        _write_member(zf, f"{top}/data.pkl", buf.getbuffer())
        _write_member(zf, f"{top}/.format_version", b"1")
        _write_member(zf, f"{top}/.storage_alignment", str(_ALIGN).encode())
        if byteorder_record:
            _write_member(zf, f"{top}/byteorder", sys.byteorder.encode())
        for ref in sorted(pickler.storages.values(), key=lambda r: int(r.key)):
            array = ref.array if ref.array.size else xp.empty(0, xp.uint8)
            _write_member(zf, f"{top}/data/{ref.key}", array.view(xp.uint8))
        _write_member(zf, f"{top}/version", b"3\n")
