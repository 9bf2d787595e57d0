"""Layer ``serialization``: ``graphgrad.save`` / ``graphgrad.load`` (``torch.save`` /
``torch.load``) in two formats, and PyTorch's ``weights_only`` allowlist.

* graphgrad's own format (``npz_format.py``): tensors, arrays, numbers, strings, None and
  dicts/lists/tuples of them in a NumPy ``.npz``; never pickled. ``save`` writes it for
  such data unless asked for the torch format.
* PyTorch's format (``torch_reader.py``, ``torch_writer.py``): the zip with ``data.pkl``
  that ``torch.save`` writes, read and written with NumPy only. ``save`` writes it with
  ``format="torch"`` or ``_use_new_zipfile_serialization=True`` (then
  ``torch.load(f, weights_only=True)`` reads it), and for any object the npz format cannot
  hold (a whole ``nn.Module``...), which it pickles as ``torch.save`` does.

``load`` tells the formats apart by their content, never by the file name (except
``.safetensors``, which it reads with the safetensors package as ``torch.load`` does). A
torch file loads with ``weights_only=True`` by default, as in PyTorch 2.6+: the
restricted unpickler of ``weights_only.py`` builds tensors, containers and primitive
values and refuses any other global with PyTorch's message; ``weights_only=False``
unpickles anything and can run code: use it only for files you trust. Every load checks
declared sizes before reading, so a lying or truncated file raises ``CheckpointError``
(or the weights-only ``pickle.UnpicklingError``) and never allocates more than
``max_bytes``.
"""

from __future__ import annotations

import os
import pickle
import sys
import zipfile
from typing import IO, Any, NoReturn

from .npz_format import (MAX_COMPRESSION_RATIO, MAX_DEPTH, MAX_LOAD_BYTES, CheckpointError,
                         fits_npz, is_npz_checkpoint, read_npz, save_atomically, save_npz)
from .torch_reader import is_legacy_torch_file, read_torch_zip, torch_archive_top
from .torch_writer import write_torch_zip
from .weights_only import (add_safe_globals, clear_safe_globals, get_safe_globals,
                           safe_globals, weights_only_message)

__all__ = ["save", "load", "CheckpointError", "MAX_LOAD_BYTES", "MAX_DEPTH",
           "MAX_COMPRESSION_RATIO", "add_safe_globals", "safe_globals", "get_safe_globals",
           "clear_safe_globals"]

DEFAULT_PROTOCOL = 2
FORMATS = ("npz", "torch")


def _top_folder(f: Any) -> str:
    # torch names the archive's folder after the file; any name loads
    if isinstance(f, (str, os.PathLike)):
        stem = os.path.splitext(os.path.basename(os.fspath(f)))[0]
        if stem and stem.isprintable() and "/" not in stem:
            return stem
    return "archive"


def save(obj: Any, f: str | os.PathLike | IO[bytes], pickle_module: Any = pickle,
         pickle_protocol: int = DEFAULT_PROTOCOL,
         _use_new_zipfile_serialization: bool | None = None,
         _disable_byteorder_record: bool = False, *, format: str | None = None) -> None:
    """Write ``obj`` to the path or binary file ``f``; to a path atomically (an interrupted
    save leaves the old file as it was).

    ``format="torch"`` (or ``_use_new_zipfile_serialization=True``) writes PyTorch's zip
    format, which ``torch.load(f, weights_only=True)`` reads; ``format="npz"`` graphgrad's
    own. By default data (tensors, arrays, numbers, strings, None and containers of them)
    goes to npz and anything else (a whole module) is pickled in the torch format."""
    if pickle_module is not pickle:
        raise ValueError("graphgrad.save: only the standard pickle module is supported")
    if _use_new_zipfile_serialization is False:
        raise ValueError("graphgrad.save does not write PyTorch's legacy format "
                         "(_use_new_zipfile_serialization=False); it writes the zip format "
                         "that PyTorch >= 1.6 reads")
    if format is None:
        use_torch = _use_new_zipfile_serialization or not fits_npz(obj)
        format = "torch" if use_torch else "npz"  # noqa: A001 - the argument's name
    if format not in FORMATS:
        raise ValueError(f"graphgrad.save: unknown format {format!r} (one of {FORMATS})")
    if format == "npz":
        save_npz(obj, f)
        return
    top = _top_folder(f)

    def write(fh: IO[bytes]) -> None:
        write_torch_zip(obj, fh, top, pickle_protocol, not _disable_byteorder_record)

    if isinstance(f, (str, os.PathLike)):
        save_atomically(write, os.fspath(f))
    else:
        write(f)


def _load_safetensors(path: str) -> dict:
    from graphgrad.utils.safetensors import load_file
    return load_file(path)


def load(f: str | os.PathLike | IO[bytes], map_location: Any = None,
         pickle_module: Any = None, *, weights_only: bool | None = None,
         mmap: bool | None = None, max_bytes: int | None = None,
         **pickle_load_args: Any) -> Any:
    """Read what ``graphgrad.save`` or ``torch.save`` wrote (see the module docstring).

    ``weights_only`` (default True) restricts torch files to tensors, containers and
    primitive values; ``weights_only=False`` can execute arbitrary code from the file:
    only for trusted files. ``map_location`` is accepted and has no effect (CPU only). At
    most ``max_bytes`` (default ``MAX_LOAD_BYTES``) of data is read; with ``mmap=True`` a
    torch file's storages are mapped copy-on-write from the file instead (as PyTorch's
    MAP_PRIVATE), so loading allocates nothing for them."""
    if mmap and not isinstance(f, (str, os.PathLike)):  # PyTorch's check and wording
        raise ValueError("f must be a file path in order to use the mmap argument")
    if pickle_module is not None and pickle_module is not pickle:
        raise ValueError("graphgrad.load: only the standard pickle module is supported")
    if weights_only is None:
        weights_only = True  # PyTorch 2.6's default
    limit = sys.modules[__name__].MAX_LOAD_BYTES if max_bytes is None else max_bytes
    if isinstance(f, (str, os.PathLike)) and os.fspath(f).endswith(".safetensors"):
        return _load_safetensors(os.fspath(f))
    name = os.fspath(f) if isinstance(f, (str, os.PathLike)) else getattr(f, "name", repr(f))

    def fail(what: str) -> NoReturn:
        raise CheckpointError(f"graphgrad.load: {name}: {what}")

    fh = open(f, "rb") if isinstance(f, (str, os.PathLike)) else f  # FileNotFoundError as is
    try:
        start = fh.tell()
        head = fh.read(16)
        fh.seek(start)
        if not head.startswith(b"PK\x03\x04"):
            if is_legacy_torch_file(head):
                fail("a legacy torch.save file (PyTorch < 1.6 or "
                     "_use_new_zipfile_serialization=False): graphgrad reads the zip format "
                     "only; load it in PyTorch and torch.save it again")
            fail("corrupt or not a graphgrad checkpoint (not a zip archive, nor a torch.save "
                 "file)")
        try:
            with zipfile.ZipFile(fh) as zf:
                if is_npz_checkpoint(zf):
                    return read_npz(zf, fail, limit)
                top = torch_archive_top(zf)
                if top is None:
                    fail("not a graphgrad checkpoint (no __structure__ entry) nor a "
                         "torch.save file (no data.pkl)")
                return read_torch_zip(zf, top, fail, limit, weights_only,
                                      pickle_load_args.get("encoding", "utf-8"),
                                      os.fspath(f) if mmap else None)
        except (CheckpointError, NotImplementedError):
            raise
        except pickle.UnpicklingError as e:
            if weights_only:
                raise pickle.UnpicklingError(weights_only_message(str(e))) from None
            raise
        # Bytes from a corrupt file can fail anywhere in zipfile, zlib/bz2/lzma, NumPy's
        # header parser or the pickle (BadZipFile, ValueError, EOFError, OSError,
        # struct.error, IndexError on a short stack...): all mean the same thing here.
        except Exception as e:  # noqa: BLE001
            raise CheckpointError(f"graphgrad.load: {name}: corrupt or not a graphgrad "
                                  f"checkpoint ({type(e).__name__}: {e})") from e
    finally:
        if fh is not f:
            fh.close()
