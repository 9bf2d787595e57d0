"""Layer ``utils``: ``graphgrad.utils.data``: ``Dataset``, ``TensorDataset``, ``Subset``,
``random_split`` and ``DataLoader`` with ``default_collate``."""

from .dataloader import DataLoader, default_collate
from .dataset import Dataset, Subset, TensorDataset, random_split
from .sampler import (BatchSampler, RandomSampler, Sampler, SequentialSampler,
                      SubsetRandomSampler, WeightedRandomSampler)

__all__ = ["Dataset", "TensorDataset", "Subset", "random_split", "DataLoader",
           "default_collate", "Sampler", "SequentialSampler", "RandomSampler",
           "SubsetRandomSampler",
           "WeightedRandomSampler", "BatchSampler"]
