"""A corpus of ordinary functions and small nn-style modules that every capture frontend
(fx.symbolic_trace, jit.trace, jit.script, compile) must capture faithfully: the captured
graph's outputs and gradients equal eager's on fresh inputs.

``CaptureCase.make_inputs(rng)`` returns fresh float64 tensors that do not require grad
(a test calls ``requires_grad_()`` on the copies it differentiates). ``script_ok`` is
False where the function's source is outside what a source-to-graph compiler takes
(e.g. it calls a helper through a module object it cannot see); ``trace_ok`` likewise for
tracing. Both are True for every case here unless a comment says why.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

import graphgrad as gg
import graphgrad.nn.functional as F
from graphgrad import nn


@dataclass(frozen=True)
class CaptureCase:
    name: str
    fn: Callable
    make_inputs: Callable[[np.random.Generator], tuple]
    script_ok: bool = True
    trace_ok: bool = True

    def __repr__(self) -> str:
        return self.name


def _t(rng: np.random.Generator, *shape: int, positive: bool = False) -> gg.Tensor:
    a = rng.standard_normal(shape)
    if positive:
        a = np.abs(a) + 0.5
    return gg.tensor(a, dtype=gg.float64)


def shapes(*specs):
    """make_inputs for tensors of the given shapes (a shape ending in "+" is positive)."""
    def make(rng):
        return tuple(_t(rng, *s[:-1], positive=True) if s and s[-1] == "+" else _t(rng, *s)
                     for s in specs)
    return make


# ---- functions ---------------------------------------------------------------------------

def affine(x, w, b):
    return x @ w + b


def tanh_mlp(x, w1, w2):
    return gg.tanh(x @ w1) @ w2


def softmax_rows(x):
    return gg.softmax(x, dim=-1)


def log_softmax_rows(x):
    return gg.log_softmax(x, dim=1)


def logsumexp_rows(x):
    return gg.logsumexp(x, dim=-1)


def mse(a, b):
    return ((a - b) ** 2).mean()


def soft_cross_entropy(logits, target):
    return -(gg.softmax(target, dim=-1) * gg.log_softmax(logits, dim=-1)).sum(-1).mean()


def layer_norm_from_ops(x, g, b):
    mu = x.mean(-1, keepdim=True)
    var = ((x - mu) ** 2).mean(-1, keepdim=True)
    return (x - mu) / gg.sqrt(var + 1e-5) * g + b


def attention(q, k, v):
    scores = q @ k.transpose(-2, -1) * 0.5
    return gg.softmax(scores, dim=-1) @ v


def gelu_tanh(x):
    return 0.5 * x * (1.0 + gg.tanh(0.7978845608 * (x + 0.044715 * x ** 3)))


def swish(x):
    return x * gg.sigmoid(x)


def residual(x, w):
    return x + gg.relu(x @ w)


def polynomial(x):
    return 3 * x ** 3 - 2 * x ** 2 + x - 1


def rosenbrock(x):
    return (100 * (x[1:] - x[:-1] ** 2) ** 2 + (1 - x[:-1]) ** 2).sum()


def cosine_similarity(a, b):
    return (a * b).sum(-1) / (a.norm(dim=-1) * b.norm(dim=-1))


def huber_from_ops(a, b):
    d = a - b
    return gg.where(gg.abs(d) < 1.0, 0.5 * d ** 2, gg.abs(d) - 0.5).mean()


def cat_and_sum(x, y):
    return (gg.cat([x, y], dim=0) * 2).sum(0)


def stack_mean(x, y, z):
    return gg.stack([x, y, z], dim=0).mean(0)


def softplus_from_ops(x):
    return gg.log(1 + gg.exp(x))


def row_max(x):
    return gg.amax(x, dim=1) + x.sum(1)


def clamp_times(x):
    return x.clamp(-0.5, 0.5) * x


def transpose_flatten(x):
    return x.t().reshape(-1) * 2


def outer_broadcast(x, y):
    return x.unsqueeze(0) + y.unsqueeze(1)


def two_outputs(x, y):
    return x + y, x * y


def _scaled_tanh(a):
    return a.tanh() * 2


def uses_helper(x):
    return _scaled_tanh(x) + _scaled_tanh(x * 2)


def standardize(x):
    return (x - x.mean(0)) / x.std(0)


def pythagoras(x, y):
    return gg.sin(x) ** 2 + gg.cos(x) ** 2 * y


def min_max(a, b):
    return gg.maximum(a, b) - gg.minimum(a, b) * 0.5


def batched_matmul(a, b):
    return gg.bmm(a, b).relu()


def exp_log_chain(x):
    return gg.log(gg.exp(x) + 1.0) * gg.sqrt(x * x + 1.0)


def method_chain(x):
    return x.sin().mul(2).add(x.cos()).pow(2).sum(dim=0)


# ---- modules -----------------------------------------------------------------------------

class ResidualBlock(nn.Module):
    def __init__(self, d: int):
        super().__init__()
        self.lin = nn.Linear(d, d, dtype=gg.float64)
        self.act = nn.ReLU()

    def forward(self, x):
        return x + self.act(self.lin(x))


class SelfAttention(nn.Module):
    def __init__(self, d: int):
        super().__init__()
        self.q = nn.Linear(d, d, dtype=gg.float64)
        self.k = nn.Linear(d, d, dtype=gg.float64)
        self.v = nn.Linear(d, d, dtype=gg.float64)
        self.scale = d ** -0.5

    def forward(self, x):
        scores = self.q(x) @ self.k(x).transpose(-2, -1) * self.scale
        return F.softmax(scores, dim=-1) @ self.v(x)


class NormThenLinear(nn.Module):
    def __init__(self, d: int, out: int):
        super().__init__()
        self.norm = nn.LayerNorm(d, dtype=gg.float64)
        self.lin = nn.Linear(d, out, dtype=gg.float64)

    def forward(self, x):
        return F.gelu(self.lin(self.norm(x)))


class MSEModule(nn.Module):
    def __init__(self):
        super().__init__()
        self.loss = nn.MSELoss()

    def forward(self, pred, target):
        return self.loss(pred, target)


class TinyCNN(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv = nn.Conv2d(1, 2, 3, padding=1, dtype=gg.float64)
        self.flat = nn.Flatten()
        self.head = nn.Linear(2 * 4 * 4, 3, dtype=gg.float64)

    def forward(self, x):
        return self.head(self.flat(F.relu(self.conv(x))))


gg.manual_seed(0)
_MLP = nn.Sequential(nn.Linear(4, 8, dtype=gg.float64), nn.Tanh(),
                     nn.Linear(8, 3, dtype=gg.float64))

CORPUS: list[CaptureCase] = [
    CaptureCase("affine", affine, shapes((3, 4), (4, 2), (2,))),
    CaptureCase("tanh_mlp", tanh_mlp, shapes((5, 4), (4, 6), (6, 2))),
    CaptureCase("softmax_rows", softmax_rows, shapes((3, 5))),
    CaptureCase("log_softmax_rows", log_softmax_rows, shapes((3, 5))),
    CaptureCase("logsumexp_rows", logsumexp_rows, shapes((4, 3))),
    CaptureCase("mse", mse, shapes((6,), (6,))),
    CaptureCase("soft_cross_entropy", soft_cross_entropy, shapes((4, 5), (4, 5))),
    CaptureCase("layer_norm_from_ops", layer_norm_from_ops, shapes((3, 6), (6,), (6,))),
    CaptureCase("attention", attention, shapes((4, 3), (5, 3), (5, 2))),
    CaptureCase("gelu_tanh", gelu_tanh, shapes((7,))),
    CaptureCase("swish", swish, shapes((2, 3))),
    CaptureCase("residual", residual, shapes((3, 4), (4, 4))),
    CaptureCase("polynomial", polynomial, shapes((5,))),
    CaptureCase("rosenbrock", rosenbrock, shapes((6,))),
    CaptureCase("cosine_similarity", cosine_similarity, shapes((3, 4), (3, 4))),
    CaptureCase("huber_from_ops", huber_from_ops, shapes((8,), (8,))),
    CaptureCase("cat_and_sum", cat_and_sum, shapes((2, 3), (4, 3))),
    CaptureCase("stack_mean", stack_mean, shapes((3,), (3,), (3,))),
    CaptureCase("softplus_from_ops", softplus_from_ops, shapes((4,))),
    CaptureCase("row_max", row_max, shapes((3, 4))),
    CaptureCase("clamp_times", clamp_times, shapes((6,))),
    CaptureCase("transpose_flatten", transpose_flatten, shapes((2, 3))),
    CaptureCase("outer_broadcast", outer_broadcast, shapes((3,), (4,))),
    CaptureCase("two_outputs", two_outputs, shapes((3,), (3,))),
    CaptureCase("uses_helper", uses_helper, shapes((4,))),
    CaptureCase("standardize", standardize, shapes((5, 3))),
    CaptureCase("pythagoras", pythagoras, shapes((4,), (4,))),
    CaptureCase("min_max", min_max, shapes((5,), (5,))),
    CaptureCase("batched_matmul", batched_matmul, shapes((2, 3, 4), (2, 4, 2))),
    CaptureCase("exp_log_chain", exp_log_chain, shapes((5,))),
    CaptureCase("method_chain", method_chain, shapes((3, 2))),
    CaptureCase("mlp_module", _MLP, shapes((5, 4))),
    CaptureCase("residual_block", ResidualBlock(4), shapes((3, 4))),
    CaptureCase("self_attention", SelfAttention(4), shapes((5, 4))),
    CaptureCase("norm_then_linear", NormThenLinear(6, 3), shapes((4, 6))),
    CaptureCase("mse_module", MSEModule(), shapes((6,), (6,))),
    CaptureCase("tiny_cnn", TinyCNN(), shapes((2, 1, 4, 4))),
]
