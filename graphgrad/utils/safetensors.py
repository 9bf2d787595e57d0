"""Layer ``utils``: safetensors files (the format of the model hubs) through the
``safetensors`` package's NumPy API, with the names of ``safetensors.torch``:
``save_file``/``load_file`` and ``save``/``load`` (bytes).

A safetensors file is an 8-byte header length, a JSON header (name -> dtype, shape, byte
range; an optional ``__metadata__`` str -> str map) and the raw data: it holds no code,
and the package checks the header against the file before reading. Tensors come back as
graphgrad tensors, so ``model.load_state_dict(load_file(path))`` works. Needs the
optional extra ``graphgrad[safetensors]``.
"""

from __future__ import annotations

import os
from typing import Any

from graphgrad.backend import xp
from graphgrad.tensor import Tensor, from_numpy

__all__ = ["save_file", "load_file", "save", "load", "load_metadata"]


def _numpy_api() -> Any:
    try:
        import safetensors.numpy as api
    except ImportError as e:
        raise ImportError("graphgrad.utils.safetensors needs the safetensors package: pip "
                          "install 'graphgrad[safetensors]'") from e
    return api


def _arrays(tensors: dict[str, Tensor]) -> dict[str, Any]:
    if not isinstance(tensors, dict):
        raise TypeError(f"Expected a dict of [str, Tensor] but received {type(tensors)}")
    out = {}
    for name, t in tensors.items():
        if not isinstance(name, str) or not isinstance(t, Tensor):
            raise TypeError(f"Expected a dict of [str, Tensor] but got key {name!r} of type "
                            f"{type(name).__name__} with value of type {type(t).__name__}")
        # C order, native bytes: what the format stores (0-d stays 0-d with asarray)
        out[name] = xp.asarray(t.detach()._array, dtype=t._array.dtype.newbyteorder("="),
                               order="C")
    return out


def _tensors(arrays: dict[str, Any]) -> dict[str, Tensor]:
    return {name: from_numpy(xp.array(a)) for name, a in arrays.items()}


def save_file(tensors: dict[str, Tensor], filename: str | os.PathLike,
              metadata: dict[str, str] | None = None) -> None:
    """Write ``tensors`` (name -> tensor) and the str -> str ``metadata`` to ``filename``."""
    _numpy_api().save_file(_arrays(tensors), os.fspath(filename), metadata=metadata)


def save(tensors: dict[str, Tensor], metadata: dict[str, str] | None = None) -> bytes:
    """The safetensors bytes of ``tensors``."""
    return _numpy_api().save(_arrays(tensors), metadata=metadata)


def load_file(filename: str | os.PathLike, device: str = "cpu") -> dict[str, Tensor]:
    """The tensors of the safetensors file ``filename`` (CPU only)."""
    if str(device) != "cpu":
        raise RuntimeError(f"graphgrad.utils.safetensors: device {device!r}: graphgrad "
                           f"runs on the CPU only")
    return _tensors(_numpy_api().load_file(os.fspath(filename)))


def load(data: bytes) -> dict[str, Tensor]:
    """The tensors of safetensors ``data`` (bytes)."""
    return _tensors(_numpy_api().load(data))


def load_metadata(filename: str | os.PathLike) -> dict[str, str] | None:
    """The file's ``__metadata__`` map (None when it has none), without reading data."""
    _numpy_api()  # the extra's error message when the package is missing
    from safetensors import safe_open
    with safe_open(os.fspath(filename), framework="np") as f:
        return f.metadata()
