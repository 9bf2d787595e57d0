"""Sorting and searching against PyTorch beyond the op tables (``op_cases.py``,
``jvp_vmap_cases.py``): sort order at ties, NaN and infinities, topk's ``sorted=False``
contract, kthvalue and median, searchsorted; gradients and PyTorch's error messages."""


from __future__ import annotations

import re

import numpy as np
import pytest
import torch
from helpers import gg_and_torch, to_numpy

import graphgrad as gg

# ---- sort order: ties, NaN, infinities ----------------------------------------------------

_NAN = np.nan
_TIES = np.array([[3.0, _NAN, 1.0, np.inf, _NAN, 1.0, -np.inf, 3.0],
                  [0.0, -0.0, 2.0, 2.0, 2.0, _NAN, -1.0, 0.0]])


@pytest.mark.parametrize("descending", [False, True])
@pytest.mark.parametrize("dim", [0, 1, -1])
def test_sort_ties_and_nan_follow_torch_stable_order(descending, dim):
    g, t = gg_and_torch(_TIES)
    got = gg.sort(g, dim=dim, descending=descending, stable=True)
    want = torch.sort(t, dim=dim, descending=descending, stable=True)
    np.testing.assert_array_equal(to_numpy(got.indices), want.indices.numpy())
    np.testing.assert_array_equal(to_numpy(got.values), want.values.numpy())


def test_nan_is_the_largest_value():
    g = gg.tensor([1.0, _NAN, -np.inf, np.inf])
    assert np.isnan(to_numpy(gg.sort(g).values)[-1])
    assert np.isnan(to_numpy(gg.sort(g, descending=True).values)[0])
    assert to_numpy(gg.argsort(g, descending=True))[1] == 3  # inf just after NaN
    assert to_numpy(gg.topk(g, 1).indices).tolist() == [1]


def test_sort_without_stable_keeps_ties_in_order_too():
    # stable=False allows any order of ties; graphgrad's is always the stable one
    g = gg.tensor([2, 1, 2, 1, 2])
    assert to_numpy(gg.argsort(g)).tolist() == [1, 3, 0, 2, 4]
    assert to_numpy(gg.argsort(g, descending=True)).tolist() == [0, 2, 4, 1, 3]


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
    assert to_numpy(x.grad).tolist() == [1.0, 100.0, 10.0]


def test_values_grad_fn_is_gather():
    x = gg.tensor([3.0, 1.0, 2.0], requires_grad=True)
    assert "Gather" in type(x.sort().values.grad_fn).__name__ or \
        "Gather" in repr(x.sort().values.grad_fn)


def test_msort_sorts_dim_0():
    a = np.array([[3.0, 1.0], [1.0, 2.0], [2.0, 0.0]])
    g, t = gg_and_torch(a)
    np.testing.assert_array_equal(to_numpy(gg.msort(g)), torch.msort(t).numpy())
    np.testing.assert_array_equal(to_numpy(g.msort()), torch.msort(t).numpy())


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
    g, t = gg_and_torch(a)
    got = gg.topk(g, 3, dim=1, largest=largest, sorted=False)
    want = torch.topk(t, 3, dim=1, largest=largest, sorted=False)
    # PyTorch leaves the order unspecified: compare the sets, and check that the
    # indices point at the values
    np.testing.assert_array_equal(np.sort(to_numpy(got.values), 1),
                                  np.sort(want.values.numpy(), 1))
    np.testing.assert_array_equal(np.take_along_axis(a, to_numpy(got.indices), 1),
                                  to_numpy(got.values))


def test_topk_with_ties_picks_values_that_the_indices_point_at():
    a = np.array([[1.0, 3.0, 3.0, 2.0, 3.0]])
    g, t = gg_and_torch(a)
    got = gg.topk(g, 2)
    assert to_numpy(got.values).tolist() == torch.topk(t, 2).values.numpy().tolist()
    np.testing.assert_array_equal(np.take_along_axis(a, to_numpy(got.indices), 1),
                                  to_numpy(got.values))


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
    g, t = gg_and_torch(a)
    for k in range(1, 6):
        got, want = gg.kthvalue(g, k, 1), torch.kthvalue(t, k, 1)
        np.testing.assert_array_equal(to_numpy(got.values), want.values.numpy())
        picked = np.take_along_axis(a, to_numpy(got.indices)[:, None], 1)[:, 0]
        np.testing.assert_array_equal(picked, to_numpy(got.values))


def test_kthvalue_k_out_of_range():
    with pytest.raises(RuntimeError, match="kthvalue\\(\\): selected number k out of range for "
                                           "dimension 0"):
        gg.kthvalue(gg.ones(3), 4)
    with pytest.raises(RuntimeError, match="selected number k out of range"):
        gg.kthvalue(gg.ones(3), 0)


def test_median_is_the_lower_median_and_propagates_nan():
    assert to_numpy(gg.median(gg.tensor([4.0, 1.0, 3.0, 2.0]))) == 2.0
    assert np.isnan(to_numpy(gg.median(gg.tensor([1.0, _NAN, 0.0]))))
    assert np.isnan(to_numpy(gg.median(gg.ones(0))))
    got = gg.median(gg.tensor([[1.0, _NAN, 0.0, _NAN], [3.0, 1.0, 2.0, 0.0]]), 1)
    assert to_numpy(got.indices).tolist() == [1, 1]
    assert np.isnan(to_numpy(got.values)[0]) and to_numpy(got.values)[1] == 1.0


def test_median_of_an_empty_dim():
    with pytest.raises(IndexError, match="median\\(\\): Expected reduction dim 1 to have "
                                         "non-zero size."):
        gg.median(gg.ones(2, 0), 1)


def test_median_gradient_goes_to_the_picked_element():
    x = gg.tensor([[3.0, 1.0, 2.0, 5.0]], requires_grad=True)
    gg.median(x, 1).values.sum().backward()
    assert to_numpy(x.grad).tolist() == [[0.0, 0.0, 1.0, 0.0]]


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
            np.testing.assert_array_equal(to_numpy(got), want.numpy())


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
    assert to_numpy(gg.searchsorted(gg.tensor([1.0, 3.0, 5.0]), 4.0)).tolist() == 2
    assert gg.searchsorted(gg.tensor([1.0]), gg.tensor([4.0]), out_int32=True).dtype == \
        gg.int32
