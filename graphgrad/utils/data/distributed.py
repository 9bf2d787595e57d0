"""Layer ``utils``: ``DistributedSampler``, each rank's share of a dataset, with PyTorch's
index assignment: the same sizes, padding (indices repeated from the front so every rank
gets ``ceil(N / R)``), truncation with ``drop_last`` and strided split ``[rank::R]``.

With ``shuffle=True`` the base order is the permutation ``torch.randperm(N)`` gives from a
CPU generator seeded with ``seed + epoch`` (reproduced bit for bit by ``torch_randperm``):
the same on every rank, new each epoch once ``set_epoch`` is called, and the same shards as
PyTorch's sampler for the same seed. graphgrad's global random stream is not touched.
"""

from __future__ import annotations

import math
from collections.abc import Iterator, Sized

from graphgrad.distributed.process_group import get_rank, get_world_size, is_available

from .sampler import Sampler
from .torch_randperm import torch_randperm

__all__ = ["DistributedSampler"]


def _from_group(what: str) -> int:
    if not is_available():
        raise RuntimeError("Requires distributed package to be available")
    return get_world_size() if what == "num_replicas" else get_rank()


class DistributedSampler(Sampler):
    """``DistributedSampler(dataset, num_replicas=None, rank=None, shuffle=True, seed=0,
    drop_last=False)``: rank ``rank``'s indices of ``dataset`` among ``num_replicas``
    ranks (both default to the default process group's)."""

    def __init__(self, dataset: Sized, num_replicas: int | None = None,
                 rank: int | None = None, shuffle: bool = True, seed: int = 0,
                 drop_last: bool = False) -> None:
        if num_replicas is None:
            num_replicas = _from_group("num_replicas")
        if rank is None:
            rank = _from_group("rank")
        if rank >= num_replicas or rank < 0:
            raise ValueError(f"Invalid rank {rank}, rank should be in the interval "
                             f"[0, {num_replicas - 1}]")
        self.dataset = dataset
        self.num_replicas = num_replicas
        self.rank = rank
        self.epoch = 0
        self.drop_last = drop_last
        n = len(dataset)
        if drop_last and n % num_replicas != 0:
            self.num_samples = math.ceil((n - num_replicas) / num_replicas)
        else:
            self.num_samples = math.ceil(n / num_replicas)
        self.total_size = self.num_samples * num_replicas
        self.shuffle = shuffle
        self.seed = seed

    def base_order(self) -> list[int]:
        """All indices before padding and splitting: torch's permutation seeded with
        ``seed + epoch`` when shuffling, else ``0 .. N-1``."""
        n = len(self.dataset)
        if self.shuffle:
            return torch_randperm(n, self.seed + self.epoch)
        return list(range(n))

    def __iter__(self) -> Iterator[int]:
        indices = self.base_order()
        if not self.drop_last:
            padding = self.total_size - len(indices)
            if padding <= len(indices):
                indices += indices[:padding]
            else:
                indices += (indices * math.ceil(padding / len(indices)))[:padding]
        else:
            indices = indices[:self.total_size]
        assert len(indices) == self.total_size
        indices = indices[self.rank:self.total_size:self.num_replicas]
        assert len(indices) == self.num_samples
        return iter(indices)

    def __len__(self) -> int:
        return self.num_samples

    def set_epoch(self, epoch: int) -> None:
        """Use ``epoch`` in the seed of the next shuffle: call it before each epoch's
        iterator, or every epoch visits the data in the same order."""
        self.epoch = epoch
