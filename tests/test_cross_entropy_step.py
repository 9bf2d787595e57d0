"""``F.cross_entropy`` in plain eager mode records ``_CrossEntropyStep``: a batch of one
row block keeps the forward's exp(x - max) and row sums for the backward. Its gradient
must be the bits of ``CrossEntropyBackward`` (which computes them again), match PyTorch,
and every other backward (a second pass, ``create_graph``, a transform, a mode) must be
``CrossEntropy``'s."""

import numpy as np
import pytest

import graphgrad as gg
import graphgrad.nn.functional as F
from graphgrad.ops import cross_entropy as ce

CONFIGS = [dict(), dict(reduction="sum"), dict(reduction="none"), dict(ignore_index=1),
           dict(label_smoothing=0.1), dict(weight=True), dict(weight=True, ignore_index=2,
                                                              label_smoothing=0.3)]


def _inputs(dtype, n=9, c=5, seed=0):
    rng = np.random.default_rng(seed)
    x = rng.standard_normal((n, c)).astype(dtype) * 3
    t = rng.integers(0, c, n)
    t[:3] = [1, 2, 1]
    w = rng.uniform(0.5, 2, c).astype(dtype)
    return x, t, w


def _kwargs(cfg, w):
    kw = {k: v for k, v in cfg.items() if k != "weight"}
    if cfg.get("weight"):
        kw["weight"] = gg.tensor(w)
    return kw


@pytest.mark.parametrize("dtype", ["float32", "float64"])
@pytest.mark.parametrize("cfg", CONFIGS)
def test_saved_gradient_is_the_kernels_bits_and_torchs_values(dtype, cfg):
    torch = pytest.importorskip("torch")
    x0, t0, w0 = _inputs(dtype)
    kw = _kwargs(cfg, w0)
    x = gg.tensor(x0, requires_grad=True)
    t = gg.tensor(t0)
    loss = F.cross_entropy(x, t, **kw)
    assert loss.op is ce._CrossEntropyStep
    run = loss.params["run"]
    assert run.values is not None           # kept by the forward
    g = gg.ones_like(loss) * 0.7
    loss.backward(g)
    assert run.values is None               # released by the backward
    params = {k: v for k, v in kw.items() if k != "weight"}
    args = (gg.tensor(np.asarray(0.7 if loss.ndim == 0 else np.full(loss.shape, 0.7),
                                 dtype)), gg.tensor(x0), t)
    if "weight" in kw:
        args += (kw["weight"],)
    want = ce.CrossEntropyBackward.apply(*args, **params).numpy()
    np.testing.assert_array_equal(x.grad.numpy(), want)     # the same bits
    # the loss itself: the bits of CrossEntropy
    ref = ce.CrossEntropy.apply(gg.tensor(x0), t, *args[3:], **params)
    np.testing.assert_array_equal(loss.detach().numpy(), ref.numpy())
    tx = torch.tensor(x0, requires_grad=True)
    tkw = dict(params)
    if "weight" in kw:
        tkw["weight"] = torch.tensor(w0)
    tl = torch.nn.functional.cross_entropy(tx, torch.tensor(t0), **tkw)
    tl.backward(torch.full(tl.shape, 0.7, dtype=tl.dtype))
    tol = 1e-6 if dtype == "float32" else 1e-12
    np.testing.assert_allclose(loss.detach().numpy(), tl.detach().numpy(), rtol=tol, atol=tol)
    np.testing.assert_allclose(x.grad.numpy(), tx.grad.numpy(), rtol=tol, atol=tol)


def test_retain_graph_second_pass_and_grad_accumulation():
    x0, t0, _ = _inputs("float32")
    x, t = gg.tensor(x0, requires_grad=True), gg.tensor(t0)
    loss = F.cross_entropy(x, t)
    loss.backward(retain_graph=True)
    first = x.grad.numpy().copy()
    assert loss.params["run"].values is None
    loss.backward()     # computed again from the logits: the same bits, accumulated
    np.testing.assert_array_equal(x.grad.numpy(), first + first)
    with pytest.raises(RuntimeError, match="backward through the graph a second time"):
        loss.backward()


def test_create_graph_is_crossentropys_recorded_rule():
    x0, t0, _ = _inputs("float64")
    t = gg.tensor(t0)
    v = gg.tensor(np.random.default_rng(1).standard_normal(x0.shape))
    got = []
    for fn in (lambda x: F.cross_entropy(x, t),
               lambda x: ce.CrossEntropy.apply(x, t)):
        x = gg.tensor(x0, requires_grad=True)
        (g,) = gg.autograd.grad(fn(x), x, create_graph=True)
        (hv,) = gg.autograd.grad((g * v).sum(), x)
        got.append((g.detach().numpy(), hv.numpy()))
    for a, b in zip(*got, strict=True):
        np.testing.assert_array_equal(a, b)


def test_inplace_change_of_the_logits_raises():
    x0, t0, _ = _inputs("float32")
    x = gg.tensor(x0, requires_grad=True)
    y = x * 1
    loss = F.cross_entropy(y, gg.tensor(t0))
    y.mul_(2)
    with pytest.raises(RuntimeError, match="modified by an inplace operation"):
        loss.backward()


def test_large_batch_keeps_nothing():
    c = 1000
    n = ce._rows_per_block(c) + 1    # two row blocks: the backward computes again
    x = gg.randn(n, c, requires_grad=True)
    loss = F.cross_entropy(x, gg.tensor(np.zeros(n, np.int64)))
    assert loss.params["run"].values is None
    loss.backward()
    want = ce.CrossEntropyBackward.apply(gg.tensor(np.float32(1)), x.detach(),
                                         gg.tensor(np.zeros(n, np.int64))).numpy()
    np.testing.assert_array_equal(x.grad.numpy(), want)


def test_bad_target_error_names_cross_entropy():
    x = gg.randn(3, 4, requires_grad=True)
    with pytest.raises(IndexError, match="out of bounds"):
        F.cross_entropy(x, gg.tensor([0, 1, 7]))


@pytest.mark.parametrize("layout", ["C", "F", "T"])
@pytest.mark.parametrize("dtype", ["float32", "float64", "complex64"])
@pytest.mark.parametrize("cfg", CONFIGS)
def test_one_block_paths_give_the_row_block_loops_bits(monkeypatch, layout, dtype, cfg):
    """A batch of one row block runs the loss on x whole and keeps exp(x - max) for the
    gradient (which, given nothing saved, computes them on x whole); with blocks of 2
    rows the same inputs go through the loops, computing everything again: the same
    bits."""
    rng = np.random.default_rng(len(str(cfg)))
    x = rng.standard_normal((11, 7)) * 4
    if dtype.startswith("complex"):
        x = x + 1j * rng.standard_normal((11, 7))
    x = x.astype(dtype)
    x = np.asfortranarray(x) if layout == "F" else x.T.copy().T if layout == "T" else x
    t = rng.integers(0, 7, 11)
    t[:2] = 1
    w = rng.uniform(0.5, 2, 7) if cfg.get("weight") else None
    params = {k: v for k, v in cfg.items() if k != "weight"}
    ii, red, ls = (params.get("ignore_index", -100), params.get("reduction", "mean"),
                   params.get("label_smoothing", 0.0))
    g = np.asarray(0.3 if red != "none" else rng.standard_normal(11), dtype)
    run = ce.Residuals()
    loss = ce._loss(x, t, w, ii, red, ls, run)
    grad = ce._gradient(g, x, t, w, ii, red, ls, run.values)
    # with nothing saved (a compiled backward's CrossEntropyBackward): one block too
    np.testing.assert_array_equal(ce._gradient(g, x, t, w, ii, red, ls), grad)
    monkeypatch.setattr(ce, "_BLOCK", 14)   # 2 rows of 7 a block
    run2 = ce.Residuals()
    np.testing.assert_array_equal(ce._loss(x, t, w, ii, red, ls, run2), loss)
    assert run2.values is None
    np.testing.assert_array_equal(ce._gradient(g, x, t, w, ii, red, ls), grad)
    assert grad.flags.c_contiguous
