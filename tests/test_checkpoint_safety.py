"""Checkpoints that survive interrupts and hostile files (issue 14): atomic save, loads
that check every declared size before decompressing, one CheckpointError for every
corrupt file, and PyTorch's behaviour where PyTorch has it."""

import importlib.util
import io
import json
import os
import pickle
import random
import tracemalloc
import zipfile
from pathlib import Path

import numpy as np
import pytest
import torch

import graphgrad as gg
from graphgrad import nn
from graphgrad.serialization import MAX_DEPTH, CheckpointError, load, save

_BENCH = Path(__file__).resolve().parents[1] / "bench" / "checkpoint_safety.py"
_spec = importlib.util.spec_from_file_location("checkpoint_safety_bench", _BENCH)
harness = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(harness)  # the bench's harness: the test and the measure agree

BOMB_BYTES = 256 << 20  # inflated size of the test bombs (files of about 260 KB)
PEAK_LIMIT = 100 << 20


def _craft(path, structure, entries=None, compression=zipfile.ZIP_STORED):
    """A zip laid out like a checkpoint: ``structure`` (JSON-able or a raw str) and
    ``entries`` name -> ndarray (written as .npy) or bytes (written as they are)."""
    text = structure if isinstance(structure, str) else json.dumps(structure)
    with zipfile.ZipFile(path, "w", compression) as zf:
        with zf.open("__structure__.npy", "w") as fp:
            np.lib.format.write_array(fp, np.array(text))
        for name, value in (entries or {}).items():
            with zf.open(f"{name}.npy", "w") as fp:
                if isinstance(value, bytes):
                    fp.write(value)
                else:
                    np.lib.format.write_array(fp, value, allow_pickle=True)
    return path


def _root(node):
    return {"format": "graphgrad-npz-1", "root": node}


def _ref(i):
    return {"tensor": i, "requires_grad": False}


def _sample_checkpoint(path):
    obj = {"w": gg.randn(3, 4), "b": gg.zeros(4, dtype=gg.float64), "step": 3,
           "nested": [(1, "x", None), {"a": np.arange(3)}]}
    save(obj, path)
    return obj


def _same(a, b):
    if isinstance(a, gg.Tensor):
        return (isinstance(b, gg.Tensor) and a.dtype == b.dtype
                and np.array_equal(a.numpy(), b.numpy()))
    if isinstance(a, np.ndarray):
        return isinstance(b, np.ndarray) and a.dtype == b.dtype and np.array_equal(a, b)
    if isinstance(a, dict):
        return isinstance(b, dict) and list(a) == list(b) and all(_same(a[k], b[k]) for k in a)
    if isinstance(a, (list, tuple)):
        return type(a) is type(b) and len(a) == len(b) and all(map(_same, a, b))
    return type(a) is type(b) and a == b


# ---------------------------------------------------------------------- round trip


@pytest.mark.parametrize("target", ["path", "buffer"])
def test_round_trip_exact(tmp_path, target):
    obj = {"f32": gg.randn(2, 3), "f64": gg.randn(4, dtype=gg.float64), "i": gg.arange(5),
           "b": gg.tensor([True, False]), "h": gg.randn(3).to(gg.float16),
           "c": gg.tensor(np.array([1 + 2j])), "scalar": gg.tensor(2.5),
           "empty": gg.zeros(0, 3), "p": nn.Parameter(gg.ones(2)),
           "fortran": np.asfortranarray(np.arange(6.0).reshape(2, 3)),
           "strings": np.array(["ab", "c"]), "deep": [[[[{"k": (1, 2.5, None, True)}]]]]}
    f = tmp_path / "ckpt.pt" if target == "path" else io.BytesIO()
    save(obj, f)
    if target == "buffer":
        f.seek(0)
    back = load(f)
    assert list(back) == list(obj)
    assert _same({k: v for k, v in back.items() if k != "p"},
                 {k: v for k, v in obj.items() if k != "p"})
    assert back["p"].requires_grad and np.array_equal(back["p"].detach().numpy(), [1, 1])
    assert back["fortran"].flags.f_contiguous
    if target == "path":
        assert os.listdir(tmp_path) == ["ckpt.pt"]  # no temporary file left


def test_state_dict_round_trip_matches_torch(tmp_path):
    torch.manual_seed(0)
    ref = torch.nn.Linear(3, 2)
    torch.save(ref.state_dict(), tmp_path / "t.pt")
    expected = torch.load(tmp_path / "t.pt")
    model = nn.Linear(3, 2)
    model.load_state_dict({k: gg.tensor(v.numpy()) for k, v in ref.state_dict().items()})
    save(model.state_dict(), tmp_path / "g.pt")
    back = load(tmp_path / "g.pt")
    assert list(back) == list(expected)
    for k in expected:
        assert np.array_equal(back[k].numpy(), expected[k].numpy())


def test_save_keeps_mode_and_matches_torch_errors(tmp_path):
    path = tmp_path / "ckpt.pt"
    save({"a": gg.ones(2)}, path)
    os.chmod(path, 0o640)
    save({"a": gg.zeros(2)}, path)
    assert os.stat(path).st_mode & 0o777 == 0o640
    for lib in (torch, gg):
        with pytest.raises(RuntimeError, match="Parent directory .*missing does not exist"):
            lib.save({}, str(tmp_path / "missing" / "x.pt"))
        with pytest.raises(FileNotFoundError):
            lib.load(str(tmp_path / "absent.pt"))


def test_save_refuses_deep_nesting():
    deep = []
    for _ in range(MAX_DEPTH + 5):
        deep = [deep]
    with pytest.raises(ValueError, match="MAX_DEPTH"):
        save(deep, io.BytesIO())


# ---------------------------------------------------------------- interrupted saves


@pytest.mark.parametrize("how", ["SIGKILL", "SIGINT", "ENOSPC"])
def test_interrupted_save_keeps_old_checkpoint(tmp_path, how):
    result = harness.interrupted_save(str(tmp_path), how)
    assert result["survived"], result
    if how == "SIGKILL":  # nothing can run after SIGKILL: only a stray temporary may remain
        assert all(f == "ckpt.npz" or f.startswith(".ckpt.npz.") for f in result["files"])
    else:  # the exception path removes the temporary file
        assert result["files"] == ["ckpt.npz"], result
        assert ("KeyboardInterrupt" if how == "SIGINT" else "No space left") in result["error"]
    save({"w": gg.ones(3)}, tmp_path / "ckpt.npz")  # a later save still works
    assert np.array_equal(load(tmp_path / "ckpt.npz")["w"].numpy(), np.ones(3))


def test_interrupt_harness_detects_loss(tmp_path):
    """The harness can fail: a save that writes in place (as before issue 14) loses the
    old checkpoint under the same interruption."""
    module = tmp_path / "in_place.py"
    module.write_text("import numpy as np\n"
                      "def save(obj, f):\n"
                      "    with open(f, 'wb') as fh:\n"
                      "        np.savez(fh, **obj)\n")
    directory = tmp_path / "run"
    directory.mkdir()
    assert not harness.interrupted_save(str(directory), "ENOSPC", str(module))["survived"]


# ---------------------------------------------------------------------- zip bombs


def _peak_while_refused(path, match):
    tracemalloc.start()
    try:
        with pytest.raises(CheckpointError, match=match) as info:
            load(path)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert str(path) in str(info.value)
    assert peak < PEAK_LIMIT, peak
    return peak


def test_bomb_with_consistent_header_is_refused(tmp_path):
    path = tmp_path / "bomb.npz"
    harness.write_bomb(str(path), (BOMB_BYTES // 8,), BOMB_BYTES)
    assert os.path.getsize(path) < BOMB_BYTES // 500
    _peak_while_refused(path, "MAX_COMPRESSION_RATIO")
    # the same file through plain np.load (the old code path) allocates the whole bomb
    peak, outcome = harness.peak_bytes(lambda: harness.load_all_entries(str(path)))
    assert outcome == "loaded" and peak > BOMB_BYTES


def test_bomb_declaring_a_small_shape_is_refused(tmp_path):
    path = tmp_path / "bomb.npz"
    harness.write_bomb(str(path), (4,), BOMB_BYTES)
    _peak_while_refused(path, r"holds \d+ bytes but its header declares 160 ")


def test_bomb_declaring_a_huge_shape_is_refused(tmp_path):
    path = tmp_path / "bomb.npz"
    harness.write_bomb(str(path), (1 << 40,), 1 << 20)
    _peak_while_refused(path, "header declares 8796093022336 ")


def test_total_limit(tmp_path, monkeypatch):
    path = tmp_path / "big.pt"
    save({"a": gg.zeros(1000, dtype=gg.float64), "b": gg.zeros(1000, dtype=gg.float64)}, path)
    with pytest.raises(CheckpointError, match="max_bytes=12000 .*entry 't1'"):
        load(path, max_bytes=12000)
    assert load(path, max_bytes=20000)["b"].shape == (1000,)
    monkeypatch.setattr(gg.serialization, "MAX_LOAD_BYTES", 12000)
    with pytest.raises(CheckpointError, match="max_bytes=12000"):
        load(path)
    assert load(path, max_bytes=20000)["a"].shape == (1000,)


def test_unreferenced_entries_are_not_read(tmp_path):
    path = _craft(tmp_path / "c.npz", _root({"list": [_ref(0)]}),
                  {"t0": np.arange(3.0), "junk": b"\x00" * 10})
    assert np.array_equal(load(path)[0].numpy(), np.arange(3.0))


# ------------------------------------------------------------------ corrupt files


def test_truncated_files(tmp_path):
    _sample_checkpoint(tmp_path / "ok.pt")
    data = (tmp_path / "ok.pt").read_bytes()
    cut = tmp_path / "cut.pt"
    offsets = sorted(set(range(0, len(data), max(1, len(data) // 60))) | {len(data) - 1})
    for n in offsets:
        cut.write_bytes(data[:n])
        with pytest.raises(CheckpointError, match="cut.pt"):
            load(cut)


def test_bit_flips_raise_or_load_unchanged(tmp_path):
    """A flipped bit in array data or the structure breaks the entry's CRC; one in zip
    metadata (a timestamp, a version field) may change nothing. Either the load fails
    with CheckpointError or it returns exactly what was saved: never wrong data."""
    obj = _sample_checkpoint(tmp_path / "ok.pt")
    data = (tmp_path / "ok.pt").read_bytes()
    flipped = tmp_path / "flip.pt"
    rng = random.Random(0)
    refused = 0
    for offset in rng.sample(range(len(data)), 250):
        corrupt = bytearray(data)
        corrupt[offset] ^= 1 << rng.randrange(8)
        flipped.write_bytes(bytes(corrupt))
        try:
            back = load(flipped)
        except CheckpointError as e:
            assert "flip.pt" in str(e)
            refused += 1
            continue
        assert _same(back, obj), offset
    assert refused > 150


@pytest.mark.parametrize("depth", [MAX_DEPTH + 1, 100_000])
def test_deep_nesting(tmp_path, depth):
    text = json.dumps(_root({"value": 0}))
    text = text.replace('{"value": 0}', '{"list": [' * depth + '{"value": 0}' + "]}" * depth)
    with pytest.raises(CheckpointError, match=f"nesting deeper than MAX_DEPTH={MAX_DEPTH}"):
        load(_craft(tmp_path / "deep.npz", text))


@pytest.mark.parametrize("structure, entries, match", [
    (_root({"list": [_ref(0), _ref(7)]}), {"t0": np.ones(2)}, "missing entry 't7'"),
    ('{"format": "graphgrad-npz-1", "root": ', {}, "corrupt .*JSONDecodeError"),
    ({"format": "other", "root": {"value": 1}}, {}, "unknown checkpoint format 'other'"),
    (_root({"set": [1]}), {}, "unknown entry in the file's structure"),
    (_root({"tensor": "0"}), {}, "malformed array reference"),
    (_root({"dict": [[[1], {"value": 1}]]}), {}, "malformed dict item"),
    (_root({"value": {"a": 1}}), {}, "malformed value"),
    (_root({"list": [_ref(0), _ref(0)]}), {"t0": np.ones(2)}, "'t0' is referenced twice"),
    (_root(_ref(0)), {"t0": np.array([b"ab"])}, "dtype '|S2', which no tensor has"),
    (_root(_ref(0)), {"t0": np.array([{"a": 1}], dtype=object)}, "dtype '|O'.*never objects"),
    (_root({"ndarray": 0}), {"t0": np.zeros(2, dtype=[("x", "<f8")])}, "never objects"),
    (_root(_ref(0)), {"t0": b"\x93NUMPY\x01\x00\x46\x00{'descr': '<q9', 'fortran_order': "
                            b"False, 'shape': (2,), }" + b" " * 9 + b"\n"}, "corrupt"),
    (_root(_ref(0)), {"t0": b"not an npy file at all"}, "corrupt"),
    (_root(_ref(0)), {"t0": np.lib.format.magic(1, 0)}, "corrupt"),
])
def test_malformed_checkpoints(tmp_path, structure, entries, match):
    path = _craft(tmp_path / "bad.npz", structure, entries)
    with pytest.raises(CheckpointError, match=match) as info:
        load(path)
    assert "bad.npz" in str(info.value)


def test_a_pickle_is_never_run(tmp_path):
    marker = tmp_path / "pwned"

    class Evil:
        def __reduce__(self):
            return (open, (str(marker), "w"))

    payload = np.empty(1, dtype=object)
    payload[0] = Evil()
    path = _craft(tmp_path / "evil.npz", _root(_ref(0)), {"t0": payload})
    for kwargs in ({}, {"weights_only": False}):
        with pytest.raises(CheckpointError, match="never objects or pickles"):
            load(path, **kwargs)
    plain = tmp_path / "plain.pkl"
    plain.write_bytes(pickle.dumps(Evil()))
    with pytest.raises(CheckpointError, match="corrupt or not a graphgrad checkpoint"):
        load(plain)
    assert not marker.exists()


@pytest.mark.parametrize("content", [b"", b"hello", b"PK\x03\x04" + b"\x00" * 40])
def test_not_a_zip(tmp_path, content):
    path = tmp_path / "x.pt"
    path.write_bytes(content)
    with pytest.raises(CheckpointError, match="x.pt: corrupt or not a graphgrad checkpoint"):
        load(path)


def test_torch_file_loads_and_other_npz_is_refused(tmp_path):
    torch.save({"w": torch.ones(2)}, tmp_path / "t.pt")  # issue 20: torch files load
    assert np.array_equal(load(tmp_path / "t.pt")["w"].numpy(), np.ones(2))
    np.savez(tmp_path / "n.npz", a=np.ones(2))
    with pytest.raises(CheckpointError, match="not a graphgrad checkpoint"):
        load(tmp_path / "n.npz")


def test_big_endian_entry_loads_as_native(tmp_path):
    path = _craft(tmp_path / "be.npz", _root(_ref(0)), {"t0": np.arange(4.0).astype(">f8")})
    back = load(path)
    assert back.dtype == gg.float64 and np.array_equal(back.numpy(), np.arange(4.0))


def test_compressed_and_lzma_entries(tmp_path):
    """Compression is allowed within MAX_COMPRESSION_RATIO (a user may have re-zipped)."""
    rng = np.random.default_rng(0)
    for method in (zipfile.ZIP_DEFLATED, zipfile.ZIP_LZMA):
        path = _craft(tmp_path / "z.npz", _root(_ref(0)), {"t0": rng.standard_normal(100)},
                      compression=method)
        assert load(path).shape == (100,)


def test_failed_load_leaves_module_untouched(tmp_path):
    model = nn.Linear(3, 2)
    before = {k: v.detach().numpy().copy() for k, v in model.state_dict().items()}
    good = nn.Linear(3, 2)
    save(good.state_dict(), tmp_path / "ckpt.pt")
    data = (tmp_path / "ckpt.pt").read_bytes()
    (tmp_path / "ckpt.pt").write_bytes(data[:len(data) // 2] + data[len(data) // 2 + 1:])
    with pytest.raises(CheckpointError):
        model.load_state_dict(load(tmp_path / "ckpt.pt"))
    for k, v in model.state_dict().items():
        assert np.array_equal(v.detach().numpy(), before[k])


def test_train_keeps_the_old_checkpoint_when_its_save_fails(tmp_path, monkeypatch):
    """``graphgrad train`` writes its checkpoint with ``save``: a full disk while it writes
    leaves the previous run's checkpoint loadable and unchanged."""
    pytest.importorskip("sklearn")
    from graphgrad.train import train_digits

    first = train_digits(epochs=0, quiet=True, out_dir=tmp_path, plot=False)
    old = (Path(first["checkpoint"])).read_bytes()
    write_array = np.lib.format.write_array

    def full_disk(*args, **kwargs):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(np.lib.format, "write_array", full_disk)
    with pytest.raises(OSError, match="No space left"):
        train_digits(epochs=0, quiet=True, out_dir=tmp_path, plot=False, seed=1)
    monkeypatch.setattr(np.lib.format, "write_array", write_array)
    assert Path(first["checkpoint"]).read_bytes() == old
    assert sorted(os.listdir(tmp_path)) == [Path(first["checkpoint"]).name]
    assert load(first["checkpoint"])["config"]["seed"] == 0
