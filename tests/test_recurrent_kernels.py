"""The array kernels of the recurrent layer ops (ops/recurrent_kernels.py) against torch's
autograd of the same recurrence, at float32 and float64: the forward (sigmoids computed
as 0.5 tanh(0.5 x) + 0.5, saturated gates included) and the backward through time, both
from the gates the forward kept and from gates recomputed (an output that is not the
forward's own buffer)."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from graphgrad.ops import recurrent_kernels as K
from op_cases import gru_reference, lstm_reference, rnn_reference

# float32: six steps back through time; NumPy's SIMD tanh (which the sigmoids use) differs
# from torch's in the last bits, by CPU and NumPy version (2.4's misses 2e-5 at saturation)
TOL = {np.float32: dict(rtol=1e-4, atol=1e-5), np.float64: dict(rtol=1e-11, atol=1e-13)}


def _lstm_ref(*args, **params):
    return lstm_reference(torch, *args, **params)


def _gru_ref(*args, **params):
    return gru_reference(torch, *args, **params)


def _rnn_ref(*args, **params):
    return rnn_reference(torch, *args, **params)


STEPS, ROWS, H = 6, 3, 5
LAYERS = {  # name: (forward, backward, reference, input shapes, params)
    "lstm": (K.lstm_forward, K.lstm_backward, _lstm_ref,
             [(STEPS, ROWS, 4 * H), (ROWS, H), (ROWS, H), (4 * H, H)], {}),
    "gru": (K.gru_forward, K.gru_backward, _gru_ref,
            [(STEPS, ROWS, 3 * H), (ROWS, H), (3 * H, H), (3 * H,)], {}),
    "gru_no_bias": (K.gru_forward, K.gru_backward, _gru_ref,
                    [(STEPS, ROWS, 3 * H), (ROWS, H), (3 * H, H)], {}),
    "rnn_tanh": (K.rnn_forward, K.rnn_backward, _rnn_ref,
                 [(STEPS, ROWS, H), (ROWS, H), (H, H)], {"nonlinearity": "tanh"}),
    "rnn_relu": (K.rnn_forward, K.rnn_backward, _rnn_ref,
                 [(STEPS, ROWS, H), (ROWS, H), (H, H)], {"nonlinearity": "relu"}),
}


def _inputs(shapes, dtype, scale=1.0):
    rng = np.random.default_rng(0)
    return [(rng.standard_normal(s) * scale).astype(dtype) for s in shapes]


def _check(name, dtype, scale):
    forward, backward, ref, shapes, params = LAYERS[name]
    args = _inputs(shapes, dtype, scale)
    width = 2 * H if name == "lstm" else H
    g = _inputs([(STEPS, ROWS, width)], dtype)[0]
    targs = [torch.tensor(a, requires_grad=True) for a in args]
    want = ref(*targs, **params)
    want_grads = torch.autograd.grad(want, targs, torch.tensor(g))
    want_flat = np.concatenate([d.numpy().reshape(-1) for d in want_grads])
    out = forward(*args, **params)
    np.testing.assert_allclose(out, want.detach().numpy(), **TOL[dtype])
    kept = backward(g, out, *args, **params)  # from the forward's buffer
    recomputed = backward(g, np.ascontiguousarray(out), *args, **params)
    for flat in (kept, recomputed):
        assert flat.dtype == dtype
        np.testing.assert_allclose(flat, want_flat, **TOL[dtype])


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("name", list(LAYERS))
def test_forward_and_backward_against_torch(name, dtype):
    _check(name, dtype, 1.0)


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("name", ["lstm", "gru"])
def test_saturated_gates_against_torch(name, dtype):
    """Pre-activations of +-tens: the sigmoids by tanh saturate as torch's do."""
    _check(name, dtype, 12.0)


def test_only_its_own_buffers_are_read_as_kept_gates():
    """An output at the start of some other array of the right size is not mistaken
    for the forward's: the gates are recomputed, and the result is the true gradient."""
    forward, backward, _, shapes, _ = LAYERS["lstm"]
    args = _inputs(shapes, np.float64)
    g = _inputs([(STEPS, ROWS, 2 * H)], np.float64)[0]
    out = forward(*args)
    want = backward(g, np.ascontiguousarray(out), *args)
    foreign = np.full(3 * out.size, 7.0)
    foreign[:out.size] = out.reshape(-1)
    np.testing.assert_allclose(backward(g, foreign[:out.size].reshape(out.shape), *args), want,
                               rtol=1e-13)
    # and the forward's own buffer gives the same gradient
    np.testing.assert_allclose(backward(g, out, *args), want, rtol=1e-12, atol=1e-14)


def test_the_forwards_keep_their_buffers_for_the_backward():
    """The gates are found again from the ops' outputs (no gate GEMM in the backward),
    also through the op's dispatch; a copy of the output is not such a view."""
    import graphgrad as gg
    from graphgrad.ops.recurrent import GruLayer, LstmLayer
    lstm = _inputs(LAYERS["lstm"][3], np.float32)
    gru = _inputs(LAYERS["gru"][3], np.float32)
    out = LstmLayer.apply(*(gg.tensor(a) for a in lstm))._array
    assert K._kept(out, (STEPS, 5, ROWS, H)) is not None
    assert K._kept(out.copy(), (STEPS, 5, ROWS, H)) is None
    assert K._kept(GruLayer.apply(*(gg.tensor(a) for a in gru))._array,
                   (STEPS, 4, ROWS, H)) is not None


def test_with_gradients_off_the_output_holds_no_gates():
    """Under no_grad no backward can read the gates: the output is not the start of a
    larger allocation (it would keep them alive as long as it lives)."""
    import graphgrad as gg
    from graphgrad.ops.recurrent import GruLayer, LstmLayer
    with gg.no_grad():
        out = LstmLayer.apply(*(gg.tensor(a) for a in _inputs(LAYERS["lstm"][3],
                                                                np.float32)))._array
        hs = GruLayer.apply(*(gg.tensor(a) for a in _inputs(LAYERS["gru"][3],
                                                             np.float32)))._array
    for a in (out, hs):
        assert (a if a.base is None else a.base).size == a.size
