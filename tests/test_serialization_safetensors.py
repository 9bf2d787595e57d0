"""safetensors files (issue 20) through graphgrad.utils.safetensors: round trips with the
reference library both ways, metadata, Module.load_state_dict from a file."""

from __future__ import annotations

import numpy as np
import pytest

import graphgrad as gg
from graphgrad import nn

pytest.importorskip("safetensors", reason="needs the safetensors extra: pip install "
                    "'graphgrad[safetensors]'")
torch = pytest.importorskip("torch")
import safetensors.numpy  # noqa: E402
import safetensors.torch  # noqa: E402

from graphgrad.utils.safetensors import load, load_file, load_metadata, save, save_file  # noqa: E402,I001

DTYPES = ["float32", "float64", "float16", "int8", "int16", "int32", "int64", "uint8", "bool"]


@pytest.mark.parametrize("name", DTYPES)
def test_graphgrad_to_reference_and_back(tmp_path, name):
    base = gg.tensor((np.arange(12).reshape(3, 4) % 5).astype(name))
    tensors = {"a": base, "view": base[1:, ::2], "scalar": base[0, 0].clone(),
               "empty": base[:0]}
    save_file(tensors, tmp_path / "g.safetensors", metadata={"format": "pt", "step": "3"})
    ref = safetensors.torch.load_file(str(tmp_path / "g.safetensors"))
    for k, v in tensors.items():
        assert str(ref[k].dtype) == f"torch.{name}" and tuple(ref[k].shape) == tuple(v.shape)
        assert np.array_equal(ref[k].numpy(), v.numpy())
    assert load_metadata(tmp_path / "g.safetensors") == {"format": "pt", "step": "3"}
    safetensors.torch.save_file({k: v.clone() for k, v in ref.items()},
                                str(tmp_path / "t.safetensors"))
    back = load_file(tmp_path / "t.safetensors")
    for k, v in tensors.items():
        assert back[k].dtype == v.dtype and np.array_equal(back[k].numpy(), v.numpy())


def test_bytes_api_and_graphgrad_load_by_extension(tmp_path):
    data = save({"w": gg.arange(3.0)})
    assert np.array_equal(safetensors.numpy.load(data)["w"], [0.0, 1.0, 2.0])
    assert np.array_equal(load(data)["w"].numpy(), [0.0, 1.0, 2.0])
    save_file({"w": gg.ones(2)}, tmp_path / "m.safetensors")
    assert np.array_equal(gg.load(tmp_path / "m.safetensors")["w"].numpy(), [1.0, 1.0])


def test_load_state_dict_from_a_torch_written_file(tmp_path):
    torch.manual_seed(0)
    ref = torch.nn.Sequential(torch.nn.Linear(4, 3), torch.nn.ReLU(), torch.nn.Linear(3, 2))
    safetensors.torch.save_file(ref.state_dict(), str(tmp_path / "m.safetensors"))
    model = nn.Sequential(nn.Linear(4, 3), nn.ReLU(), nn.Linear(3, 2))
    model.load_state_dict(load_file(tmp_path / "m.safetensors"))
    x = np.random.default_rng(0).standard_normal((5, 4)).astype(np.float32)
    np.testing.assert_allclose(model(gg.tensor(x)).detach().numpy(),
                               ref(torch.tensor(x)).detach().numpy(), rtol=1e-6)


def test_bad_input_and_bad_files(tmp_path):
    with pytest.raises(TypeError, match="Expected a dict of"):
        save_file({"w": np.ones(2)}, tmp_path / "x.safetensors")
    (tmp_path / "bad.safetensors").write_bytes(b"\xff" * 8 + b"{}")
    with pytest.raises(Exception, match="(?i)header"):
        load_file(tmp_path / "bad.safetensors")


def test_missing_package_names_the_extra(tmp_path, monkeypatch):
    import sys
    monkeypatch.setitem(sys.modules, "safetensors.numpy", None)  # import fails as if absent
    with pytest.raises(ImportError, match=r"pip install 'graphgrad\[safetensors\]'"):
        save_file({"w": gg.ones(2)}, tmp_path / "x.safetensors")
