"""Layer ``utils``: ``DataLoader``, batches of a dataset in sampler order, and
``default_collate``, which stacks samples into batch tensors.

A ``TensorDataset`` is batched by one fancy index per tensor instead of stacking
``batch_size`` rows (same result, a few hundred times fewer Python calls).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping, Sequence

from graphgrad.backend import float64, xp
from graphgrad.ops import stack
from graphgrad.tensor import Generator, Tensor, tensor

from .dataset import Dataset, TensorDataset
from .sampler import BatchSampler, RandomSampler, SequentialSampler

__all__ = ["DataLoader", "default_collate"]


def default_collate(batch: Sequence):
    """Tensors are stacked; numbers and NumPy arrays become tensors; tuples, lists and
    dicts are collated field by field."""
    first = batch[0]
    if isinstance(first, Tensor):
        return stack(list(batch), 0)
    if isinstance(first, (xp.ndarray, xp.generic)):  # arrays and NumPy scalars
        return tensor(xp.stack(batch))
    if isinstance(first, float):  # Python floats are doubles: PyTorch keeps float64
        return tensor(list(batch), dtype=float64)
    if isinstance(first, (bool, int)):
        return tensor(list(batch))
    if isinstance(first, str):
        return list(batch)
    if isinstance(first, Mapping):
        return {k: default_collate([b[k] for b in batch]) for k in first}
    if isinstance(first, (tuple, list)):
        if any(len(b) != len(first) for b in batch):
            raise RuntimeError("each element in list of batch should be of equal size")
        fields = [default_collate(list(f)) for f in zip(*batch, strict=True)]
        if isinstance(first, tuple) and hasattr(first, "_fields"):  # a namedtuple
            return type(first)(*fields)
        return fields  # a list, for tuples too (as PyTorch: batch[0] = ... must work)
    raise TypeError(f"default_collate: batch must contain tensors, numbers, dicts or lists; "
                    f"found {type(first).__name__}")


class DataLoader:
    """``DataLoader(dataset, batch_size=1, shuffle=False, drop_last=False,
    generator=None, collate_fn=None)``: iterate over batches; with ``shuffle`` each epoch
    draws a new order from ``generator``."""

    def __init__(self, dataset: Dataset, batch_size: int | None = 1, shuffle: bool = False,
                 sampler=None, batch_sampler=None, num_workers: int = 0,
                 collate_fn: Callable | None = None, pin_memory: bool = False,
                 drop_last: bool = False, generator: Generator | None = None,
                 **unused) -> None:
        if batch_sampler is not None and (batch_size != 1 or shuffle or sampler is not None
                                          or drop_last):
            raise ValueError("batch_sampler option is mutually exclusive with batch_size, "
                             "shuffle, sampler, and drop_last")
        if batch_sampler is not None:
            batch_size = None
        self.dataset = dataset
        self.batch_size = batch_size
        self.drop_last = drop_last
        self.generator = generator
        if sampler is None:
            sampler = RandomSampler(dataset, generator=generator) if shuffle \
                else SequentialSampler(dataset)
        elif shuffle:
            raise ValueError("sampler option is mutually exclusive with shuffle")
        self.sampler = sampler
        if batch_sampler is None and batch_size is not None:
            batch_sampler = BatchSampler(sampler, batch_size, drop_last)
        self.batch_sampler = batch_sampler
        self.collate_fn = collate_fn or default_collate
        # rows of TensorDataset's tensors at once; a subclass may override __getitem__
        self._fast = collate_fn is None and type(dataset) is TensorDataset

    def __iter__(self) -> Iterator:
        if self.batch_sampler is None:  # batch_size=None: samples one by one, uncollated
            for i in self.sampler:
                yield self.dataset[i]
            return
        for idx in self.batch_sampler:
            if self._fast:
                rows = tensor(idx)
                yield [t[rows] for t in self.dataset.tensors]  # default_collate's list
            else:
                yield self.collate_fn([self.dataset[i] for i in idx])

    def __len__(self) -> int:
        if self.batch_sampler is None:
            return len(self.sampler)
        return len(self.batch_sampler)
