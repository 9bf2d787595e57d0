"""Matrix ops against PyTorch beyond the op tables: triangles and diagonals, trace,
rot90, triangle indices, einsum (every form, sublists, third derivatives), tensordot,
addmm and its relatives; PyTorch's error messages."""


from __future__ import annotations

import re

import numpy as np
import pytest
import torch
from helpers import gg_and_torch, to_numpy

import graphgrad as gg

# ---- triangles, diagonals -----------------------------------------------------------------


@pytest.mark.parametrize("fn", ["tril", "triu"])
def test_triangle_needs_a_matrix(fn):
    with pytest.raises(RuntimeError, match=f"{fn}: input tensor must have at least 2 "
                                           f"dimensions"):
        getattr(gg, fn)(gg.ones(3))


@pytest.mark.parametrize("fn", ["tril", "triu"])
@pytest.mark.parametrize("k", [-5, -1, 0, 2, 7])
def test_triangle_offsets_match_torch(fn, k):
    a = np.arange(2 * 3 * 4, dtype=np.float64).reshape(2, 3, 4)
    g, t = gg_and_torch(a)
    np.testing.assert_array_equal(to_numpy(getattr(g, fn)(k)), getattr(t, fn)(k).numpy())


def test_diagonal_errors():
    with pytest.raises(RuntimeError, match="diagonal dimensions cannot be identical 0, -2"):
        gg.diagonal(gg.ones(3, 3), 0, 0, -2)
    with pytest.raises(IndexError, match="Dimension out of range"):
        gg.diagonal(gg.ones(3, 3), 0, 0, 2)


@pytest.mark.parametrize("offset", [-4, -3, 3, 5])
def test_diagonal_past_the_matrix_is_empty(offset):
    g, t = gg_and_torch(np.ones((2, 3, 4)))
    got, want = gg.diagonal(g, offset, 1, 2), torch.diagonal(t, offset, 1, 2)
    assert tuple(got.shape) == tuple(want.shape)


def test_diag_errors():
    for shape, n in (((), 0), ((2, 2, 2), 3)):
        with pytest.raises(RuntimeError, match=f"diag\\(\\): Supports 1D or 2D tensors. Got {n}D"):
            gg.diag(gg.ones(*shape))
    with pytest.raises(RuntimeError, match="diagonal dimensions cannot be identical 0, -3"):
        gg.diag_embed(gg.ones(2, 3), 0, 0, -3)


def test_diag_embed_gradient_reads_the_diagonal_back():
    v = gg.tensor([1.0, 2.0], requires_grad=True)
    m = gg.diag_embed(v, 1)
    assert to_numpy(m).tolist() == [[0.0, 1.0, 0.0], [0.0, 0.0, 2.0], [0.0, 0.0, 0.0]]
    (m * gg.arange(9.0).reshape(3, 3)).sum().backward()
    assert to_numpy(v.grad).tolist() == [1.0, 5.0]


def test_trace_needs_a_matrix():
    with pytest.raises(RuntimeError, match="trace: expected a matrix, but got tensor with dim 3"):
        gg.trace(gg.ones(2, 2, 2))


# ---- einsum -------------------------------------------------------------------------------

_FORMS = [
    ("ij,jk->ik", [(2, 3), (3, 4)]),
    ("bij,bkj->bik", [(2, 2, 3), (2, 4, 3)]),
    ("ii->", [(3, 3)]),
    ("iij->j", [(3, 3, 2)]),
    ("ij->", [(2, 3)]),
    ("i,j,k->ijk", [(2,), (3,), (2,)]),
    ("ij,ij->", [(2, 3), (2, 3)]),
    ("ab,cd->", [(2, 3), (4, 5)]),
    ("...ij,...jk", [(2, 1, 2, 3), (4, 3, 2)]),
    ("b...,b...->b", [(2, 3, 4), (2, 3, 4)]),
    ("...", [(2, 3)]),
    ("i,i", [(0,), (0,)]),
    ("ijk,jil->kl", [(2, 3, 4), (3, 2, 5)]),
    ("ij,jk,kl,lm->mi", [(2, 3), (3, 2), (2, 4), (4, 2)]),
    ("xi , ix -> x", [(3, 2), (2, 3)]),
]


@pytest.mark.parametrize("equation, shapes", _FORMS, ids=[f[0] for f in _FORMS])
def test_einsum_forms_match_torch(equation, shapes):
    rng = np.random.default_rng(2)
    arrays = [rng.standard_normal(s) for s in shapes]
    g_in = [gg.tensor(a, requires_grad=True) for a in arrays]
    t_in = [torch.tensor(a, requires_grad=True) for a in arrays]
    got, want = gg.einsum(equation, *g_in), torch.einsum(equation, *t_in)
    assert tuple(got.shape) == tuple(want.shape)
    np.testing.assert_allclose(to_numpy(got), want.detach().numpy(), rtol=1e-12, atol=1e-12)
    if got.numel():
        w = rng.standard_normal(tuple(want.shape))
        (got * gg.tensor(w)).sum().backward()
        (want * torch.tensor(w)).sum().backward()
        for a, b in zip(g_in, t_in, strict=True):
            np.testing.assert_allclose(to_numpy(a.grad), b.grad.numpy(), rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("equation, operands, message", [
    ("ij,jk", [(2, 3)], "fewer operands were provided than specified in the equation"),
    ("i", [(2,), (2,)], "more operands were provided than specified in the equation"),
    ("ij", [(2,)], r"the number of subscripts in the equation \(2\) does not match the number "
                   r"of dimensions \(1\) for operand 0 and no ellipsis was given"),
    ("i1", [(2,)], r"invalid subscript given at index 1 in the equation string, subscripts "
                   r"must be in \[a-zA-Z\]"),
    ("ij,k1", [(2, 2), (2, 2)], "invalid subscript given at index 4 in the equation string"),
    ("ij->i1", [(2, 2)], "invalid subscript given at index 5 in the equation string"),
    ("..i", [(2,)], "found '.' for operand 0 that is not part of any ellipsis"),
    ("ij->k", [(2, 3)], "output subscript k does not appear in the equation for any input "
                        "operand"),
    ("ij->ii", [(2, 3)], "output subscript i appears more than once in the output"),
    ("ii->i", [(2, 3)], "subscript i is repeated for operand 0 but the sizes don't match, "
                        "3 != 2"),
    ("ij,jk->ik", [(3, 3), (2, 3)], "subscript j has size 2 for operand 1 which does not "
                                    "broadcast with previously seen size 3"),
])
def test_einsum_errors_use_torch_wording(equation, operands, message):
    tensors = [gg.ones(*s) for s in operands]
    with pytest.raises(RuntimeError, match=r"einsum\(\): " + message):
        gg.einsum(equation, *tensors)
    with pytest.raises(RuntimeError, match=r"einsum\(\): " + message):
        torch.einsum(equation, *[torch.ones(*s) for s in operands])


def test_einsum_sublist_form_matches_torch():
    rng = np.random.default_rng(5)
    a, b = rng.standard_normal((2, 3)), rng.standard_normal((3, 4))
    for call in (lambda m, x, y: m.einsum(x, [0, 1], y, [1, 2], [0, 2]),
                 lambda m, x, y: m.einsum(x, [0, 1], y, [1, 2]),
                 lambda m, x, y: m.einsum(x, [Ellipsis, 1], [1]),
                 lambda m, x, y: m.einsum(x, [51, 0], y, [0, 26])):
        got, want = call(gg, gg.tensor(a), gg.tensor(b)), call(torch, torch.tensor(a),
                                                               torch.tensor(b))
        np.testing.assert_allclose(to_numpy(got), want.numpy(), rtol=1e-12)
    with pytest.raises(RuntimeError, match=re.escape("einsum(): subscript in subscript list "
                                                     "is not within the valid range [0, 52)")):
        gg.einsum(gg.tensor(a), [0, 60])


def test_einsum_third_derivative_of_a_quadratic_form():
    a = np.array([[1.0, 2.0], [0.5, -1.0]])
    # float64 throughout: PyTorch's einsum refuses float32 x with float64 a
    x = gg.tensor([0.3, -0.7], dtype=gg.float64, requires_grad=True)
    y = gg.einsum("i,ij,j->", x, gg.tensor(a), x) * gg.einsum("i->", x)
    (g1,) = gg.autograd.grad(y, x, create_graph=True)
    (h,) = gg.autograd.grad(g1.sum(), x, create_graph=True)
    (t,) = gg.autograd.grad(h.sum(), x)
    # y = q * s with q = x^T A x, s = sum(x): with S = A + A^T the third derivative is
    # T_ijk = S_ij + S_ik + S_jk, and the test sums it over i and j (n = 2)
    s = a + a.T
    want = s.sum() + 4 * s.sum(0)
    np.testing.assert_allclose(to_numpy(t), want)


# ---- tensordot, rot90, triangle indices, logaddexp, xlogy ---------------------------------


@pytest.mark.parametrize("dims, message", [
    (1, "contracted dimensions need to match, but first has size 3 in dim -1 and second has "
        "size 2 in dim 0"),
    (([0], [1, 0]), "both dimension lists should have same length"),
    (3, "tensordot expects dims < ndim_a or ndim_b, but got dims=3"),
    (-1, "tensordot expects dims >= 0, but got dims=-1"),
])
def test_tensordot_errors_use_torch_wording(dims, message):
    with pytest.raises(RuntimeError, match=re.escape(message)):
        gg.tensordot(gg.ones(2, 3), gg.ones(2, 3), dims)
    with pytest.raises(RuntimeError, match=re.escape(message)):
        torch.tensordot(torch.ones(2, 3), torch.ones(2, 3), dims)


@pytest.mark.parametrize("shape, dims, message", [
    ((2, 3), [0], "expected total rotation dims == 2, but got dims = 1"),
    ((2, 3), [0, 0], "expected rotation dims to be different, but got dim0 = 0 and dim1 = 0"),
    ((3,), [0, 1], "expected total dims >= 2, but got total dims = 1"),
])
def test_rot90_errors_use_torch_wording(shape, dims, message):
    with pytest.raises(RuntimeError, match=re.escape(message)):
        gg.rot90(gg.ones(*shape), 1, dims)


@pytest.mark.parametrize("fn", ["tril_indices", "triu_indices"])
@pytest.mark.parametrize("row, col, offset", [(3, 4, 1), (3, 2, -1), (0, 4, 0), (4, 4, -5),
                                              (2, 5, 10), (1, 1, 0)])
def test_triangle_indices_match_torch(fn, row, col, offset):
    got, want = getattr(gg, fn)(row, col, offset), getattr(torch, fn)(row, col, offset)
    assert got.dtype == gg.int64
    np.testing.assert_array_equal(to_numpy(got), want.numpy())


# ---- compound arithmetic ------------------------------------------------------------------


def test_addmm_beta_zero_ignores_nan_in_input():
    c = gg.tensor([[np.nan, np.inf], [1.0, -np.inf]])
    a, b = gg.eye(2, dtype=gg.float32), gg.tensor([[1.0, 2.0], [3.0, 4.0]])
    assert to_numpy(gg.addmm(c, a, b, beta=0)).tolist() == [[1.0, 2.0], [3.0, 4.0]]


def test_addmm_errors():
    with pytest.raises(RuntimeError, match="mat1 must be a matrix, got 1-D tensor"):
        gg.addmm(gg.ones(3), gg.ones(3), gg.ones(3, 3))
    with pytest.raises(RuntimeError, match="mat2 must be a matrix, got 3-D tensor"):
        gg.addmm(gg.ones(3), gg.ones(3, 3), gg.ones(1, 3, 3))
    with pytest.raises(RuntimeError, match=r"mat1 and mat2 shapes cannot be multiplied "
                                           r"\(2x3 and 2x3\)"):
        gg.addmm(gg.ones(3), gg.ones(2, 3), gg.ones(2, 3))
    with pytest.raises(RuntimeError):  # the input must broadcast to the product
        gg.addmm(gg.ones(3, 1), gg.ones(2, 3), gg.ones(3, 3))


def test_addmv_and_batched_product_errors_use_torch_wording():
    with pytest.raises(RuntimeError, match="vector \\+ matrix @ vector expected, got 1, 1, 1"):
        gg.addmv(gg.ones(2), gg.ones(3), gg.ones(3))
    with pytest.raises(RuntimeError, match=r"size mismatch, got input \(2\), mat \(2x3\), "
                                           r"vec \(2\)"):
        gg.addmv(gg.ones(2), gg.ones(2, 3), gg.ones(2))
    with pytest.raises(RuntimeError, match="batch1 must be a 3D tensor"):
        gg.addbmm(gg.ones(3, 3), gg.ones(3, 3), gg.ones(2, 3, 3))
    with pytest.raises(RuntimeError, match="batch1 and batch2 must have same number of "
                                           "batches, got 2 and 3"):
        gg.addbmm(gg.ones(3, 3), gg.ones(2, 3, 3), gg.ones(3, 3, 3))
    with pytest.raises(RuntimeError, match=r"Incompatible matrix sizes for bmm \(2x4 and 3x3\)"):
        gg.addbmm(gg.ones(2, 3), gg.ones(2, 2, 4), gg.ones(2, 3, 3))
    with pytest.raises(RuntimeError, match=r"Expected size for first two dimensions of batch2 "
                                           r"tensor to be: \[2, 3\] but got: \[2, 4\]."):
        gg.baddbmm(gg.ones(2, 2, 3), gg.ones(2, 2, 3), gg.ones(2, 4, 3))
