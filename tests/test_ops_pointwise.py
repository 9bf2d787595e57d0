"""Pointwise ops against PyTorch beyond the op tables: logaddexp and xlogy at
infinities, ties and zero, addcdiv, lerp, nan_to_num, meshgrid's errors; that the
tensor methods of these ops exist; and shape rules with unknown batch dims in
static graphs."""


from __future__ import annotations

import numpy as np
import pytest
import torch
from helpers import gg_and_torch, to_numpy

import graphgrad as gg
from graphgrad.ops.cumulative import CumminIndices


def test_logaddexp_infinities_and_large_values():
    a = np.array([-np.inf, np.inf, 1000.0, -np.inf, np.inf, 1e308])
    b = np.array([-np.inf, np.inf, 0.0, 3.0, -np.inf, 1e308])
    (ga, ta), (gb, tb) = gg_and_torch(a), gg_and_torch(b)
    np.testing.assert_array_equal(to_numpy(gg.logaddexp(ga, gb)), torch.logaddexp(ta, tb).numpy())
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
    xt = torch.tensor(to_numpy(x), requires_grad=True)
    yt = torch.tensor(to_numpy(y), requires_grad=True)
    got, want = gg.xlogy(x, y), torch.xlogy(xt, yt)
    np.testing.assert_array_equal(to_numpy(got), want.detach().numpy())
    got.sum().backward()
    want.sum().backward()
    # where the value is defined (positive finite y) the gradients are PyTorch's
    np.testing.assert_allclose(to_numpy(x.grad)[3:], xt.grad.numpy()[3:])
    np.testing.assert_allclose(to_numpy(y.grad)[3:], yt.grad.numpy()[3:])


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
    assert to_numpy(gg.lerp(gg.tensor(a), gg.tensor(b), 1.0)).tolist() == b.tolist()
    np.testing.assert_array_equal(to_numpy(gg.lerp(gg.tensor(a), gg.tensor(b), 0.7)),
                                  torch.lerp(torch.tensor(a), torch.tensor(b), 0.7).numpy())


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_nan_to_num_defaults_are_the_dtype_bounds(dtype):
    a = np.array([np.nan, np.inf, -np.inf, 1.5], dtype=dtype)
    g, t = gg_and_torch(a)
    got = gg.nan_to_num(g)
    assert got.dtype == g.dtype
    np.testing.assert_array_equal(to_numpy(got), torch.nan_to_num(t).numpy())
    assert np.isfinite(to_numpy(got)).all()


def test_nan_to_num_gradient_is_zero_where_replaced():
    x = gg.tensor([np.nan, np.inf, -np.inf, 1.5], requires_grad=True)
    gg.nan_to_num(x).sum().backward()
    assert to_numpy(x.grad).tolist() == [0.0, 0.0, 0.0, 1.0]


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
    np.testing.assert_array_equal(got, to_numpy(fn(gg.tensor(feed))))
