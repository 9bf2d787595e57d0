"""The min-cut partition of the compiled backward (``graphgrad.backends.min_cut``): on
known graphs the saved set is the one the cut chose (fewer bytes than the former rule,
which recomputed every elementwise value from the nearest library-call result), values
a backward matrix product reads are saved rather than recomputed, and the gradients
equal PyTorch's."""

from __future__ import annotations

import numpy as np
import pytest

import graphgrad as gg
import graphgrad.nn.functional as F
from graphgrad.backends.aot import partition
from graphgrad.backends.min_cut import min_cut, size_of
from graphgrad.graph import Graph, Spec
from graphgrad.dynamo import CompiledFunction
from graphgrad.ops import REGISTRY

torch = pytest.importorskip("torch")


def _partition(f, *shapes):
    cf = CompiledFunction(f, backend="eager", share=False)
    cf(*[gg.randn(*s) for s in shapes])
    part = partition(cf.graphs[0], list(range(len(shapes))))
    saved = part.forward.outputs[part.n_outputs:]
    return part, sum(size_of(n) for n in saved)


def _grads_match(f, tf, *shapes):
    gg.manual_seed(0)
    xs = [gg.randn(*s, requires_grad=True) for s in shapes]
    got = gg.autograd.grad(CompiledFunction(f, backend="default", share=False)(*xs), xs)
    ts = [torch.tensor(x.detach().numpy(), requires_grad=True) for x in xs]
    want = torch.autograd.grad(tf(*ts), ts)
    for a, b in zip(got, want, strict=True):
        # float32 sums of terms up to |b|'s largest: an entry that cancels (525 among
        # entries of 1e6 in add_exp's) is exact only to ~eps times that largest term
        scale = max(1.0, float(np.abs(b.numpy()).max()))
        np.testing.assert_allclose(a.numpy(), b.numpy(), rtol=1e-4, atol=1e-5 * scale)


def add_exp(x, w, v):
    return ((x @ w) + (x @ v)).exp().sum()


def test_the_cut_saves_one_sum_instead_of_its_two_matmul_operands():
    part, nbytes = _partition(add_exp, (8, 16), (16, 16), (16, 16))
    # the former rule saved both matmul results (recomputing their sum and exp): 1024 B
    # beside the inputs; the cut saves the sum (512 B) and recomputes only exp from it
    assert sorted(part.saved) == ["add", "v", "w", "x"]
    assert nbytes == 8 * 16 * 4 + (8 * 16 + 2 * 16 * 16) * 4
    assert [n.op.__name__ for n in part.backward.nodes if n.kind == "call"][0] == "Exp"
    _grads_match(add_exp, add_exp, (8, 16), (16, 16), (16, 16))


def layer_norm(x, w, b):
    return F.layer_norm(x, (x.shape[-1],), w, b).sum()


def torch_layer_norm(x, w, b):
    return torch.nn.functional.layer_norm(x, (x.shape[-1],), w, b).sum()


def layer_norm_parts(x, w, b):
    xc = x - x.mean(-1, keepdim=True)
    return (xc * ((xc * xc).mean(-1, keepdim=True) + 1e-5).rsqrt() * w + b).sum()


def test_layer_norm_saves_the_centered_input_and_the_variance():
    part, nbytes = _partition(layer_norm_parts, (8, 16), (16,), (16,))
    # the former rule saved x, its mean and the variance (640 B); the centered x replaces
    # x and the mean (608 B), the normalization is recomputed from it
    assert sorted(part.saved) == ["mean_1", "sub", "w"]
    assert nbytes == (8 * 16 + 8 + 16) * 4 < (8 * 16 + 8 + 8 + 16) * 4
    _grads_match(layer_norm_parts, torch_layer_norm, (8, 16), (16,), (16,))


def test_the_layer_norm_op_saves_only_its_inputs():
    # F.layer_norm is one op whose backward recomputes the statistics from its input
    part, nbytes = _partition(layer_norm, (8, 16), (16,), (16,))
    assert sorted(part.saved) == ["w", "x"]
    assert nbytes == (8 * 16 + 16) * 4
    _grads_match(layer_norm, torch_layer_norm, (8, 16), (16,), (16,))


def gelu_mlp(x, w1, w2):
    return (F.gelu(x @ w1, approximate="tanh") @ w2).sum()


def torch_gelu_mlp(x, w1, w2):
    return (torch.nn.functional.gelu(x @ w1, approximate="tanh") @ w2).sum()


def test_a_value_a_backward_matmul_reads_is_saved_not_recomputed():
    part, _ = _partition(gelu_mlp, (8, 16), (16, 16), (16, 16))
    # GELU's output feeds w2's gradient (a matrix product): recomputing it would be a
    # whole extra pass over it (Inductor's rule), so it is saved beside GELU's input
    assert sorted(part.saved) == ["gelu", "matmul", "w1", "w2", "x"]
    assert not any(n.kind == "call" and n.op.__name__ == "Gelu" for n in part.backward.nodes)
    _grads_match(gelu_mlp, torch_gelu_mlp, (8, 16), (16, 16), (16, 16))


def relu_mlp(x, w1, w2):
    return ((x @ w1).relu() @ w2).sum()


def test_relu_mlp_backward_reads_the_saved_activation():
    part, nbytes = _partition(relu_mlp, (8, 16), (16, 32), (32, 4))
    # ReLU's gradient reads its output, which w2's gradient reads too: the matmul's
    # result never crosses over and no ReLU runs again
    assert sorted(part.saved) == ["relu", "w1", "w2", "x"]
    assert not any(n.kind == "call" and n.op.__name__ == "Relu" for n in part.backward.nodes)
    assert nbytes == (8 * 32 + 16 * 32 + 32 * 4 + 8 * 16) * 4
    _grads_match(relu_mlp, relu_mlp, (8, 16), (16, 32), (32, 4))


def test_min_cut_on_a_hand_built_graph_saves_the_fewest_bytes():
    """s = x.sum(1, keepdim=True); e = exp(s); the backward reads b1 = e * x and
    b2 = e + x (128 B each): the cut saves x and one (4, 1) value (144 B) and recomputes
    b1 and b2 from them; with b1 and b2 materialized in the backward they are saved."""
    f32 = np.dtype("float32")
    g = Graph("hand")
    x = g.placeholder(Spec((4, 8), f32), "x")
    s = g.add("call", "s", op=REGISTRY["Sum"], inputs=(x,), params={"dim": (1,),
              "keepdim": True}, spec=Spec((4, 1), f32), nargs=1)
    e = g.add("call", "e", op=REGISTRY["Exp"], inputs=(s,), spec=Spec((4, 1), f32), nargs=1)
    b1 = g.add("call", "b1", op=REGISTRY["Mul"], inputs=(e, x), spec=Spec((4, 8), f32),
               nargs=2)
    b2 = g.add("call", "b2", op=REGISTRY["Add"], inputs=(e, x), spec=Spec((4, 8), f32),
               nargs=2)
    g.set_outputs([b1, b2])
    saved, recomputed = min_cut([x], [s, e, b1, b2], [b1, b2], set())
    assert sum(size_of(n) for n in saved) == 144 and x in saved and len(saved) == 2
    assert recomputed[-2:] == [b1, b2]
    saved, recomputed = min_cut([x], [s, e, b1, b2], [b1, b2], {b1, b2})
    assert saved == [b1, b2] and recomputed == []


def test_without_the_materialized_ban_the_cut_saves_fewest_bytes():
    """``ban_recompute_materialized_backward = False`` (PyTorch's switch): the GELU MLP's
    cut saves GELU's input alone (512 B fewer than with the ban) and the backward
    recomputes GELU; the gradients stay PyTorch's."""
    from graphgrad.backends.min_cut import config
    banned, banned_bytes = _partition(gelu_mlp, (8, 16), (16, 16), (16, 16))
    config.ban_recompute_materialized_backward = False
    try:
        part, nbytes = _partition(gelu_mlp, (8, 16), (16, 16), (16, 16))
        assert sorted(part.saved) == ["matmul", "w1", "w2", "x"]
        assert nbytes == banned_bytes - 8 * 16 * 4
        assert any(n.kind == "call" and n.op.__name__ == "Tanh" for n in part.backward.nodes)
        _grads_match(gelu_mlp, torch_gelu_mlp, (8, 16), (16, 16), (16, 16))
    finally:
        config.ban_recompute_materialized_backward = True
