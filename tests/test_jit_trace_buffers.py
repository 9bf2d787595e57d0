"""graphgrad.jit.trace of modules that update buffers in place (BatchNorm's running
statistics and ``num_batches_tracked`` in train mode): every call of the traced module
updates them as eager does, over several calls and batch sizes; gradients agree too."""

from __future__ import annotations

import copy
import warnings

import numpy as np
import pytest

import graphgrad as gg
from graphgrad import jit, nn


def _states(m: nn.Module) -> dict[str, np.ndarray]:
    return {k: v.detach().numpy().copy() for k, v in m.state_dict().items()}


@pytest.mark.parametrize("make, shape", [
    (lambda: nn.BatchNorm1d(3), (4, 3)),
    (lambda: nn.BatchNorm1d(3, momentum=0.3), (5, 3, 2)),
    (lambda: nn.BatchNorm2d(2), (3, 2, 4, 4)),
    (lambda: nn.Sequential(nn.Linear(3, 3), nn.BatchNorm1d(3), nn.ReLU()), (6, 3)),
])
def test_traced_module_updates_buffers_as_eager(make, shape):
    gg.manual_seed(0)
    module = make()
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # a buffer update the trace could not explain warns
        traced = jit.trace(module, gg.randn(*shape))
    eager = copy.deepcopy(module)           # the same state the trace left behind
    before = _states(module)
    for k in range(3):
        x = gg.randn(shape[0] + k, *shape[1:]) * (k + 1) + k  # other batch sizes too
        out, ref = traced(x), eager(x)
        np.testing.assert_allclose(out.detach().numpy(), ref.detach().numpy(), rtol=1e-5,
                                   atol=1e-6)
        mine, theirs = _states(module), _states(eager)
        assert mine.keys() == theirs.keys()
        for name in mine:
            np.testing.assert_allclose(mine[name], theirs[name], rtol=1e-5, atol=1e-7,
                                       err_msg=f"buffer {name} after call {k + 1}")
    after = _states(module)
    moved = [n for n in after if "running" in n and not np.allclose(after[n], before[n])]
    assert moved, "the running statistics did not move"
    tracked = [n for n in after if n.endswith("num_batches_tracked")]
    assert all(after[n] == before[n] + 3 for n in tracked)


def test_traced_batchnorm_gradients_match_eager():
    gg.manual_seed(1)
    module = nn.BatchNorm1d(4)
    traced = jit.trace(module, gg.randn(8, 4))
    eager = copy.deepcopy(module)
    x = gg.randn(6, 4)
    traced(x).pow(2).sum().backward()
    eager(x).pow(2).sum().backward()
    for (name, p), q in zip(module.named_parameters(), eager.parameters(), strict=True):
        np.testing.assert_allclose(p.grad.numpy(), q.grad.numpy(), rtol=1e-5, atol=1e-6,
                                   err_msg=name)


def test_eval_mode_trace_writes_nothing_and_says_which_outputs_are_state():
    module = nn.BatchNorm1d(3)
    train = jit.trace(module, gg.randn(4, 3))
    assert any("num_batches_tracked" in line and "written back" in line
               for line in train.ir.header)
    assert len(train.ir.output_node.inputs) == 4   # the output and three buffers
    module.eval()
    frozen = _states(module)
    evaluated = jit.trace(module, gg.randn(4, 3))
    assert len(evaluated.ir.output_node.inputs) == 1
    evaluated(gg.randn(4, 3))
    assert all(np.array_equal(frozen[k], v) for k, v in _states(module).items())
