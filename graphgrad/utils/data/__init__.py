"""Layer ``utils``: ``graphgrad.utils.data``: ``Dataset``, ``TensorDataset``, ``Subset``,
``random_split``, ``DataLoader`` with ``default_collate``, the samplers and
``DistributedSampler``."""

from .dataloader import DataLoader, default_collate
from .distributed import DistributedSampler
from .dataset import Dataset, Subset, TensorDataset, random_split
from .sampler import (BatchSampler, RandomSampler, Sampler, SequentialSampler,
                      SubsetRandomSampler, WeightedRandomSampler)

__all__ = ["Dataset", "TensorDataset", "Subset", "random_split", "DataLoader",
           "default_collate", "Sampler", "SequentialSampler", "RandomSampler",
           "SubsetRandomSampler",
           "WeightedRandomSampler", "BatchSampler", "DistributedSampler"]
