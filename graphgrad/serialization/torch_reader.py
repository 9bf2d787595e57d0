"""Layer ``serialization``: reading ``torch.save`` files with NumPy only.

A ``torch.save`` file is an uncompressed zip: ``<top>/data.pkl`` (a protocol-2 pickle),
one ``<top>/data/<key>`` member of raw bytes per storage, and small records
(``version``, ``byteorder``...). The pickle names storages by persistent id
``('storage', <storage class>, key, location, numel)`` and builds each tensor as a view of
one: ``_rebuild_tensor_v2(storage, offset, size, stride, ...)``, offsets and strides in
elements. Here each storage becomes one NumPy array and each tensor a strided view of it,
so tensors that shared a storage in PyTorch share memory in graphgrad too.

The file is untrusted: every storage's size must equal what its record declares, every
view must lie inside its storage, and the bytes read are counted against ``max_bytes``
before they are read.
"""

from __future__ import annotations

import io
import os
import pickle
import struct
import zipfile
from collections.abc import Callable
from typing import Any

from graphgrad.backend import xp
from graphgrad.nn.parameter import Parameter
from graphgrad.tensor import Tensor, from_numpy

from .npz_format import MAX_COMPRESSION_RATIO
from .torch_names import ALLOWED_GLOBALS, StorageType, numpy_dtype
from .weights_only import WeightsUnpickler

__all__ = ["torch_archive_top", "read_torch_zip", "is_legacy_torch_file"]

# pickle.dumps(0x1950a86a20f9469cfc6c, protocol=2) without its STOP: the magic number
# a legacy (non-zip) torch.save file starts with
_LEGACY_MAGIC = b"\x80\x02\x8a\nl\xfc\x9cF\xf9 j\xa8P\x19"


def is_legacy_torch_file(head: bytes) -> bool:
    return head.startswith(_LEGACY_MAGIC)


def torch_archive_top(zf: zipfile.ZipFile) -> str | None:
    """The top folder (``"sd/"``) of a torch.save archive, or None when ``zf`` is not one."""
    for name in zf.namelist():
        folder, _, leaf = name.partition("/")
        if leaf == "data.pkl":
            return folder + "/"
    return None


class _Storage:
    """One storage of the file: a flat NumPy array of its dtype."""

    __slots__ = ("array", "key")

    def __init__(self, array, key: str):
        self.array, self.key = array, key


class _Loader:
    """The storages and tensor builders of one archive."""

    def __init__(self, zf: zipfile.ZipFile, top: str, fail: Callable, max_bytes: int,
                 mmap_path: str | None = None):
        self.zf, self.top, self.fail, self.mmap_path = zf, top, fail, mmap_path
        self.limit = self.budget = max_bytes
        self.storages: dict[str, _Storage] = {}
        order = self.record("byteorder")
        self.byteorder = "little" if order is None else order.decode("ascii", "replace")
        if self.byteorder not in ("little", "big"):
            fail(f"unknown byteorder record {self.byteorder!r}")

    def record(self, name: str) -> bytes | None:
        try:
            info = self.zf.getinfo(self.top + name)
        except KeyError:
            return None
        if info.file_size > 64:
            self.fail(f"record {name!r} is {info.file_size} bytes long")
        return self.zf.read(info)

    def member(self, name: str, declared: int | None) -> bytes:
        """The bytes of member ``name``, checked against its ``declared`` size, the
        compression ratio and the remaining budget before anything is read."""
        try:
            info = self.zf.getinfo(self.top + name)
        except KeyError:
            self.fail(f"missing archive member {self.top + name!r}")
        if declared is not None and info.file_size != declared:
            self.fail(f"member {name!r} holds {info.file_size} bytes but the pickle declares "
                      f"{declared}")
        if info.file_size > MAX_COMPRESSION_RATIO * max(info.compress_size, 1):
            self.fail(f"member {name!r} inflates {info.compress_size} bytes to "
                      f"{info.file_size} (a zip bomb?)")
        if info.file_size > self.budget:
            self.fail(f"the file needs more than max_bytes={self.limit} bytes (member "
                      f"{name!r} alone declares {info.file_size}); pass a larger max_bytes "
                      f"to load if the file is trusted")
        self.budget -= info.file_size
        return self.zf.read(info)

    # ------------------------------------------------------------------ persistent ids
    def persistent_load(self, pid: tuple) -> _Storage:
        if len(pid) != 5:
            self.fail(f"malformed storage reference {pid!r:.80}")
        _, cls, key, _location, numel = pid
        if not isinstance(cls, StorageType):
            self.fail(f"storage reference names {cls!r:.60}, not a storage class")
        if not isinstance(key, str) or type(numel) is not int or numel < 0:
            self.fail(f"malformed storage reference {pid!r:.80}")
        try:
            dtype = numpy_dtype(cls)
        except TypeError as e:
            self.fail(str(e).removeprefix("graphgrad.load: "))
        have = self.storages.get(key)
        if have is not None:
            if have.array.dtype != dtype or have.array.size != numel:
                self.fail(f"storage {key!r} is referenced as two different storages")
            return have
        array = self.mapped(f"data/{key}", numel, dtype) if self.mmap_path else None
        if array is None:
            raw = bytearray(self.member(f"data/{key}", numel * dtype.itemsize))
            array = xp.frombuffer(raw, dtype=dtype)  # a bytearray: writable, as torch's is
        if self.byteorder != ("little" if xp.little_endian else "big") and dtype.itemsize > 1:
            array = array.byteswap()
        storage = self.storages[key] = _Storage(array, key)
        return storage

    def mapped(self, name: str, numel: int, dtype) -> Any:
        """Member ``name`` mapped copy-on-write from the file (``mmap=True``: PyTorch's
        MAP_PRIVATE), or None where it cannot be (compressed, empty); sizes checked as
        for a read, but nothing is allocated."""
        try:
            info = self.zf.getinfo(self.top + name)
        except KeyError:
            self.fail(f"missing archive member {self.top + name!r}")
        nbytes = numel * dtype.itemsize
        if info.file_size != nbytes:
            self.fail(f"member {name!r} holds {info.file_size} bytes but the pickle declares "
                      f"{nbytes}")
        if info.compress_type != zipfile.ZIP_STORED or not numel:
            return None
        with open(self.mmap_path, "rb") as fh:
            fh.seek(info.header_offset)
            head = fh.read(30)
            size = os.fstat(fh.fileno()).st_size
        if len(head) != 30 or head[:4] != b"PK\x03\x04":
            self.fail(f"member {name!r} has no local header")
        name_len, extra_len = struct.unpack("<HH", head[26:30])
        offset = info.header_offset + 30 + name_len + extra_len
        if offset + nbytes > size:
            self.fail(f"member {name!r} runs past the end of the file")
        return xp.memmap(self.mmap_path, dtype=dtype, mode="c", offset=offset, shape=(numel,))

    # ------------------------------------------------------------------ rebuild functions
    def view(self, storage: Any, offset: Any, size: Any, stride: Any) -> Any:
        """The NumPy view ``storage[offset:]`` with ``size`` and ``stride`` (elements),
        refused unless every element it reaches lies inside the storage."""
        if not isinstance(storage, _Storage):
            self.fail(f"a tensor is built on {type(storage).__name__}, not a storage")
        if not (isinstance(size, tuple) and isinstance(stride, tuple)
                and len(size) == len(stride)
                and all(type(n) is int and n >= 0 for n in (*size, *stride))
                and type(offset) is int and offset >= 0):
            self.fail(f"malformed tensor: offset {offset!r:.40}, size {size!r:.80}, stride "
                      f"{stride!r:.80}")
        n = storage.array.size
        empty = any(s == 0 for s in size)
        last = offset + sum((s - 1) * st for s, st in zip(size, stride, strict=True))
        if offset > n or (not empty and last >= n):
            self.fail(f"a tensor of size {list(size)}, stride {list(stride)} at offset "
                      f"{offset} does not fit its storage {storage.key!r} of {n} elements")
        item = storage.array.itemsize
        # an ndarray on the storage's buffer: its .base is the storage, so graphgrad's
        # storage_offset/stride and a later save see the sharing
        return xp.ndarray(size, storage.array.dtype, buffer=storage.array,
                          offset=offset * item if n else 0,
                          strides=tuple(s * item for s in stride))

    def rebuild_tensor(self, storage, storage_offset, size, stride, requires_grad=False,
                       backward_hooks=None, metadata=None) -> Tensor:
        """torch._utils._rebuild_tensor_v2 (and _rebuild_tensor, without the flags)."""
        t = from_numpy(self.view(storage, storage_offset, size, stride))
        if requires_grad is True:
            t.requires_grad_(True)
        return t

    def rebuild_tensor_v3(self, storage, storage_offset, size, stride, requires_grad,
                          backward_hooks, dtype, metadata=None) -> Tensor:
        """torch._utils._rebuild_tensor_v3: an untyped (byte) storage read as ``dtype``."""
        np_dtype = getattr(dtype, "np", None)
        if np_dtype is None:
            self.fail(f"a tensor of dtype {dtype!r}, which graphgrad does not have")
        raw = storage.array if isinstance(storage, _Storage) else None
        if raw is None or raw.dtype != xp.uint8 or raw.size % np_dtype.itemsize:
            self.fail("_rebuild_tensor_v3 on a storage that is not whole elements of bytes")
        typed = _Storage(raw.view(np_dtype), storage.key)
        return self.rebuild_tensor(typed, storage_offset, size, stride, requires_grad)

    def rebuild_parameter(self, data, requires_grad, backward_hooks, state=None) -> Parameter:
        if not isinstance(data, Tensor):
            self.fail(f"a Parameter built on {type(data).__name__}, not a tensor")
        return Parameter(data, requires_grad=bool(requires_grad))

    def rebuild_from_type(self, func, new_type, args, state) -> Tensor:
        if new_type not in (Tensor, Parameter) or func not in (self.rebuild_tensor,
                                                                self.rebuild_tensor_v3):
            self.fail(f"a tensor of subclass {new_type!r:.60}, which graphgrad does not load")
        return func(*args)

    def rebuilders(self) -> dict[str, Any]:
        return {"torch._utils._rebuild_tensor_v2": self.rebuild_tensor,
                "torch._utils._rebuild_tensor": self.rebuild_tensor,
                "torch._utils._rebuild_tensor_v3": self.rebuild_tensor_v3,
                "torch._utils._rebuild_parameter": self.rebuild_parameter,
                "torch._utils._rebuild_parameter_with_state": self.rebuild_parameter,
                "torch._tensor._rebuild_from_type_v2": self.rebuild_from_type}


class _FullUnpickler(pickle.Unpickler):
    """``weights_only=False``: any global the pickle names is imported (unsafe); the
    torch names of tensors, storages and dtypes resolve to graphgrad's."""

    def __init__(self, file, loader: _Loader, **kwargs: Any):
        super().__init__(file, **kwargs)
        self.loader = loader
        self.table = {**ALLOWED_GLOBALS, **loader.rebuilders()}

    def find_class(self, module: str, name: str) -> Any:
        path = f"{module}.{name}"
        if path in self.table:
            return self.table[path]
        return super().find_class(module, name)

    def persistent_load(self, pid: Any) -> Any:
        if type(pid) is not tuple or not pid or pid[0] != "storage":
            raise pickle.UnpicklingError(f"unsupported persistent id {pid!r:.60}")
        return self.loader.persistent_load(pid)


def read_torch_zip(zf: zipfile.ZipFile, top: str, fail: Callable, max_bytes: int,
                   weights_only: bool, encoding: str = "utf-8",
                   mmap_path: str | None = None) -> Any:
    """The object a ``torch.save`` archive holds; see the module docstring. With
    ``mmap_path`` (the archive's file) storages are mapped from it instead of read."""
    if any(name.startswith(top + "code/") for name in zf.namelist()):
        fail("a TorchScript archive (torch.jit.save): graphgrad.load reads torch.save files")
    loader = _Loader(zf, top, fail, max_bytes, mmap_path)
    data = loader.member("data.pkl", None)
    if weights_only:
        return WeightsUnpickler(data, loader.persistent_load, loader.rebuilders(),
                                encoding=encoding).load()
    return _FullUnpickler(io.BytesIO(data), loader, encoding=encoding).load()
