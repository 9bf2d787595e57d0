"""The permute of a stack, stacked in the permuted layout (passes/simplify.py): graph
differentiation of attention joins the cotangents of q, k and v into one ``Stack``
(window_cotangents.py) and permutes it back to the projection's layout for a reshape,
which copied the stacked gradient a second time. ``simplify`` makes that a stack of
the permuted cotangents along the dim the permute gives the stacked one, and
``Stack``'s forward writes a stack of row-contiguous views in C order (as torch.stack),
so the reshape is a view; where the pieces are the consecutive slices of one array (the
fused attention backward's flat result) the stack is that array reshaped. The rewrites
are exact (data movement only: bit for bit, the gradients of the rewritten graph too);
a stack something else reads too is left alone. Compiled attention training equals
eager's."""

from __future__ import annotations

import numpy as np
import pytest

import graphgrad as gg
from graphgrad import graph as G
from graphgrad import nn
from graphgrad import passes as P
from graphgrad.dynamo import CompiledFunction
from graphgrad.ops import REGISTRY
from graphgrad.ops.join import Stack
from test_compile_backward_slices import _backward_nodes, _encoder, _train
from test_passes import _assert_same, _check_pass, _run, _with_gradients

torch = pytest.importorskip("torch")

_STACK, _PERMUTE, _CAT = REGISTRY["Stack"], REGISTRY["Permute"], REGISTRY["Cat"]


def _xs(n=3, shape=(2, 3, 4, 5), seed=0) -> list[np.ndarray]:
    rng = np.random.default_rng(seed)
    xs = [rng.standard_normal(shape) for _ in range(n)]
    xs[0].flat[:3] = [-0.0, np.inf, np.nan]
    return xs


def _calls(graph, op) -> list:
    return [n for n in graph.nodes if n.kind == "call" and n.op is op]


def _optimized(fn, xs):
    """(traced graph, optimized graph) of ``fn`` on ``xs``; the two compute the same
    values bit for bit (``_check_pass``)."""
    g = G.trace(fn, *xs)
    new, _ = P.optimize(g)
    _check_pass(P.simplify, g, [gg.tensor(x) for x in xs])
    _assert_same(_run(g, [gg.tensor(x) for x in xs]), _run(new, [gg.tensor(x) for x in xs]))
    return g, new


_CASES = [   # (stack dim, permutation of the stack, the new stack's dim, the inputs' q)
    (0, (1, 3, 0, 2, 4), 2, (0, 2, 1, 3)),   # attention's qkv cotangents
    (0, (1, 0, 2, 3, 4), 1, None),           # only the stacked dim moves: no permutes
    (2, (4, 3, 2, 1, 0), 2, (3, 2, 1, 0)),   # the stacked dim stays where it is
    (4, (4, 0, 1, 2, 3), 0, None),
    (1, (0, 2, 3, 4, 1), 4, None),
]


@pytest.mark.parametrize("case", range(len(_CASES)))
def test_permute_of_a_stack_becomes_a_stack_of_permutes(case):
    d, p, new_dim, q = _CASES[case]

    def f(a, b, c, m=gg):
        return m.stack([a, b, c], dim=d).permute(*p).reshape(-1) * 2.0

    xs = _xs()
    g, new = _optimized(f, xs)
    (stack,) = _calls(new, _STACK)
    assert stack.params["dim"] == new_dim
    assert not any(n.inputs[0] is stack for n in _calls(new, _PERMUTE))
    permutes = _calls(new, _PERMUTE)
    if q is None:
        assert permutes == [] and list(stack.inputs) == new.inputs
    else:
        assert list(stack.inputs) == permutes and all(n.params["dims"] == q for n in permutes)
    want = f(*[gg.tensor(x) for x in xs]).numpy()   # eager
    got = _run(new, [gg.tensor(x) for x in xs])[0]
    assert got.tobytes() == want.tobytes()   # -0.0, inf and NaN where they were
    torch_out = f(*[torch.tensor(x) for x in xs], m=torch).numpy()
    assert got.tobytes() == torch_out.tobytes()


def test_gradients_through_the_rewritten_stack_are_the_same_bit_for_bit():
    xs = _xs(seed=1)

    def f(a, b, c):
        s = gg.stack([a.exp(), b * b, c.sin()], dim=0).permute(1, 3, 0, 2, 4)
        return (s.reshape(6, -1) * gg.tensor(np.arange(60.0))).sum()

    args = [gg.tensor(x) for x in xs]
    plain = _with_gradients(G.trace(f, *xs))
    rewritten = _with_gradients(P.optimize(G.trace(f, *xs))[0])
    assert _calls(P.optimize(G.trace(f, *xs))[0], _STACK)[0].params["dim"] == 2
    _assert_same(_run(plain, args), _run(rewritten, args))


def test_stack_of_row_contiguous_views_is_c_contiguous_and_reshapes_to_a_view():
    """What makes the rewrite pay: NumPy lays out a stack as its inputs lie, so the stack
    of permuted views was itself permuted and the reshape copied it."""
    flat = np.arange(3 * 2 * 4 * 5 * 6, dtype=np.float32)
    xs = [a.transpose(0, 2, 1, 3) for a in flat.reshape(3, 2, 4, 5, 6)]
    out = Stack.forward(*xs, dim=2)
    assert out.flags.c_contiguous
    assert out.tobytes() == np.stack(xs, axis=2).tobytes()
    assert np.shares_memory(out.reshape(10, -1), out)
    # a strided last dim (transposed matrices) keeps NumPy's layout, which copies in runs
    ts = [m.T for m in np.ones((3, 40, 30), np.float32)]
    assert Stack.forward(*ts, dim=0).tobytes() == np.stack(ts).tobytes()
    assert not Stack.forward(*ts, dim=0).flags.c_contiguous
    t = torch.stack([torch.tensor(x) for x in xs], 2)
    assert gg.stack([gg.tensor(x) for x in xs], 2).stride() == t.stride()
    for d in range(-5, 5):   # the op's own dim, negative too (as a pass may give it)
        assert Stack.forward(*xs, dim=d).tobytes() == np.stack(xs, axis=d).tobytes(), d


@pytest.mark.parametrize("kind", ["read twice", "an output", "a cat"])
def test_the_rewrite_is_not_made_where_the_stack_is_read_elsewhere(kind):
    """A stack read by another node too would be made twice; a stack the graph hands out
    is the caller's tensor. Every permutation of a stack can be expressed as a stack of
    permutes, so nothing else refuses it; a cat is not a stack (its joined dim is not
    new), left as it is."""
    def f(a, b, c):
        if kind == "a cat":
            return (gg.cat([a, b, c], 0).permute(1, 0, 2, 3).reshape(-1) * 2.0).sum()
        s = gg.stack([a, b, c], 0)
        out = (s.permute(1, 3, 0, 2, 4).reshape(-1) * 2.0).sum()
        return (out + s.amax()) if kind == "read twice" else (out, s)

    g, new = _optimized(f, _xs())
    join = _STACK if kind != "a cat" else _CAT
    (stack,) = _calls(new, join)
    assert any(n.inputs[0] is stack for n in _calls(new, _PERMUTE))
    assert stack.params["dim"] == 0


_TILED = [   # (pieces of t (4, 6) stacked along 0, whether they are t reshaped)
    (lambda t: [t[0:2].reshape(3, 4), t[2:4].reshape(3, 4)], True),
    (lambda t: list(t.unbind(0)), True),                       # stack(unbind(t))
    (lambda t: [t[:1], t[1:3].reshape(1, 12)[:, :6], t[3:]], False),   # not t's slices
    (lambda t: [t[2:4].reshape(12), t[0:2].reshape(12)], False),       # out of order
    (lambda t: [t[0], t[2]], False),                                   # a gap
    (lambda t: [t[0:4:2].reshape(12), t[1:4:2].reshape(12)], False),   # strided
    (lambda t: [t[:, 0:3], t[:, 3:6]], False),                         # along dim 1
]


@pytest.mark.parametrize("case", range(len(_TILED)))
def test_a_stack_of_the_consecutive_slices_of_one_value_is_a_reshape(case):
    pieces, tiled = _TILED[case]

    def f(t, u):
        return gg.stack(pieces(t * u), 0) * 2.0

    xs = _xs(2, (4, 6))
    g, new = _optimized(f, xs)
    assert (_calls(new, _STACK) == []) is tiled
    if tiled:   # the stack is the product reshaped, no slice of it is left
        assert not any(n.op is REGISTRY["Getitem"] for n in new.nodes if n.kind == "call")
    want = f(*[gg.tensor(x) for x in xs]).numpy()
    assert _run(new, [gg.tensor(x) for x in xs])[0].tobytes() == want.tobytes()


@pytest.mark.parametrize("batch_first", [True, False])
def test_compiled_fused_attention_backward_reshapes_its_flat_qkv_cotangent(batch_first):
    """The fused attention backward returns the cotangents of q, k, v as one flat array;
    graph differentiation slices it and stacks the slices (window_cotangents.py): that is
    the array reshaped, permuted back to the projection's layout and reshaped, one copy."""
    gg.manual_seed(0)
    mha = nn.MultiheadAttention(16, 4, batch_first=batch_first)
    x = gg.randn(4, 6, 16)
    cf = CompiledFunction(lambda x: mha(x, x, x)[0].square().sum(), backend="default",
                          share=False)
    cf(x).backward()
    want = [p.grad.numpy().copy() for p in mha.parameters()]
    nodes = _backward_nodes(cf)
    (sdpa,) = [n for n in nodes if n.op.__name__ == "ScaledDotProductAttentionBackward"]
    assert [n.op for n in nodes if sdpa in n.inputs] == [REGISTRY["Reshape"]]
    assert not any(n.op is _STACK for n in nodes)
    for p in mha.parameters():
        p.grad = None
    mha(x, x, x)[0].square().sum().backward()   # eager
    for p, w in zip(mha.parameters(), want, strict=True):
        np.testing.assert_allclose(w, p.grad.numpy(), rtol=1e-5, atol=1e-6)


class _Attention(nn.Module):
    """Attention written out (as many programs do), q, k, v from one projection."""

    def __init__(self, e: int = 16, h: int = 4):
        super().__init__()
        self.h = h
        self.qkv, self.proj = nn.Linear(e, 3 * e), nn.Linear(e, 3)

    def forward(self, x):
        b, t, e = x.shape
        qkv = self.qkv(x).reshape(b, t, 3, self.h, e // self.h).permute(2, 0, 3, 1, 4)
        q, k, v = qkv.unbind(0)
        w = (q @ k.transpose(-2, -1) * (e // self.h) ** -0.5).softmax(-1)
        return self.proj((w @ v).transpose(1, 2).reshape(b, t, e).mean(1))


def test_compiled_written_out_attention_stacks_qkv_in_the_projections_layout():
    gg.manual_seed(2)
    x, y = gg.randn(5, 6, 16), gg.randint(0, 3, (5,))

    def make():
        gg.manual_seed(0)
        return _Attention()

    want_losses, want_w = _train(make, False, x, y)
    got_losses, got_w = _train(make, True, x, y)
    np.testing.assert_allclose(got_losses, want_losses, rtol=1e-5, atol=1e-6)
    for a, b in zip(got_w, want_w, strict=True):
        np.testing.assert_allclose(a, b, rtol=1e-4, atol=1e-5)
    model = make()
    cf = CompiledFunction(lambda x: model(x).square().sum(), backend="default", share=False)
    cf(x).backward()
    nodes = _backward_nodes(cf)
    (stack,) = [n for n in nodes if n.op is _STACK]
    assert stack.params["dim"] == 2   # (N, L, 3, H, hd): the projection's rows
    assert all(i.op is _PERMUTE for i in stack.inputs)
    assert [n.op for n in nodes if stack in n.inputs] == [REGISTRY["Reshape"]]


def test_compiled_transformer_training_equals_eager():
    gg.manual_seed(1)
    x, y = gg.randn(5, 6, 16), gg.randint(0, 3, (5,))
    want_losses, want_w = _train(lambda: _encoder(0.0), False, x, y)
    got_losses, got_w = _train(lambda: _encoder(0.0), True, x, y)
    np.testing.assert_allclose(got_losses, want_losses, rtol=1e-5, atol=1e-6)
    for a, b in zip(got_w, want_w, strict=True):
        np.testing.assert_allclose(a, b, rtol=1e-4, atol=1e-5)
