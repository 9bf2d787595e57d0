"""Normalisation layers against PyTorch: batch norm (running statistics, train/eval,
second derivatives, the functional form, state_dict), group norm, RMSNorm, and the
error messages of these and of instance norm in PyTorch's wording."""


from __future__ import annotations

import numpy as np
import pytest
import torch
from helpers import close, rand, step_both, twin_layers

import graphgrad as gg
from graphgrad import nn
from graphgrad.nn import functional as F

# ---- batch and group normalisation --------------------------------------------------------
BATCHNORMS = [
    ("bn1d", lambda m: m.BatchNorm1d(3), (8, 3)),
    ("bn1d_3d", lambda m: m.BatchNorm1d(3), (4, 3, 5)),
    ("bn2d", lambda m: m.BatchNorm2d(2), (3, 2, 4, 5)),
    ("bn2d_momentum", lambda m: m.BatchNorm2d(2, momentum=0.3, eps=1e-3), (2, 2, 3, 3)),
    ("bn2d_cumulative", lambda m: m.BatchNorm2d(2, momentum=None), (2, 2, 3, 3)),
    ("bn1d_no_affine", lambda m: m.BatchNorm1d(3, affine=False), (5, 3)),
    ("bn1d_no_bias", lambda m: m.BatchNorm1d(3, bias=False), (5, 3)),
    ("bn2d_untracked", lambda m: m.BatchNorm2d(2, track_running_stats=False), (2, 2, 3, 3)),
    ("bn3d", lambda m: m.BatchNorm3d(2), (2, 2, 3, 2, 2)),
    ("in1d", lambda m: m.InstanceNorm1d(3), (2, 3, 5)),
    ("in2d_affine_tracked", lambda m: m.InstanceNorm2d(2, affine=True,
                                                       track_running_stats=True), (3, 2, 3, 3)),
    ("in2d_unbatched", lambda m: m.InstanceNorm2d(2, momentum=0.3, track_running_stats=True),
     (2, 3, 3)),
]


@pytest.mark.parametrize("name,make,shape", BATCHNORMS, ids=[b[0] for b in BATCHNORMS])
def test_batchnorm_train_then_eval_matches_torch(name, make, shape):
    g_mod, t_mod = twin_layers(make)
    for step in range(3):  # the running statistics move the same way, step by step
        step_both(g_mod, t_mod, rand(*shape, seed=step) * 2 + 1, seed=step)
        g_mod.zero_grad()
        t_mod.zero_grad()
    g_mod.eval()
    t_mod.eval()
    step_both(g_mod, t_mod, rand(*shape, seed=10))


def test_batchnorm_second_derivatives_match_torch():
    """d/dx and d/dweight of |d out/dx|^2: batch norm is made of differentiable ops."""
    g_mod, t_mod = twin_layers(lambda m: m.BatchNorm2d(2))
    x = rand(3, 2, 2, 3, seed=4)
    r = rand(3, 2, 2, 3, seed=5)
    gx, tx = gg.tensor(x, requires_grad=True), torch.tensor(x, requires_grad=True)
    (dg,) = gg.autograd.grad((g_mod(gx) * gg.tensor(r)).sum(), gx, create_graph=True)
    (dt,) = torch.autograd.grad((t_mod(tx) * torch.tensor(r)).sum(), tx, create_graph=True)
    close(dg, dt)
    hg = gg.autograd.grad((dg ** 2).sum(), [gx, g_mod.weight])
    ht = torch.autograd.grad((dt ** 2).sum(), [tx, t_mod.weight])
    for a, b in zip(hg, ht, strict=True):
        close(a, b, 1e-9, 1e-11)


def test_functional_batch_norm_matches_torch():
    x = rand(6, 3, 2)
    w, b = rand(3, seed=1), rand(3, seed=2)
    rm_g, rv_g = gg.zeros(3, dtype=gg.float64), gg.ones(3, dtype=gg.float64)
    rm_t, rv_t = torch.zeros(3, dtype=torch.float64), torch.ones(3, dtype=torch.float64)
    out_g = F.batch_norm(gg.tensor(x), rm_g, rv_g, gg.tensor(w), gg.tensor(b), True, 0.2)
    out_t = torch.nn.functional.batch_norm(torch.tensor(x), rm_t, rv_t, torch.tensor(w),
                                           torch.tensor(b), True, 0.2)
    close(out_g, out_t)
    close(rm_g, rm_t)
    close(rv_g, rv_t)
    # eval with the running statistics; training with none (batch statistics only)
    close(F.batch_norm(gg.tensor(x), rm_g, rv_g),
          torch.nn.functional.batch_norm(torch.tensor(x), rm_t, rv_t))
    close(F.batch_norm(gg.tensor(x), None, None, training=True),
          torch.nn.functional.batch_norm(torch.tensor(x), None, None, training=True))


def test_batchnorm_errors_use_torch_wording():
    with pytest.raises(RuntimeError, match="running_mean must be defined in evaluation mode"):
        F.batch_norm(gg.randn(4, 3), None, None, training=False)
    with pytest.raises(ValueError, match=r"Expected more than 1 value per channel when "
                       r"training, got input size graphgrad.Size\(\[1, 3\]\)"):
        nn.BatchNorm1d(3)(gg.randn(1, 3))
    with pytest.raises(RuntimeError, match="running_mean should contain 3 elements not 4"):
        F.batch_norm(gg.randn(2, 3), gg.zeros(4), gg.ones(4), training=True)
    with pytest.raises(RuntimeError, match="weight should contain 3 elements not 4"):
        F.batch_norm(gg.randn(2, 3), gg.zeros(3), gg.ones(3), gg.ones(4), training=True)
    with pytest.raises(ValueError, match=r"expected 2D or 3D input \(got 4D input\)"):
        nn.BatchNorm1d(3)(gg.randn(2, 3, 4, 5))
    with pytest.raises(ValueError, match=r"expected 4D input \(got 3D input\)"):
        nn.BatchNorm2d(3)(gg.randn(2, 3, 4))
    nn.BatchNorm1d(3).eval()(gg.randn(1, 3))  # eval: one sample is fine


def test_batchnorm_state_dict_and_reset_as_torch():
    t_mod, g_mod = torch.nn.BatchNorm2d(2), nn.BatchNorm2d(2)
    assert list(g_mod.state_dict()) == list(t_mod.state_dict())
    g_mod(gg.randn(3, 2, 2, 2))
    assert int(g_mod.num_batches_tracked) == 1
    g_mod.reset_running_stats()
    close(g_mod.running_mean, np.zeros(2))
    close(g_mod.running_var, np.ones(2))
    assert int(g_mod.num_batches_tracked) == 0
    # a model with batch norm trains in float32 with float32 statistics
    assert g_mod.running_mean.dtype == gg.float32


GROUPNORMS = [
    ("gn", lambda m: m.GroupNorm(2, 4), (3, 4, 5)),
    ("gn_2d", lambda m: m.GroupNorm(3, 6, eps=1e-3), (2, 6, 2, 3)),
    ("gn_instance", lambda m: m.GroupNorm(4, 4), (2, 4, 3, 3)),
    ("gn_layer", lambda m: m.GroupNorm(1, 4, affine=False), (2, 4, 3)),
    ("gn_no_bias", lambda m: m.GroupNorm(2, 4, bias=False), (2, 4, 3)),
]


@pytest.mark.parametrize("name,make,shape", GROUPNORMS, ids=[b[0] for b in GROUPNORMS])
def test_groupnorm_matches_torch(name, make, shape):
    g_mod, t_mod = twin_layers(make)
    step_both(g_mod, t_mod, rand(*shape))


def test_groupnorm_errors_use_torch_wording():
    with pytest.raises(ValueError, match=r"num_channels \(4\) must be divisible by "
                       r"num_groups \(3\)"):
        nn.GroupNorm(3, 4)
    with pytest.raises(RuntimeError, match=r"Expected number of channels in input to be "
                       r"divisible by num_groups, but got input of shape \[2, 5, 4\] and "
                       r"num_groups=2"):
        F.group_norm(gg.randn(2, 5, 4), 2)
    with pytest.raises(ValueError, match="Expected more than 1 value per channel"):
        F.group_norm(gg.randn(1, 2), 2)


@pytest.mark.parametrize("shape,norm_shape,kw", [((3, 4), 4, {}),
                                                 ((2, 3, 4), (3, 4), {"eps": 1e-3}),
                                                 ((2, 5), [5], {"elementwise_affine": False})])
def test_rmsnorm_matches_torch(shape, norm_shape, kw):
    g_mod, t_mod = twin_layers(lambda m: m.RMSNorm(norm_shape, **kw))
    assert list(g_mod.state_dict()) == list(t_mod.state_dict())
    step_both(g_mod, t_mod, rand(*shape))
    for lib in (gg, torch):
        with pytest.raises(RuntimeError, match=r"Given normalized_shape=\[4\], expected input "
                           r"with shape \[\*4\], but got input of size\[2, 3\]"):
            lib.nn.functional.rms_norm(lib.ones(2, 3), [4])


def test_instance_norm_errors_use_torch_wording():
    for lib in (gg, torch):
        with pytest.raises(ValueError, match="Expected more than 1 spatial element when "
                           "training, got input size"):
            lib.nn.functional.instance_norm(lib.ones(2, 3, 1))
        with pytest.raises(ValueError, match=r"expected 3D or 4D input \(got 2D input\)"):
            lib.nn.InstanceNorm2d(3)(lib.ones(2, 3))
        with pytest.raises(ValueError, match="expected input's size at dim=1 to match "
                           r"num_features \(4\), but got: 3."):
            lib.nn.InstanceNorm1d(4, affine=True)(lib.ones(2, 3, 5))
        with pytest.warns(UserWarning, match="does not match num_features"):
            lib.nn.InstanceNorm1d(4)(lib.randn(2, 3, 5))
        with pytest.raises(ValueError, match=r"expected 5D input \(got 4D input\)"):
            lib.nn.BatchNorm3d(3)(lib.ones(2, 3, 2, 2))
