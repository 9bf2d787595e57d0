"""Layer ``utils``: the order a ``DataLoader`` visits indices in, and their batching.

Every sampler is lazy as PyTorch's are: nothing is drawn when it is made, and iterating
draws as it goes (``RandomSampler`` with replacement draws 32 indices at a time; without,
one permutation per pass over the data), so ``num_samples=int(1e10)`` costs no memory.
"""

from __future__ import annotations

import itertools
from collections.abc import Iterable, Iterator, Sequence, Sized

from graphgrad.backend import float64
from graphgrad.ops.random import multinomial
from graphgrad.tensor import Generator, as_tensor, default_generator, randint, randperm

__all__ = ["Sampler", "SequentialSampler", "RandomSampler", "SubsetRandomSampler",
           "WeightedRandomSampler", "BatchSampler"]

_CHUNK = 32  # indices drawn per call with replacement (PyTorch's chunk)


class Sampler:
    def __iter__(self) -> Iterator[int]:
        raise NotImplementedError


class SequentialSampler(Sampler):
    def __init__(self, data_source: Sized) -> None:
        self.data_source = data_source

    def __iter__(self) -> Iterator[int]:
        return iter(range(len(self.data_source)))

    def __len__(self) -> int:
        return len(self.data_source)


def _positive_int(name: str, value) -> None:
    if not isinstance(value, int) or isinstance(value, bool) or value <= 0:
        raise ValueError(f"{name} should be a positive integer value, but got "
                         f"{name}={value}")


class RandomSampler(Sampler):
    """``num_samples`` indices (default: one pass) drawn from ``generator``; without one,
    each iteration seeds a fresh generator from the global one (as PyTorch), so
    ``manual_seed`` makes the sequence of epochs reproducible and each epoch differs."""

    def __init__(self, data_source: Sized, replacement: bool = False,
                 num_samples: int | None = None, generator: Generator | None = None) -> None:
        self.data_source = data_source
        self.replacement = replacement
        self._num_samples = num_samples
        self.generator = generator
        if not isinstance(replacement, bool):
            raise TypeError(f"replacement should be a boolean value, but got "
                            f"replacement={replacement}")
        if not isinstance(self.num_samples, int) or self.num_samples <= 0:
            raise ValueError(f"num_samples should be a positive integer value, but got "
                             f"num_samples={self.num_samples}")

    @property
    def num_samples(self) -> int:
        return len(self.data_source) if self._num_samples is None else self._num_samples

    def __iter__(self) -> Iterator[int]:
        n = len(self.data_source)
        generator = self.generator
        if generator is None:
            seed = int(default_generator.rng.integers(0, 2**63 - 1))
            generator = Generator().manual_seed(seed)
        if self.replacement:
            for _ in range(self.num_samples // _CHUNK):
                yield from randint(0, n, (_CHUNK,), generator=generator).tolist()
            yield from randint(0, n, (self.num_samples % _CHUNK,), generator=generator).tolist()
        else:
            for _ in range(self.num_samples // n):
                yield from randperm(n, generator=generator).tolist()
            yield from randperm(n, generator=generator).tolist()[:self.num_samples % n]

    def __len__(self) -> int:
        return self.num_samples


class SubsetRandomSampler(Sampler):
    """The given ``indices`` in a random order, a new one each iteration."""

    def __init__(self, indices: Sequence[int], generator: Generator | None = None) -> None:
        self.indices = indices
        self.generator = generator

    def __iter__(self) -> Iterator[int]:
        for i in randperm(len(self.indices), generator=self.generator).tolist():
            yield self.indices[i]

    def __len__(self) -> int:
        return len(self.indices)


class WeightedRandomSampler(Sampler):
    """``num_samples`` indices drawn with probabilities proportional to ``weights``
    (``multinomial``), with or without replacement; drawn when iterated."""

    def __init__(self, weights: Sequence[float], num_samples: int, replacement: bool = True,
                 generator: Generator | None = None) -> None:
        _positive_int("num_samples", num_samples)
        if not isinstance(replacement, bool):
            raise ValueError(f"replacement should be a boolean value, but got "
                             f"replacement={replacement}")
        weights = as_tensor(weights, dtype=float64)
        if weights.ndim != 1:
            raise ValueError(f"weights should be a 1d sequence but given weights have shape "
                             f"{tuple(weights.shape)}")
        self.weights = weights
        self.num_samples = num_samples
        self.replacement = replacement
        self.generator = generator

    def __iter__(self) -> Iterator[int]:
        drawn = multinomial(self.weights, self.num_samples, self.replacement,
                            generator=self.generator)
        yield from drawn.tolist()

    def __len__(self) -> int:
        return self.num_samples


class BatchSampler(Sampler):
    """Lists of ``batch_size`` indices from ``sampler``, taken as it yields them."""

    def __init__(self, sampler: Sampler | Iterable[int], batch_size: int,
                 drop_last: bool) -> None:
        _positive_int("batch_size", batch_size)
        if not isinstance(drop_last, bool):
            raise ValueError(f"drop_last should be a boolean value, but got "
                             f"drop_last={drop_last}")
        self.sampler = sampler
        self.batch_size = batch_size
        self.drop_last = drop_last

    def __iter__(self) -> Iterator[list[int]]:
        indices = iter(self.sampler)
        batch = list(itertools.islice(indices, self.batch_size))
        while batch and (len(batch) == self.batch_size or not self.drop_last):
            yield batch
            batch = list(itertools.islice(indices, self.batch_size))

    def __len__(self) -> int:
        n = len(self.sampler)
        return n // self.batch_size if self.drop_last else -(-n // self.batch_size)
