"""Layer ``distributed``: collectives on picklable Python objects, as PyTorch's
``all_gather_object`` / ``broadcast_object_list`` / ``gather_object``: each object is
pickled into bytes, the lengths are exchanged first, then the bytes. Like PyTorch's they
are slow next to tensor collectives, and unpickling runs code from the sender: use them
only between ranks you trust."""

from __future__ import annotations

import pickle
from typing import Any

import numpy as np

from .process_group import mpi, resolve, wait_all

__all__ = ["all_gather_object", "broadcast_object_list", "gather_object"]


def _bytes(obj: Any) -> np.ndarray:
    return np.frombuffer(pickle.dumps(obj), dtype=np.uint8)


def _allgather_bytes(pg, data: np.ndarray) -> list[bytes]:
    sizes = np.empty(pg.size(), np.int64)
    wait_all([pg.comm.Iallgather(np.array(data.size, np.int64), sizes)], pg, "allgather")
    out = np.empty(int(sizes.sum()), np.uint8)
    offsets = np.concatenate([[0], np.cumsum(sizes)[:-1]])
    counts = (sizes.tolist(), offsets.tolist())
    wait_all([pg.comm.Iallgatherv(data, [out, counts, mpi().BYTE])], pg, "allgather")
    return [out[o:o + n].tobytes() for o, n in zip(offsets, sizes, strict=True)]


def all_gather_object(object_list: list, obj: Any, group: Any = None) -> None:
    """``object_list[r]`` becomes rank r's ``obj`` on every rank (pickle-based)."""
    pg = resolve(group)
    if pg is None:
        return
    if len(object_list) != pg.size():
        raise ValueError(f"all_gather_object: object_list has {len(object_list)} entries, "
                         f"expected the group size {pg.size()}")
    for r, raw in enumerate(_allgather_bytes(pg, _bytes(obj))):
        object_list[r] = pickle.loads(raw)


def gather_object(obj: Any, object_gather_list: list | None = None, dst: int | None = None,
                  group: Any = None) -> None:
    """On rank ``dst`` (default 0), ``object_gather_list[r]`` becomes rank r's ``obj``."""
    pg = resolve(group)
    if pg is None:
        return
    root = pg.ranks.index(0 if dst is None else dst)
    gathered = _allgather_bytes(pg, _bytes(obj))  # small objects: one pattern for both
    if pg.rank() == root:
        if object_gather_list is None:
            raise ValueError("Argument ``object_gather_list`` must be specified on "
                             "destination rank.")
        for r, raw in enumerate(gathered):
            object_gather_list[r] = pickle.loads(raw)


def broadcast_object_list(object_list: list, src: int | None = None, group: Any = None,
                          device: Any = None, group_src: int | None = None) -> None:
    """Every rank's ``object_list`` entries become rank ``src``'s (pickle-based)."""
    pg = resolve(group)
    if pg is None:
        return
    root = group_src if group_src is not None else pg.ranks.index(0 if src is None else src)
    data = _bytes(list(object_list)) if pg.rank() == root else None
    size = np.array(data.size if data is not None else 0, np.int64)
    wait_all([pg.comm.Ibcast(size, root=root)], pg, "broadcast")
    if data is None:
        data = np.empty(int(size), np.uint8)
    wait_all([pg.comm.Ibcast(data, root=root)], pg, "broadcast")
    if pg.rank() != root:
        received = pickle.loads(data.tobytes())
        object_list[:] = received[:len(object_list)]
