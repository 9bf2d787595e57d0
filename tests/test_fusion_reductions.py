"""Fusion across reductions (``graphgrad.passes.fusion``, ``backends/fused_numpy.py``):
row-local reductions (over trailing dims, keeping the rank) inside one group, for
LayerNorm, softmax, log_softmax and cross-entropy, forward and the compiled backward's
graphs; the row-blocked NumPy lowering equal to eager (bit for bit forward), with Numba
on and off, on float32/float64, strided inputs, size-0 and size-1 rows, NaN and inf."""

from __future__ import annotations

import numpy as np
import pytest

import graphgrad as gg
import graphgrad.nn.functional as F
from graphgrad.backends import fused as fused_mod
from graphgrad.backends.aot import partition
from graphgrad.backends.fused import lower
from graphgrad.backends.fused_numpy import BLOCK_ELEMENTS, _bounds, _row_major
from graphgrad.compiler import explain
from graphgrad.dynamo import CompiledFunction
from graphgrad.passes import Fused, decompose, fuse_elementwise, fusion_report, optimize



def layer_norm(x, w, b):
    return F.layer_norm(x, (x.shape[-1],), w, b)


def layer_norm_by_hand(x, w, b):
    m = x.mean(-1, keepdim=True)
    v = ((x - m) ** 2).mean(-1, keepdim=True)
    return (x - m) / (v + 1e-5).sqrt() * w + b


def softmax_affine(x, w, b):
    return F.softmax(x * w + b, -1)


def log_softmax_scaled(x, w, b):
    return F.log_softmax(x, -1) * w


def softmax_by_hand(x, w, b):
    e = (x - x.amax(-1, keepdim=True)).exp()
    return e / e.sum(-1, keepdim=True)


def cross_entropy(x, y):
    return F.cross_entropy(x, y)


def _captured(fn, *args):
    cf = CompiledFunction(fn, backend="eager", share=False)
    cf(*args)
    return cf.graphs[0]


def _ops(graph) -> list[list[str]]:
    return [ops for _, ops in fusion_report(optimize(graph)[0]).groups]


def _fwd_bwd(fn, *args):
    part = partition(_captured(fn, *args), [0])
    return _ops(part.forward), _ops(part.backward)


def test_layer_norm_is_one_group_forward_and_backward():
    x, w, b = gg.randn(8, 16), gg.randn(16), gg.randn(16)
    parts = ["Mean", "Sub", "Mul", "Mean", "Add", "Rsqrt", "Mul", "Mul", "Add"]
    # F.layer_norm is one op eagerly (NativeLayerNorm); the compiler decomposes it into
    # its parts (passes.decompose), which fuse into one row kernel
    assert _ops(_captured(layer_norm, x, w, b)) == [parts]
    fwd, bwd = _fwd_bwd(layer_norm, x, w, b)
    # the op's backward reads only its inputs: the training forward is one group too, and
    # the backward recomputes the statistics inside its one group
    assert fwd == [parts]
    assert len(bwd) == 1 and bwd[0].count("Mean") == 4 and "Rsqrt" in bwd[0]
    # written by hand (a backward of row sums, expands, divisions): one group, which was
    # seven with a reduction allowed only at a group's end
    _, bwd = _fwd_bwd(layer_norm_by_hand, x, w, b)
    assert len(bwd) == 1 and bwd[0].count("Sum") == 3 and "Expand" in bwd[0]


def test_layer_norm_stays_one_op_where_its_parts_would_round_differently():
    x = gg.randn(8, 16).to(gg.float16)   # the op computes float16 in float32
    graph = optimize(_captured(layer_norm, x, gg.randn(16).half(), gg.randn(16).half()))[0]
    assert decompose(graph) is graph
    assert "NativeLayerNorm" in [op for _, op, _ in fusion_report(graph).not_fused]


def test_softmax_log_softmax_and_cross_entropy_groups():
    x, w, b = gg.randn(8, 16), gg.randn(16), gg.randn(16)
    assert _ops(_captured(softmax_by_hand, x, w, b)) == [["Amax", "Sub", "Exp", "Sum", "Div"]]
    assert _ops(_captured(softmax_affine, x, w, b)) == [["Mul", "Add", "Softmax"]]
    assert _ops(_captured(log_softmax_scaled, x, w, b)) == [["LogSoftmax", "Mul"]]
    _, bwd = _fwd_bwd(softmax_affine, x, w, b)
    assert bwd == [["Mul", "Sum", "Sub", "Mul", "Mul"]]   # out * (g - sum(g * out)), * w
    _, bwd = _fwd_bwd(log_softmax_scaled, x, w, b)
    assert any("Sum" in g and "Exp" in g for g in bwd)
    y = gg.tensor(np.arange(8) % 16)
    part = partition(_captured(cross_entropy, x, y), [0])
    # cross_entropy is one op, which keeps the logits: the compiled backward is its
    # backward kernel, one opaque node (kernel_vjp), where the composite rule made a
    # one-hot of the targets and a group recomputing the softmax per row block
    assert _ops(part.backward) == []
    assert [n.op.__name__ for n in part.backward.nodes if n.kind == "call"] == \
        ["CrossEntropyBackward"]
    report = fusion_report(optimize(part.backward)[0])
    assert [(op, why) for _, op, why in report.not_fused] == \
        [("CrossEntropyBackward", "not an elementwise op or a reduction")]


def test_reductions_that_are_not_row_local_still_end_groups():
    x = gg.randn(8, 16)
    # over the rows (dim 0) and without keepdim: every row before any reader
    assert _ops(_captured(lambda x: (x - x.mean(0, keepdim=True)) * 2, x)) == [["Sub", "Mul"]]
    assert _ops(_captured(lambda x: x.sum(-1) * 2 + 1, x)) == [["Mul", "Add"]]
    # a reduction still ends a group as before
    assert _ops(_captured(lambda x: ((x * 2).exp() + 1).sum(0), x)) == [
        ["Mul", "Exp", "Add", "Sum"]]


def test_explain_lists_the_group_with_its_reductions(lowering):
    out = explain(layer_norm)(gg.randn(4, 8), gg.randn(8), gg.randn(8))
    ((_, ops, chosen, _),) = out.fused_groups
    # with Numba: a row kernel (fused_rows.py), its sums NumPy's pairwise order
    assert ops.count("Mean") == 2 and chosen == lowering


def test_layer_norm_kernel_runs_row_blocks():
    x, w, b = gg.randn(1024, 512), gg.randn(512), gg.randn(512)
    g = fuse_elementwise(optimize(_captured(layer_norm, x, w, b))[0])
    (node,) = [n for n in g.nodes if n.kind == "call" and n.op is Fused]
    k = lower(node.params["kernel"])
    assert "for r, e in _bounds" in k.numpy_source
    rows = BLOCK_ELEMENTS // 512
    assert f"_empty(({rows}, 512)" in k.numpy_source   # block buffers, not full-size ones
    assert k.numpy_source.count("_empty((1024, 512)") == 1   # the result only


def test_block_bounds_never_leave_a_single_row_block():
    assert _bounds(10, 4) == ((0, 4), (4, 8), (8, 10))
    assert _bounds(9, 4) == ((0, 4), (4, 9))   # NumPy orders a 1-row strided sum apart
    assert _bounds(8, 4) == ((0, 4), (4, 8))


def test_only_inputs_out_of_row_major_order_take_eagers_computation():
    a = np.ones((6, 4), np.float32)
    assert _row_major(a, a[:, ::2], a[1:], np.broadcast_to(a[:1], (6, 4)),
                      np.broadcast_to(np.float32(1), (6, 4)), 2.0)
    assert not _row_major(a, a.T)
    assert not _row_major(a[::-1])


def _layer_norm_parts(x, w, b):
    """F.layer_norm as the compiler decomposes it (NativeLayerNorm.decompose), eagerly."""
    xc = x - x.mean(-1, keepdim=True)
    return xc * ((xc * xc).mean(-1, keepdim=True) + 1e-5).rsqrt() * w + b


# the eager oracle of each function (bit for bit): the library layer_norm's compiled form
# is its parts, whose rounding differs from the op's own kernel in the last bits
_EAGER = {layer_norm: _layer_norm_parts}
_FNS = [layer_norm, layer_norm_by_hand, softmax_affine, log_softmax_scaled, softmax_by_hand]
# (rows, cols): blocked (> 128k elements, 257 rows left over), one row left over
# (513 = 2 * 256 + 1 rows of 256), small, size-1 rows, no rows, empty rows, 3-d
_SHAPES = [(1000, 257), (513, 256), (3, 5), (7, 1), (0, 4), (5, 0), (301, 3, 160)]


def _arrays(shape, dtype, strided, special, rng):
    xa = rng.standard_normal(shape).astype(dtype)
    if strided and xa.ndim == 2:
        xa = np.ascontiguousarray(xa.T).T
    if special and xa.size:
        xa.reshape(-1)[3 % xa.size] = np.nan
        xa.reshape(-1)[-1] = np.inf
    wa = rng.standard_normal(shape[-1]).astype(dtype)
    ba = rng.standard_normal(shape[-1]).astype(dtype)
    return xa, wa, ba


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("shape", _SHAPES)
def test_fused_reductions_equal_eager(lowering, dtype, shape):
    rng = np.random.default_rng(len(shape) + shape[0])
    for strided, special in ((False, False), (True, True), (True, False), (False, True)):
        xa, wa, ba = _arrays(shape, dtype, strided, special, rng)
        for f in _FNS:
            x, w, b = gg.from_numpy(xa), gg.from_numpy(wa), gg.from_numpy(ba)
            cf = CompiledFunction(f, backend="default", share=False)
            with np.errstate(all="ignore"), gg.no_grad():
                if f is softmax_by_hand and 0 in shape[1:]:   # amax of an empty row
                    with pytest.raises(IndexError, match="non-zero size"):
                        cf(x, w, b)
                    continue
                want = _EAGER.get(f, f)(x, w, b).numpy()
                got = cf(x, w, b).numpy()
            np.testing.assert_array_equal(got, want, err_msg=f"{f.__name__} {strided}")
            if f is layer_norm:   # and the op's own kernel up to rounding
                np.testing.assert_allclose(got, f(x, w, b).numpy(), rtol=1e-5, atol=1e-5)
            if special or 0 in shape[1:]:
                continue
            xr, wr = gg.from_numpy(xa).requires_grad_(), gg.from_numpy(wa).requires_grad_()
            want_g = gg.autograd.grad(f(xr, wr, b).sum(), [xr, wr], allow_unused=True)
            cf = CompiledFunction(f, backend="default", share=False)
            got_g = gg.autograd.grad(cf(xr, wr, b).sum(), [xr, wr], allow_unused=True)
            tol = 1e-4 if dtype == np.float32 else 1e-10
            for a, c in zip(got_g, want_g, strict=True):
                if a is None or c is None:   # unused (w in a softmax): None or zeros
                    assert a is None and c is None or not (c if a is None else a).numpy().any()
                    continue
                np.testing.assert_allclose(a.numpy(), c.numpy(), rtol=tol, atol=tol)


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_cross_entropy_equals_eager_and_torch(lowering, dtype):
    torch = pytest.importorskip("torch")
    rng = np.random.default_rng(3)
    xa = rng.standard_normal((700, 300)).astype(dtype)
    ya = rng.integers(0, 300, 700)
    x, y = gg.from_numpy(xa).requires_grad_(), gg.tensor(ya)
    cf = CompiledFunction(cross_entropy, backend="default", share=False)
    loss = cf(x, y)
    (gx,) = gg.autograd.grad(loss, [x])
    (want,) = gg.autograd.grad(cross_entropy(x, y), [x])
    tol = 1e-5 if dtype == np.float32 else 1e-12
    np.testing.assert_allclose(gx.numpy(), want.numpy(), rtol=tol, atol=tol)
    tx = torch.from_numpy(xa).requires_grad_()
    tl = torch.nn.functional.cross_entropy(tx, torch.from_numpy(ya))
    tl.backward()
    np.testing.assert_allclose(loss.item(), tl.item(), rtol=tol)
    np.testing.assert_allclose(gx.numpy(), tx.grad.numpy(), rtol=tol, atol=tol)


@pytest.mark.parametrize("d", [1, 7, 8, 9, 127, 128, 129, 136, 255, 257, 1000, 4097])
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_row_kernel_sums_in_numpys_pairwise_order(lowering, d, dtype):
    """Row lengths around NumPy's pairwise boundaries (8-wide blocks, 128-element
    leaves, halves rounded to 8): the row kernel's sums and means are NumPy's, bit for
    bit, on values spread over six decades (where the order shows)."""
    rng = np.random.default_rng(d)
    xa = (rng.standard_normal((37, d)) * 10.0 ** rng.uniform(-3, 3, (37, d))).astype(dtype)

    def f(x, w):
        s = (x * 2 - w).sum(-1, keepdim=True)
        return (x - x.mean(-1, keepdim=True)) * s + w

    x, w = gg.from_numpy(xa), gg.from_numpy(rng.standard_normal(d).astype(dtype))
    cf = CompiledFunction(f, backend="default", share=False)
    with gg.no_grad():
        np.testing.assert_array_equal(cf(x, w).numpy(), f(x, w).numpy())
    (k,) = [lower(n.params["kernel"]) for n in
            fuse_elementwise(optimize(_captured(f, x, w))[0]).nodes
            if n.kind == "call" and n.op is Fused]
    if lowering == "numba":
        assert k.lowering == "numba" and "block(" in k.numba_source, k.decision.reason


def test_layer_norm_backward_runs_one_row_kernel(lowering, monkeypatch):
    monkeypatch.setattr(fused_mod, "kernel_cache", {})
    x = gg.randn(256, 96, requires_grad=True)
    w, b = gg.randn(96, requires_grad=True), gg.randn(96)
    cf = CompiledFunction(layer_norm, backend="default", share=False)
    got = gg.autograd.grad(cf(x, w, b).sum(), [x, w])
    want = gg.autograd.grad(layer_norm(x, w, b).sum(), [x, w])
    for a, c in zip(got, want, strict=True):
        np.testing.assert_allclose(a.numpy(), c.numpy(), rtol=1e-4, atol=1e-5)
    # the backward recomputes the statistics and takes its row means in the same kernel
    (bwd,) = [k for k in fused_mod.kernel_cache.values() if k.program.op_names.count("Mean") == 4]
    assert "Rsqrt" in bwd.program.op_names and bwd.lowering == lowering, bwd.decision.reason


def test_a_row_kernels_result_owns_its_memory(lowering, monkeypatch):
    """A row kernel's result is allocated in the group's shape (not a reshaped view of
    the kernel's (rows, cols) buffer): it owns its memory, so the memory plan may reuse
    it as a later group's buffer; with ``out`` it is ``out`` itself."""
    monkeypatch.setattr(fused_mod, "kernel_cache", {})
    x, w, b = gg.randn(4, 32, 96), gg.randn(96), gg.randn(96)
    cf = CompiledFunction(layer_norm, backend="default", share=False)
    with gg.no_grad():
        want = cf(x, w, b).numpy()
    (k,) = [k for k in fused_mod.kernel_cache.values() if "Mean" in k.program.op_names]
    args = (x.numpy(), w.numpy(), b.numpy())
    got = k(*args)
    assert got.base is None and got.shape == (4, 32, 96) and got.flags.c_contiguous
    buf = np.empty_like(got)
    assert k(*args, out=buf) is buf
    np.testing.assert_array_equal(got, want)
    np.testing.assert_array_equal(buf, want)
    assert k.lowering == lowering, k.decision.reason


def test_row_kernel_types_literals_as_numpy_does(lowering):
    """``x > 0.1`` on float32 compares with float32(0.1) (NumPy's weak scalar), not the
    double: values between the two must land on the same side as in eager."""
    xa = np.full((40, 64), np.float32(0.1), np.float32)
    xa[:, ::2] = np.nextafter(np.float32(0.1), np.float32(1))

    def f(x):
        m = x.mean(-1, keepdim=True)
        return gg.where(x > 0.1, x - m, x * 0.3) + (x <= 0.1)

    x = gg.from_numpy(xa)
    cf = CompiledFunction(f, backend="default", share=False)
    with gg.no_grad():
        np.testing.assert_array_equal(cf(x).numpy(), f(x).numpy())
