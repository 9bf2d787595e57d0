"""N-d convolution and pooling against PyTorch (float64): conv3d, the transposed
convolutions 1-3d, InstanceNorm3d, max/avg pooling 1-3d with ceil_mode,
count_include_pad, divisor_override and indices, max_unpool; values, gradients, second
derivatives where PyTorch has them, and the errors with PyTorch's types and wording."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from helpers import close, rand, raises_as_torch, step_both, twin_layers

import graphgrad as gg


def _both(fn, *arrays, second_order: bool = True):
    """``fn(lib, *tensors)`` in both libraries: outputs, first and second derivatives."""
    results = []
    for lib in (gg, torch):
        ts = [lib.tensor(a, requires_grad=True) for a in arrays]
        out = fn(lib, *ts)
        extra = list(out[1:]) if isinstance(out, tuple) else []
        out = out[0] if isinstance(out, tuple) else out
        r = lib.tensor(rand(*out.shape, seed=5))
        grads = lib.autograd.grad((out * r).sum(), ts, create_graph=second_order)
        row = [out, *grads, *extra]
        total = sum((g ** 2).sum() for g in grads)
        if second_order and total.requires_grad:  # None: a linear map's zero second order
            row += [lib.zeros_like(t) if h is None else h for t, h in
                    zip(ts, lib.autograd.grad(total, ts, allow_unused=True), strict=True)]
        elif second_order:
            row += [lib.zeros_like(t) for t in ts]
        results.append(row)
    for a, b in zip(*results, strict=True):
        assert tuple(a.shape) == tuple(b.shape)
        close(a, b, 1e-9, 1e-11)


CONV = [
    ("conv3d", lambda m, x, w, b: m.conv3d(x, w, b, stride=(1, 2, 1), padding=(1, 0, 1),
                                           dilation=(1, 1, 2)),
     [(2, 2, 4, 5, 5), (3, 2, 2, 3, 2), (3,)]),
    ("conv3d_groups", lambda m, x, w: m.conv3d(x, w, groups=2), [(1, 4, 3, 3, 3),
                                                                 (4, 2, 2, 2, 2)]),
    ("conv3d_same_unbatched", lambda m, x, w: m.conv3d(x, w, padding="same"),
     [(2, 3, 3, 3), (4, 2, 3, 3, 3)]),
    ("conv_transpose1d", lambda m, x, w, b: m.conv_transpose1d(
        x, w, b, stride=3, padding=1, output_padding=2, dilation=2), [(2, 2, 5), (2, 3, 3),
                                                                      (3,)]),
    ("conv_transpose1d_groups_unbatched", lambda m, x, w: m.conv_transpose1d(
        x, w, stride=2, groups=2), [(4, 5), (4, 1, 3)]),
    ("conv_transpose3d", lambda m, x, w: m.conv_transpose3d(
        x, w, stride=(2, 1, 2), padding=(0, 1, 1), output_padding=(1, 0, 1), groups=2),
     [(1, 4, 3, 3, 3), (4, 1, 2, 3, 3)]),
]


@pytest.mark.parametrize("name,fn,shapes", CONV, ids=[c[0] for c in CONV])
def test_convolutions_match_torch_to_second_order(name, fn, shapes):
    _both(lambda lib, *t: fn(lib.nn.functional, *t),
          *[rand(*s, seed=i) for i, s in enumerate(shapes)])


LAYERS = [
    ("conv3d", lambda m: m.Conv3d(2, 4, (2, 3, 2), stride=2, padding=1), (2, 2, 5, 6, 5)),
    ("convT1d", lambda m: m.ConvTranspose1d(4, 6, 3, stride=2, padding=1, output_padding=1,
                                            groups=2, dilation=2), (2, 4, 7)),
    ("convT3d", lambda m: m.ConvTranspose3d(2, 3, 2, stride=2, bias=False), (1, 2, 2, 3, 2)),
    ("instnorm3d", lambda m: m.InstanceNorm3d(3), (2, 3, 3, 4, 3)),
    ("instnorm3d_affine_stats", lambda m: m.InstanceNorm3d(3, affine=True,
                                                           track_running_stats=True),
     (2, 3, 3, 4, 3)),
    ("instnorm3d_unbatched", lambda m: m.InstanceNorm3d(2, affine=True), (2, 3, 2, 4)),
    ("maxpool3d", lambda m: m.MaxPool3d(2, (1, 2, 2), 1, ceil_mode=True), (2, 2, 5, 5, 4)),
    ("avgpool3d", lambda m: m.AvgPool3d(3, 2, 1, ceil_mode=True, count_include_pad=False),
     (2, 2, 6, 5, 7)),
    ("avgpool2d_divisor", lambda m: m.AvgPool2d((3, 2), (2, 1), 1, divisor_override=5),
     (2, 3, 8, 6)),
]


@pytest.mark.parametrize("name,make,shape", LAYERS, ids=[c[0] for c in LAYERS])
def test_layers_match_torch(name, make, shape):
    torch.manual_seed(0)
    g_mod, t_mod = twin_layers(make)
    step_both(g_mod, t_mod, rand(*shape))
    if "stats" in name:  # eval uses the running statistics the step left
        g_mod.eval(), t_mod.eval()
        close(g_mod(gg.tensor(rand(*shape, seed=2))), t_mod(torch.tensor(rand(*shape, seed=2))))


POOLS = [
    ("max2d_indices", lambda m, x: m.max_pool2d(x, 3, 2, 1, return_indices=True), (2, 3, 7, 6)),
    ("max2d_ceil", lambda m, x: m.max_pool2d(x, 3, 2, 1, ceil_mode=True, return_indices=True),
     (2, 3, 8, 6)),
    ("max2d_dilation_unbatched", lambda m, x: m.max_pool2d(x, 3, 1, 1, dilation=2,
                                                           return_indices=True), (3, 8, 6)),
    ("max3d_ceil", lambda m, x: m.max_pool3d(x, 2, (1, 2, 2), 1, ceil_mode=True,
                                             return_indices=True), (2, 2, 5, 5, 4)),
    ("max1d_indices", lambda m, x: m.max_pool1d(x, 3, 2, 1, return_indices=True), (2, 3, 9)),
    ("avg2d_ceil", lambda m, x: m.avg_pool2d(x, 3, 2, 1, ceil_mode=True), (2, 3, 8, 6)),
    ("avg2d_ceil_exclude_pad", lambda m, x: m.avg_pool2d(x, 3, 2, 1, ceil_mode=True,
                                                         count_include_pad=False),
     (2, 3, 8, 6)),
    ("avg2d_divisor_override", lambda m, x: m.avg_pool2d(x, (3, 2), (2, 1), (1, 1),
                                                         divisor_override=5), (2, 3, 8, 6)),
    ("avg3d", lambda m, x: m.avg_pool3d(x, 3, 2, 1, ceil_mode=True, count_include_pad=False),
     (2, 2, 6, 5, 7)),
    ("avg1d_ceil_unbatched", lambda m, x: m.avg_pool1d(x, 3, 2, 1, ceil_mode=True,
                                                       count_include_pad=False), (2, 8)),
]


@pytest.mark.parametrize("name,fn,shape", POOLS, ids=[c[0] for c in POOLS])
def test_pooling_matches_torch(name, fn, shape):
    # a max pooling's gradient is piecewise constant: graphgrad records no second order
    _both(lambda lib, x: fn(lib.nn.functional, x), rand(*shape),
          second_order=name.startswith("avg"))


def _pool_unpool(n: int, k, s, p, with_size: bool):
    def fn(lib, x):
        f = lib.nn.functional
        out, idx = getattr(f, f"max_pool{n}d")(x, k, s, p, return_indices=True)
        size = tuple(x.shape[-n:]) if with_size else None
        return getattr(f, f"max_unpool{n}d")(out, idx, k, s, p, output_size=size)
    return fn


@pytest.mark.parametrize("n,k,s,p,shape,with_size", [
    (1, 2, None, 0, (2, 3, 7), False), (2, 3, 2, 1, (2, 3, 7, 6), True),
    (2, 2, 1, 0, (3, 5, 5), False), (3, 2, None, 0, (2, 3, 4, 4, 6), False)])
def test_max_unpool_matches_torch(n, k, s, p, shape, with_size):
    # overlapping windows (stride 1) write one input twice: the gradient gathers both
    _both(_pool_unpool(n, k, s, p, with_size), rand(*shape))
    g_mod, t_mod = twin_layers(lambda m: getattr(m, f"MaxUnpool{n}d")(k, s, p))
    x = rand(*shape)
    outs = []
    for lib, mod in ((gg, g_mod), (torch, t_mod)):
        pooled, idx = getattr(lib.nn.functional, f"max_pool{n}d")(lib.tensor(x), k, s, p,
                                                                  return_indices=True)
        outs.append(mod(pooled, idx, tuple(x.shape[-n:]) if with_size else None))
    close(*outs)


def test_max_pool_of_integers_pads_with_the_dtype_minimum():
    for dtype in (np.int32, np.int64, np.uint8, np.int8):
        x = np.random.default_rng(0).integers(np.iinfo(dtype).min, np.iinfo(dtype).max,
                                              (2, 2, 6, 7), endpoint=True).astype(dtype)
        out_g, idx_g = gg.nn.functional.max_pool2d(gg.tensor(x), 3, 2, 1, ceil_mode=True,
                                                   return_indices=True)
        out_t, idx_t = torch.nn.functional.max_pool2d(torch.tensor(x), 3, 2, 1, ceil_mode=True,
                                                      return_indices=True)
        assert out_g.dtype.name.endswith(str(out_t.dtype)[6:])
        np.testing.assert_array_equal(out_g.numpy(), out_t.numpy())
        np.testing.assert_array_equal(idx_g.numpy(), idx_t.numpy())
    x = np.arange(-30, 18, dtype=np.int64).reshape(1, 1, 6, 8)
    close(gg.nn.functional.avg_pool2d(gg.tensor(x), 3, 2, 1, ceil_mode=True),
          torch.nn.functional.avg_pool2d(torch.tensor(x), 3, 2, 1, ceil_mode=True))


CONV_ERRORS = [
    lambda lib: lib.nn.functional.conv2d(lib.ones(1, 1, 5, 5), lib.ones(1, 1, 3, 3),
                                         dilation=0),
    lambda lib: lib.nn.functional.conv2d(lib.ones(1, 1, 5, 5), lib.ones(1, 1, 3, 3),
                                         dilation=(1, -1)),
    lambda lib: lib.nn.functional.conv2d(lib.ones(1, 1, 5, 5), lib.ones(1, 1, 3, 3), stride=0),
    lambda lib: lib.nn.functional.conv2d(lib.ones(1, 1, 5, 5), lib.ones(1, 1, 3, 3),
                                         padding=-1),
    lambda lib: lib.nn.functional.conv2d(lib.ones(1, 1, 5, 5), lib.ones(1, 1, 3, 3), groups=0),
    lambda lib: lib.nn.functional.conv2d(lib.ones(1, 1, 5, 5), lib.ones(1, 1, 3, 3),
                                         stride=(1, 1, 1)),
    lambda lib: lib.nn.functional.conv2d(lib.ones(1, 2, 5, 5), lib.ones(3, 1, 3, 3), groups=2),
    lambda lib: lib.nn.functional.conv3d(lib.ones(1, 1, 5, 5, 5), lib.ones(1, 1, 3, 3)),
    lambda lib: lib.nn.functional.conv2d(lib.ones(1, 1, 5, 5), lib.ones(1, 1, 3)),
    lambda lib: lib.nn.functional.conv_transpose3d(lib.ones(1, 1, 5, 5, 5), lib.ones(1, 1, 3, 3)),
    lambda lib: lib.nn.functional.conv2d(lib.ones(1, 1, 5, 5), lib.ones(1, 1, 3, 3),
                                         lib.ones(2)),
    lambda lib: lib.nn.functional.conv2d(lib.ones(1, 1, 2, 2), lib.ones(1, 1, 3, 3)),
    lambda lib: lib.nn.functional.conv1d(lib.ones(1, 1, 5), lib.ones(1, 1, 3), dilation=0),
    lambda lib: lib.nn.functional.conv1d(lib.ones(5), lib.ones(1, 1, 3)),
    lambda lib: lib.nn.functional.conv3d(lib.ones(1, 1, 5, 5, 5), lib.ones(1, 1, 3, 3, 3),
                                         dilation=0),
    lambda lib: lib.nn.functional.conv3d(lib.ones(5, 5, 5), lib.ones(1, 1, 3, 3, 3)),
    lambda lib: lib.nn.functional.conv3d(lib.ones(1, 1, 2, 2, 2), lib.ones(1, 1, 3, 3, 3)),
    lambda lib: lib.nn.functional.conv_transpose1d(lib.ones(1, 1, 5), lib.ones(1, 1, 3),
                                                   dilation=0),
    lambda lib: lib.nn.functional.conv_transpose1d(lib.ones(1, 3, 5), lib.ones(2, 1, 3)),
    lambda lib: lib.nn.functional.conv_transpose1d(lib.ones(1, 1, 5), lib.ones(1, 1, 3),
                                                   output_padding=1),
    lambda lib: lib.nn.functional.conv_transpose3d(lib.ones(1, 1, 5, 5, 5),
                                                   lib.ones(1, 1, 3, 3, 3), dilation=0),
    lambda lib: lib.nn.functional.conv_transpose3d(lib.ones(1, 1, 5, 5, 5),
                                                   lib.ones(1, 1, 3, 3, 3), output_padding=1),
    lambda lib: lib.nn.functional.conv_transpose2d(lib.ones(1, 1, 5, 5), lib.ones(1, 1, 3, 3),
                                                   output_padding=-1),
    lambda lib: lib.nn.functional.conv_transpose2d(lib.ones(1, 1, 5, 5), lib.ones(1, 1, 3, 3),
                                                   stride=0),
]


@pytest.mark.parametrize("call", CONV_ERRORS, ids=range(len(CONV_ERRORS)))
def test_convolution_errors_as_torch(call):
    raises_as_torch(call)


POOL_ERRORS = [
    (RuntimeError, lambda lib: lib.nn.functional.max_pool2d(lib.ones(1, 1, 5, 5), 3, stride=0)),
    (RuntimeError, lambda lib: lib.nn.functional.max_pool2d(lib.ones(1, 1, 5, 5), 3,
                                                            padding=2)),
    (RuntimeError, lambda lib: lib.nn.functional.max_pool2d(lib.ones(1, 1, 8, 8), 3, 1, 2,
                                                            dilation=2)),
    (RuntimeError, lambda lib: lib.nn.functional.max_pool2d(lib.ones(1, 1, 5, 5), 2,
                                                            dilation=0)),
    (RuntimeError, lambda lib: lib.nn.functional.max_pool2d(lib.ones(1, 1, 1, 1), 2)),
    (RuntimeError, lambda lib: lib.nn.functional.max_pool2d(lib.ones(5), 2)),
    (RuntimeError, lambda lib: lib.nn.functional.max_pool3d(lib.ones(1, 1, 6, 6, 6), 3, 1, 2,
                                                            dilation=2)),
    (RuntimeError, lambda lib: lib.nn.functional.max_pool3d(lib.ones(1, 1, 5, 5, 5), 2,
                                                            dilation=0)),
    (RuntimeError, lambda lib: lib.nn.functional.max_pool3d(lib.ones(1, 1, 1, 1, 1), 2)),
    (RuntimeError, lambda lib: lib.nn.functional.max_pool1d(lib.ones(5), 2)),
    (RuntimeError, lambda lib: lib.nn.functional.max_pool1d(lib.ones(1, 1, 5), 3, padding=2)),
    (RuntimeError, lambda lib: lib.nn.functional.max_pool1d(lib.ones(1, 1, 5), 3, stride=0)),
    (RuntimeError, lambda lib: lib.nn.functional.max_pool1d(lib.ones(1, 1, 1), 2)),
    (RuntimeError, lambda lib: lib.nn.functional.avg_pool2d(lib.ones(1, 1, 5, 5), 3,
                                                            padding=2)),
    (RuntimeError, lambda lib: lib.nn.functional.avg_pool2d(lib.ones(1, 1, 5, 5), 2,
                                                            divisor_override=0)),
    (RuntimeError, lambda lib: lib.nn.functional.avg_pool2d(lib.ones(1, 1, 1, 1), 2)),
    (IndexError, lambda lib: lib.nn.functional.avg_pool2d(lib.ones(5), 2)),
    (NotImplementedError, lambda lib: lib.nn.functional.avg_pool2d(
        lib.ones(1, 1, 4, 4, dtype=lib.int32), 2)),
    (RuntimeError, lambda lib: lib.nn.functional.avg_pool3d(lib.ones(1, 1, 1, 1, 1), 2)),
    (RuntimeError, lambda lib: lib.nn.functional.avg_pool3d(lib.ones(5, 5), 2)),
    (RuntimeError, lambda lib: lib.nn.functional.avg_pool1d(lib.ones(5), 2)),
    (RuntimeError, lambda lib: lib.nn.functional.avg_pool1d(lib.ones(1, 1, 1), 2)),
]


@pytest.mark.parametrize("error,call", POOL_ERRORS, ids=range(len(POOL_ERRORS)))
def test_pooling_errors_as_torch(error, call):
    raises_as_torch(call, error)


def _pooled(lib):
    x = lib.tensor(rand(1, 1, 4, 4))
    return lib.nn.functional.max_pool2d(x, 2, return_indices=True)


UNPOOL_ERRORS = [
    (ValueError, lambda lib, o, i: lib.nn.functional.max_unpool2d(o, i, 2, output_size=(9, 9))),
    (ValueError, lambda lib, o, i: lib.nn.functional.max_unpool2d(o, i, 2,
                                                                  output_size=(1, 5, 5))),
    (ValueError, lambda lib, o, i: lib.nn.functional.max_unpool1d(o[0], i[0], 2,
                                                                  output_size=(9,))),
    (RuntimeError, lambda lib, o, i: lib.nn.functional.max_unpool2d(  # one bad index: which
        o, lib.tensor([[[[0, 3], [99, 15]]]]), 2)),  # PyTorch names of several varies
    (RuntimeError, lambda lib, o, i: lib.nn.functional.max_unpool2d(o, i.double(), 2)),
    (RuntimeError, lambda lib, o, i: lib.nn.functional.max_unpool2d(o, i[..., :1], 2)),
    (RuntimeError, lambda lib, o, i: lib.nn.functional.max_unpool2d(o[0, 0], i[0, 0], 2)),
    (RuntimeError, lambda lib, o, i: lib.nn.functional.max_unpool3d(o[0], i[0], 2)),
    (NotImplementedError, lambda lib, o, i: lib.nn.functional.max_unpool2d(
        o.to(lib.int32), i, 2)),
]


@pytest.mark.parametrize("error,call", UNPOOL_ERRORS, ids=range(len(UNPOOL_ERRORS)))
def test_max_unpool_errors_as_torch(error, call):
    raises_as_torch(lambda lib: call(lib, *_pooled(lib)), error)


def test_module_reprs_match_torch():
    for make in (lambda m: m.MaxUnpool2d(2), lambda m: m.MaxUnpool1d(3, 2, 1),
                 lambda m: m.MaxUnpool3d((1, 2, 2)), lambda m: m.MaxPool3d(2, ceil_mode=True),
                 lambda m: m.AvgPool3d(3, 2, 1), lambda m: m.Conv3d(2, 4, 3, groups=2),
                 lambda m: m.ConvTranspose1d(2, 4, 3, output_padding=1, stride=2),
                 lambda m: m.ConvTranspose3d(2, 4, (1, 2, 3)), lambda m: m.InstanceNorm3d(4)):
        assert repr(make(gg.nn)) == repr(make(torch.nn))


def test_max_pool_modules_return_indices_for_max_unpool():
    x = rand(2, 3, 6, 7)
    outs = []
    for lib in (gg, torch):
        pool = lib.nn.MaxPool2d(3, 2, 1, return_indices=True, ceil_mode=True)
        unpool = lib.nn.MaxUnpool2d(3, 2, 1)
        xt = lib.tensor(x, requires_grad=True)
        pooled, idx = pool(xt)
        out = unpool(pooled, idx, output_size=xt.shape)
        (g,) = lib.autograd.grad((out * lib.tensor(rand(*out.shape, seed=3))).sum(), xt)
        outs.append([pooled, idx, out, g])
        assert repr(pool) == repr(torch.nn.MaxPool2d(3, 2, 1, return_indices=True,
                                                     ceil_mode=True))
    for a, b in zip(*outs, strict=True):
        close(a, b)


def test_max_pool_indices_of_nan_windows_as_torch():
    x = rand(1, 2, 6, 6)
    x[0, 0, 0, 1] = x[0, 0, 1, 0] = x[0, 1, 3, 3] = np.nan
    outs = [lib.nn.functional.max_pool2d(lib.tensor(x), 3, 2, 1, return_indices=True)
            for lib in (gg, torch)]
    for a, b in zip(*outs, strict=True):
        np.testing.assert_array_equal(a.numpy(), b.numpy())


@pytest.mark.parametrize("shape,size", [((2, 3, 7, 5), (3, 2)), ((3, 6, 6), 4),
                                        ((1, 2, 5, 9), (1, 4)), ((2, 4, 3, 3), (None, 2))])
def test_adaptive_max_pool2d_indices_match_torch(shape, size):
    rng = np.random.default_rng(0)
    a = rng.integers(0, 4, size=shape).astype(np.float64)  # ties: the first max, as torch
    a.flat[3] = np.nan
    results = []
    for lib in (torch, gg):
        x = lib.tensor(a, requires_grad=True)
        values, indices = lib.nn.functional.adaptive_max_pool2d(x, size, return_indices=True)
        module = lib.nn.AdaptiveMaxPool2d(size, return_indices=True)(x)
        values.nan_to_num(0.0).sum().backward()
        results.append((values.detach().numpy(), indices.numpy(), module[1].numpy(),
                        x.grad.numpy()))
    for t, g in zip(*results, strict=True):
        np.testing.assert_array_equal(g, t)


def test_adaptive_max_pool1d_matches_torch():
    a = np.random.default_rng(1).normal(size=(2, 3, 10))
    results = []
    for lib in (torch, gg):
        x = lib.tensor(a)
        values, indices = lib.nn.functional.adaptive_max_pool1d(x, 4, return_indices=True)
        plain = lib.nn.AdaptiveMaxPool1d(4)(x)
        results.append((values.numpy(), indices.numpy(), plain.numpy()))
    for t, g in zip(*results, strict=True):
        np.testing.assert_array_equal(g, t)


@pytest.mark.parametrize("nd", [1, 2, 3])
@pytest.mark.parametrize("kw", [{}, {"padding": 1}, {"stride": 1, "dilation": 2},
                                {"ceil_mode": True, "stride": 3}])
def test_max_pool_of_an_empty_batch(nd, kw):
    # an empty batch (a last, empty shard) gives empty results and gradients, as in torch
    shape = (0, 2) + (6,) * nd
    outs = []
    for lib in (gg, torch):
        x = lib.zeros(*shape, requires_grad=True)
        out, idx = getattr(lib.nn.functional, f"max_pool{nd}d")(x, 2, return_indices=True, **kw)
        out.sum().backward()
        outs.append((tuple(out.shape), tuple(idx.shape), tuple(x.grad.shape)))
        if "dilation" not in kw and "ceil_mode" not in kw:
            up = getattr(lib.nn.functional, f"max_unpool{nd}d")(out, idx, 2, **kw)
            outs[-1] += (tuple(up.shape),)
    assert outs[0] == outs[1]
