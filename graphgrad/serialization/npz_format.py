"""Layer ``serialization``: graphgrad's own format, read and written by ``graphgrad.save`` /
``graphgrad.load``: tensors, and nested dicts, lists and tuples of tensors, arrays,
numbers, strings and None (state dicts of modules and optimizers), in a NumPy ``.npz``
file.

Every tensor is one array entry (``t0``, ``t1``, ...); the nesting is a JSON document in
the ``__structure__`` entry. A file holds data only, never code: nothing is unpickled.

Saving to a path is atomic: the bytes go to a temporary file in the same directory, which
is flushed, fsynced and then renamed over the target, so an interrupted or failed save
leaves the old checkpoint as it was.

Loading treats the file as untrusted. It reads only the entries the structure references,
and checks each one's declared sizes (zip header, ``.npy`` header, compression ratio, the
total against ``MAX_LOAD_BYTES``) before it decompresses a byte of array data, so a zip
bomb costs no memory. Every way a file can be corrupt raises ``CheckpointError`` naming
the file and the fault, and nothing is returned (or applied) after a failure.
"""

from __future__ import annotations

import json
import os
import secrets
import zipfile
from typing import IO, Any

from graphgrad.backend import from_numpy_dtype, xp
from graphgrad.tensor import Tensor, from_numpy

__all__ = ["save_npz", "read_npz", "is_npz_checkpoint", "save_atomically", "CheckpointError",
           "MAX_LOAD_BYTES", "MAX_DEPTH", "MAX_COMPRESSION_RATIO", "fits_npz"]

_FORMAT = "graphgrad-npz-1"
_STRUCTURE = "__structure__"

MAX_LOAD_BYTES = 4 << 30
"""The most array bytes ``load`` will allocate (``load(..., max_bytes=...)`` overrides)."""

MAX_DEPTH = 200
"""The deepest nesting of dicts/lists/tuples ``save`` writes and ``load`` accepts (far
below Python's recursion limit, so a crafted file cannot raise RecursionError)."""

MAX_COMPRESSION_RATIO = 200
"""Uncompressed over compressed size allowed for one entry. ``save`` stores entries
uncompressed (ratio 1) and real weights deflate by less than 10x; a bomb of zeros
inflates about 1000x."""

_MAX_HEADER = 10_000  # NumPy's own limit for a .npy header
_CHUNK = 1 << 20      # array data is copied in chunks of this size: no second full copy
_ARRAY_KINDS = "biufcUS"  # bool, integers, floats, complex, strings: never objects


class CheckpointError(RuntimeError):
    """A file that ``graphgrad.load`` cannot read: not a checkpoint, corrupt, truncated,
    or declaring more data than it may (a zip bomb). The message names the file."""


# ---------------------------------------------------------------------------- save


def _encode(obj: Any, arrays: list, depth: int = 0) -> Any:
    if depth > MAX_DEPTH:
        raise ValueError(f"graphgrad.save: nesting deeper than MAX_DEPTH={MAX_DEPTH}")
    if isinstance(obj, Tensor):
        arrays.append(obj._array)
        return {"tensor": len(arrays) - 1, "requires_grad": bool(obj.requires_grad)}
    if isinstance(obj, xp.ndarray):
        arrays.append(obj)
        return {"ndarray": len(arrays) - 1}
    if isinstance(obj, xp.generic):
        return {"value": obj.item()}
    if obj is None or isinstance(obj, (bool, int, float, str)):
        return {"value": obj}
    if isinstance(obj, dict):
        for k in obj:
            if not (k is None or isinstance(k, (bool, int, float, str))):
                raise TypeError(f"graphgrad.save: dict keys must be str, int, float, bool or "
                                f"None, got {type(k).__name__}")
        return {"dict": [[k, _encode(v, arrays, depth + 1)] for k, v in obj.items()]}
    if isinstance(obj, (list, tuple)):
        kind = "list" if isinstance(obj, list) else "tuple"
        return {kind: [_encode(v, arrays, depth + 1) for v in obj]}
    raise TypeError(f"graphgrad.save: cannot save an object of type {type(obj).__name__} "
                    f"(tensors, arrays, numbers, strings, None and dicts/lists/tuples of "
                    f"them only: no pickled code)")


def _fsync_directory(directory: str) -> None:
    # Makes the rename itself durable; not every platform can open a directory.
    try:
        fd = os.open(directory, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)


def save_atomically(write, path: str) -> None:
    """Call ``write(fh)`` on a temporary file beside ``path``, then rename it over
    ``path``: an interrupted or failed save leaves the old file as it was."""
    directory = os.path.dirname(os.path.abspath(path))
    if not os.path.isdir(directory):  # PyTorch's check and wording
        raise RuntimeError(f"Parent directory {os.path.dirname(path) or '.'} does not exist.")
    tmp = os.path.join(directory, f".{os.path.basename(path)}.{secrets.token_hex(8)}.tmp")
    # os.open with 0o666 lets the umask decide the mode, as open(path, "wb") would.
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_BINARY", 0),
                 0o666)
    try:
        with os.fdopen(fd, "wb") as fh:
            write(fh)
            fh.flush()
            os.fsync(fh.fileno())
        if os.path.exists(path):
            os.chmod(tmp, os.stat(path).st_mode & 0o7777)  # keep the old file's mode
        os.replace(tmp, path)
    except BaseException:  # KeyboardInterrupt too: never leave the temporary file behind
        try:
            os.unlink(tmp)
        except OSError:
            pass
        raise
    _fsync_directory(directory)


def fits_npz(obj: Any, depth: int = 0) -> bool:
    """Whether ``obj`` is data this format holds (no other object anywhere in it)."""
    if depth > MAX_DEPTH:
        return True  # save_npz raises its nesting error
    if isinstance(obj, (Tensor, xp.ndarray, xp.generic)) or obj is None or isinstance(
            obj, (bool, int, float, str)):
        return True
    if isinstance(obj, dict):
        return all(k is None or isinstance(k, (bool, int, float, str)) for k in obj) and all(
            fits_npz(v, depth + 1) for v in obj.values())
    if isinstance(obj, (list, tuple)):
        return all(fits_npz(v, depth + 1) for v in obj)
    return False


def save_npz(obj: Any, f: str | os.PathLike | IO[bytes]) -> None:
    """Write ``obj`` to the path or binary file ``f`` (the name is kept as given). Saving
    to a path replaces the file atomically: an interrupted save leaves the old one."""
    arrays: list = []
    structure = {"format": _FORMAT, "root": _encode(obj, arrays)}
    entries = {f"t{i}": a for i, a in enumerate(arrays)}
    entries[_STRUCTURE] = xp.array(json.dumps(structure))
    if isinstance(f, (str, os.PathLike)):
        # a file object: NumPy would append ".npz" to a name
        save_atomically(lambda fh: xp.savez(fh, **entries), os.fspath(f))
    else:
        xp.savez(f, **entries)


# ---------------------------------------------------------------------------- load


class _Reader:
    """Reads checked ``.npy`` entries out of an open zip archive for one ``load``."""

    def __init__(self, zf: zipfile.ZipFile, fail, max_bytes: int):
        self.zf, self.fail, self.limit, self.budget = zf, fail, max_bytes, max_bytes

    def header(self, name: str):
        """The ``(shape, fortran_order, dtype, data_offset)`` of entry ``name``, checked
        against its zip header, the compression ratio and the remaining byte budget."""
        try:
            info = self.zf.getinfo(f"{name}.npy")
        except KeyError:
            self.fail(f"missing entry {name!r}")
        with self.zf.open(info) as fp:
            version = xp.lib.format.read_magic(fp)
            if version == (1, 0):
                shape, fortran, dtype = xp.lib.format.read_array_header_1_0(
                    fp, max_header_size=_MAX_HEADER)
            elif version == (2, 0):
                shape, fortran, dtype = xp.lib.format.read_array_header_2_0(
                    fp, max_header_size=_MAX_HEADER)
            else:
                self.fail(f"entry {name!r} has unsupported .npy version {version}")
            offset = fp.tell()
        if dtype.kind not in _ARRAY_KINDS or dtype.hasobject or dtype.fields is not None:
            self.fail(f"entry {name!r} has dtype {dtype.str!r}: only bool, integer, float, "
                      f"complex and string arrays are loaded (never objects or pickles)")
        count = 1
        for n in shape:
            count *= n
        nbytes = count * dtype.itemsize
        if info.file_size != offset + nbytes:
            self.fail(f"entry {name!r} holds {info.file_size} bytes but its header declares "
                      f"{offset + nbytes} (shape {shape}, dtype {dtype.str})")
        if info.file_size > MAX_COMPRESSION_RATIO * max(info.compress_size, 1):
            self.fail(f"entry {name!r} inflates {info.compress_size} bytes to "
                      f"{info.file_size}, more than MAX_COMPRESSION_RATIO="
                      f"{MAX_COMPRESSION_RATIO} times (a zip bomb?)")
        if nbytes > self.budget:
            self.fail(f"the arrays need more than max_bytes={self.limit} bytes"
                      f" (entry {name!r} alone declares {nbytes}); pass a larger "
                      f"max_bytes to load if the file is trusted")
        self.budget -= nbytes
        return shape, fortran, dtype, offset

    def array(self, name: str, head) -> Any:
        """The data of entry ``name`` whose checked ``header`` is ``head``."""
        shape, fortran, dtype, offset = head
        out = xp.empty(shape, dtype=dtype, order="F" if fortran else "C")
        flat = out.reshape(-1, order="A").view(xp.uint8) if out.size else out
        with self.zf.open(f"{name}.npy") as fp:
            fp.read(offset)
            done = 0
            while done < flat.size:  # reading to the end makes zipfile check the CRC
                chunk = fp.read(min(_CHUNK, flat.size - done))
                if not chunk:
                    self.fail(f"entry {name!r} ends early")
                flat[done:done + len(chunk)] = xp.frombuffer(chunk, dtype=xp.uint8)
                done += len(chunk)
        if not dtype.isnative:
            out = out.astype(dtype.newbyteorder("="))
        return out


def _check_structure(node: Any, refs: dict, fail, depth: int = 0) -> None:
    """Validate the JSON ``node`` and record each array it references as ``refs[name] =
    is_tensor``; raises through ``fail`` on anything ``save`` would not have written."""
    if depth > MAX_DEPTH:
        fail(f"nesting deeper than MAX_DEPTH={MAX_DEPTH}")
    if not isinstance(node, dict) or len(node) not in (1, 2):
        fail(f"malformed structure node {str(node)[:80]}")
    for key in ("tensor", "ndarray"):
        if key in node:
            i = node[key]
            if type(i) is not int or i < 0:
                fail(f"malformed array reference {str(node)[:80]}")
            if f"t{i}" in refs:
                fail(f"entry 't{i}' is referenced twice")
            refs[f"t{i}"] = key == "tensor"
            return
    if len(node) != 1:
        fail(f"malformed structure node {str(node)[:80]}")
    (kind, value), = node.items()
    if kind == "value":
        if not (value is None or isinstance(value, (bool, int, float, str))):
            fail(f"malformed value {str(value)[:80]}")
    elif kind == "dict":
        if not isinstance(value, list):
            fail("malformed dict")
        for item in value:
            if (not isinstance(item, list) or len(item) != 2
                    or not (item[0] is None or isinstance(item[0], (bool, int, float, str)))):
                fail(f"malformed dict item {str(item)[:80]}")
            _check_structure(item[1], refs, fail, depth + 1)
    elif kind in ("list", "tuple"):
        if not isinstance(value, list):
            fail(f"malformed {kind}")
        for v in value:
            _check_structure(v, refs, fail, depth + 1)
    else:
        fail(f"unknown entry in the file's structure: {str(node)[:80]}")


def _decode(node: dict, arrays: dict) -> Any:
    # Only runs on a structure _check_structure accepted, so its depth is bounded.
    if "tensor" in node:
        t = from_numpy(arrays[f"t{node['tensor']}"])
        if node.get("requires_grad"):
            t.requires_grad_(True)
        return t
    if "ndarray" in node:
        return arrays[f"t{node['ndarray']}"]
    if "value" in node:
        return node["value"]
    if "dict" in node:
        return {k: _decode(v, arrays) for k, v in node["dict"]}
    if "list" in node:
        return [_decode(v, arrays) for v in node["list"]]
    return tuple(_decode(v, arrays) for v in node["tuple"])


def _read_checkpoint(zf: zipfile.ZipFile, fail, max_bytes: int) -> Any:
    reader = _Reader(zf, fail, max_bytes)
    if f"{_STRUCTURE}.npy" not in zf.namelist():
        fail("not a graphgrad checkpoint (no __structure__ entry)")
    head = reader.header(_STRUCTURE)
    if head[2].kind != "U" or head[0] != ():
        fail("the __structure__ entry is not a string")
    try:
        structure = json.loads(str(reader.array(_STRUCTURE, head)))
    except RecursionError:
        fail(f"nesting deeper than MAX_DEPTH={MAX_DEPTH}")
    if not isinstance(structure, dict) or structure.get("format") != _FORMAT:
        fmt = structure.get("format") if isinstance(structure, dict) else None
        fail(f"unknown checkpoint format {fmt!r}")
    refs: dict = {}
    _check_structure(structure.get("root"), refs, fail)
    heads = {name: reader.header(name) for name in refs}  # every size checked first
    for name, is_tensor in refs.items():
        if is_tensor:
            try:
                from_numpy_dtype(heads[name][2].newbyteorder("="))
            except TypeError:
                fail(f"entry {name!r} has dtype {heads[name][2].str!r}, which no tensor has")
    arrays = {name: reader.array(name, h) for name, h in heads.items()}
    return _decode(structure["root"], arrays)


def is_npz_checkpoint(zf: zipfile.ZipFile) -> bool:
    return f"{_STRUCTURE}.npy" in zf.namelist()


def read_npz(zf: zipfile.ZipFile, fail, max_bytes: int) -> Any:
    """The object in the graphgrad checkpoint ``zf``; faults raise through ``fail``."""
    return _read_checkpoint(zf, fail, max_bytes)
