"""BatchNorm in train mode under the capture frontends and the static API: torch.fx and
TorchScript keep the running-statistics update (fx calls BatchNorm as a leaf module when
the GraphModule runs; a scripted graph holds the buffer writes), so graphgrad's must give
eager's outputs and buffers call after call, checked against PyTorch; a static graph whose
placeholder leaves the dims batch_norm reads unknown says which and what to do."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from helpers import close, twin_layers

import graphgrad as gg
import graphgrad.static as tf


def _seq(nn):
    return nn.Sequential(nn.Linear(4, 3), nn.BatchNorm1d(3), nn.ReLU())


@pytest.mark.parametrize("frontend", ["fx.symbolic_trace", "jit.script"])
def test_captured_sequential_batchnorm_updates_buffers_as_eager(frontend):
    g_mod, t_mod = twin_layers(_seq)
    capture = gg.fx.symbolic_trace if frontend == "fx.symbolic_trace" else gg.jit.script
    captured = capture(g_mod)
    rng = np.random.default_rng(3)
    for _ in range(3):
        x = rng.standard_normal((8, 4))
        close(captured(gg.tensor(x)).detach(), t_mod(torch.tensor(x)).detach())
        # the captured module shares g_mod's buffers, as torch's GraphModule does
        bn_g, bn_t = g_mod[1], t_mod[1]
        close(bn_g.running_mean, bn_t.running_mean)
        close(bn_g.running_var, bn_t.running_var)
        assert int(bn_g.num_batches_tracked) == int(bn_t.num_batches_tracked)
    assert int(g_mod[1].num_batches_tracked) == 3


def test_static_batchnorm_with_unknown_channels_says_what_to_do():
    bn = gg.nn.BatchNorm1d(3)
    with tf.Graph().as_default():
        x = tf.placeholder(tf.float32, shape=(None, None), name="x")
        with pytest.raises(RuntimeError) as e:
            bn(x)
    msg = str(e.value)
    assert msg.startswith("batch_norm: the input of shape [?, ?]")
    assert "number of channels (dim 1)" in msg and "shape=(None, C)" in msg


def test_static_batchnorm_in_training_with_unknown_batch_says_what_to_do():
    seq = _seq(gg.nn)
    with tf.Graph().as_default():
        x = tf.placeholder(tf.float32, shape=(None, 4), name="x")
        with pytest.raises(RuntimeError) as e:
            seq(x)
    msg = str(e.value)
    assert "batch_norm: the input of shape [?, 3]" in msg and "unbiased batch variance" in msg
    assert "module.eval()" in msg and "track_running_stats=False" in msg


def test_static_batchnorm_in_eval_mode_runs_for_any_batch():
    seq = _seq(gg.nn).eval()
    g = tf.Graph()
    with g.as_default():
        x = tf.placeholder(tf.float32, shape=(None, 4), name="x")
        y = seq(x)
        with tf.Session(graph=g) as sess:
            for n in (2, 5):
                v = gg.randn(n, 4)
                np.testing.assert_allclose(sess.run(y, {x: v.numpy()}),
                                           seq(v).detach().numpy(), rtol=1e-5, atol=1e-6)
