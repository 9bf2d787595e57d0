"""Sparse COO tensors against PyTorch: construction and its errors, coalesce, to_dense,
to_sparse, the sparse-dense products and their gradients (sparse where PyTorch's are),
second order w.r.t. the dense operand, and a 2-layer GCN trained through both."""

from __future__ import annotations

import warnings

import numpy as np
import pytest
import torch

import graphgrad as gg

warnings.filterwarnings("ignore", message="Sparse invariant checks")

IDX = [[0, 1, 1, 0, 2], [2, 0, 2, 2, 1]]  # uncoalesced: (0, 2) twice, out of order
VAL = [3.0, 4.0, 5.0, 6.0, -1.0]


def _both(indices=IDX, values=VAL, size=None, dtype=np.float64, **kw):
    v = np.asarray(values, dtype)
    size = () if size is None else (size,)
    return (gg.sparse_coo_tensor(gg.tensor(np.asarray(indices)), gg.tensor(v), *size, **kw),
            torch.sparse_coo_tensor(torch.tensor(indices), torch.tensor(v), *size, **kw))


def _same_sparse(a, b) -> None:
    assert a.is_sparse and b.is_sparse
    assert tuple(a.shape) == tuple(b.shape)
    assert a._nnz() == b._nnz() and a.is_coalesced() == b.is_coalesced()
    assert a.sparse_dim() == b.sparse_dim() and a.dense_dim() == b.dense_dim()
    np.testing.assert_array_equal(a._indices().numpy(), b._indices().numpy())
    np.testing.assert_allclose(a._values().numpy(), b._values().detach().numpy())


def test_construction_metadata_and_repr():
    s, t = _both()
    _same_sparse(s, t)
    assert s.layout is gg.sparse_coo and repr(s.layout) == "graphgrad.sparse_coo"
    assert gg.ones(2).layout is gg.strided and not gg.ones(2).is_sparse
    assert s.dtype == gg.float64 and s.numel() == t.numel() and s.ndim == 2
    assert repr(s) == repr(t).replace("torch.", "graphgrad.")
    s32, t32 = _both(dtype=np.float32, requires_grad=True)
    assert repr(s32) == repr(t32).replace("torch.", "graphgrad.")


@pytest.mark.parametrize("kw", [dict(size=(3, 4)), dict(size=(3, 3), is_coalesced=False),
                                dict(dtype=np.float32)])
def test_construction_variants(kw):
    _same_sparse(*_both(**kw))


def test_list_arguments_infer_dtypes_and_int32_indices_become_int64():
    s = gg.sparse_coo_tensor([[0, 1], [1, 0]], [1, 2])
    t = torch.sparse_coo_tensor([[0, 1], [1, 0]], [1, 2])
    assert str(s.dtype).split(".")[1] == str(t.dtype).split(".")[1]
    s = gg.sparse_coo_tensor(gg.tensor(np.array(IDX, np.int32)), gg.tensor(VAL))
    assert s._indices().dtype == gg.int64
    assert gg.sparse_coo_tensor([[0, 1]], [1.0, 2.0], dtype=gg.float64).dtype == gg.float64


def test_hybrid_values_keep_dense_dims():
    vals = np.arange(6.0).reshape(3, 2)
    s = gg.sparse_coo_tensor([[0, 2, 0]], gg.tensor(vals))
    t = torch.sparse_coo_tensor([[0, 2, 0]], torch.tensor(vals))
    _same_sparse(s, t)
    _same_sparse(s.coalesce(), t.coalesce())
    np.testing.assert_allclose(s.to_dense().numpy(), t.to_dense().numpy())


ERRORS = [
    (lambda m: m.sparse_coo_tensor(m.tensor([0, 1]), m.tensor([1.0, 2.0])),
     RuntimeError, "indices must be sparse_dim x nnz"),
    (lambda m: m.sparse_coo_tensor(m.tensor(IDX), m.tensor(VAL[:3])),
     RuntimeError, "indices and values must have same nnz"),
    (lambda m: m.sparse_coo_tensor(m.tensor(IDX), m.tensor(VAL), (3,)),
     RuntimeError, "'len(size) == sparse_dim + dense_dim' is not satisfied"),
    (lambda m: m.sparse_coo_tensor(m.tensor(IDX), m.tensor(VAL), (2, 3), check_invariants=True),
     RuntimeError, "size is inconsistent with indices: for dim 0, size is 2 but found index 2"),
    (lambda m: m.sparse_coo_tensor(-m.tensor(IDX), m.tensor(VAL)),
     RuntimeError, "found negative index -2 for dim 0"),
    (lambda m: m.sparse_coo_tensor([[0, 1]], m.ones(2, 3), (2, 4)),
     RuntimeError, "values has incorrect size, expected [2, 4], got [2, 3]"),
    (lambda m: m.sparse_coo_tensor(m.tensor(IDX), m.tensor(VAL)).indices(),
     RuntimeError, "Cannot get indices on an uncoalesced tensor"),
    (lambda m: m.sparse_coo_tensor(m.tensor(IDX), m.tensor(VAL)).values(),
     RuntimeError, "Cannot get values on an uncoalesced tensor"),
    (lambda m: m.ones(2).coalesce(),
     RuntimeError, "coalesce expected sparse coordinate tensor layout but got Strided"),
    (lambda m: m.ones(2).is_coalesced(),
     RuntimeError, "is_coalesced expected sparse coordinate tensor layout but got Strided"),
    (lambda m: m.ones(2, 3).to_sparse(3),
     RuntimeError, "dense_to_sparse: sparse_dim argument must be in [0,2] range, but 3 is given"),
    (lambda m: m.sparse_coo_tensor(m.tensor(IDX), m.tensor(VAL)).numpy(),
     TypeError, "can't convert Sparse layout tensor to numpy"),
    (lambda m: m.ones(2)._indices(), NotImplementedError, "Could not run 'aten::_indices'"),
    (lambda m: m.sparse.mm(m.sparse_coo_tensor(m.tensor(IDX), m.tensor(VAL)), m.ones(4, 2)),
     RuntimeError, "addmm: Argument #3 (dense): Expected dim 0 size 3, got 4"),
    (lambda m: m.sparse.mm(m.sparse_coo_tensor(m.tensor(IDX), m.tensor(VAL)),
                           m.ones(3, 2, dtype=m.float64)),
     RuntimeError, "expected scalar type Float but found Double"),
]


@pytest.mark.parametrize("call,exc,msg", ERRORS, ids=range(len(ERRORS)))
def test_errors_match_torch(call, exc, msg):
    with pytest.raises(exc) as theirs:
        call(torch)
    assert msg in str(theirs.value)
    with pytest.raises(exc, match=_re(msg)):
        call(gg)


def _re(msg: str) -> str:
    import re
    return re.escape(msg)


@pytest.mark.parametrize("op", [lambda s: s.exp(), lambda s: s.view(-1),
                                lambda s: s * gg.ones(3, 3), lambda s: s[0],
                                lambda s: gg.ones(3, 3) @ s])
def test_dense_ops_on_sparse_raise_not_implemented_naming_layout(op):
    s = gg.sparse_coo_tensor(gg.tensor(IDX), gg.tensor(VAL))
    with pytest.raises(NotImplementedError, match="sparse_coo"):
        op(s)


def test_coalesce_to_dense_to_sparse():
    s, t = _both()
    _same_sparse(s.coalesce(), t.coalesce())
    c = s.coalesce()
    np.testing.assert_array_equal(c.indices().numpy(), t.coalesce().indices().numpy())
    np.testing.assert_allclose(c.values().detach().numpy(), t.coalesce().values().numpy())
    np.testing.assert_allclose(s.to_dense().numpy(), t.to_dense().numpy())
    dense = np.array([[0.0, 1.5, 0.0], [2.0, 0.0, 0.0], [0.0, 0.0, 0.0]])
    for sd in (None, 1, 2):
        a = gg.tensor(dense).to_sparse(*(() if sd is None else (sd,)))
        b = torch.tensor(dense).to_sparse(*(() if sd is None else (sd,)))
        _same_sparse(a, b)
        np.testing.assert_allclose(a.to_dense().numpy(), dense)
    assert gg.sparse.sum(s).item() == pytest.approx(torch.sparse.sum(t).item())
    # uncoalesced operands: the same tensor, whichever entries hold it
    np.testing.assert_allclose((s + s).to_dense().numpy(), (t + t).to_dense().numpy())
    _same_sparse(s.coalesce() + s.coalesce(), t.coalesce() + t.coalesce())


PRODUCTS = {"sparse.mm": (lambda m, s, d: m.sparse.mm(s, d)),
            "spmm": (lambda m, s, d: m.spmm(s, d)),
            "mm": (lambda m, s, d: m.mm(s, d)),
            "matmul_operator": (lambda m, s, d: s @ d),
            "matmul": (lambda m, s, d: m.matmul(s, d))}


@pytest.mark.parametrize("name", PRODUCTS)
@pytest.mark.parametrize("leaf", [True, False], ids=["sparse_leaf", "values_leaf"])
def test_products_values_and_gradients(name, leaf):
    rng = np.random.default_rng(0)
    dn = rng.standard_normal((3, 4))
    f = PRODUCTS[name]
    grads = []
    for m in (gg, torch):
        v = m.tensor(np.asarray(VAL), requires_grad=not leaf)
        s = m.sparse_coo_tensor(m.tensor(IDX), v, (3, 3), requires_grad=leaf)
        d = m.tensor(dn, requires_grad=True)
        out = f(m, s, d)
        (out.sin() * out).sum().backward()
        grads.append((out.detach().numpy(), d.grad.numpy(), s.grad if leaf else v.grad))
    (o1, d1, g1), (o2, d2, g2) = grads
    np.testing.assert_allclose(o1, o2, rtol=1e-12)
    np.testing.assert_allclose(d1, d2, rtol=1e-12)
    assert g1.is_sparse == g2.is_sparse
    if g2.is_sparse:
        _same_sparse(g1, g2)
        np.testing.assert_allclose(g1.to_dense().numpy(), g2.to_dense().numpy(), rtol=1e-12)
    else:
        np.testing.assert_allclose(g1.numpy(), g2.numpy(), rtol=1e-12)


def test_to_dense_gradient_is_sparse_at_the_nonzeros():
    gs = []
    for m in (gg, torch):
        s = m.sparse_coo_tensor(m.tensor(IDX), m.tensor(np.asarray(VAL)), (3, 3),
                                requires_grad=True)
        (s.to_dense() ** 2).sum().backward()
        gs.append(s.grad)
    _same_sparse(*gs)


def test_second_order_wrt_dense_operand():
    rng = np.random.default_rng(1)
    dn = rng.standard_normal((3, 2))
    hs = []
    for m in (gg, torch):
        s = m.sparse_coo_tensor(m.tensor(IDX), m.tensor(np.asarray(VAL)), (3, 3))
        d = m.tensor(dn, requires_grad=True)
        y = (m.sparse.mm(s, d) ** 3).sum()
        (g,) = m.autograd.grad(y, d, create_graph=True)
        (h,) = m.autograd.grad((g * g.cos()).sum(), d)
        hs.append((g.detach().numpy(), h.numpy()))
    np.testing.assert_allclose(hs[0][0], hs[1][0], rtol=1e-12)
    np.testing.assert_allclose(hs[0][1], hs[1][1], rtol=1e-12)


def _gcn(m, adj, x, w1, w2):
    h = m.relu(m.sparse.mm(adj, x @ w1))
    out = m.spmm(adj, h @ w2)
    return m.nn.functional.log_softmax(out, dim=1)


def test_two_layer_gcn_forward_backward_matches_torch():
    """pygcn's model on a random graph: grads of both weights and of the edge weights."""
    rng = np.random.default_rng(2)
    n, f, hidden, classes = 12, 5, 8, 3
    edges = rng.integers(0, n, size=(2, 30))
    edges = np.concatenate([edges, np.stack([np.arange(n)] * 2)], axis=1)  # self loops
    weights = rng.uniform(0.1, 1.0, edges.shape[1])
    x, w1, w2 = rng.standard_normal((n, f)), rng.standard_normal((f, hidden)), \
        rng.standard_normal((hidden, classes))
    labels = rng.integers(0, classes, n)
    res = []
    for m in (gg, torch):
        ew = m.tensor(weights, requires_grad=True)
        adj = m.sparse_coo_tensor(m.tensor(edges), ew, (n, n))
        p1, p2 = m.tensor(w1, requires_grad=True), m.tensor(w2, requires_grad=True)
        out = _gcn(m, adj, m.tensor(x), p1, p2)
        loss = m.nn.functional.nll_loss(out, m.tensor(labels))
        loss.backward()
        res.append((out.detach().numpy(), p1.grad.numpy(), p2.grad.numpy(), ew.grad.numpy()))
    for a, b in zip(*res, strict=True):
        np.testing.assert_allclose(a, b, rtol=1e-10, atol=1e-12)


def test_gcn_with_a_sparse_leaf_adjacency_accumulates_a_sparse_grad():
    rng = np.random.default_rng(3)
    n = 6
    edges = np.stack([np.arange(n), (np.arange(n) + 1) % n])
    x, w = rng.standard_normal((n, 3)), rng.standard_normal((3, 2))
    gs = []
    for m in (gg, torch):
        adj = m.sparse_coo_tensor(m.tensor(edges), m.tensor(np.ones(n)), (n, n),
                                  requires_grad=True)
        p = m.tensor(w, requires_grad=True)
        h = m.sparse.mm(adj, m.tanh(m.sparse.mm(adj, m.tensor(x) @ p)))
        h.pow(2).sum().backward()
        h.sum().detach()
        gs.append((adj.grad, p.grad.numpy()))
    _same_sparse(gs[0][0].coalesce(), gs[1][0].coalesce())
    np.testing.assert_allclose(gs[0][1], gs[1][1], rtol=1e-12)


@pytest.mark.parametrize("fn", ["softmax", "log_softmax"])
@pytest.mark.parametrize("dim", [0, 1, -1])
def test_sparse_softmax_values_and_gradients(fn, dim):
    rng = np.random.default_rng(4)
    weights = rng.standard_normal((3, 2))
    res = []
    for m in (gg, torch):
        v = m.tensor(np.asarray(VAL), requires_grad=True)
        s = m.sparse_coo_tensor(m.tensor(IDX), v, (3, 3))
        # torch's backward for a negative dim is wrong (a row's gradients do not sum to
        # zero): its forward and gradient for the same dim counted from the front are right
        out = getattr(m.sparse, fn)(s, dim if m is gg else dim % 2)
        (m.sparse.mm(out, m.tensor(weights)) ** 2).sum().backward()
        res.append((out, v.grad.numpy()))
    _same_sparse(res[0][0].detach(), res[1][0].detach())
    np.testing.assert_allclose(res[0][1], res[1][1], rtol=1e-12)


def test_to_sparse_of_a_dense_tensor_passes_the_gradient_back_dense():
    rng = np.random.default_rng(5)
    a = rng.standard_normal((3, 3)) * (rng.random((3, 3)) > 0.4)
    d = rng.standard_normal((3, 2))
    gs = []
    for m in (gg, torch):
        x = m.tensor(a, requires_grad=True)
        m.sparse.mm(x.to_sparse(), m.tensor(d)).pow(2).sum().backward()
        gs.append(x.grad.numpy())
    np.testing.assert_allclose(gs[0], gs[1], rtol=1e-12)


def test_transforms_refuse_sparse_tensors_by_name():
    s = gg.sparse_coo_tensor(gg.tensor(IDX), gg.tensor(VAL))
    with pytest.raises(NotImplementedError, match="sparse COO tensors are not supported"):
        gg.func.vmap(lambda d: gg.sparse.mm(s, d))(gg.ones(4, 3, 2))


def test_legacy_sparse_float_tensor_constructor():
    """pygcn: ``torch.sparse.FloatTensor(indices, values, shape)``."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        t = torch.sparse.FloatTensor(torch.tensor(IDX), torch.tensor(VAL), torch.Size([3, 4]))
    _same_sparse(gg.sparse.FloatTensor(gg.tensor(IDX), gg.tensor(VAL), gg.Size([3, 4])), t)


def test_scaling_and_transposing_a_sparse_tensor_match_torch():
    """``s * number``, ``number * s`` and ``s.t()`` stay sparse, and gradients reach the
    values the sparse tensor was built from."""
    results = []
    for lib in (torch, gg):
        i = lib.tensor([[0, 1, 1, 2], [2, 0, 2, 1]])
        v = lib.tensor([3.0, 4.0, 5.0, 6.0], dtype=lib.float64, requires_grad=True)
        s = lib.sparse_coo_tensor(i, v, (3, 3))
        d = lib.tensor(np.arange(9.0).reshape(3, 3), dtype=lib.float64, requires_grad=True)
        out = lib.sparse.mm((s * 2.5).t(), d) + lib.sparse.mm(0.5 * s, d)
        out.sum().backward()
        results.append(((s * 2).is_sparse, s.t().is_sparse, out.detach().numpy(),
                        v.grad.numpy(), d.grad.numpy(), s.t().to_dense().detach().numpy()))
    t, g = results
    assert g[:2] == t[:2] == (True, True)
    for a, b in zip(g[2:], t[2:], strict=True):
        np.testing.assert_allclose(a, b, rtol=1e-12)
