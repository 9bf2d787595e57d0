"""Tensor methods PyTorch has for ops graphgrad has (issue 14's probe: 52 were missing,
among them ``sin_``, ``index_add_``, ``unfold``, ``stride``): the probe itself, every
in-place variant against PyTorch (value, dtype, gradient through the rebased tensor,
version counter, the leaf error), and the memory-layout queries."""

from __future__ import annotations

import re

import numpy as np
import pytest
import torch

import graphgrad as gg
from helpers import close

# torch.Tensor methods graphgrad still lacks although it has the op
NOT_YET: set = set()


def _missing() -> set:
    """Public torch.Tensor names graphgrad.Tensor lacks, for ops graphgrad has as a
    function or method (``x_`` counts when ``x`` exists), plus the layout queries."""
    ours = set(dir(gg.Tensor))
    functions = {n for n in dir(gg) if not n.startswith("_")}
    layout = {"stride", "storage_offset", "is_contiguous", "element_size", "nbytes",
              "itemsize", "unfold"}
    out = set()
    for name in (n for n in dir(torch.Tensor) if not n.startswith("_")):
        base = name[:-1] if name.endswith("_") else name
        if name not in ours and (base in functions or base in ours or name in layout):
            out.add(name)
    return out


def test_probe_finds_only_the_known_gaps():
    assert _missing() == NOT_YET


def test_no_public_method_that_torch_lacks():
    """Every public method graphgrad adds is PyTorch's (no invented in-place variants)."""
    ours = {n for n in dir(gg.Tensor) if not n.startswith("_")}
    internal = {"inputs", "op", "params"}  # the graph node's fields (Value)
    assert sorted(ours - set(dir(torch.Tensor)) - internal) == []


RNG = np.random.default_rng(0)
A = RNG.uniform(-0.9, 0.9, (3, 4))
B = RNG.uniform(0.5, 1.5, (3, 4)) * RNG.choice([-1.0, 1.0], (3, 4))


def _t(m, a):
    return m.tensor(a)


# name -> (input array, function of the namespace giving the other arguments)
UNARY = ["absolute_", "acos_", "arccos_", "asin_", "arcsin_", "atan_", "arctan_", "ceil_",
         "cos_", "cosh_", "erf_", "expm1_", "floor_", "log1p_", "reciprocal_", "round_",
         "sign_", "sin_", "sinh_", "square_", "tan_", "trunc_", "asinh_", "atanh_",
         "arcsinh_", "arctanh_", "exp2_", "negative_"]
POSITIVE = ["log10_", "log2_", "rsqrt_"]
BINARY = ["atan2_", "divide_", "multiply_", "subtract_", "true_divide_", "floor_divide_",
          "fmod_", "remainder_", "copysign_", "xlogy_", "eq_", "ne_", "lt_", "le_", "gt_",
          "ge_", "logical_and_", "logical_or_", "logical_xor_"]
CASES = {name: (A, lambda m: ()) for name in UNARY}
CASES.update({name: (np.abs(A) + 0.5, lambda m: ()) for name in POSITIVE})
CASES.update({name: (A, lambda m: (_t(m, B),)) for name in BINARY})
CASES.update({
    "acosh_": (np.abs(A) + 1.5, lambda m: ()),
    "arccosh_": (np.abs(A) + 1.5, lambda m: ()),
    "logical_not_": (A, lambda m: ()),
    "lerp_": (A, lambda m: (_t(m, B), 0.3)),
    "addcmul_": (A, lambda m: (_t(m, B), _t(m, A), )),
    "addcdiv_": (A, lambda m: (_t(m, A), _t(m, B))),
    "addmm_": (A, lambda m: (_t(m, B[:, :3]), _t(m, B))),
    "addmv_": (A[0, :3], lambda m: (_t(m, B[:3, :3]), _t(m, A[1, :3]))),
    "addbmm_": (A[:3, :3], lambda m: (_t(m, np.stack([B[:, :3]] * 2)),
                                      _t(m, np.stack([A[:, :3]] * 2)))),
    "baddbmm_": (np.stack([A[:3, :3]] * 2), lambda m: (_t(m, np.stack([B[:, :3]] * 2)),
                                                       _t(m, np.stack([A[:, :3]] * 2)))),
    "nan_to_num_": (np.where(A > 0.5, np.inf, A), lambda m: ()),
    "cumsum_": (A, lambda m: (1,)),
    "cumprod_": (A, lambda m: (0,)),
    "tril_": (A, lambda m: (1,)),
    "triu_": (A, lambda m: (-1,)),
    "scatter_": (A, lambda m: (1, m.tensor([[0, 2], [1, 3], [3, 0]]), _t(m, B[:, :2]))),
    "scatter_reduce_": (A, lambda m: (0, m.tensor([[0, 2, 1, 0]]), _t(m, B[:1]), "prod")),
    "index_add_": (A, lambda m: (0, m.tensor([2, 0, 2]), _t(m, B))),
    "index_copy_": (A, lambda m: (1, m.tensor([3, 0]), _t(m, B[:, :2]))),
    "index_fill_": (A, lambda m: (1, m.tensor([1, 2]), -0.5)),
})


# PyTorch has no derivative for these in-place variants (its out-of-place acosh... have
# one, which graphgrad's in-place variants use: their gradient is compared with it)
NO_TORCH_INPLACE_DERIVATIVE = {"acosh_", "arccosh_", "asinh_", "arcsinh_", "atanh_",
                               "arctanh_"}
# PyTorch has no derivative for floor_divide at all; graphgrad's op is not differentiable
NO_DERIVATIVE = {"floor_divide_"}
# not recorded by autograd in PyTorch: the history stays, a leaf may be written
UNTRACKED = {"logical_and_", "logical_or_", "logical_xor_", "logical_not_"}


def _run_inplace(m, name, base, w, reference_name):
    args = CASES[name][1]
    leaf = m.tensor(base, requires_grad=True)
    x = leaf * 1.0
    version = x._version
    if reference_name == name:
        out = getattr(x, name)(*args(m))
        assert out is x and x._version > version
    else:
        x = getattr(x, reference_name)(*args(m))
    if name in NO_DERIVATIVE:
        return x.detach().numpy().copy(), str(x.dtype), None
    (x * m.tensor(w)).sum().backward()
    return x.detach().numpy().copy(), str(x.dtype), leaf.grad.numpy().copy()


@pytest.mark.parametrize("name", sorted(CASES))
def test_inplace_variant_matches_torch(name):
    base = CASES[name][0]
    w = np.random.default_rng(1).standard_normal(base.shape)
    gv, gd, g_grad = _run_inplace(gg, name, base, w, name)
    torch_name = name[:-1] if name in NO_TORCH_INPLACE_DERIVATIVE else name
    tv, td, t_grad = _run_inplace(torch, name, base, w, torch_name)
    close(gv, tv)
    assert gd.split(".")[-1] == td.split(".")[-1]
    if g_grad is not None:
        close(g_grad, t_grad)
    for m in (gg, torch):
        leaf = m.tensor(base, requires_grad=True)
        if name in UNTRACKED:  # written, still a leaf that requires grad
            getattr(leaf, name)(*CASES[name][1](m))
            assert leaf.requires_grad and leaf.grad_fn is None
            continue
        with pytest.raises(RuntimeError, match="a leaf Variable that requires grad is being "
                                               "used in an in-place operation"):
            getattr(leaf, name)(*CASES[name][1](m))


def test_torch_lacks_the_inplace_derivatives_graphgrad_has():
    """Why NO_TORCH_INPLACE_DERIVATIVE exists: PyTorch refuses these at backward."""
    for name in sorted(NO_TORCH_INPLACE_DERIVATIVE):
        base = CASES[name][0]
        x = torch.tensor(base, requires_grad=True) * 1.0
        with pytest.raises(NotImplementedError, match="inplace version of"):
            getattr(x, name)().sum().backward()


INT_CASES = {
    "bitwise_and_": lambda m: (m.tensor([3, 5, 6]),), "bitwise_or_": lambda m: (5,),
    "bitwise_xor_": lambda m: (m.tensor([1, 1, 7]),), "bitwise_not_": lambda m: (),
    "bitwise_left_shift_": lambda m: (2,), "bitwise_right_shift_": lambda m: (
        m.tensor([1, 0, 2]),),
}


@pytest.mark.parametrize("name", sorted(INT_CASES))
def test_integer_inplace_variants(name):
    g, t = gg.tensor([12, -7, 9]), torch.tensor([12, -7, 9])
    assert getattr(g, name)(*INT_CASES[name](gg)) is g
    getattr(t, name)(*INT_CASES[name](torch))
    assert g.tolist() == t.tolist() and g.dtype == gg.int64


def test_out_of_place_methods_added():
    a = np.arange(12.0).reshape(3, 4) - 5
    pairs = [(lambda m, x: x.bitwise_and(m.tensor(6)) if x.dtype == m.int64 else x),
             (lambda m, x: x.long().bitwise_xor(3)), (lambda m, x: x.long().bitwise_not()),
             (lambda m, x: x.long().bitwise_or(m.tensor(1))),
             (lambda m, x: x.index_put((m.tensor([0, 2]),), m.tensor(1.5, dtype=m.float64))),
             (lambda m, x: x.tensor_split(3, dim=1)), (lambda m, x: x[0].inner(x[1])),
             (lambda m, x: x[0].vdot(x[1])), (lambda m, x: x.cfloat().real if False else
                                              x.cdouble().to(m.complex128).abs())]
    for fn in pairs:
        g, t = fn(gg, gg.tensor(a)), fn(torch, torch.tensor(a))
        if isinstance(t, tuple):
            for p, q in zip(g, t, strict=True):
                close(p, q)
        else:
            close(g, t)
    assert gg.tensor(a).cfloat().dtype == gg.complex64


LAYOUTS = {
    "contiguous": lambda x: x, "permuted": lambda x: x.permute(2, 0, 1),
    "sliced": lambda x: x[1:, ::2], "selected": lambda x: x[:, 1],
    "expanded": lambda x: x.expand(3, 2, 3, 4), "narrowed": lambda x: x[..., 1:3],
    "transposed": lambda x: x[0].t(), "reshaped_then_sliced": lambda x: x.reshape(6, 4)[2:],
}


@pytest.mark.parametrize("name", LAYOUTS)
@pytest.mark.parametrize("dtype", ["float64", "float32", "int64", "bool"])
def test_layout_queries_match_torch(name, dtype):
    a = (np.arange(24.0).reshape(2, 3, 4) % 3).astype(dtype)
    g, t = LAYOUTS[name](gg.tensor(a)), LAYOUTS[name](torch.tensor(a))
    assert g.stride() == t.stride()
    assert [g.stride(d) for d in range(-g.ndim, g.ndim)] == \
        [t.stride(d) for d in range(-t.ndim, t.ndim)]
    assert g.storage_offset() == t.storage_offset()
    assert (g.itemsize, g.nbytes, g.element_size()) == (t.itemsize, t.nbytes, t.element_size())
    assert g.is_contiguous() == t.is_contiguous()


def test_stride_dim_out_of_range_matches_torch():
    for m in (gg, torch):
        with pytest.raises(IndexError, match=r"Dimension out of range \(expected to be in "
                                             r"range of \[-2, 1\], but got 2\)"):
            m.zeros(2, 3).stride(2)
    assert gg.tensor(1.0).stride() == torch.tensor(1.0).stride() == ()


def test_cuda_refuses_as_a_cpu_only_pytorch():
    for m in (gg, torch):
        with pytest.raises(AssertionError, match="Torch not compiled with CUDA enabled"):
            m.zeros(2).cuda()


@pytest.mark.parametrize("target", ["torch.DoubleTensor", "torch.LongTensor", "IntTensor",
                                    "graphgrad.HalfTensor", "torch.Foo", "float64"])
def test_type_names_and_casts_as_torch(target):
    """``x.type()`` names the legacy type (graphgrad's prefix for torch's); ``x.type(t)``
    casts to a legacy type name or constructor, and refuses other strings as torch."""
    x_t, x_g = torch.ones(2), gg.ones(2)
    assert x_g.type() == x_t.type().replace("torch.", "graphgrad.")
    name = target.replace("graphgrad.", "torch.")
    try:
        expected = x_t.type(name)
    except ValueError as err:
        with pytest.raises(ValueError, match=re.escape(str(err).replace(name, target))):
            x_g.type(target)
        return
    got = x_g.type(target)
    assert str(got.dtype).split(".")[-1] == str(expected.dtype).split(".")[-1]
    assert got.type() == expected.type().replace("torch.", "graphgrad.")
    assert x_g.type(getattr(gg, name.split(".")[-1])).dtype == got.dtype


_SHAPE_IN_PLACE = [("squeeze_", ()), ("squeeze_", (1,)), ("unsqueeze_", (0,)), ("t_", ()),
                   ("transpose_", (0, 2)), ("swapaxes_", (1, 0)), ("swapdims_", (-1, 0))]


@pytest.mark.parametrize("name,args", _SHAPE_IN_PLACE)
def test_in_place_shape_changes_match_torch(name, args):
    """The tensor becomes the view (shape, values, one version step), records the view's
    history for gradients, and refuses a leaf that requires grad, as PyTorch."""
    data = np.arange(6.0).reshape((2, 3) if name == "t_" else (2, 1, 3))
    results = []
    for lib in (torch, gg):
        a = lib.tensor(data, requires_grad=True)
        b = a * 2
        before = b._version
        out = getattr(b, name)(*args)
        weights = lib.tensor(np.arange(b.numel(), dtype=np.float64).reshape(tuple(b.shape)))
        (b * weights).sum().backward()
        results.append((out is b, tuple(b.shape), b._version - before,
                        b.detach().numpy(), a.grad.numpy()))
        with pytest.raises(RuntimeError, match="a leaf Variable that requires grad"):
            getattr(lib.tensor(data, requires_grad=True), name)(*args)
    t, g = results
    assert g[:3] == t[:3]
    np.testing.assert_array_equal(g[3], t[3])
    np.testing.assert_array_equal(g[4], t[4])


def test_in_place_shape_change_refuses_what_graphgrad_cannot_replay():
    x = gg.ones(2, 3)
    v = x[0]
    with pytest.raises(NotImplementedError, match="is a view or has views"):
        x.t_()
    with pytest.raises(NotImplementedError, match="is a view or has views"):
        v.unsqueeze_(0)
    with pytest.raises(NotImplementedError, match="under a transform"):
        gg.func.vmap(lambda r: r.unsqueeze_(0))(gg.ones(2, 3))
