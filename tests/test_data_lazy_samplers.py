"""The samplers of ``graphgrad.utils.data`` draw lazily, as PyTorch's do: a
``RandomSampler`` with ``num_samples=int(1e10)`` and a ``DataLoader`` over it (minGPT's
pattern) yield their first batches with little memory (measured with tracemalloc, not
time); passes without replacement are permutations; each iteration draws anew;
generators make it reproducible; the errors are PyTorch's. Distributions are checked
with fixed seeds and bounds from the sample size."""

from __future__ import annotations

import itertools
import tracemalloc

import numpy as np
import pytest
import torch.utils.data as tdata

import graphgrad as gg
from graphgrad.utils import data as gdata

HUGE = int(1e10)
LOW_MEMORY = 2 * 2**20  # bytes: a list of 1e10 indices would need ~80 GB


class Sized:
    def __init__(self, n: int) -> None:
        self.n = n

    def __len__(self) -> int:
        return self.n


class CharDataset(gdata.Dataset):
    """minGPT's character dataset: blocks of a token array and the next-token targets."""

    def __init__(self, tokens: np.ndarray, block: int) -> None:
        self.tokens, self.block = tokens, block

    def __len__(self) -> int:
        return len(self.tokens) - self.block

    def __getitem__(self, i: int):
        chunk = self.tokens[i:i + self.block + 1]
        return gg.tensor(chunk[:-1]), gg.tensor(chunk[1:])


def peak_bytes(fn):
    tracemalloc.start()
    try:
        result = fn()
        return result, tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()


def test_random_sampler_with_replacement_is_lazy():
    s = gdata.RandomSampler(Sized(7), replacement=True, num_samples=HUGE)
    assert len(s) == HUGE == len(tdata.RandomSampler(Sized(7), True, HUGE))
    first, peak = peak_bytes(lambda: list(itertools.islice(iter(s), 100)))
    assert peak < LOW_MEMORY
    assert len(first) == 100 and all(isinstance(i, int) and 0 <= i < 7 for i in first)
    batches, peak = peak_bytes(lambda: list(itertools.islice(
        iter(gdata.BatchSampler(s, 16, drop_last=False)), 5)))
    assert peak < LOW_MEMORY and [len(b) for b in batches] == [16] * 5


def test_random_sampler_with_replacement_counts_and_distribution():
    gg.manual_seed(0)
    for n_samples in (1, 31, 32, 33, 100):
        assert len(list(gdata.RandomSampler(Sized(4), True, n_samples))) == n_samples
    draws = list(gdata.RandomSampler(Sized(5), True, 50_000))
    counts = np.bincount(draws, minlength=5)
    chi2 = ((counts - 10_000) ** 2 / 10_000).sum()
    assert chi2 < 40  # chi2 with 4 degrees of freedom: far beyond the 0.99999 quantile


def test_random_sampler_without_replacement_loops_permutations():
    gg.manual_seed(1)
    order = list(gdata.RandomSampler(Sized(5), num_samples=12))
    assert len(order) == 12
    assert sorted(order[:5]) == sorted(order[5:10]) == list(range(5))
    assert len(set(order[10:])) == 2
    one_pass = gdata.RandomSampler(Sized(6))
    a, b = list(one_pass), list(one_pass)
    assert sorted(a) == sorted(b) == list(range(6)) and a != b  # a new order per iteration
    s, peak = peak_bytes(lambda: next(iter(gdata.RandomSampler(Sized(1000), num_samples=HUGE))))
    assert 0 <= s < 1000 and peak < LOW_MEMORY


def test_random_sampler_reproducible_by_seed_and_generator():
    gg.manual_seed(5)
    a = [list(gdata.RandomSampler(Sized(10))) for _ in range(2)]
    gg.manual_seed(5)
    b = [list(gdata.RandomSampler(Sized(10))) for _ in range(2)]
    assert a == b and a[0] != a[1]
    for replacement in (False, True):
        g1, g2 = gg.Generator().manual_seed(3), gg.Generator().manual_seed(3)
        x = list(gdata.RandomSampler(Sized(10), replacement, 40, generator=g1))
        y = list(gdata.RandomSampler(Sized(10), replacement, 40, generator=g2))
        assert x == y


def test_samplers_draw_nothing_when_made():
    """Making a sampler leaves the global generator alone: draws happen on iteration."""
    gg.manual_seed(7)
    gdata.RandomSampler(Sized(10))
    gdata.RandomSampler(Sized(10), True, HUGE)
    gdata.SubsetRandomSampler([3, 1, 4])
    gdata.WeightedRandomSampler([0.1, 0.9], 5)
    after = gg.rand(3).tolist()
    gg.manual_seed(7)
    assert gg.rand(3).tolist() == after


def test_sequential_and_subset_random_samplers():
    seq = gdata.SequentialSampler(Sized(HUGE))
    first, peak = peak_bytes(lambda: list(itertools.islice(iter(seq), 5)))
    assert first == [0, 1, 2, 3, 4] and len(seq) == HUGE and peak < LOW_MEMORY
    sub = gdata.SubsetRandomSampler([10, 20, 30, 40], generator=gg.Generator().manual_seed(0))
    a, b = list(sub), list(sub)
    assert sorted(a) == sorted(b) == [10, 20, 30, 40] and len(sub) == 4
    assert a != b or list(sub) != a


def test_weighted_random_sampler():
    gg.manual_seed(2)
    w = [0.1, 0.0, 0.6, 0.3]
    s = gdata.WeightedRandomSampler(w, 30_000)
    assert len(s) == 30_000 and s.weights.dtype == gg.float64
    counts = np.bincount(list(s), minlength=4)
    expected = 30_000 * np.array(w)
    assert counts[1] == 0
    keep = expected > 0
    assert (((counts - expected)[keep] ** 2) / expected[keep]).sum() < 40
    distinct = list(gdata.WeightedRandomSampler([1.0, 2.0, 3.0, 4.0], 4, replacement=False))
    assert sorted(distinct) == [0, 1, 2, 3]
    g = [list(gdata.WeightedRandomSampler(w, 10, generator=gg.Generator().manual_seed(4)))
         for _ in range(2)]
    assert g[0] == g[1]


@pytest.mark.parametrize("make", [
    lambda data: data.RandomSampler(Sized(3), replacement=1),
    lambda data: data.RandomSampler(Sized(3), num_samples=0),
    lambda data: data.RandomSampler(Sized(0)),
    lambda data: data.RandomSampler(Sized(3), num_samples=2.5),
    lambda data: data.WeightedRandomSampler([1.0, 2.0], 0),
    lambda data: data.WeightedRandomSampler([1.0, 2.0], True),
    lambda data: data.WeightedRandomSampler([1.0, 2.0], 3, replacement=None),
    lambda data: data.WeightedRandomSampler([[1.0, 2.0]], 3),
    lambda data: data.BatchSampler(range(4), 0, False),
    lambda data: data.BatchSampler(range(4), True, False),
    lambda data: data.BatchSampler(range(4), 2, 1),
])
def test_sampler_errors_match_torch(make):
    with pytest.raises(Exception) as want:
        make(tdata)
    with pytest.raises(type(want.value)) as got:
        make(gdata)
    assert str(got.value) == str(want.value)


def test_weighted_sampler_without_enough_categories_raises_on_iteration_as_torch():
    for lib in (tdata, gdata):
        s = lib.WeightedRandomSampler([1.0, 2.0], 3, replacement=False)
        with pytest.raises(RuntimeError, match="cannot sample n_sample > prob_dist.size"):
            list(s)


@pytest.mark.parametrize("drop_last", [False, True])
def test_batch_sampler_as_torch(drop_last):
    for n in (9, 10, 12):
        got = list(gdata.BatchSampler(gdata.SequentialSampler(Sized(n)), 4, drop_last))
        want = list(tdata.BatchSampler(tdata.SequentialSampler(Sized(n)), 4, drop_last))
        assert got == want
        assert len(gdata.BatchSampler(range(n), 4, drop_last)) == len(want)
    assert list(gdata.BatchSampler(iter(range(5)), 2, drop_last)) == \
        list(tdata.BatchSampler(iter(range(5)), 2, drop_last))


def test_dataloader_min_gpt_pattern_is_lazy():
    """minGPT's trainer: a loader over a sampler of 1e10 draws with replacement; a few
    batches are taken, and memory stays low."""
    tokens = np.arange(200) % 13
    ds = CharDataset(tokens, block=8)
    gg.manual_seed(3)
    loader = gdata.DataLoader(ds, sampler=gdata.RandomSampler(ds, replacement=True,
                                                              num_samples=HUGE),
                              batch_size=4, shuffle=False, pin_memory=False, num_workers=0)
    assert len(loader) == HUGE // 4

    def take():
        it = iter(loader)
        return [next(it) for _ in range(3)]

    batches, peak = peak_bytes(take)
    assert peak < LOW_MEMORY
    for x, y in batches:
        assert tuple(x.shape) == tuple(y.shape) == (4, 8) and x.dtype == gg.int64
        np.testing.assert_array_equal(y.numpy()[:, :-1], x.numpy()[:, 1:])
        np.testing.assert_array_equal((x.numpy()[:, 1:] - x.numpy()[:, :-1]) % 13, 1)
    firsts = {int(x[0, 0]) for x, _ in batches}
    assert len(firsts) > 1 or len({tuple(x.numpy().ravel()) for x, _ in batches}) > 1


def test_dataloader_tensor_dataset_with_huge_sampler():
    ds = gdata.TensorDataset(gg.arange(10).float(), gg.arange(10))
    loader = gdata.DataLoader(ds, batch_size=3, sampler=gdata.RandomSampler(ds, True, HUGE))
    (xb, yb), peak = peak_bytes(lambda: next(iter(loader)))
    assert peak < LOW_MEMORY and xb.tolist() == yb.float().tolist() and len(yb) == 3
