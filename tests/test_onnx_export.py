"""ONNX export (issue 20): graphgrad.onnx.export, checked by running the file in
onnxruntime against graphgrad's own output; onnx.checker passes on every file."""

from __future__ import annotations

import io
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest

import graphgrad as gg
from graphgrad import nn

onnx = pytest.importorskip("onnx", reason="needs the onnx extra: pip install 'graphgrad[onnx]'")
ort = pytest.importorskip("onnxruntime", reason="needs onnxruntime (the test extra)")

from graphgrad.onnx import UnsupportedOperatorError, export  # noqa: E402
from graphgrad.train import make_model  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]


def _run(path, feeds):
    sess = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    return sess.run(None, feeds)


def _check(model, inputs, tmp_path, *, rtol=1e-5, atol=1e-5, batches=None, **kwargs):
    """Export ``model`` on ``inputs`` (numpy arrays), check the file, run it in ORT and
    compare with graphgrad; ``batches``: other leading sizes to run the same file with."""
    path = tmp_path / "m.onnx"
    names = [f"x{k}" for k in range(len(inputs))]
    export(model, tuple(gg.tensor(x) for x in inputs), path, input_names=names, **kwargs)
    onnx.checker.check_model(onnx.load(str(path)), full_check=True)
    for xs in [inputs] + [[np.resize(x, (b, *x.shape[1:])) for x in inputs]
                          for b in (batches or [])]:
        got = _run(path, dict(zip(names, xs, strict=True)))
        want = model(*[gg.tensor(x) for x in xs])
        want = want if isinstance(want, tuple) else (want,)
        assert len(got) == len(want)
        for g, w in zip(got, want, strict=True):
            w = w.detach().numpy()
            assert g.shape == w.shape and g.dtype == w.dtype
            np.testing.assert_allclose(g, w, rtol=rtol, atol=atol)
    return path


def _rand(*shape, seed=0):
    return np.random.default_rng(seed).standard_normal(shape).astype(np.float32)


@pytest.mark.parametrize("kind", ["mlp", "cnn"])
def test_digits_models_with_a_dynamic_batch(tmp_path, kind):
    gg.manual_seed(0)
    model = make_model(kind).eval()
    _check(model, [_rand(4, 64)], tmp_path, batches=[1, 9],
           dynamic_axes={"x0": {0: "batch"}, "output": {0: "batch"}})
    dims = onnx.load(str(tmp_path / "m.onnx")).graph.input[0].type.tensor_type.shape.dim
    assert dims[0].dim_param == "batch" and dims[1].dim_value == 64


@pytest.mark.parametrize("opset", [17, 20])  # GELU: Erf at 17, the Gelu op at 20
def test_normalization_and_dropout_in_eval(tmp_path, opset):
    gg.manual_seed(0)
    model = nn.Sequential(nn.Linear(6, 8), nn.BatchNorm1d(8), nn.LayerNorm(8), nn.Dropout(0.5),
                          nn.GELU(), nn.Linear(8, 3), nn.Tanh())
    model.train()
    for _ in range(3):  # running statistics that are not the defaults
        model(gg.randn(16, 6))
    model.eval()
    path = _check(model, [_rand(5, 6)], tmp_path, opset_version=opset)
    ops = {n.op_type for n in onnx.load(str(path)).graph.node}
    assert ("Gelu" in ops) == (opset >= 20) and "Gemm" in ops
    # the norms' arithmetic became the ONNX ops, weight and bias folded in
    assert {"BatchNormalization", "LayerNormalization"} <= ops and not ops & {"Sub", "Sqrt"}
    conv = nn.Sequential(nn.Conv2d(2, 4, 3), nn.BatchNorm2d(4), nn.ReLU(),
                         nn.AvgPool2d(2), nn.Flatten(), nn.Softmax(-1)).eval()
    path = _check(conv, [_rand(2, 2, 7, 7)], tmp_path, opset_version=opset)
    assert _ops(path) - {"Identity", "Reshape", "Shape", "Gather", "Unsqueeze", "Concat",
                         "Mul"} == {"Conv", "BatchNormalization", "Relu", "AveragePool",
                                    "Softmax"}


def test_norms_without_affine_and_lookalikes(tmp_path):
    plain = nn.Sequential(nn.LayerNorm((3, 4), elementwise_affine=False),
                          nn.BatchNorm2d(5, affine=False)).eval()
    plain[1].running_mean.copy_(gg.randn(5))
    path = _check(plain, [_rand(2, 5, 3, 4)], tmp_path)
    assert _ops(path) == {"LayerNormalization", "BatchNormalization", "Identity"}

    def over_the_batch(x):  # normalizes over dim 0, which LayerNormalization cannot
        c = x - x.mean(0, keepdim=True)
        return c * gg.rsqrt((c * c).mean(0, keepdim=True) + 1e-5)

    path = _check(over_the_batch, [_rand(4, 3)], tmp_path)
    assert "LayerNormalization" not in _ops(path)


def test_training_model_is_exported_in_eval_mode(tmp_path):
    model = nn.Sequential(nn.Linear(4, 4), nn.Dropout(0.9))
    model.train()
    path = tmp_path / "d.onnx"
    export(model, (gg.randn(2, 4),), path, input_names=["x"])
    assert model.training  # restored
    x = _rand(2, 4)
    model.eval()
    np.testing.assert_allclose(_run(path, {"x": x})[0], model(gg.tensor(x)).detach().numpy(),
                               rtol=1e-6)


class _Recurrent(nn.Module):
    def __init__(self, cls, **kwargs):
        super().__init__()
        self.rnn = cls(4, 6, num_layers=2, batch_first=True, **kwargs)
        self.head = nn.Linear(self.rnn.hidden_size * (1 + self.rnn.bidirectional), 2)

    def forward(self, x):
        out, state = self.rnn(x)
        h = state[0] if isinstance(state, tuple) else state
        return self.head(out[:, -1]), h


_BATCH = {"x0": {0: "batch"}, "output_0": {0: "batch"}, "output_1": {1: "batch"}}


@pytest.mark.parametrize("bidirectional", [False, True], ids=["forward", "bidirectional"])
@pytest.mark.parametrize("cls,kw", [(nn.LSTM, {}), (nn.GRU, {}), (nn.RNN, {}),
                                    (nn.RNN, {"nonlinearity": "relu"})],
                         ids=["LSTM", "GRU", "RNN_tanh", "RNN_relu"])
def test_recurrent_layers_as_onnx_ops_with_a_dynamic_batch(tmp_path, cls, kw, bidirectional):
    # the zero initial state is traced as a constant at batch 3; the export leaves it
    # out (ONNX's default is zeros), so other batch sizes run through the same file
    gg.manual_seed(0)
    model = _Recurrent(cls, bidirectional=bidirectional, **kw).eval()
    path = _check(model, [_rand(3, 5, 4)], tmp_path, batches=[1, 7], dynamic_axes=_BATCH)
    ops = [n.op_type for n in onnx.load(str(path)).graph.node]
    assert ops.count(cls.__name__) == 2 * (1 + bidirectional)
    assert ops.count("Gemm") == 1 and "MatMul" not in ops  # input projections folded in


class _LstmStates(nn.Module):
    def __init__(self):
        super().__init__()
        self.rnn = nn.LSTM(4, 5)

    def forward(self, x, h0, c0):
        out, (h, c) = self.rnn(x, (h0, c0))
        return out, h, c


def test_recurrent_initial_and_final_states(tmp_path):
    # given initial states are inputs of the LSTM op; the final c is ONNX's Y_c
    gg.manual_seed(0)
    _check(_LstmStates().eval(), [_rand(6, 2, 4), _rand(1, 2, 5, seed=1),
                                  _rand(1, 2, 5, seed=2)], tmp_path)
    cell = nn.GRUCell(4, 3).eval()
    _check(cell, [_rand(2, 4), _rand(2, 3, seed=1)], tmp_path)


@pytest.mark.parametrize("cls", [nn.LSTM, nn.GRU], ids=["LSTM", "GRU"])
def test_recurrent_weights_as_graph_inputs(tmp_path, cls):
    # w_ih unknown at export: the op takes the projected input through a gate permutation
    gg.manual_seed(0)
    model = cls(4, 3).eval()
    path = tmp_path / "r.onnx"
    export(model, (gg.randn(5, 2, 4),), path, input_names=["x"], export_params=False)
    x = _rand(5, 2, 4)
    feeds = {"x": x, **{k: v.detach().numpy() for k, v in model.state_dict().items()}}
    got = _run(path, feeds)
    want = model(gg.tensor(x))
    np.testing.assert_allclose(got[0], want[0].detach().numpy(), rtol=1e-5, atol=1e-6)
    assert "MatMul" in _ops(path) or "Gemm" in _ops(path)


def test_lstm_cell_states_of_earlier_steps_are_refused(tmp_path):
    class Middle(nn.Module):  # reads c at a step ONNX's LSTM does not return
        def __init__(self):
            super().__init__()
            self.rnn = nn.LSTM(4, 5)

        def forward(self, x):
            from graphgrad.nn.functional.recurrent import _lstm_layer
            h0 = gg.zeros(x.shape[1], 5)
            return _lstm_layer(x, h0, h0, *self.rnn._flat_weights)[1]

    with pytest.raises(UnsupportedOperatorError, match="'LstmLayer'.*cell state of the last"):
        export(Middle(), (gg.randn(3, 2, 4),), tmp_path / "m.onnx")


def test_transformer_encoder_layer(tmp_path):
    gg.manual_seed(0)
    layer = nn.TransformerEncoderLayer(8, 2, 16, batch_first=True).eval()
    _check(layer, [_rand(2, 5, 8)], tmp_path, atol=1e-4, batches=[3],
           dynamic_axes={"x0": {0: "batch"}, "output": {0: "batch"}})


def _ops(path) -> set:
    return {n.op_type for n in onnx.load(str(path)).graph.node}


@pytest.mark.parametrize("opset", [17, 20])
def test_convolutions_as_conv_and_conv_transpose(tmp_path, opset):
    gg.manual_seed(0)
    for model, shape in [
            (nn.Conv1d(4, 6, 3, stride=2, padding=1, dilation=2, groups=2), (2, 4, 11)),
            (nn.Conv2d(3, 4, (3, 2), stride=(2, 1), padding=(1, 0)), (2, 3, 7, 6)),
            (nn.Conv3d(2, 3, 2, padding=1, bias=False), (1, 2, 4, 3, 5)),
            (nn.ConvTranspose1d(4, 6, 3, stride=2, padding=1, output_padding=1, groups=2),
             (2, 4, 5)),
            (nn.ConvTranspose2d(3, 2, 3, stride=2, padding=1, output_padding=1, dilation=2),
             (2, 3, 4, 5)),
            (nn.ConvTranspose3d(2, 2, 2, stride=2), (1, 2, 2, 3, 2))]:
        path = _check(model.eval(), [_rand(*shape)], tmp_path, opset_version=opset,
                      batches=[3], dynamic_axes={"x0": {0: "n"}, "output": {0: "n"}})
        want = "ConvTranspose" if "Transpose" in type(model).__name__ else "Conv"
        # (1-d runs as 2-d over a height-1 image, as PyTorch's: reshapes around it)
        assert want in _ops(path) and not _ops(path) & {"MatMul", "Pad", "Add"}


def test_pooling_as_max_pool_and_average_pool(tmp_path):
    cases = [(nn.MaxPool2d(3, 2, padding=1, ceil_mode=True), (2, 3, 8, 7), "MaxPool"),
             (nn.MaxPool1d(2, dilation=2), (2, 3, 9), "MaxPool"),
             (nn.MaxPool3d(2), (1, 2, 4, 4, 5), "MaxPool"),
             (nn.AvgPool2d(3, 2, padding=1, count_include_pad=True), (2, 3, 7, 7),
              "AveragePool"),
             (nn.AvgPool2d(3, 2, padding=1, count_include_pad=False), (2, 3, 7, 7),
              "AveragePool"),
             (nn.AvgPool1d(2, ceil_mode=True), (2, 3, 7), "AveragePool"),
             # ceil_mode where ONNX's shape rule counts one window more than PyTorch's
             (nn.MaxPool2d((2, 3), (3, 2), padding=1, ceil_mode=True), (2, 1, 7, 8),
              "MaxPool"),
             (nn.AvgPool2d((2, 3), (3, 2), padding=1, ceil_mode=True,
                           count_include_pad=False), (2, 1, 7, 8), "AveragePool"),
             (nn.AvgPool2d(3, 2, padding=1, ceil_mode=True), (1, 2, 6, 6), "AveragePool"),
             (nn.AvgPool3d(2, padding=1), (1, 2, 4, 3, 5), "AveragePool")]
    for model, shape, op in cases:
        path = _check(model, [_rand(*shape)], tmp_path)
        # the unread indices are pruned; 1-d pools reshape to 2-d ones
        assert op in _ops(path) and not _ops(path) & {"Mod", "GatherElements", "Pad"}
    # a 1-d pool runs as 2-d after a reshape by the input's shape: sizes unknown at
    # export, ceil_mode is left to onnxruntime's kernel (which counts as PyTorch)
    _check(nn.MaxPool1d(2, 3, padding=1, ceil_mode=True), [_rand(2, 3, 7)], tmp_path,
           batches=[1], dynamic_axes={"x0": {0: "n"}})


def test_max_pool_indices_are_positions_in_each_plane(tmp_path):
    def pool(x):
        values, indices = gg.nn.functional.max_pool2d(x, 2, 2, return_indices=True)
        return values * 2, indices

    path = _check(pool, [_rand(3, 2, 6, 5)], tmp_path, batches=[1],
                  dynamic_axes={"x0": {0: "n"}})
    assert {"MaxPool", "Mod"} <= _ops(path)


def test_avg_pool_without_an_onnx_equivalent_is_refused(tmp_path):
    with pytest.raises(UnsupportedOperatorError, match="'AvgPool'.*divisor_override"):
        export(nn.AvgPool2d(2, divisor_override=3), (gg.randn(1, 1, 4, 4),), None)
    # padding counted in the divisor, and ONNX's ceil_mode window count differs
    with pytest.raises(UnsupportedOperatorError, match="'AvgPool'.*ceil_mode gives"):
        export(nn.AvgPool2d((2, 3), (3, 2), padding=1, ceil_mode=True),
               (gg.randn(2, 1, 7, 8),), None)


@pytest.mark.parametrize("mask", ["none", "causal", "bool", "float"])
def test_scaled_dot_product_attention(tmp_path, mask):
    F = gg.nn.functional
    keep = np.random.default_rng(3).random((5, 6)) > 0.3
    keep[:, 0] = True  # no row fully masked

    def attend(q, k, v):
        if mask == "bool":
            return F.scaled_dot_product_attention(q, k, v, attn_mask=gg.tensor(keep))
        if mask == "float":
            scores = q[..., :1] * k[..., None, :, 0]  # (.., L, S), computed from inputs
            return F.scaled_dot_product_attention(q, k, v, attn_mask=scores)
        return F.scaled_dot_product_attention(q, k, v, is_causal=mask == "causal")

    path = _check(attend, [_rand(2, 3, 5, 4), _rand(2, 3, 6, 4, seed=1),
                           _rand(2, 3, 6, 7, seed=2)], tmp_path, atol=1e-5)
    assert {"MatMul", "Softmax"} <= _ops(path)
    if mask in ("none", "causal"):  # the sequence lengths as dynamic axes too
        q, k, v = _rand(1, 2, 7, 4), _rand(1, 2, 3, 4, seed=1), _rand(1, 2, 3, 5, seed=2)
        export(attend, (gg.randn(1, 2, 5, 4), gg.randn(1, 2, 6, 4), gg.randn(1, 2, 6, 5)),
               path, input_names=["q", "k", "v"],
               dynamic_axes={"q": {2: "L"}, "k": {2: "S"}, "v": {2: "S"}})
        got = _run(path, {"q": q, "k": k, "v": v})[0]
        want = attend(gg.tensor(q), gg.tensor(k), gg.tensor(v)).numpy()
        np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)


def _functions():
    def where_compare(x, y):
        return gg.where(x > y, x * 2, y - 1) + (x <= 0.5).float() + (x == y).long()

    def reductions(x, y):
        return (x.sum(1, keepdim=True) + y.mean(0) + x.amax(1, keepdim=True)
                - y.logsumexp(1, keepdim=True) + x.prod(0) + x.norm(dim=1, keepdim=True))

    def indexing(x, y):
        idx = gg.tensor([2, 0, 1])
        return (x[1:, ::2] + x[idx, 1:4] + y[..., None][1:, 2:5, 0]
                + x[:, 3].unsqueeze(1)[1:] + x[-1][None, :3])

    def arg_and_gather(x, y):
        i = x.argmax(1, keepdim=True)
        return gg.gather(y, 1, i) + x.max(1).values[:, None] + x.softmax(-1).sum(-1, True)

    def shapes(x, y):
        z = gg.cat([x, y.flip(1)], dim=1).reshape(x.shape[0], 2, -1).permute(0, 2, 1)
        s = gg.stack([z, z.clamp(-0.5, 0.5)], dim=-1).tril()
        return s + x[:1, :1, None, None].expand(-1, 5, 2, 2) + x[0, :2].repeat(2, 1)

    def integer_math(x, y):
        n = (x * 10).long()
        return n // 3 + n % 4 + (x * 10).floor() / 2 - gg.floor_divide(x, 0.3)

    return [where_compare, reductions, indexing, arg_and_gather, shapes, integer_math]


@pytest.mark.parametrize("fn", _functions(), ids=lambda f: f.__name__)
@pytest.mark.parametrize("opset", [17, 18, 20])
def test_functions(tmp_path, fn, opset):
    x, y = _rand(4, 5), _rand(4, 5, seed=1)
    _check(fn, [x, y], tmp_path, opset_version=opset)


def test_parameters_are_named_initializers_or_inputs(tmp_path):
    model = nn.Sequential(nn.Linear(3, 4), nn.ReLU(), nn.Linear(4, 2)).eval()
    proto = export(model, (gg.randn(2, 3),), tmp_path / "a.onnx", input_names=["x"])
    assert {i.name for i in proto.graph.initializer} == {"0.weight", "0.bias", "2.weight",
                                                         "2.bias"}
    proto = export(model, (gg.randn(2, 3),), tmp_path / "b.onnx", input_names=["x"],
                   export_params=False)
    assert not proto.graph.initializer
    assert [i.name for i in proto.graph.input] == ["x", "0.weight", "0.bias", "2.weight",
                                                   "2.bias"]
    x = _rand(2, 3)
    feeds = {"x": x, **{k: v.detach().numpy() for k, v in model.state_dict().items()}}
    np.testing.assert_allclose(_run(tmp_path / "b.onnx", feeds)[0],
                               model(gg.tensor(x)).detach().numpy(), rtol=1e-6)


class _Transposed(nn.Module):
    def __init__(self):
        super().__init__()
        self.w = nn.Parameter(gg.arange(6.0).reshape(2, 3))

    def forward(self, x):
        return x @ self.w.t() * 2


def test_constant_folding_computes_parameter_only_ops_once(tmp_path):
    x = gg.randn(4, 3)
    folded = export(_Transposed(), (x,), tmp_path / "f.onnx", input_names=["x"])
    unfolded = export(_Transposed(), (x,), tmp_path / "u.onnx", input_names=["x"],
                      do_constant_folding=False)
    assert "Transpose" in {n.op_type for n in unfolded.graph.node}
    assert "Transpose" not in {n.op_type for n in folded.graph.node}
    for name in ("f.onnx", "u.onnx"):
        np.testing.assert_allclose(_run(tmp_path / name, {"x": x.numpy()})[0],
                                   _Transposed()(x).detach().numpy(), rtol=1e-6)


def test_unsupported_op_names_it(tmp_path):
    def f(x):
        return gg.atan2(x, x + 1)

    with pytest.raises(UnsupportedOperatorError, match="Exporting the operator 'Atan2' to "
                       "ONNX opset version 17 is not supported"):
        export(f, (gg.randn(3),), tmp_path / "u.onnx")
    assert not (tmp_path / "u.onnx").exists()


def test_arguments_are_checked(tmp_path):
    with pytest.raises(ValueError, match="opset_version 12"):
        export(nn.Linear(2, 2), (gg.randn(1, 2),), None, opset_version=12)
    with pytest.raises(ValueError, match="dynamic_axes names 'y'"):
        export(nn.Linear(2, 2), (gg.randn(1, 2),), None, input_names=["x"],
               dynamic_axes={"y": [0]})
    with pytest.raises(TypeError, match="unexpected keyword arguments"):
        export(nn.Linear(2, 2), (gg.randn(1, 2),), None, training=True)
    with pytest.raises(ValueError, match="dynamo=True"):
        export(nn.Linear(2, 2), (gg.randn(1, 2),), None, dynamo=True)
    buf = io.BytesIO()
    export(nn.Linear(2, 2), gg.randn(1, 2), buf)  # a file object and a bare tensor
    assert onnx.load_from_string(buf.getvalue()).graph.node


def test_torch_onnx_under_graphgrad_run(tmp_path):
    script = tmp_path / "prog.py"
    script.write_text(textwrap.dedent("""
        import torch
        import torch.onnx
        import torch.serialization
        model = torch.nn.Linear(3, 2)
        torch.onnx.export(model, (torch.randn(1, 3),), "lin.onnx", input_names=["x"])
        torch.serialization.add_safe_globals([torch.nn.Linear])
        torch.save(model, "m.pt")
        print(type(torch.load("m.pt")).__name__, torch.onnx.is_in_onnx_export())
    """))
    env = {"PYTHONPATH": str(ROOT), "PATH": "/usr/bin:/bin"}
    out = subprocess.run([sys.executable, "-m", "graphgrad", "run", str(script)],
                         cwd=tmp_path, capture_output=True, text=True, env=env, timeout=300)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip().endswith("Linear False")
    onnx.checker.check_model(onnx.load(str(tmp_path / "lin.onnx")))


def test_missing_onnx_package_names_the_extra(monkeypatch):
    monkeypatch.setitem(sys.modules, "onnx", None)  # import fails as if not installed
    with pytest.raises(ImportError, match=r"pip install 'graphgrad\[onnx\]'"):
        export(nn.Linear(2, 2), (gg.randn(1, 2),), None)
