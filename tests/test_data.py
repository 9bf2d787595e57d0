"""graphgrad.utils.data (datasets, samplers, DataLoader determinism) and graphgrad's
save/load (npz, no pickle)."""

from __future__ import annotations

import io
import pickle
import zipfile

import numpy as np
import pytest

import graphgrad as gg
from graphgrad import nn, optim
from graphgrad.serialization import load, save
from graphgrad.utils.data import (DataLoader, Dataset, Subset, TensorDataset, default_collate,
                                  random_split)


def _ds(n=10):
    return TensorDataset(gg.arange(n).float().unsqueeze(1) * gg.ones(1, 3), gg.arange(n))


def _epochs(loader, k=2):
    return [[yb.tolist() for _, yb in loader] for _ in range(k)]


def test_batches_in_order_and_drop_last():
    ds = _ds()
    assert len(ds) == 10 and ds[3][1].item() == 3 and ds[3][0].tolist() == [3.0, 3.0, 3.0]
    loader = DataLoader(ds, batch_size=4)
    assert len(loader) == 3
    assert [y.tolist() for _, y in loader] == [[0, 1, 2, 3], [4, 5, 6, 7], [8, 9]]
    dropped = DataLoader(ds, batch_size=4, drop_last=True)
    assert len(dropped) == 2 and [y.tolist() for _, y in dropped][-1] == [4, 5, 6, 7]
    xb, yb = next(iter(loader))
    assert tuple(xb.shape) == (4, 3) and yb.dtype == gg.int64


def test_shuffle_is_deterministic_with_a_seeded_generator():
    ds = _ds(20)
    a = _epochs(DataLoader(ds, 6, shuffle=True, generator=gg.Generator().manual_seed(7)))
    b = _epochs(DataLoader(ds, 6, shuffle=True, generator=gg.Generator().manual_seed(7)))
    c = _epochs(DataLoader(ds, 6, shuffle=True, generator=gg.Generator().manual_seed(8)))
    assert a == b and a != c
    assert a[0] != a[1]  # a new order every epoch
    for epoch in a:
        assert sorted(sum(epoch, [])) == list(range(20))
    gg.manual_seed(1)
    d = _epochs(DataLoader(ds, 6, shuffle=True))
    gg.manual_seed(1)
    assert d == _epochs(DataLoader(ds, 6, shuffle=True))


class Squares(Dataset):
    def __len__(self):
        return 5

    def __getitem__(self, i):
        return {"x": gg.tensor([float(i), float(i * i)]), "i": i, "name": f"s{i}"}


def test_default_collate_on_a_custom_dataset():
    batches = list(DataLoader(Squares(), batch_size=2))
    assert len(batches) == 3
    first = batches[0]
    assert first["x"].tolist() == [[0.0, 0.0], [1.0, 1.0]]
    assert first["i"].tolist() == [0, 1] and first["name"] == ["s0", "s1"]
    assert default_collate([(1.5, np.zeros(2)), (2.5, np.ones(2))])[1].shape == (2, 2)
    custom = DataLoader(Squares(), batch_size=5, collate_fn=lambda b: len(b))
    assert list(custom) == [5]
    assert [s["i"] for s in DataLoader(Squares(), batch_size=None)] == [0, 1, 2, 3, 4]


def test_subset_and_random_split():
    ds = _ds(10)
    parts = random_split(ds, [7, 3], generator=gg.Generator().manual_seed(0))
    assert [len(p) for p in parts] == [7, 3]
    seen = sorted(int(p[i][1]) for p in parts for i in range(len(p)))
    assert seen == list(range(10))
    assert [len(p) for p in random_split(ds, [0.5, 0.5])] == [5, 5]
    assert int(Subset(ds, [4, 2])[1][1]) == 2
    with pytest.raises(ValueError, match="Size mismatch"):
        TensorDataset(gg.zeros(3), gg.zeros(4))


def test_save_load_round_trip(tmp_path):
    obj = {"w": gg.randn(3, 4), "ints": gg.arange(5), "flag": True, "lr": 0.1, "n": 3,
           "name": "adam", "none": None, "nested": [gg.tensor(2.0, dtype=gg.float64),
                                                     (1, 2.5, "x"), {0: gg.ones(2)}],
           "array": np.arange(4.0), "p": nn.Parameter(gg.ones(2))}
    path = tmp_path / "ckpt.gg"
    save(obj, path)
    assert path.exists() and not (tmp_path / "ckpt.gg.npz").exists()
    back = load(path)
    assert set(back) == set(obj)
    assert np.array_equal(back["w"].numpy(), obj["w"].numpy()) and back["w"].dtype == gg.float32
    assert back["ints"].dtype == gg.int64 and back["nested"][0].dtype == gg.float64
    assert back["nested"][1] == (1, 2.5, "x") and list(back["nested"][2]) == [0]
    assert back["flag"] is True and back["none"] is None and back["name"] == "adam"
    assert back["p"].requires_grad and np.array_equal(back["array"], np.arange(4.0))
    # a plain .npz inside, and nothing that needs pickle to read
    with zipfile.ZipFile(path) as z:
        assert "__structure__.npy" in z.namelist()
    np.load(path, allow_pickle=False)["t0"]


def test_module_and_optimizer_checkpoint(tmp_path):
    model = nn.Sequential(nn.Linear(3, 4), nn.ReLU(), nn.Linear(4, 2))
    opt = optim.Adam(model.parameters(), lr=0.01)
    model(gg.randn(5, 3)).sum().backward()
    opt.step()
    buf = io.BytesIO()
    save({"model": model.state_dict(), "opt": opt.state_dict()}, buf)
    buf.seek(0)
    ckpt = load(buf)
    model2 = nn.Sequential(nn.Linear(3, 4), nn.ReLU(), nn.Linear(4, 2))
    model2.load_state_dict(ckpt["model"])
    opt2 = optim.Adam(model2.parameters(), lr=0.5)
    opt2.load_state_dict(ckpt["opt"])
    assert opt2.param_groups[0]["lr"] == 0.01 and opt2.param_groups[0]["betas"] == (0.9, 0.999)
    x = gg.randn(2, 3)
    assert np.array_equal(model(x).detach().numpy(), model2(x).detach().numpy())
    assert float(opt2.state[next(model2.parameters())]["step"]) == 1.0


def test_save_refuses_code():
    # graphgrad's own format holds data only; the default pickles other objects as
    # torch.save does (issue 20), and a lambda cannot be pickled there either
    with pytest.raises(TypeError, match="cannot save an object of type function"):
        save({"f": lambda: 0}, io.BytesIO(), format="npz")
    with pytest.raises(TypeError, match="dict keys"):
        save({(1, 2): 0}, io.BytesIO(), format="npz")
    with pytest.raises(pickle.PicklingError):
        save({"f": lambda: 0}, io.BytesIO())


def test_default_collate_matches_torch():
    """Python floats collate to float64, bools to bool; a batch of tuples is a list (so
    ``batch[0] = ...`` works), a namedtuple stays one, TensorDataset's batches are lists."""
    import collections

    torch = pytest.importorskip("torch")
    Pair = collections.namedtuple("Pair", "a b")
    samples = {"floats": [(1.5, 2), (2.5, 3)], "named": [Pair(1.0, True), Pair(2.0, False)],
               "dict": [{"x": [1, 2]}, {"x": [3, 4]}]}

    def describe(batch):
        if isinstance(batch, dict):
            return {k: describe(v) for k, v in batch.items()}
        if isinstance(batch, (list, tuple)):
            return (type(batch).__name__, [describe(b) for b in batch])
        return (batch.tolist(), str(batch.dtype).split(".")[-1])

    for name, data in samples.items():
        got = next(iter(DataLoader(data, batch_size=2)))
        want = next(iter(torch.utils.data.DataLoader(data, batch_size=2)))
        assert describe(got) == describe(want), name
    got = next(iter(DataLoader(TensorDataset(gg.ones(4, 2), gg.zeros(4)), batch_size=2)))
    assert type(got) is list and len(got) == 2


def test_loader_respects_getitem_overrides_and_collates_numpy_scalars():
    torch = pytest.importorskip("torch")
    rng = np.random.default_rng(0)
    x_np, y_np = rng.random((4, 3)).astype(np.float32), np.arange(4)
    outs = []
    for lib in (torch, gg):
        data = lib.utils.data

        class Augmented(data.TensorDataset):
            def __getitem__(self, i):
                x, y = super().__getitem__(i)
                return x * 100, y

        class Arrays(data.Dataset):
            def __len__(self):
                return 4

            def __getitem__(self, i):
                return x_np[i], y_np[i], np.float32(i) / 2

        aug = [b[0].tolist() for b in data.DataLoader(Augmented(lib.arange(4.0), lib.arange(4)),
                                                      batch_size=2)]
        batch = next(iter(data.DataLoader(Arrays(), batch_size=2)))
        outs.append((aug, [(t.tolist(), str(t.dtype).split(".")[-1]) for t in batch]))
    assert outs[0] == outs[1]
