"""What the op tables (``op_cases.py``, ``jvp_vmap_cases.py``) do not cover for the
sorting and searching functions, triangles and diagonals, shifts, cumulative ops, einsum
and tensordot, grids, logaddexp/xlogy and the compound arithmetic (addmm and its
relatives, addcmul, addcdiv, lerp, nan_to_num): the sort order at ties and NaN, topk's
``sorted=False`` contract, derivatives of cumprod at zeros past second order, the error
messages (in PyTorch's wording), and einsum forms against ``torch.einsum``.
"""

from __future__ import annotations

import re

import numpy as np
import pytest
import torch

import graphgrad as gg
from graphgrad.ops.cumulative import CumminIndices


def _both(a):
    return gg.tensor(a), torch.tensor(a)


def _np(t):
    return t.detach().numpy() if hasattr(t, "detach") else np.asarray(t)


# ---- sort order: ties, NaN, infinities ----------------------------------------------------

_NAN = np.nan
_TIES = np.array([[3.0, _NAN, 1.0, np.inf, _NAN, 1.0, -np.inf, 3.0],
                  [0.0, -0.0, 2.0, 2.0, 2.0, _NAN, -1.0, 0.0]])


@pytest.mark.parametrize("descending", [False, True])
@pytest.mark.parametrize("dim", [0, 1, -1])
def test_sort_ties_and_nan_follow_torch_stable_order(descending, dim):
    g, t = _both(_TIES)
    got = gg.sort(g, dim=dim, descending=descending, stable=True)
    want = torch.sort(t, dim=dim, descending=descending, stable=True)
    np.testing.assert_array_equal(_np(got.indices), want.indices.numpy())
    np.testing.assert_array_equal(_np(got.values), want.values.numpy())


def test_nan_is_the_largest_value():
    g = gg.tensor([1.0, _NAN, -np.inf, np.inf])
    assert np.isnan(_np(gg.sort(g).values)[-1])
    assert np.isnan(_np(gg.sort(g, descending=True).values)[0])
    assert _np(gg.argsort(g, descending=True))[1] == 3  # inf just after NaN
    assert _np(gg.topk(g, 1).indices).tolist() == [1]


def test_sort_without_stable_keeps_ties_in_order_too():
    # stable=False allows any order of ties; graphgrad's is always the stable one
    g = gg.tensor([2, 1, 2, 1, 2])
    assert _np(gg.argsort(g)).tolist() == [1, 3, 0, 2, 4]
    assert _np(gg.argsort(g, descending=True)).tolist() == [0, 2, 4, 1, 3]


def test_sort_result_is_a_named_pair_like_max_dim():
    x = gg.tensor([[3.0, 1.0, 2.0]])
    result = x.sort()
    values, indices = result
    assert type(result) is type(gg.max(x, dim=1))
    assert values is result.values and indices is result.indices
    assert indices.dtype == gg.int64 and not indices.requires_grad


def test_sort_gradient_goes_back_to_the_sorted_positions():
    x = gg.tensor([3.0, 1.0, 2.0], requires_grad=True)
    values = x.sort(descending=True).values
    (values * gg.tensor([1.0, 10.0, 100.0])).sum().backward()
    assert _np(x.grad).tolist() == [1.0, 100.0, 10.0]


def test_values_grad_fn_is_gather():
    x = gg.tensor([3.0, 1.0, 2.0], requires_grad=True)
    assert "Gather" in type(x.sort().values.grad_fn).__name__ or \
        "Gather" in repr(x.sort().values.grad_fn)


def test_msort_sorts_dim_0():
    a = np.array([[3.0, 1.0], [1.0, 2.0], [2.0, 0.0]])
    g, t = _both(a)
    np.testing.assert_array_equal(_np(gg.msort(g)), torch.msort(t).numpy())
    np.testing.assert_array_equal(_np(g.msort()), torch.msort(t).numpy())


def test_complex_step_goes_through_sort():
    """Argsort orders a complex input by its real part, so the complex step (x + ih)
    keeps x's order and the sorted values carry the step."""
    from graphgrad import numdiff as nd

    def f(x):
        top = gg.topk(x, 2).values
        return (gg.sort(x * x, descending=True).values * gg.arange(1.0, 5.0,
                                                                    dtype=gg.float64)).sum() \
            + top.prod()
    x = np.array([0.3, -1.2, 0.8, 2.0])
    cs = nd.gradient(f, x, method="complex_step")
    ad = gg.func.grad(f)(gg.tensor(x)).numpy()
    np.testing.assert_allclose(cs, ad, rtol=1e-14, atol=1e-14)


# ---- topk ---------------------------------------------------------------------------------


@pytest.mark.parametrize("largest", [True, False])
def test_topk_unsorted_gives_the_same_elements(largest):
    rng = np.random.default_rng(0)
    a = rng.standard_normal((4, 7))
    g, t = _both(a)
    got = gg.topk(g, 3, dim=1, largest=largest, sorted=False)
    want = torch.topk(t, 3, dim=1, largest=largest, sorted=False)
    # PyTorch leaves the order unspecified: compare the sets, and check that the
    # indices point at the values
    np.testing.assert_array_equal(np.sort(_np(got.values), 1), np.sort(want.values.numpy(), 1))
    np.testing.assert_array_equal(np.take_along_axis(a, _np(got.indices), 1), _np(got.values))


def test_topk_with_ties_picks_values_that_the_indices_point_at():
    a = np.array([[1.0, 3.0, 3.0, 2.0, 3.0]])
    g, t = _both(a)
    got = gg.topk(g, 2)
    assert _np(got.values).tolist() == torch.topk(t, 2).values.numpy().tolist()
    np.testing.assert_array_equal(np.take_along_axis(a, _np(got.indices), 1), _np(got.values))


def test_topk_k_out_of_range():
    with pytest.raises(RuntimeError, match="selected index k out of range"):
        gg.topk(gg.ones(3), 4)
    with pytest.raises(RuntimeError, match="selected index k out of range"):
        gg.topk(gg.ones(3), -1)


def test_topk_zero_elements():
    got = gg.topk(gg.tensor([[1.0, 2.0]]), 0)
    assert tuple(got.values.shape) == (1, 0) and tuple(got.indices.shape) == (1, 0)


def test_sort_dim_out_of_range():
    with pytest.raises(IndexError, match="Dimension out of range"):
        gg.sort(gg.ones(3), 1)


# ---- kthvalue, median ------------------------------------------------------------------------


def test_kthvalue_with_nan_and_ties_gives_torch_values():
    a = np.array([[1.0, _NAN, 0.0, 1.0, -np.inf], [_NAN, _NAN, 2.0, 2.0, 2.0]])
    g, t = _both(a)
    for k in range(1, 6):
        got, want = gg.kthvalue(g, k, 1), torch.kthvalue(t, k, 1)
        np.testing.assert_array_equal(_np(got.values), want.values.numpy())
        np.testing.assert_array_equal(np.take_along_axis(a, _np(got.indices)[:, None], 1)[:, 0],
                                      _np(got.values))


def test_kthvalue_k_out_of_range():
    with pytest.raises(RuntimeError, match="kthvalue\\(\\): selected number k out of range for "
                                           "dimension 0"):
        gg.kthvalue(gg.ones(3), 4)
    with pytest.raises(RuntimeError, match="selected number k out of range"):
        gg.kthvalue(gg.ones(3), 0)


def test_median_is_the_lower_median_and_propagates_nan():
    assert _np(gg.median(gg.tensor([4.0, 1.0, 3.0, 2.0]))) == 2.0
    assert np.isnan(_np(gg.median(gg.tensor([1.0, _NAN, 0.0]))))
    assert np.isnan(_np(gg.median(gg.ones(0))))
    got = gg.median(gg.tensor([[1.0, _NAN, 0.0, _NAN], [3.0, 1.0, 2.0, 0.0]]), 1)
    assert _np(got.indices).tolist() == [1, 1]
    assert np.isnan(_np(got.values)[0]) and _np(got.values)[1] == 1.0


def test_median_of_an_empty_dim():
    with pytest.raises(IndexError, match="median\\(\\): Expected reduction dim 1 to have "
                                         "non-zero size."):
        gg.median(gg.ones(2, 0), 1)


def test_median_gradient_goes_to_the_picked_element():
    x = gg.tensor([[3.0, 1.0, 2.0, 5.0]], requires_grad=True)
    gg.median(x, 1).values.sum().backward()
    assert _np(x.grad).tolist() == [[0.0, 0.0, 1.0, 0.0]]


# ---- searchsorted, bucketize ------------------------------------------------------------------


def test_searchsorted_matches_torch_on_random_rows():
    rng = np.random.default_rng(4)
    for _ in range(40):
        lead = tuple(rng.integers(1, 3, int(rng.integers(0, 2))))
        seq = np.sort(rng.integers(-3, 3, (*lead, int(rng.integers(1, 5)))), -1).astype(float)
        vals = rng.integers(-4, 4, (*lead, 3)).astype(float)
        for right in (False, True):
            got = gg.searchsorted(gg.tensor(seq), gg.tensor(vals), right=right)
            want = torch.searchsorted(torch.tensor(seq), torch.tensor(vals), right=right)
            np.testing.assert_array_equal(_np(got), want.numpy())


@pytest.mark.parametrize("call, message", [
    (lambda m: m.searchsorted(m.ones(2, 3), m.ones(3, 1)),
     "torch.searchsorted(): boundaries tensor should be 1 dimension or the first N-1 "
     "dimensions of boundaries tensor and input value tensor must match, but we got "
     "boundaries tensor [2, 3] and input value tensor [3, 1]"),
    (lambda m: m.searchsorted(m.ones(3), m.ones(1), side="left", right=True),
     "torch.searchsorted(): side and right can't be set to opposites, got side of left "
     "while right was True"),
    (lambda m: m.searchsorted(m.tensor(1.0), m.ones(1)),
     "torch.searchsorted(): boundaries tensor should have positive dimension, but got 0 "
     "dimension"),
    (lambda m: m.bucketize(m.ones(2), m.ones(1, 3)),
     "boundaries tensor must be 1 dimension, but got dim(2)"),
])
def test_searchsorted_errors_use_torch_wording(call, message):
    for m in (gg, torch):
        with pytest.raises(RuntimeError, match=re.escape(message)):
            call(m)


def test_searchsorted_scalar_value_and_int32():
    assert _np(gg.searchsorted(gg.tensor([1.0, 3.0, 5.0]), 4.0)).tolist() == 2
    assert gg.searchsorted(gg.tensor([1.0]), gg.tensor([4.0]), out_int32=True).dtype == \
        gg.int32


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
    g, t = _both(a)
    np.testing.assert_array_equal(_np(getattr(g, fn)(k)), getattr(t, fn)(k).numpy())


def test_diagonal_errors():
    with pytest.raises(RuntimeError, match="diagonal dimensions cannot be identical 0, -2"):
        gg.diagonal(gg.ones(3, 3), 0, 0, -2)
    with pytest.raises(IndexError, match="Dimension out of range"):
        gg.diagonal(gg.ones(3, 3), 0, 0, 2)


@pytest.mark.parametrize("offset", [-4, -3, 3, 5])
def test_diagonal_past_the_matrix_is_empty(offset):
    g, t = _both(np.ones((2, 3, 4)))
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
    assert _np(m).tolist() == [[0.0, 1.0, 0.0], [0.0, 0.0, 2.0], [0.0, 0.0, 0.0]]
    (m * gg.arange(9.0).reshape(3, 3)).sum().backward()
    assert _np(v.grad).tolist() == [1.0, 5.0]


def test_trace_needs_a_matrix():
    with pytest.raises(RuntimeError, match="trace: expected a matrix, but got tensor with dim 3"):
        gg.trace(gg.ones(2, 2, 2))


# ---- roll, diff ---------------------------------------------------------------------------


def test_roll_errors():
    with pytest.raises(RuntimeError, match="shifts and dimensions must align. shifts: 2, dims:1"):
        gg.roll(gg.ones(3, 3), (1, 2), (0,))
    with pytest.raises(RuntimeError, match="shifts and dimensions must align"):
        gg.roll(gg.ones(3, 3), (1, 2))


def test_roll_result_is_a_new_tensor():
    x = gg.tensor([1.0, 2.0, 3.0])
    y = x.roll(3)
    assert y is not x and _np(y).tolist() == [1.0, 2.0, 3.0]


def test_roll_same_dim_twice_and_0d():
    a = np.arange(12.0).reshape(3, 4)
    g, t = _both(a)
    np.testing.assert_array_equal(_np(g.roll((1, 2), (1, 1))), t.roll((1, 2), (1, 1)).numpy())
    np.testing.assert_array_equal(_np(gg.roll(gg.tensor(2.0), 1)), 2.0)


def test_diff_errors():
    with pytest.raises(RuntimeError, match="diff expects input to be at least one-dimensional"):
        gg.diff(gg.tensor(1.0))
    with pytest.raises(RuntimeError, match="order must be non-negative but got -1"):
        gg.diff(gg.ones(3), n=-1)
    with pytest.raises(RuntimeError, match="diff expects prepend or append to be the same "
                                           "dimension as input"):
        gg.diff(gg.ones(3, 2), prepend=gg.ones(2))


def test_diff_more_times_than_elements():
    g, t = _both(np.array([1.0, 4.0, 9.0]))
    for n in range(5):
        np.testing.assert_array_equal(_np(gg.diff(g, n)), torch.diff(t, n).numpy())


# ---- cumprod at zeros, third order ----------------------------------------------------------


@pytest.mark.parametrize("x", [[2.0, 0.0, 3.0, 0.0, 1.5], [0.0, 0.0, 0.0], [1.0, 2.0, 0.0],
                               [0.5, -1.0, 2.0]])
def test_cumprod_derivatives_to_third_order_match_torch(x):
    rng = np.random.default_rng(1)
    r, s, u = (rng.standard_normal(len(x)) for _ in range(3))

    def third(m):
        a = m.tensor(np.array(x), requires_grad=True)
        y = (m.cumprod(a, 0) * m.tensor(r)).sum()
        (g1,) = m.autograd.grad(y, a, create_graph=True)
        (g2,) = m.autograd.grad((g1 * m.tensor(s)).sum(), a, create_graph=True)
        (g3,) = m.autograd.grad((g2 * m.tensor(u)).sum(), a, allow_unused=True)
        return [_np(v) if v is not None else np.zeros(len(x)) for v in (g1, g2, g3)]

    for got, want in zip(third(gg), third(torch), strict=True):
        np.testing.assert_allclose(got, want, rtol=1e-12, atol=1e-12)


def test_cumprod_first_order_backward_is_one_linear_op():
    """Plain backward runs CumprodBackward (O(n) along the dim) and nothing quadratic:
    the n-copies construction appears only when the gradient is differentiated again."""
    from graphgrad.tensor import Mode, dispatch, pop_mode, push_mode

    class Recorder(Mode):
        def __init__(self):
            self.seen = []

        def process(self, op, args, params):
            self.seen.append(op.__name__)
            with self.lowered():
                return dispatch(op, args, params)

    x = gg.tensor(np.array([[2.0, 0.0, 3.0, 0.5], [1.0, -1.0, 0.0, 0.0]]), requires_grad=True)
    y = gg.cumprod(x, 1)
    rec = Recorder()
    push_mode(rec)
    try:
        (grad,) = gg.autograd.grad(y.sum(), x)
    finally:
        pop_mode(rec)
    assert "CumprodBackward" in rec.seen and "Cumprod" not in rec.seen, rec.seen
    xt = torch.tensor(_np(x), requires_grad=True)
    (want,) = torch.autograd.grad(torch.cumprod(xt, 1).sum(), xt)
    np.testing.assert_allclose(_np(grad), want.numpy(), rtol=1e-14)


@pytest.mark.parametrize("fn", ["cummax", "cummin"])
def test_running_extremum_ties_nan_and_inf_follow_torch(fn):
    rng = np.random.default_rng(3)
    for _ in range(50):
        shape = tuple(rng.integers(1, 5, rng.integers(1, 4)))
        a = rng.integers(-2, 3, shape).astype(np.float64)
        a[rng.random(shape) < 0.15] = _NAN
        a[rng.random(shape) < 0.1] = np.inf
        dim = int(rng.integers(-len(shape), len(shape)))
        g, t = _both(a)
        got, want = getattr(gg, fn)(g, dim), getattr(torch, fn)(t, dim)
        np.testing.assert_array_equal(_np(got.indices), want.indices.numpy())
        np.testing.assert_array_equal(_np(got.values), want.values.numpy())


def test_cumprod_int_and_bool_give_int64():
    assert gg.cumprod(gg.tensor([1, 2, 3]), 0).dtype == gg.int64
    assert gg.cumprod(gg.tensor([True, False]), 0).dtype == gg.int64
    assert gg.cumprod(gg.tensor([1, 2]), 0, dtype=gg.float32).dtype == gg.float32


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
    np.testing.assert_allclose(_np(got), want.detach().numpy(), rtol=1e-12, atol=1e-12)
    if got.numel():
        w = rng.standard_normal(tuple(want.shape))
        (got * gg.tensor(w)).sum().backward()
        (want * torch.tensor(w)).sum().backward()
        for a, b in zip(g_in, t_in, strict=True):
            np.testing.assert_allclose(_np(a.grad), b.grad.numpy(), rtol=1e-12, atol=1e-12)


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
        np.testing.assert_allclose(_np(got), want.numpy(), rtol=1e-12)
    with pytest.raises(RuntimeError, match=re.escape("einsum(): subscript in subscript list "
                                                     "is not within the valid range [0, 52)")):
        gg.einsum(gg.tensor(a), [0, 60])


def test_einsum_third_derivative_of_a_quadratic_form():
    a = np.array([[1.0, 2.0], [0.5, -1.0]])
    x = gg.tensor([0.3, -0.7], requires_grad=True)
    y = gg.einsum("i,ij,j->", x, gg.tensor(a), x) * gg.einsum("i->", x)
    (g1,) = gg.autograd.grad(y, x, create_graph=True)
    (h,) = gg.autograd.grad(g1.sum(), x, create_graph=True)
    (t,) = gg.autograd.grad(h.sum(), x)
    # y = q * s with q = x^T A x, s = sum(x): with S = A + A^T the third derivative is
    # T_ijk = S_ij + S_ik + S_jk, and the test sums it over i and j (n = 2)
    s = a + a.T
    want = s.sum() + 4 * s.sum(0)
    np.testing.assert_allclose(_np(t), want)


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
    np.testing.assert_array_equal(_np(got), want.numpy())


def test_logaddexp_infinities_and_large_values():
    a = np.array([-np.inf, np.inf, 1000.0, -np.inf, np.inf, 1e308])
    b = np.array([-np.inf, np.inf, 0.0, 3.0, -np.inf, 1e308])
    (ga, ta), (gb, tb) = _both(a), _both(b)
    np.testing.assert_array_equal(_np(gg.logaddexp(ga, gb)), torch.logaddexp(ta, tb).numpy())
    with pytest.raises(NotImplementedError, match="\"logaddexp_cpu\" not implemented for "
                                                  "'Long'"):
        gg.logaddexp(gg.tensor([1]), gg.tensor([2]))
    with pytest.raises(NotImplementedError, match="\"lerp_kernel_scalar\" not implemented "
                                                  "for 'Long'"):
        gg.lerp(gg.tensor([1]), gg.tensor([2]), 0.5)


def test_logaddexp_derivatives_at_a_tie_are_the_smooth_ones():
    # log(2 e^x) = x + log 2: first derivative 1/2 per argument, second -1/4 across them
    a = gg.tensor(0.3, dtype=gg.float64, requires_grad=True)
    b = gg.tensor(0.3, dtype=gg.float64, requires_grad=True)
    out = gg.logaddexp(a, b)
    ga, gb = gg.autograd.grad(out, (a, b), create_graph=True)
    assert float(ga) == pytest.approx(0.5) and float(gb) == pytest.approx(0.5)
    (gab,) = gg.autograd.grad(ga, b)
    assert float(gab) == pytest.approx(-0.25)


def test_xlogy_at_zero():
    x = gg.tensor([0.0, 0.0, 0.0, 0.0, 2.0], requires_grad=True)
    y = gg.tensor([0.0, -1.0, np.inf, 3.0, 3.0], requires_grad=True)
    xt = torch.tensor(_np(x), requires_grad=True)
    yt = torch.tensor(_np(y), requires_grad=True)
    got, want = gg.xlogy(x, y), torch.xlogy(xt, yt)
    np.testing.assert_array_equal(_np(got), want.detach().numpy())
    got.sum().backward()
    want.sum().backward()
    # where the value is defined (positive finite y) the gradients are PyTorch's
    np.testing.assert_allclose(_np(x.grad)[3:], xt.grad.numpy()[3:])
    np.testing.assert_allclose(_np(y.grad)[3:], yt.grad.numpy()[3:])


def test_meshgrid_errors_and_warning():
    a = gg.tensor([1.0, 2.0])
    with pytest.warns(UserWarning, match="it will be required to pass the indexing argument"):
        grids = gg.meshgrid(a, a)
    assert tuple(grids[0].shape) == (2, 2)
    with pytest.raises(RuntimeError, match='indexing must be one of "xy" or "ij", but '
                                           "received: foo"):
        gg.meshgrid(a, a, indexing="foo")
    with pytest.raises(RuntimeError, match="Expected 0D or 1D tensor in the tensor list"):
        gg.meshgrid(a.reshape(2, 1), a, indexing="ij")
    with pytest.raises(RuntimeError, match="meshgrid expects all tensors to have the same "
                                           "dtype"):
        gg.meshgrid(a, a.double(), indexing="ij")
    with pytest.raises(RuntimeError, match="meshgrid expects a non-empty TensorList"):
        gg.meshgrid(indexing="ij")


# ---- compound arithmetic ------------------------------------------------------------------


def test_addmm_beta_zero_ignores_nan_in_input():
    c = gg.tensor([[np.nan, np.inf], [1.0, -np.inf]])
    a, b = gg.eye(2, dtype=gg.float32), gg.tensor([[1.0, 2.0], [3.0, 4.0]])
    assert _np(gg.addmm(c, a, b, beta=0)).tolist() == [[1.0, 2.0], [3.0, 4.0]]


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


def test_addcdiv_refuses_integer_division():
    i = gg.tensor([1, 2])
    with pytest.raises(RuntimeError, match="Integer division with addcdiv is no longer "
                                           "supported"):
        gg.addcdiv(i, i, i)


def test_lerp_dtype_errors_and_exact_end():
    with pytest.raises(RuntimeError, match="expected dtype float for `end` but got dtype "
                                           "double"):
        gg.lerp(gg.ones(2), gg.ones(2, dtype=gg.float64), 0.5)
    with pytest.raises(RuntimeError, match="expected dtype float for `weight` but got dtype "
                                           "double"):
        gg.lerp(gg.ones(2), gg.ones(2), gg.ones(2, dtype=gg.float64))
    a, b = np.array([0.1, 1e8]), np.array([0.7, 3.0])
    assert _np(gg.lerp(gg.tensor(a), gg.tensor(b), 1.0)).tolist() == b.tolist()
    np.testing.assert_array_equal(_np(gg.lerp(gg.tensor(a), gg.tensor(b), 0.7)),
                                  torch.lerp(torch.tensor(a), torch.tensor(b), 0.7).numpy())


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_nan_to_num_defaults_are_the_dtype_bounds(dtype):
    a = np.array([np.nan, np.inf, -np.inf, 1.5], dtype=dtype)
    g, t = _both(a)
    got = gg.nan_to_num(g)
    assert got.dtype == g.dtype
    np.testing.assert_array_equal(_np(got), torch.nan_to_num(t).numpy())
    assert np.isfinite(_np(got)).all()


def test_nan_to_num_gradient_is_zero_where_replaced():
    x = gg.tensor([np.nan, np.inf, -np.inf, 1.5], requires_grad=True)
    gg.nan_to_num(x).sum().backward()
    assert _np(x.grad).tolist() == [0.0, 0.0, 0.0, 1.0]


# ---- methods -------------------------------------------------------------------------------


@pytest.mark.parametrize("name", ["sort", "argsort", "topk", "msort", "kthvalue", "median",
                                  "tril", "triu", "diagonal", "diag", "diag_embed", "trace",
                                  "roll", "diff", "cumprod", "cummax", "cummin", "addmm",
                                  "addmv", "addbmm", "baddbmm", "addcmul", "addcdiv", "lerp",
                                  "nan_to_num", "rot90", "logaddexp", "xlogy"])
def test_tensor_methods_exist_like_torch(name):
    assert hasattr(torch.Tensor, name)
    assert callable(getattr(gg.Tensor, name))


# ---- shape rules with unknown dims (static graphs) --------------------------------------------


@pytest.mark.parametrize("name, fn", [
    ("tril", lambda x: gg.tril(x, -1)),
    ("triu", lambda x: x.triu(1)),
    ("cumprod", lambda x: gg.cumprod(x, 1)),
    ("argsort", lambda x: gg.argsort(x, 1, descending=True)),
    # the op itself: cummin's values are a gather, whose shape rule needs known dims
    ("cummin_indices", lambda x: CumminIndices.apply(x, dim=0)),
    ("searchsorted", lambda x: gg.searchsorted(gg.tensor([0.0, 2.5]), x)),
])
def test_ops_build_graphs_with_unknown_batch_dims(name, fn):
    from graphgrad import static as tf
    feed = np.array([[3.0, 1.0, 2.0], [0.0, 5.0, 4.0]])
    graph = tf.Graph()
    with graph.as_default():
        x = tf.placeholder("float64", (None, 3))
        y = fn(x)
        with tf.Session() as session:
            got = session.run(y, {x: feed})
    np.testing.assert_array_equal(got, _np(fn(gg.tensor(feed))))
