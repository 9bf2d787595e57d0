"""PyTorch checkpoints in and out (issue 20): graphgrad.load reads torch.save files with
NumPy only, through the weights_only unpickler; graphgrad.save(format="torch") writes
files torch.load(weights_only=True) reads; whole-object saves; hostile and lying files."""

from __future__ import annotations

import io
import os
import pickle
import zipfile
from collections import OrderedDict

import numpy as np
import pytest
import torch

import graphgrad as gg
from graphgrad import nn
from graphgrad.serialization import CheckpointError, load, safe_globals, save
from graphgrad.serialization import torch_writer

DTYPES = ["float32", "float64", "float16", "int8", "int16", "int32", "int64", "uint8", "bool",
          "complex64", "complex128"]


def _sample(lib, name):
    values = np.arange(-6, 6).reshape(3, 4) % 5
    t = lib.tensor(values.astype(name))
    return t


@pytest.mark.parametrize("name", DTYPES)
def test_torch_save_then_graphgrad_load(tmp_path, name):
    base = _sample(torch, name)
    obj = {"base": base, "view": base[1:, ::2], "row": base[2], "scalar": base[0, 1].clone(),
           "empty": base[:0]}
    torch.save(obj, tmp_path / "t.pt")
    back = load(tmp_path / "t.pt")
    for k, v in obj.items():
        assert back[k].dtype.name == str(v.dtype).removeprefix("torch.")
        assert tuple(back[k].shape) == tuple(v.shape)
        assert np.array_equal(back[k].numpy(), v.numpy())
    assert back["view"].stride() == (4, 2) and back["view"].storage_offset() == 4
    assert np.shares_memory(back["view"].numpy(), back["base"].numpy())
    assert np.shares_memory(back["row"].numpy(), back["base"].numpy())


@pytest.mark.parametrize("name", DTYPES)
def test_graphgrad_save_then_torch_load(tmp_path, name):
    base = _sample(gg, name)
    obj = {"base": base, "view": base[1:, ::2], "scalar": base[0, 1].clone(),
           "flipped": base.flip(0), "size": gg.Size([2, 3]), "dtype": base.dtype}
    save(obj, tmp_path / "g.pt", _use_new_zipfile_serialization=True)
    back = torch.load(tmp_path / "g.pt", weights_only=True)
    for k in ("base", "view", "scalar", "flipped"):
        assert str(back[k].dtype) == f"torch.{name}"
        assert tuple(back[k].shape) == tuple(obj[k].shape)
        assert np.array_equal(back[k].numpy(), obj[k].numpy())
    assert back["view"].stride() == (4, 2) and back["view"].storage_offset() == 4
    assert back["view"].untyped_storage().data_ptr() == back["base"].untyped_storage().data_ptr()
    assert back["size"] == torch.Size([2, 3]) and back["dtype"] == getattr(torch, name)


def test_torch_format_members_are_aligned(tmp_path):
    save({"w": gg.ones(3), "b": gg.zeros(5, dtype=gg.int64)}, tmp_path / "a.pt", format="torch")
    with zipfile.ZipFile(tmp_path / "a.pt") as zf:
        names = zf.namelist()
        assert names[0] == "a/data.pkl" and "a/version" in names
        for info in zf.infolist():
            assert info.compress_type == zipfile.ZIP_STORED
    raw = (tmp_path / "a.pt").read_bytes()
    with zipfile.ZipFile(tmp_path / "a.pt") as zf:
        for info in zf.infolist():
            data_start = info.header_offset + 30 + len(info.filename) + int.from_bytes(
                raw[info.header_offset + 28:info.header_offset + 30], "little")
            assert data_start % 64 == 0, info.filename


def test_parameters_and_requires_grad_round_trip(tmp_path):
    p = torch.nn.Parameter(torch.ones(2))
    torch.save({"p": p, "g": torch.ones(2, requires_grad=True)}, tmp_path / "t.pt")
    back = load(tmp_path / "t.pt")
    assert isinstance(back["p"], nn.Parameter) and back["p"].requires_grad
    assert back["g"].requires_grad
    save(back, tmp_path / "g.pt", format="torch")
    again = torch.load(tmp_path / "g.pt", weights_only=True)
    assert isinstance(again["p"], torch.nn.Parameter) and again["g"].requires_grad


def _copy_state(src_sd, lib):
    return {k: lib.tensor(v.detach().numpy().copy()) for k, v in src_sd.items()}


def _models():
    torch.manual_seed(0)
    return [
        (lambda: torch.nn.Linear(5, 3), lambda: nn.Linear(5, 3), (4, 5)),
        (lambda: torch.nn.Conv2d(2, 3, 3, padding=1), lambda: nn.Conv2d(2, 3, 3, padding=1),
         (2, 2, 6, 6)),
        (lambda: torch.nn.LSTM(4, 5, num_layers=2, batch_first=True),
         lambda: nn.LSTM(4, 5, num_layers=2, batch_first=True), (2, 3, 4)),
        (lambda: torch.nn.TransformerEncoderLayer(8, 2, 16, dropout=0.0, batch_first=True),
         lambda: nn.TransformerEncoderLayer(8, 2, 16, dropout=0.0, batch_first=True),
         (2, 5, 8)),
    ]


def _out(y):
    return y[0] if isinstance(y, tuple) else y


@pytest.mark.parametrize("make_torch,make_gg,shape", _models(),
                         ids=["Linear", "Conv2d", "LSTM", "TransformerEncoderLayer"])
def test_state_dicts_move_both_ways(tmp_path, make_torch, make_gg, shape):
    x = np.random.default_rng(0).standard_normal(shape).astype(np.float32)
    ref = make_torch().eval()
    torch.save(ref.state_dict(), tmp_path / "t.pt")
    model = make_gg().eval()
    model.load_state_dict(load(tmp_path / "t.pt"))
    expected = _out(ref(torch.tensor(x))).detach().numpy()
    np.testing.assert_allclose(_out(model(gg.tensor(x))).detach().numpy(), expected,
                               rtol=1e-4, atol=1e-5)
    # and back: graphgrad's state_dict in the torch format into a fresh torch module
    save(model.state_dict(), tmp_path / "g.pt", format="torch")
    fresh = make_torch().eval()
    fresh.load_state_dict(torch.load(tmp_path / "g.pt", weights_only=True))
    np.testing.assert_allclose(_out(fresh(torch.tensor(x))).detach().numpy(), expected,
                               rtol=1e-5, atol=1e-6)


def test_whole_module_save_needs_allowlisting(tmp_path):
    model = nn.Sequential(nn.Linear(3, 4), nn.ReLU())
    save(model, tmp_path / "m.pt")  # pickled as torch.save does
    with pytest.raises(pickle.UnpicklingError) as info:
        load(tmp_path / "m.pt")
    msg = str(info.value)
    assert msg.startswith("Weights only load failed.")
    assert ("GLOBAL graphgrad.nn.modules.container.Sequential was not an allowed global by "
            "default. Please use `graphgrad.serialization.add_safe_globals([graphgrad.nn."
            "modules.container.Sequential])`") in msg
    x = gg.randn(2, 3)
    back = load(tmp_path / "m.pt", weights_only=False)
    assert np.array_equal(back(x).detach().numpy(), model(x).detach().numpy())
    with safe_globals([nn.Sequential, nn.Linear, nn.ReLU]):
        again = load(tmp_path / "m.pt")
    assert np.array_equal(again(x).detach().numpy(), model(x).detach().numpy())
    assert not gg.serialization.get_safe_globals()  # the context manager removed them
    with pytest.raises(pickle.UnpicklingError):
        load(tmp_path / "m.pt")


def test_torch_module_pickle_is_refused_with_torch_wording(tmp_path):
    torch.save(torch.nn.Linear(2, 2), tmp_path / "m.pt")
    with pytest.raises(pickle.UnpicklingError, match="GLOBAL torch.nn.modules.linear.Linear was "
                       "not an allowed global by default"):
        load(tmp_path / "m.pt")


def _archive(path, data_pkl: bytes, members: dict | None = None, top="archive"):
    with zipfile.ZipFile(path, "w") as zf:
        zf.writestr(f"{top}/data.pkl", data_pkl)
        for name, raw in (members or {}).items():
            zf.writestr(f"{top}/{name}", raw)
        zf.writestr(f"{top}/version", b"3\n")
    return path


class _Call:
    def __init__(self, fn, *args):
        self.fn, self.args = fn, args

    def __reduce__(self):
        return (self.fn, self.args)


@pytest.mark.parametrize("fn,match", [
    (os.system, "whose module (posix|nt) is blocked"),
    (eval, "GLOBAL eval was not an allowed global"),
    (exec, "GLOBAL exec was not an allowed global"),
    (open, "was not an allowed global"),
])
def test_hostile_pickles_are_refused_and_nothing_runs(tmp_path, fn, match):
    marker = tmp_path / "pwned"
    arg = {os.system: f"touch {marker}", eval: f"open({str(marker)!r}, 'w')",
           exec: f"open({str(marker)!r}, 'w')", open: str(marker)}[fn]
    args = (arg, "w") if fn is open else (arg,)
    payload = pickle.dumps({"w": _Call(fn, *args)}, protocol=2)
    path = _archive(tmp_path / "evil.pt", payload)
    with pytest.raises(pickle.UnpicklingError, match=match):
        load(path)
    with pytest.raises(pickle.UnpicklingError, match=match):
        load(path, weights_only=True)
    assert not marker.exists()


def test_hostile_opcodes_are_refused(tmp_path):
    marker = tmp_path / "pwned"
    # protocol 4 (FRAME, STACK_GLOBAL): opcodes torch.save never writes
    payload = pickle.dumps(_Call(os.system, f"touch {marker}"), protocol=4)
    with pytest.raises(pickle.UnpicklingError, match="Unsupported operand 149"):
        load(_archive(tmp_path / "p4.pt", payload))
    # an INST opcode (protocol 0's call) is refused too
    inst = b"(S'touch " + str(marker).encode() + b"'\nios\nsystem\n."
    with pytest.raises(pickle.UnpicklingError, match="Unsupported operand"):
        load(_archive(tmp_path / "inst.pt", inst))
    assert not marker.exists()


class _Lying(torch_writer._TorchPickler):
    """A pickler writing what a hostile file claims: objects of class _Claim reduce to
    the given global and arguments; _Storage objects are storage references."""

    def reducer_override(self, obj):
        if isinstance(obj, _Claim):
            return (self.global_(*obj.path), obj.args)
        return super().reducer_override(obj)

    def persistent_id(self, obj):
        if isinstance(obj, _Store):
            return ("storage", self.global_("torch", obj.cls), obj.key, "cpu", obj.numel)
        return None


class _Claim:
    def __init__(self, path, *args):
        self.path, self.args = path, args


class _Store:
    def __init__(self, cls, key, numel):
        self.cls, self.key, self.numel = cls, key, numel


def _lying_file(path, obj, storages):
    buf = io.BytesIO()
    _Lying(buf, 2).dump(obj)
    return _archive(path, buf.getvalue(), {f"data/{k}": v for k, v in storages.items()})


def _tensor_claim(storage, offset, size, stride):
    return _Claim(("torch._utils", "_rebuild_tensor_v2"), storage, offset, size, stride, False,
                  OrderedDict())


@pytest.mark.parametrize("obj,storages,match", [
    # a view reaching past its storage
    (lambda s: _tensor_claim(s, 2, (3,), (1,)), {"0": bytes(16)}, "does not fit its storage"),
    (lambda s: _tensor_claim(s, 0, (2, 2), (4, 1)), {"0": bytes(16)}, "does not fit"),
    # a storage record declaring more than its member holds (no allocation of it)
    (lambda s: _tensor_claim(_Store("FloatStorage", "0", 1 << 40), 0, (1,), (1,)),
     {"0": bytes(16)}, "holds 16 bytes but the pickle declares"),
    (lambda s: _tensor_claim(_Store("FloatStorage", "9", 4), 0, (1,), (1,)), {"0": bytes(16)},
     "missing archive member"),
    # dtypes graphgrad lacks
    (lambda s: _tensor_claim(_Store("BFloat16Storage", "0", 8), 0, (8,), (1,)),
     {"0": bytes(16)}, "graphgrad has no bfloat16 tensors"),
    (lambda s: _tensor_claim(_Store("QInt8Storage", "0", 16), 0, (16,), (1,)),
     {"0": bytes(16)}, "graphgrad has no qint8"),
    (lambda s: _tensor_claim(s, -1, (1,), (1,)), {"0": bytes(16)}, "malformed tensor"),
    (lambda s: _tensor_claim("not a storage", 0, (1,), (1,)), {}, "not a storage"),
])
def test_lying_files_raise(tmp_path, obj, storages, match):
    path = _lying_file(tmp_path / "lie.pt", {"w": obj(_Store("FloatStorage", "0", 4))},
                       storages)
    with pytest.raises(CheckpointError, match=match):
        load(path)


def test_max_bytes_is_checked_before_reading(tmp_path):
    torch.save({"w": torch.zeros(1000)}, tmp_path / "t.pt")
    with pytest.raises(CheckpointError, match="more than max_bytes=1000"):
        load(tmp_path / "t.pt", max_bytes=1000)
    assert load(tmp_path / "t.pt", max_bytes=10_000)["w"].shape == (1000,)


def test_truncated_and_foreign_files(tmp_path):
    torch.save({"w": torch.arange(100.0)}, tmp_path / "t.pt")
    raw = (tmp_path / "t.pt").read_bytes()
    for cut in (10, len(raw) // 2, len(raw) - 30):
        (tmp_path / "cut.pt").write_bytes(raw[:cut])
        with pytest.raises(CheckpointError):
            load(tmp_path / "cut.pt")
    (tmp_path / "magic.pt").write_bytes(b"XK" + raw[2:])
    with pytest.raises(CheckpointError, match="not a zip archive"):
        load(tmp_path / "magic.pt")
    torch.save({"w": torch.ones(2)}, tmp_path / "legacy.pt", _use_new_zipfile_serialization=False)
    with pytest.raises(CheckpointError, match="a legacy torch.save file"):
        load(tmp_path / "legacy.pt")
    with pytest.raises(ValueError, match="legacy format"):
        save({"w": gg.ones(2)}, tmp_path / "x.pt", _use_new_zipfile_serialization=False)


def test_torch_state_dict_metadata_and_bytes_io():
    buf = io.BytesIO()
    torch.save(torch.nn.Sequential(torch.nn.Linear(2, 2)).state_dict(), buf)
    buf.seek(0)
    back = load(buf)
    assert list(back) == ["0.weight", "0.bias"] and back._metadata[""] == {"version": 1}
    out = io.BytesIO()
    save(back, out, format="torch")
    out.seek(0)
    assert list(torch.load(out, weights_only=True)) == ["0.weight", "0.bias"]


def test_torch_optimizer_state_dict_loads(tmp_path):
    model = torch.nn.Linear(3, 2)
    opt = torch.optim.Adam(model.parameters(), lr=0.01, betas=(0.8, 0.9))
    model(torch.randn(4, 3)).sum().backward()
    opt.step()
    torch.save({"model": model.state_dict(), "optim": opt.state_dict(), "epoch": 3},
               tmp_path / "ckpt.pt")
    back = load(tmp_path / "ckpt.pt")
    ref = opt.state_dict()
    assert back["epoch"] == 3 and back["optim"]["param_groups"][0]["betas"] == (0.8, 0.9)
    for k, v in ref["state"][0].items():
        assert np.array_equal(back["optim"]["state"][0][k].numpy(), v.numpy())


def test_primitive_values_both_ways(tmp_path):
    import collections
    obj = {"bytes": b"abc\xff", "set": {1, 2}, "complex": 1 + 2j, "ba": bytearray(b"xy"),
           "counter": collections.Counter("aab"), "float": 1.5, "none": None, "big": 2**70,
           "neg": -5, "tuple": (1, "x"), "device": torch.device("cpu"), "dtype": torch.int64}
    torch.save(obj, tmp_path / "p.pt")
    back = load(tmp_path / "p.pt")
    plain = {k: v for k, v in obj.items() if k not in ("device", "dtype")}
    assert {k: back[k] for k in plain} == plain
    assert back["device"] == "cpu" and back["dtype"] is gg.int64
    save(back, tmp_path / "q.pt", format="torch")
    assert torch.load(tmp_path / "q.pt", weights_only=True) == obj


def test_mmap_maps_storages_copy_on_write(tmp_path):
    base = torch.arange(12.0).reshape(3, 4)
    torch.save({"base": base, "view": base[1:, ::2], "empty": torch.ones(0)}, tmp_path / "t.pt")
    raw = (tmp_path / "t.pt").read_bytes()
    back = load(tmp_path / "t.pt", mmap=True)
    assert np.array_equal(back["view"].numpy(), base[1:, ::2].numpy())
    assert isinstance(_root_array(back["base"].numpy()), np.memmap)
    back["base"][1, 0] = 100.0  # seen through the view, never written to the file
    assert back["view"][0, 0].item() == 100.0
    assert (tmp_path / "t.pt").read_bytes() == raw
    with pytest.raises(ValueError, match="f must be a file path in order to use the mmap"):
        load(io.BytesIO(raw), mmap=True)
    path = _lying_file(tmp_path / "lie.pt", {"w": _tensor_claim(
        _Store("FloatStorage", "0", 1 << 40), 0, (1,), (1,))}, {"0": bytes(16)})
    with pytest.raises(CheckpointError, match="holds 16 bytes but the pickle declares"):
        load(path, mmap=True)


def _root_array(a):
    while isinstance(a.base, np.ndarray):
        a = a.base
    return a
