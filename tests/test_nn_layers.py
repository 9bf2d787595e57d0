"""The smaller layers and functions of ``graphgrad.nn`` against PyTorch: activations
(also in place), pooling, interpolation, Conv1d and ConvTranspose2d, padding, pixel
shuffle, fold modules, bilinear, dropout variants, cosine similarity; values,
gradients and error messages."""


from __future__ import annotations

import numpy as np
import pytest
import torch
from helpers import RTOL, close, rand, step_both, twin_layers

import graphgrad as gg
from graphgrad import nn
from graphgrad.nn import functional as F


# ---- smaller layers and functions ---------------------------------------------------------
@pytest.mark.parametrize("in_shape,out_size", [((2, 3, 8, 6), (4, 3)), ((2, 3, 7, 5), 3),
                                                ((1, 2, 5, 9), (None, 4)), ((3, 6, 6), 1),
                                                ((1, 1, 4, 4), (5, 3))])
def test_adaptive_avg_pool2d_matches_torch(in_shape, out_size):
    step_both(nn.AdaptiveAvgPool2d(out_size), torch.nn.AdaptiveAvgPool2d(out_size),
              rand(*in_shape))
    assert repr(nn.AdaptiveAvgPool2d(out_size)) == repr(torch.nn.AdaptiveAvgPool2d(out_size))


@pytest.mark.parametrize("s1,s2,dim", [((4, 5), (4, 5), 1), ((3, 4, 2), (3, 4, 2), -1),
                                       ((4, 5), (1, 5), 1), ((5,), (5,), 0)])
def test_cosine_similarity_matches_torch(s1, s2, dim):
    a, b = rand(*s1, seed=1), rand(*s2, seed=2)
    ga, gb = gg.tensor(a, requires_grad=True), gg.tensor(b, requires_grad=True)
    ta, tb = torch.tensor(a, requires_grad=True), torch.tensor(b, requires_grad=True)
    out_g, out_t = nn.CosineSimilarity(dim)(ga, gb), torch.nn.CosineSimilarity(dim)(ta, tb)
    close(out_g, out_t)
    (out_g ** 2).sum().backward()
    (out_t ** 2).sum().backward()
    close(ga.grad, ta.grad)
    close(gb.grad, tb.grad)
    # a zero vector: the norm is clamped at eps, the similarity 0 (no nan)
    z = np.zeros(s1)
    close(F.cosine_similarity(gg.tensor(z), gb, dim),
          torch.nn.functional.cosine_similarity(torch.tensor(z), tb, dim))


def test_dropout2d_zeroes_whole_channels():
    gg.manual_seed(0)
    x = gg.ones(8, 16, 3, 3)
    out = nn.Dropout2d(0.5)(x).numpy()
    per_channel = out.reshape(8, 16, 9)
    assert set(np.unique(out)) <= {0.0, 2.0}
    assert (per_channel.min(axis=2) == per_channel.max(axis=2)).all()  # whole planes
    assert 0.25 < (per_channel[:, :, 0] == 0).mean() < 0.75
    m = nn.Dropout2d(0.5).eval()
    assert m(x) is x
    assert repr(m) == repr(torch.nn.Dropout2d(0.5))
    with pytest.warns(UserWarning, match="Received a 3D input to dropout2d"):
        F.dropout2d(gg.ones(2, 3, 4))
    with pytest.raises(ValueError, match="dropout probability has to be between 0 and 1"):
        F.dropout2d(x, 1.5)


# ---- more activations, RMSNorm, attention, Conv1d -----------------------------------------
ACTIVATIONS = [
    ("relu6", lambda m: m.ReLU6(), 4.0),
    ("hardtanh", lambda m: m.Hardtanh(-2.0, 3.0), 3.0),
    ("hardsigmoid", lambda m: m.Hardsigmoid(), 4.0),
    ("hardswish", lambda m: m.Hardswish(), 4.0),
    ("mish", lambda m: m.Mish(), 2.0),
    ("selu", lambda m: m.SELU(), 2.0),
    ("celu", lambda m: m.CELU(0.7), 2.0),
    ("softsign", lambda m: m.Softsign(), 2.0),
    ("tanhshrink", lambda m: m.Tanhshrink(), 2.0),
    ("glu", lambda m: m.GLU(1), 1.0),
    ("softmin", lambda m: m.Softmin(1), 1.0),
    ("prelu", lambda m: m.PReLU(), 1.0),
    ("prelu_channels", lambda m: m.PReLU(4, init=0.1), 1.0),
]


# PyTorch's backward formulas of these use float32 constants even for float64 (1/6 in
# hardsigmoid's, 1/alpha in celu's): their gradients agree with graphgrad's exact ones
# to float32 precision only
FLOAT32_CONSTANT_GRADS = {"hardsigmoid", "celu"}


@pytest.mark.parametrize("name,make,spread", ACTIVATIONS, ids=[a[0] for a in ACTIVATIONS])
def test_more_activations_match_torch(name, make, spread):
    g_mod, t_mod = twin_layers(make)
    x = rand(3, 4, 5) * spread
    rtol = 1e-6 if name in FLOAT32_CONSTANT_GRADS else RTOL
    step_both(g_mod, t_mod, x, grad_rtol=rtol)
    # second derivatives (of the smooth pieces; the clip points are never hit)
    gx, tx = gg.tensor(x, requires_grad=True), torch.tensor(x, requires_grad=True)
    (dg,) = gg.autograd.grad((g_mod(gx) ** 2).sum(), gx, create_graph=True)
    (dt,) = torch.autograd.grad((t_mod(tx) ** 2).sum(), tx, create_graph=True)
    close(dg, dt, rtol)
    (hg,) = gg.autograd.grad(dg.sum(), gx)
    if name == "hardsigmoid":  # PyTorch has no double backward for it: 2 y'^2 by hand
        close(hg, np.where(np.abs(x) < 3, 2 / 36, 0.0))
    else:
        close(hg, torch.autograd.grad(dt.sum(), tx)[0], max(rtol, 1e-9), 1e-11)


def test_clip_points_have_torch_gradients():
    x = np.array([-3.0, -1.0, 0.0, 3.0, 6.0])
    for fn in ("relu6", "hardtanh", "hardsigmoid", "hardswish"):
        gx, tx = gg.tensor(x, requires_grad=True), torch.tensor(x, requires_grad=True)
        getattr(F, fn)(gx).sum().backward()
        getattr(torch.nn.functional, fn)(tx).sum().backward()
        close(gx.grad, tx.grad, 1e-6 if fn in FLOAT32_CONSTANT_GRADS else RTOL)


def test_more_activation_errors_use_torch_wording():
    for lib in (gg, torch):
        with pytest.raises(RuntimeError, match="Halving dimension must be even, but dimension "
                           "1 is size 3"):
            lib.nn.functional.glu(lib.ones(2, 3), 1)
        with pytest.raises(RuntimeError, match="Mismatch of parameter numbers and input channel "
                           "size. Found parameter numbers = 2 and channel size = 3."):
            lib.nn.functional.prelu(lib.ones(2, 3), lib.ones(2))
        with pytest.raises(AssertionError, match=r"max_val \(1.0\) must be greater than "
                           r"min_val \(2.0\)"):
            lib.nn.Hardtanh(2.0, 1.0)
        with pytest.raises(RuntimeError, match="alpha cannot be 0 for CELU"):
            lib.nn.functional.celu(lib.ones(2), 0.0)


CONV1D = [
    ("conv1d", lambda m: m.Conv1d(2, 4, 3), (2, 2, 9)),
    ("conv1d_all", lambda m: m.Conv1d(4, 6, 3, stride=2, padding=2, dilation=2, groups=2,
                                      bias=False), (2, 4, 11)),
    ("conv1d_same", lambda m: m.Conv1d(3, 2, 5, padding="same"), (1, 3, 7)),
    ("conv1d_unbatched", lambda m: m.Conv1d(2, 3, 2), (2, 6)),
]


@pytest.mark.parametrize("name,make,shape", CONV1D, ids=[c[0] for c in CONV1D])
def test_conv1d_matches_torch(name, make, shape):
    torch.manual_seed(0)
    g_mod, t_mod = twin_layers(make)
    step_both(g_mod, t_mod, rand(*shape))


def test_conv1d_init_and_errors_as_torch():
    gg.manual_seed(0)
    m = nn.Conv1d(4, 3, 5)
    bound = 1 / np.sqrt(4 * 5)
    assert np.abs(m.weight.detach().numpy()).max() <= bound
    assert np.abs(m.bias.detach().numpy()).max() <= bound
    for lib in (gg, torch):
        with pytest.raises(RuntimeError, match=r"Given groups=1, weight of size \[4, 2, 3\], "
                           r"expected input\[2, 3, 8\] to have 2 channels, but got 3 channels "
                           r"instead"):
            lib.nn.functional.conv1d(lib.ones(2, 3, 8), lib.ones(4, 2, 3))


POOLS = [
    ("maxpool1d", lambda m: m.MaxPool1d(2), (2, 3, 9)),
    ("maxpool1d_all", lambda m: m.MaxPool1d(3, 2, 1, 2), (2, 3, 11)),
    ("maxpool1d_ceil_unbatched", lambda m: m.MaxPool1d(2, ceil_mode=True), (3, 7)),
    ("avgpool1d", lambda m: m.AvgPool1d(3, 2, 1), (2, 3, 10)),
    ("avgpool1d_unbatched", lambda m: m.AvgPool1d(2), (3, 8)),
    ("adaptive_avg1d", lambda m: m.AdaptiveAvgPool1d(3), (2, 3, 10)),
    ("adaptive_max2d", lambda m: m.AdaptiveMaxPool2d((3, 2)), (2, 3, 7, 5)),
    ("adaptive_max2d_none_unbatched", lambda m: m.AdaptiveMaxPool2d((None, 4)), (3, 5, 9)),
]


@pytest.mark.parametrize("name,make,shape", POOLS, ids=[p[0] for p in POOLS])
def test_more_pooling_matches_torch(name, make, shape):
    g_mod, t_mod = twin_layers(make)
    step_both(g_mod, t_mod, rand(*shape))


INTERPOLATE = [
    ("nearest_x2", (2, 3, 4, 5), {"scale_factor": 2}),
    ("nearest_size", (1, 2, 5, 7), {"size": (8, 3)}),
    ("nearest_1.5", (1, 2, 5, 6), {"scale_factor": 1.5}),
    ("nearest_1d", (2, 3, 7), {"size": 10}),
    ("bilinear_up", (2, 2, 4, 5), {"scale_factor": 2, "mode": "bilinear"}),
    ("bilinear_down_size", (1, 2, 9, 7), {"size": (4, 5), "mode": "bilinear"}),
    ("bilinear_align", (1, 2, 4, 5), {"size": (7, 9), "mode": "bilinear",
                                      "align_corners": True}),
    ("bilinear_recompute", (1, 1, 5, 5), {"scale_factor": 1.7, "mode": "bilinear",
                                          "recompute_scale_factor": True}),
    ("linear", (2, 3, 6), {"scale_factor": 2.5, "mode": "linear"}),
    ("linear_align", (2, 3, 6), {"size": 4, "mode": "linear", "align_corners": True}),
]


@pytest.mark.parametrize("name,shape,kw", INTERPOLATE, ids=[i[0] for i in INTERPOLATE])
def test_interpolate_matches_torch(name, shape, kw):
    x = rand(*shape)
    results = []
    for lib in (gg, torch):
        xt = lib.tensor(x, requires_grad=True)
        out = lib.nn.functional.interpolate(xt, **kw)
        (out * lib.tensor(rand(*out.shape, seed=2))).sum().backward()
        results.append([out, xt.grad])
    for a, b in zip(*results, strict=True):
        close(a, b)
    if "recompute_scale_factor" not in kw:
        g_mod, t_mod = twin_layers(lambda m: m.Upsample(**kw))
        step_both(g_mod, t_mod, x)


def test_interpolate_errors_use_torch_wording():
    for lib in (gg, torch):
        f = lib.nn.functional.interpolate
        with pytest.raises(ValueError, match="align_corners option can only be set with the "
                           "interpolating modes"):
            f(lib.ones(1, 1, 2, 2), scale_factor=2, align_corners=True)
        with pytest.raises(ValueError, match="only one of size or scale_factor should be "
                           "defined"):
            f(lib.ones(1, 1, 2, 2), size=3, scale_factor=2)
        with pytest.raises(ValueError, match="either size or scale_factor should be defined"):
            f(lib.ones(1, 1, 2, 2))


CONV_T = [
    ("convT", lambda m: m.ConvTranspose2d(3, 2, 3), (2, 3, 4, 4)),
    ("convT_stride_pad_outpad", lambda m: m.ConvTranspose2d(2, 3, 3, stride=2, padding=1,
                                                            output_padding=1), (1, 2, 4, 5)),
    ("convT_groups_dilation", lambda m: m.ConvTranspose2d(4, 6, (2, 3), groups=2, dilation=2,
                                                          bias=False), (2, 4, 3, 3)),
    ("convT_unbatched", lambda m: m.ConvTranspose2d(2, 2, 2, stride=2), (2, 3, 3)),
]


@pytest.mark.parametrize("name,make,shape", CONV_T, ids=[c[0] for c in CONV_T])
def test_conv_transpose2d_matches_torch(name, make, shape):
    g_mod, t_mod = twin_layers(make)
    step_both(g_mod, t_mod, rand(*shape))
    # second derivatives through the transposed convolution, in the weight too
    x = rand(*shape, seed=3)
    gx, tx = gg.tensor(x, requires_grad=True), torch.tensor(x, requires_grad=True)
    (dg,) = gg.autograd.grad((g_mod(gx) ** 3).sum(), gx, create_graph=True)
    (dt,) = torch.autograd.grad((t_mod(tx) ** 3).sum(), tx, create_graph=True)
    close(dg, dt, 1e-9, 1e-11)
    close(gg.autograd.grad(dg.sum(), g_mod.weight)[0],
          torch.autograd.grad(dt.sum(), t_mod.weight)[0], 1e-9, 1e-11)


def test_conv_transpose2d_and_fold_under_no_grad_and_errors():
    m = nn.ConvTranspose2d(4, 2, 3, stride=2)
    with gg.no_grad():
        y = m(gg.randn(1, 4, 3, 3))
        assert tuple(y.shape) == (1, 2, 7, 7) and not y.requires_grad
        assert tuple(F.fold(gg.randn(1, 4, 9), (4, 4), 2).shape) == (1, 1, 4, 4)
    for lib in (gg, torch):
        with pytest.raises(RuntimeError, match=r"Given transposed=1, weight of size \[4, 2, 3, "
                           r"3\], expected input\[1, 3, 4, 4\] to have 4 channels, but got 3 "
                           r"channels instead"):
            lib.nn.functional.conv_transpose2d(lib.ones(1, 3, 4, 4), lib.ones(4, 2, 3, 3))
        with pytest.raises(RuntimeError, match="output padding must be smaller than either "
                           "stride or dilation"):
            lib.nn.ConvTranspose2d(4, 2, 3, output_padding=1)(lib.ones(1, 4, 3, 3))


# ---- padding, pixel shuffle, fold modules, bilinear, thresholds ---------------------------
SMALL_LAYERS = [
    ("zeropad2d", lambda m: m.ZeroPad2d((1, 2, 0, 1)), (2, 3, 4, 4)),
    ("constpad1d", lambda m: m.ConstantPad1d(2, 3.5), (2, 3, 4)),
    ("reflect2d", lambda m: m.ReflectionPad2d((2, 1, 1, 2)), (2, 3, 4, 5)),
    ("reflect1d_unbatched", lambda m: m.ReflectionPad1d(2), (3, 5)),
    ("replicate2d", lambda m: m.ReplicationPad2d(2), (1, 2, 3, 3)),
    ("replicate1d", lambda m: m.ReplicationPad1d((3, 1)), (2, 2, 4)),
    ("pixel_shuffle", lambda m: m.PixelShuffle(2), (2, 8, 3, 4)),
    ("pixel_unshuffle", lambda m: m.PixelUnshuffle(3), (1, 2, 6, 9)),
    ("unfold", lambda m: m.Unfold(2, stride=2), (2, 3, 4, 6)),
    ("fold", lambda m: m.Fold((4, 5), 2), (2, 8, 12)),
    ("threshold", lambda m: m.Threshold(0.1, 20.0), (3, 4)),
    ("hardshrink", lambda m: m.Hardshrink(), (3, 4)),
    ("softshrink", lambda m: m.Softshrink(0.3), (3, 4)),
]


@pytest.mark.parametrize("name,make,shape", SMALL_LAYERS, ids=[x[0] for x in SMALL_LAYERS])
def test_small_layers_match_torch(name, make, shape):
    g_mod, t_mod = twin_layers(make)
    step_both(g_mod, t_mod, rand(*shape))


@pytest.mark.parametrize("mode", ["reflect", "replicate", "circular"])
def test_pad_modes_match_torch(mode):
    for shape, pads in [((2, 3, 5), (1, 2)), ((3, 5), (3, 1)), ((2, 3, 4, 5), (2, 1, 3, 0)),
                        ((2, 3, 4, 5), (-1, 2, 1, -1))]:
        x = rand(*shape)
        results = []
        for lib in (gg, torch):
            xt = lib.tensor(x, requires_grad=True)
            out = lib.nn.functional.pad(xt, pads, mode)
            (out * lib.tensor(rand(*out.shape, seed=2))).sum().backward()
            results.append([out, xt.grad])
        for a, b in zip(*results, strict=True):
            close(a, b)
    for lib in (gg, torch):
        f = lib.nn.functional.pad
        with pytest.raises(RuntimeError, match="Padding size should be less than the "
                           "corresponding input dimension"):
            f(lib.ones(1, 1, 3, 3), (3, 3, 0, 0), "reflect")
        with pytest.raises(NotImplementedError, match="Unrecognised padding mode foo"):
            f(lib.ones(1, 1, 3, 3), (1, 1), "foo")
        with pytest.raises(RuntimeError, match="Padding length must be divisible by 2"):
            f(lib.ones(1, 1, 3, 3), (1, 1, 1))


def test_bilinear_matches_torch():
    for bias in (True, False):
        g_mod, t_mod = twin_layers(lambda m, bias=bias: m.Bilinear(3, 4, 5, bias=bias))
        a, b = rand(6, 3), rand(6, 4, seed=1)
        results = []
        for lib, mod in ((gg, g_mod), (torch, t_mod)):
            xa, xb = lib.tensor(a, requires_grad=True), lib.tensor(b, requires_grad=True)
            out = mod(xa, xb)
            (out * lib.tensor(rand(6, 5, seed=2))).sum().backward()
            results.append([out, xa.grad, xb.grad] + [p.grad for p in mod.parameters()])
        for x, y in zip(*results, strict=True):
            close(x, y)


def test_pixel_shuffle_and_dropout1d_errors_and_masks():
    for lib in (gg, torch):
        with pytest.raises(RuntimeError, match=r"input.size\(-3\)=3 is not divisible by 4"):
            lib.nn.functional.pixel_shuffle(lib.ones(1, 3, 2, 2), 2)
        with pytest.raises(RuntimeError, match=r"expects width to be divisible by "
                           r"downscale_factor, but input.size\(-1\)=3 is not divisible by 2"):
            lib.nn.functional.pixel_unshuffle(lib.ones(1, 1, 4, 3), 2)
        with pytest.raises(RuntimeError, match="dropout1d: Expected 2D or 3D input, but "
                           "received a 4D input"):
            lib.nn.functional.dropout1d(lib.ones(2, 3, 4, 5))
    gg.manual_seed(1)
    out = nn.Dropout1d(0.5)(gg.ones(8, 16, 5)).numpy()
    assert (out.min(axis=2) == out.max(axis=2)).all() and set(np.unique(out)) == {0.0, 2.0}


@pytest.mark.parametrize("fn,kw", [("hardtanh", {}), ("relu6", {}), ("hardsigmoid", {}),
                                   ("hardswish", {}), ("mish", {}), ("selu", {}),
                                   ("celu", {"alpha": 0.7}),
                                   ("threshold", {"threshold": 0.1, "value": 2.0})])
def test_inplace_activations_backward_after_an_op_match_torch(fn, kw):
    """inplace=True on a non-leaf: the backward still sees the value before the write."""
    x = rand(3, 4) * 3
    results = []
    for lib in (gg, torch):
        xt = lib.tensor(x, requires_grad=True)
        h = xt * 1.5
        out = getattr(lib.nn.functional, fn)(h, inplace=True, **kw)
        assert out is h
        (out * lib.tensor(rand(3, 4, seed=1))).sum().backward()
        results.append([out, xt.grad])
    rtol = 1e-6 if fn in FLOAT32_CONSTANT_GRADS else RTOL
    close(results[0][0], results[1][0])
    close(results[0][1], results[1][1], rtol)
