"""Layer ``ops``: coordinate grids from vectors: meshgrid and cartesian_prod.

Composites of reshape and expand (meshgrid) and stack (cartesian_prod): the gradient of
each grid sums back over the dims it was expanded along.
"""

from __future__ import annotations

import warnings

from graphgrad.tensor import Value

__all__ = ["meshgrid", "cartesian_prod"]


def _tensor_list(tensors) -> list:
    if len(tensors) == 1 and isinstance(tensors[0], (list, tuple)):
        return list(tensors[0])
    return list(tensors)


def meshgrid(*tensors, indexing: str | None = None):
    """For N vectors of sizes s1..sN: N tensors of shape (s1, ..., sN), the i-th holding
    vector i along dim i (``indexing="ij"``); ``"xy"`` swaps the first two dims. 0-d
    tensors count as vectors of one element."""
    tensors = _tensor_list(tensors)
    if not tensors:
        raise RuntimeError("meshgrid expects a non-empty TensorList")
    if indexing is None:
        warnings.warn("torch.meshgrid: in an upcoming release, it will be required to pass "
                      "the indexing argument.", UserWarning, stacklevel=2)
        indexing = "ij"
    if indexing not in ("xy", "ij"):
        raise RuntimeError(f'torch.meshgrid: indexing must be one of "xy" or "ij", but '
                           f"received: {indexing}")
    for t in tensors:
        if not isinstance(t, Value) or t.ndim > 1:
            raise RuntimeError(f"torch.meshgrid: Expected 0D or 1D tensor in the tensor list "
                               f"but got: {t}")
        if t.dtype != tensors[0].dtype:
            raise RuntimeError("meshgrid expects all tensors to have the same dtype")
    vectors = [t.reshape(-1) for t in tensors]
    swap = indexing == "xy" and len(vectors) >= 2
    if swap:  # "xy" is "ij" of the first two swapped, with the two grids' dims swapped
        vectors[0], vectors[1] = vectors[1], vectors[0]
    shape = tuple(v.shape[0] for v in vectors)
    grids = []
    for i, v in enumerate(vectors):
        view = [1] * len(vectors)
        view[i] = shape[i]
        grids.append(v.reshape(*view).expand(*shape))
    if swap:
        grids[0], grids[1] = grids[1], grids[0]
    return tuple(grids)


def cartesian_prod(*tensors):
    """The rows of all combinations of one element from each vector, the last vector
    varying fastest: (prod of sizes, N); one vector is returned as it is."""
    from .join import stack
    tensors = _tensor_list(tensors)
    if len(tensors) == 1:
        return tensors[0]
    grids = meshgrid(*tensors, indexing="ij")
    return stack([g.reshape(-1) for g in grids], dim=1)
