"""Whole models under ``graphgrad.compile``: the digits MLP and CNN (graphgrad/train.py)
with their loss, and a TransformerEncoder with and without masks, are one graph each in
training and in eval mode, and compute what eager computes."""

from __future__ import annotations

import copy

import numpy as np
import pytest

import graphgrad as gg
from graphgrad import nn
from graphgrad.compiler import explain
from graphgrad.train import make_model


def _one_graph(fn, *args, **kwargs) -> None:
    out = explain(fn)(*args, **kwargs)
    assert (out.graph_count, out.graph_break_count) == (1, 0), str(out)


@pytest.mark.parametrize("kind", ["mlp", "cnn"])
@pytest.mark.parametrize("mode", ["train", "eval"])
def test_digits_models_with_their_loss_are_one_graph(kind, mode):
    gg.manual_seed(0)
    model = getattr(make_model(kind), mode)()
    x, y = gg.randn(16, 64), gg.randint(0, 10, (16,))

    def step(x, y):
        return nn.functional.cross_entropy(model(x), y)
    _one_graph(model, x)
    _one_graph(step, x, y)
    np.testing.assert_allclose(gg.compile(step)(x, y).item(), step(x, y).item(), rtol=1e-5)


def _encoder() -> nn.Module:
    gg.manual_seed(0)
    return nn.TransformerEncoder(nn.TransformerEncoderLayer(16, 4, 32, batch_first=True), 2)


@pytest.mark.parametrize("mode", ["train", "eval"])
def test_transformer_encoder_is_one_graph_and_equals_eager(mode):
    gg.compiler.reset()
    model = getattr(_encoder(), mode)()
    twin = copy.deepcopy(model)
    compiled = gg.compile(model)
    x = gg.randn(3, 5, 16)
    pad = gg.tensor([[False] * 5, [False] * 4 + [True], [False] * 3 + [True] * 2])
    causal = gg.triu(gg.full((5, 5), float("-inf")), diagonal=1)
    for kw in ({}, {"src_key_padding_mask": pad}, {"mask": causal}):
        _one_graph(model, x, **kw)
        for m in (model, twin):
            m.zero_grad()
        gg.manual_seed(1)   # (dropout draws the same masks in both)
        want = twin(x, **kw)
        gg.manual_seed(1)
        got = compiled(x, **kw)
        want.sum().backward()
        got.sum().backward()
        np.testing.assert_allclose(got.detach().numpy(), want.detach().numpy(), rtol=1e-5,
                                   atol=1e-6)
        for p, q in zip(model.parameters(), twin.parameters(), strict=True):
            np.testing.assert_allclose(p.grad.numpy(), q.grad.numpy(), rtol=1e-4, atol=1e-5)
