"""Layer ``serialization``: ``graphgrad.save`` / ``graphgrad.load``: tensors, and nested
dicts, lists and tuples of tensors, arrays, numbers, strings and None (state dicts of
modules and optimizers), in a NumPy ``.npz`` file.

Every tensor is one array entry (``t0``, ``t1``, ...); the nesting is a JSON document in
the ``__structure__`` entry. Loading uses ``np.load(allow_pickle=False)``: a file can
hold data only, never code.
"""

from __future__ import annotations

import json
import os
from typing import IO, Any

from graphgrad.backend import xp
from graphgrad.tensor import Tensor, tensor

__all__ = ["save", "load"]

_FORMAT = "graphgrad-npz-1"


def _encode(obj: Any, arrays: list) -> Any:
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
        return {"dict": [[k, _encode(v, arrays)] for k, v in obj.items()]}
    if isinstance(obj, (list, tuple)):
        kind = "list" if isinstance(obj, list) else "tuple"
        return {kind: [_encode(v, arrays) for v in obj]}
    raise TypeError(f"graphgrad.save: cannot save an object of type {type(obj).__name__} "
                    f"(tensors, arrays, numbers, strings, None and dicts/lists/tuples of "
                    f"them only: no pickled code)")


def _decode(node: dict, arrays) -> Any:
    if "tensor" in node:
        t = tensor(arrays[f"t{node['tensor']}"])
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
    if "tuple" in node:
        return tuple(_decode(v, arrays) for v in node["tuple"])
    raise ValueError(f"graphgrad.load: unknown entry in the file's structure: {node}")


def save(obj: Any, f: str | os.PathLike | IO[bytes]) -> None:
    """Write ``obj`` to the path or binary file ``f`` (the name is kept as given)."""
    arrays: list = []
    structure = {"format": _FORMAT, "root": _encode(obj, arrays)}
    entries = {f"t{i}": a for i, a in enumerate(arrays)}
    entries["__structure__"] = xp.array(json.dumps(structure))
    if isinstance(f, (str, os.PathLike)):
        with open(f, "wb") as fh:  # a file object: NumPy would append ".npz" to a name
            xp.savez(fh, **entries)
    else:
        xp.savez(f, **entries)


def load(f: str | os.PathLike | IO[bytes], map_location=None, weights_only: bool = True) -> Any:
    """Read what ``save`` wrote (``map_location`` is accepted and ignored: CPU only)."""
    with xp.load(f, allow_pickle=False) as data:
        if "__structure__" not in data.files:
            raise RuntimeError("graphgrad.load: not a graphgrad checkpoint (no __structure__ "
                               "entry)")
        structure = json.loads(str(data["__structure__"]))
        if structure.get("format") != _FORMAT:
            raise RuntimeError(f"graphgrad.load: unknown checkpoint format "
                               f"{structure.get('format')!r}")
        arrays = {k: data[k] for k in data.files if k != "__structure__"}
    return _decode(structure["root"], arrays)
