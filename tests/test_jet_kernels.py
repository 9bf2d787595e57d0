"""Taylor rules of the library kernels (convolution, its weight gradient, pooling and
its backward ops, the fused LSTM/GRU layers and attention): jets to order 4 against
nested reverse mode in graphgrad and in PyTorch (float64), with test_jet's machinery.
The backward ops are reached by jetting a gradient (taken inside the jetted function)
in the direction of its cotangent."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from test_jet import check

import graphgrad as gg
from graphgrad.ops.recurrent import GruLayer, LstmLayer, RnnLayer

F, TF = gg.nn.functional, torch.nn.functional


def _array(shape, seed):
    return np.random.default_rng(seed).standard_normal(shape)


CONV = [  # (input shape, weight shape, keyword arguments)
    ((2, 4, 7), (6, 2, 3), dict(stride=2, padding=1, groups=2)),
    ((1, 2, 6, 5), (3, 2, 2, 3), dict(stride=(2, 1), padding=(1, 0), dilation=(1, 2))),
    ((2, 1, 3, 4, 3), (2, 1, 2, 2, 2), dict(padding=1)),
]


@pytest.mark.parametrize("xs,ws,kw", CONV)
def test_convolution_is_bilinear_with_an_affine_bias(xs, ws, kw):
    n = len(ws) - 2
    conv_g = getattr(F, f"conv{n}d")
    conv_t = getattr(TF, f"conv{n}d")
    b = _array((ws[0],), 3)
    check(lambda x, w, b: conv_g(x, w, b, **kw), lambda x, w, b: conv_t(x, w, b, **kw),
          [_array(xs, 1), _array(ws, 2), b])
    check(lambda x, w: conv_g(x, w, **kw).tanh(), lambda x, w: conv_t(x, w, **kw).tanh(),
          [_array(xs, 1), _array(ws, 2)])


def test_transposed_convolution():
    # (no output_padding: PyTorch's own third derivative then passes it to a plain conv)
    kw = dict(stride=2, padding=1, groups=2)
    check(lambda x, w: F.conv_transpose2d(x, w, **kw) ** 2,
          lambda x, w: TF.conv_transpose2d(x, w, **kw) ** 2,
          [_array((2, 4, 3, 3), 1), _array((4, 3, 2, 2), 2)])


def _weight_gradient(lib, conv, ws, kw):
    """(x, g) -> the gradient of <conv(x, w), g> w.r.t. w: the weight-gradient op."""
    def f(x, g):
        w = lib.zeros(ws, dtype=lib.float64, requires_grad=True)
        (gw,) = lib.autograd.grad((conv(x, w, **kw) * g).sum(), w, create_graph=True)
        return gw
    return f


@pytest.mark.parametrize("xs,ws,kw", CONV[:2])
def test_convolution_weight_gradient_is_bilinear(xs, ws, kw):
    n = len(ws) - 2
    f_g = _weight_gradient(gg, getattr(F, f"conv{n}d"), ws, kw)
    f_t = _weight_gradient(torch, getattr(TF, f"conv{n}d"), ws, kw)
    out = getattr(TF, f"conv{n}d")(torch.zeros(xs, dtype=torch.float64),
                                   torch.zeros(ws, dtype=torch.float64), **kw).shape
    check(lambda x, g: f_g(x, g).sin(), lambda x, g: f_t(x, g).sin(),
          [_array(xs, 1), _array(tuple(out), 2)])


POOLS = [("max_pool2d", dict(kernel_size=3, stride=2, padding=1, ceil_mode=True)),
         ("max_pool1d", dict(kernel_size=2, dilation=2)),
         ("max_pool2d", dict(kernel_size=2)),  # windows that do not overlap
         ("avg_pool2d", dict(kernel_size=3, stride=2, padding=1, count_include_pad=False)),
         ("avg_pool3d", dict(kernel_size=2, ceil_mode=True, divisor_override=3))]


def _shape(name):
    return {"1d": (2, 3, 9), "2d": (2, 3, 7, 6), "3d": (1, 2, 5, 4, 5)}[name[-2:]]


@pytest.mark.parametrize("name,kw", POOLS)
def test_pooling_is_linear_with_fixed_indices(name, kw):
    """Max pooling reads values at integer indices (MaxPoolIndices: a zero series,
    TakePlanes: linear); the square makes higher orders non-zero."""
    f_g, f_t = getattr(F, name), getattr(TF, name)
    check(lambda x: f_g(x, **kw) ** 2, lambda x: f_t(x, **kw) ** 2, [_array(_shape(name), 4)])


def _pool_gradient(lib, pool, shape, kw):
    """(x, g) -> the gradient of <pool(x), g> w.r.t. x times x: runs the backward op
    (PutPlanes, AvgPoolBackward) on a jet of g."""
    def f(x, g):
        x0 = x.detach().requires_grad_(True)
        (gx,) = lib.autograd.grad((pool(x0, **kw) * g).sum(), x0, create_graph=True)
        return gx * x
    return f


@pytest.mark.parametrize("name,kw", POOLS)
def test_pooling_backward_ops_are_linear(name, kw):
    shape = _shape(name)
    x = _array(shape, 5)
    out = getattr(TF, name)(torch.tensor(x), **kw).shape
    check(_pool_gradient(gg, getattr(F, name), shape, kw),
          _pool_gradient(torch, getattr(TF, name), shape, kw), [x, _array(tuple(out), 6)])


def _lstm_torch(xg, h0, c0, w_hh):
    hidden, outs, h, c = h0.shape[-1], [], h0, c0
    for t in range(xg.shape[0]):
        i, f, g, o = (xg[t] + h @ w_hh.T).split(hidden, dim=-1)
        c = torch.sigmoid(f) * c + torch.sigmoid(i) * torch.tanh(g)
        h = torch.sigmoid(o) * torch.tanh(c)
        outs.append(torch.cat([h, c], dim=-1))
    return torch.stack(outs)


def _gru_torch(xg, h0, w_hh, b_hh):
    hidden, outs, h = h0.shape[-1], [], h0
    for t in range(xg.shape[0]):
        xr, xz, xn = xg[t].split(hidden, dim=-1)
        hr, hz, hn = (h @ w_hh.T + b_hh).split(hidden, dim=-1)
        r, z = torch.sigmoid(xr + hr), torch.sigmoid(xz + hz)
        n = torch.tanh(xn + r * hn)
        h = n + z * (h - n)
        outs.append(h)
    return torch.stack(outs)


def test_lstm_layer_rule_runs_its_composite():
    steps, batch, hidden = 3, 2, 3
    args = [_array((steps, batch, 4 * hidden), 1) * 0.5, _array((batch, hidden), 2),
            _array((batch, hidden), 3), _array((4 * hidden, hidden), 4) * 0.5]
    check(LstmLayer.apply, _lstm_torch, args)


@pytest.mark.parametrize("bias", [True, False])
def test_gru_layer_rule_runs_its_composite(bias):
    steps, batch, hidden = 3, 2, 3
    args = [_array((steps, batch, 3 * hidden), 1) * 0.5, _array((batch, hidden), 2),
            _array((3 * hidden, hidden), 4) * 0.5]
    if bias:
        check(GruLayer.apply, _gru_torch, args + [_array((3 * hidden,), 5)])
    else:
        check(GruLayer.apply, lambda *a: _gru_torch(*a, 0.0), args)


@pytest.mark.parametrize("nonlinearity", ["tanh", "relu"])
def test_rnn_layer_rule_runs_its_composite(nonlinearity):
    args = [_array((3, 2, 3), 1), _array((2, 3), 2), _array((3, 3), 4) * 0.5]
    act = getattr(torch, nonlinearity)

    def reference(xg, h, w):
        outs = []
        for t in range(xg.shape[0]):
            h = act(xg[t] + h @ w.T)
            outs.append(h ** 2)  # squared: relu's higher coefficients are not all zero
        return torch.stack(outs)
    check(lambda *a: RnnLayer.apply(*a, nonlinearity=nonlinearity) ** 2, reference, args)


@pytest.mark.parametrize("kind", ["LSTM", "GRU", "RNN"])
def test_recurrent_modules_under_jet(kind):
    """nn.LSTM / nn.GRU with PyTorch's weights, the jet along the input sequence."""
    torch.manual_seed(0)
    m_t = getattr(torch.nn, kind)(3, 4, num_layers=2, dtype=torch.float64)
    m_g = getattr(gg.nn, kind)(3, 4, num_layers=2, dtype=gg.float64)
    m_g.load_state_dict({k: gg.tensor(v.numpy()) for k, v in m_t.state_dict().items()})
    check(lambda x: m_g(x)[0], lambda x: m_t(x)[0], [_array((4, 2, 3), 7)])


ATTENTION = [dict(), dict(is_causal=True), dict(scale=0.3), dict(mask="bool"),
             dict(mask="float")]


@pytest.mark.parametrize("kw", ATTENTION, ids=str)
def test_attention_rule_runs_its_composite(kw):
    kw = dict(kw)
    q, k, v = _array((2, 4, 3), 1), _array((2, 5, 3), 2), _array((2, 5, 2), 3)
    mask = kw.pop("mask", None)
    if mask is None:
        check(lambda q, k, v: F.scaled_dot_product_attention(q, k, v, **kw),
              lambda q, k, v: TF.scaled_dot_product_attention(q, k, v, **kw), [q, k, v])
    elif mask == "bool":
        m = np.random.default_rng(4).random((4, 5)) > 0.3
        m[:, 0] = True  # no row without a key
        check(lambda q, k, v: F.scaled_dot_product_attention(q, k, v, gg.tensor(m)),
              lambda q, k, v: TF.scaled_dot_product_attention(q, k, v, torch.tensor(m)),
              [q, k, v])
    else:  # a float mask with its own series
        check(lambda q, k, v, m: F.scaled_dot_product_attention(q, k, v, m),
              lambda q, k, v, m: TF.scaled_dot_product_attention(q, k, v, m),
              [q, k, v, _array((4, 5), 4)])


@pytest.mark.parametrize("kind", ["avg", "max"])
def test_adaptive_pooling_is_linear(kind):
    """AdaptiveAvgPool (and its transpose, in the gradient) and TakePlanes at
    AdaptiveMaxPoolIndices: uneven windows that overlap."""
    f_g = getattr(F, f"adaptive_{kind}_pool2d")
    f_t = getattr(TF, f"adaptive_{kind}_pool2d")
    check(lambda x: f_g(x, (3, 4)) ** 2, lambda x: f_t(x, (3, 4)) ** 2, [_array((2, 2, 5, 6), 8)])
    check(_pool_gradient(gg, f_g, None, dict(output_size=(3, 4))),
          _pool_gradient(torch, f_t, None, dict(output_size=(3, 4))),
          [_array((2, 2, 5, 6), 8), _array((2, 2, 3, 4), 9)])
