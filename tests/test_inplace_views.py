"""In-place ops on views made by reshape/view/flatten/unsqueeze, permute/transpose/t/.T
and indexing, inside a recorded graph, against PyTorch: the write reaches the base, and
gradients through the base, the view and the written values are PyTorch's (first and
second order). Views of views chain; expanded views refuse writes as PyTorch does.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch

import graphgrad as gg

A = np.arange(1.0, 7.0).reshape(2, 3) / 4
W = np.arange(1.0, 7.0).reshape(3, 2) / 3
C = np.arange(1.0, 25.0).reshape(2, 3, 4) / 10


def t_view_mul(lib, a, w):
    b = a * 1
    v = b.t()
    v.mul_(w)
    return b, v


def reshape_view_add(lib, a, w):
    b = a * 1
    v = b.view(6)
    v.add_(w.reshape(6))
    return b, v * 2


def flatten_unsqueeze(lib, a, w):
    b = a * 2
    b.flatten().mul_(w.t().reshape(-1))
    b.unsqueeze(0).sub_(a)
    return (b,)


def transpose_setitem(lib, a, w):
    b = a * 1
    v = b.transpose(0, 1)
    v[1] = w[0]
    v[:, 0] *= w[:, 1]
    return b, v


def chain_of_views(lib, a, w):
    b = a * 1
    b.view(2, 3).T[1:3].mul_(w[1:])  # indexing a permute of a reshape
    b.reshape(3, 2)[0].add_(1.0)
    return (b,)


def unary_on_permute(lib, a, w):
    b = a.tanh() + 1  # (tanh's output is saved: writing into it would be an error)
    v = b.permute(1, 0)
    v.mul_(w)
    v.exp_()  # last: exp_ saves its output
    return b * w.t(), v


def view_not_requiring_grad(lib, a, w):
    """The base is a constant; the written values bring the gradient."""
    x = lib.zeros(3, 2, dtype=lib.float64)
    x.t().add_(a)
    x.view(-1).mul_(w.reshape(-1))
    return (x,)


def permute_3d(lib, c, w):
    b = c * 1
    v = b.permute(2, 0, 1)
    v.mul_(w.sum())
    b.movedim(0, 2)[..., 1].add_(w.sum())
    return b, v


def base_written_after_views(lib, a, w):
    """Views made before the base (or another view) changed see the change in their
    gradients too, as PyTorch regenerates their history."""
    b = a * 1
    v, row = b.t(), b[1]
    b.mul_(w.t())
    b.view(6)[:2].add_(w[0])
    return v, row * 3


CASES = [base_written_after_views, t_view_mul, reshape_view_add, flatten_unsqueeze,
         transpose_setitem, chain_of_views, unary_on_permute, view_not_requiring_grad,
         permute_3d]


def _run(fn, lib, create_graph=False):
    first = C if fn is permute_3d else A
    a = lib.tensor(first, requires_grad=True)
    w = lib.tensor(W, requires_grad=True)
    outs = fn(lib, a, w)
    loss = sum((o * o * o).sum() for o in outs)
    grads = lib.autograd.grad(loss, (a, w), create_graph=create_graph, allow_unused=True)
    values = [o.detach().numpy() for o in outs]
    if create_graph:  # a second derivative: the gradient of the gradients' squared norm
        total = sum((g * g).sum() for g in grads if g is not None)
        grads = lib.autograd.grad(total, (a, w), allow_unused=True)
    return values, [g.detach().numpy() if g is not None else None for g in grads]


@pytest.mark.parametrize("create_graph", [False, True], ids=["grad", "grad_of_grad"])
@pytest.mark.parametrize("fn", CASES, ids=[f.__name__ for f in CASES])
def test_inplace_on_views_matches_torch(fn, create_graph):
    g_values, g_grads = _run(fn, gg, create_graph)
    t_values, t_grads = _run(fn, torch, create_graph)
    for g, t in zip(g_values, t_values, strict=True):
        np.testing.assert_allclose(g, t, rtol=1e-12, err_msg="values")
    for g, t in zip(g_grads, t_grads, strict=True):
        if t is None:
            assert g is None or not np.any(g)
        else:
            np.testing.assert_allclose(g, t, rtol=1e-10, atol=1e-12, err_msg="gradients")


def test_view_and_base_share_the_version_counter():
    for lib in (gg, torch):
        a = lib.tensor(A, requires_grad=True)
        b = a * 1
        v = b.t()
        v.mul_(2)
        b.view(6).add_(1)
        assert v._version == b._version == 2, lib.__name__
        assert v.tolist() == (b.detach().t()).tolist()


def test_expanded_view_refuses_writes():
    for lib in (gg, torch):
        b = lib.tensor(A, requires_grad=True) * 1
        with pytest.raises(RuntimeError, match="more than one element of the written-to tensor "
                                               "refers to a single memory location"):
            b.expand(4, 2, 3).mul_(2)


def test_leaf_view_refuses_writes():
    for lib in (gg, torch):
        a = lib.tensor(A, requires_grad=True)
        with pytest.raises(RuntimeError, match="a view of a leaf Variable that requires grad "
                                               "is being used in an in-place operation"):
            a.t().mul_(2)


def test_writing_a_saved_output_through_a_view_is_detected():
    for lib in (gg, torch):
        a = lib.tensor(A, requires_grad=True)
        b = a.exp()  # exp saves its output for the backward pass
        b.t().mul_(2)
        with pytest.raises(RuntimeError, match="one of the variables needed for gradient "
                                               "computation has been modified by an inplace "
                                               "operation"):
            b.sum().backward()


# ---- views whose base changes after they were made ----------------------------------

def _grad_views_of_constant(lib, a, w):
    """Views of a tensor that needs no grad, made before an in-place op makes the base
    require grad, must require grad then (their history a replay of the view op)."""
    x = lib.zeros(3, 2, dtype=lib.float64)
    row, col, flat, tt = x[:2], x.t()[1], x.view(6), x.t()
    x.add_(w * a.t())
    assert all(v.requires_grad and v.grad_fn is not None for v in (row, col, flat, tt))
    assert not row.is_leaf
    loss = (row ** 3).sum() + (col * w[:, 0]).sum() + (flat.exp()).sum() + (tt * a).sum()
    return loss


def _grad_views_of_constant_written_through_a_view(lib, a, w):
    x = lib.zeros(3, 2, dtype=lib.float64)
    v, u = x.t(), x[1:]
    u.mul_(2).add_(w[1:])  # the write reaches x through u: v must see it
    return (v.sin() * a).sum() + (u ** 2).sum()


def _grad_views_of_constant_by_setitem(lib, a, w):
    """x[i] = ... makes the base require grad; views of views follow."""
    x = lib.zeros(4, dtype=lib.float64)
    m = x.view(2, 2)
    mt, row = m.t(), m[0]
    mt[1] = w[1] * a[0, :2]
    m[1:] *= a[1, 1:]
    return (row ** 3).sum() + (mt.exp() * w[:2]).sum()


def _stale_view_backward(lib, a, w):
    """A view made before its base changed, differentiated directly."""
    b = a * 1
    v, flat = b.t(), b.view(6)
    b.mul_(w.t())
    return v, flat


@pytest.mark.parametrize("create_graph", [False, True], ids=["grad", "grad_of_grad"])
@pytest.mark.parametrize("case", [_grad_views_of_constant,
                                  _grad_views_of_constant_written_through_a_view,
                                  _grad_views_of_constant_by_setitem])
def test_views_of_a_base_that_starts_requiring_grad(case, create_graph):
    results = []
    for lib in (gg, torch):
        a, w = lib.tensor(A, requires_grad=True), lib.tensor(W, requires_grad=True)
        grads = lib.autograd.grad(case(lib, a, w), (a, w), create_graph=create_graph)
        if create_graph:
            grads = lib.autograd.grad(sum((g * g).sum() for g in grads), (a, w))
        results.append([g.detach().numpy() for g in grads])
    for g, t in zip(*results, strict=True):
        np.testing.assert_allclose(g, t, rtol=1e-10, atol=1e-12)


def test_view_of_a_constant_stays_without_grad_when_the_write_is_not_recorded():
    for lib in (gg, torch):
        x = lib.zeros(3, dtype=lib.float64)
        v = x[:2]
        with lib.no_grad():
            x.add_(lib.ones(3, dtype=lib.float64, requires_grad=True))
        assert not v.requires_grad and v.grad_fn is None, lib.__name__


@pytest.mark.parametrize("how", ["backward", "grad", "grad_create_graph"])
def test_stale_view_sees_the_change_when_differentiated_directly(how):
    results = []
    for lib in (gg, torch):
        a, w = lib.tensor(A, requires_grad=True), lib.tensor(W, requires_grad=True)
        v, flat = _stale_view_backward(lib, a, w)
        assert v.grad_fn.next_functions[0][0].name() == "MulBackward0", lib.__name__
        seed_v = lib.tensor(W * 3 - 1, dtype=lib.float64)
        seed_f = lib.tensor(np.arange(6.0) - 2, dtype=lib.float64)
        if how == "backward":
            lib.autograd.backward((v, flat), (seed_v, seed_f))
            grads = (a.grad, w.grad)
        else:
            grads = lib.autograd.grad((v, flat), (a, w), (seed_v, seed_f),
                                      create_graph=how == "grad_create_graph")
            if how == "grad_create_graph":
                grads = lib.autograd.grad((grads[0] * grads[1].t()).sum(), (a, w))
        results.append([g.detach().numpy() for g in grads])
    for g, t in zip(*results, strict=True):
        np.testing.assert_allclose(g, t, rtol=1e-12)


def test_stale_view_as_an_input_to_grad_was_not_used():
    """The loss used the view before the change; the view's history now is another."""
    for lib in (gg, torch):
        a = lib.tensor(A, requires_grad=True)
        b = a * 1
        v = b[0]
        loss = (v * v).sum()
        b.mul_(2)
        with pytest.raises(RuntimeError, match="appears to not have been used in the graph"):
            lib.autograd.grad(loss, v)


# ---- forward AD: tangents of views after in-place ops ----------------------------------

def _fw_views_of_a_dual_base_written(lib, fw, p, t, w):
    x = fw.make_dual(p, t)
    v, col, vv = x[:2], x.view(3, 2).t()[1], x[2:].view(2, 2)[0]
    x.mul_(w)
    return x, v, col, vv


def _fw_plain_base_gets_a_tangent(lib, fw, p, t, w):
    x = p * 1
    v, vt = x[:3], x.view(3, 2).t()
    x.add_(fw.make_dual(w, t))  # x has no tangent before: its views derive theirs now
    return x, v, vt


def _fw_write_through_another_view(lib, fw, p, t, w):
    x = fw.make_dual(p, t)
    v, u = x.view(2, 3), x[2:5]
    u.mul_(w[:3]).add_(1.0)
    return x, v, u


def _fw_written_with_constants(lib, fw, p, t, w):
    """copy_ of a value without tangent leaves a zero tangent there (PyTorch's copy_)."""
    x = fw.make_dual(p, t) * 1
    v = x[:4]
    x[1:3] = w[:2]
    x.view(2, 3)[1].copy_(w[3:])
    return x, v


def _fw_make_dual_view_owns_its_tangent(lib, fw, p, t, w):
    """make_dual's tangent is its own: writing into the primal it views leaves it, and
    writing into it does not give the primal a tangent."""
    x = fw.make_dual(p, t)
    primal = w * 1
    y = fw.make_dual(primal, t * 1)  # (a tangent of its own: torch writes it in place)
    p.add_(1.0)
    y.mul_(2.0)
    return x, y, primal


def _fw_recorded_base_written(lib, fw, p, t, w):
    """The base is in a recorded graph too (its history requires grad)."""
    a = p.clone().requires_grad_()
    x = fw.make_dual(a, t) * 1
    v, vt = x[1:], x.view(3, 2).t()
    x.mul_(fw.make_dual(w, t.flip(0)))
    return x, v, vt


FW_CASES = [_fw_views_of_a_dual_base_written, _fw_plain_base_gets_a_tangent,
            _fw_write_through_another_view, _fw_written_with_constants,
            _fw_make_dual_view_owns_its_tangent, _fw_recorded_base_written]


@pytest.mark.parametrize("case", FW_CASES, ids=[f.__name__[4:] for f in FW_CASES])
def test_forward_ad_tangents_of_views_after_inplace(case):
    results = []
    for lib in (gg, torch):
        fw = lib.autograd.forward_ad
        p = lib.tensor(np.arange(1.0, 7.0) / 4)
        t = lib.tensor(np.arange(6.0) - 2.5)
        w = lib.tensor(np.arange(6.0, 0.0, -1.0) / 3)
        with fw.dual_level():
            outs = case(lib, fw, p.to(lib.float64), t.to(lib.float64), w.to(lib.float64))
            results.append([(o.detach().numpy().copy(),
                             None if fw.unpack_dual(o).tangent is None else
                             fw.unpack_dual(o).tangent.detach().numpy().copy()) for o in outs])
    for (gv, gt), (tv, tt) in zip(*results, strict=True):
        np.testing.assert_allclose(gv, tv, rtol=1e-12)
        if tt is None:
            assert gt is None
        else:
            np.testing.assert_allclose(gt, tt, rtol=1e-12, atol=1e-15)


def _views_after_inplace_on_base(lib, a):
    b = a * 1
    v, vt = b[1:], b.view(2, 2).t()
    b.mul_(a.flip(0))
    b[0] = a[3] ** 2
    return (v ** 3).sum() + (vt[0] * a[:2]).sum() + (b.sin() * vt.reshape(4)).sum()


@pytest.mark.parametrize("transform", ["jacfwd_of_grad", "jvp_of_grad", "jvp"])
def test_views_after_inplace_on_base_under_forward_transforms(transform):
    """Forward over reverse through views made before an in-place op on their base
    (the Hessian, a Hessian-vector product) and the jvp, against torch.func (whose
    forward over forward refuses in-place ops on its zero tangents)."""
    results = []
    for lib in (gg, torch):
        func = lib.func
        a = lib.tensor(np.array([0.5, -1.0, 2.0, 1.5]))
        f = lambda x, lib=lib: _views_after_inplace_on_base(lib, x)  # noqa: E731
        if transform == "jacfwd_of_grad":
            out = func.jacfwd(func.grad(f))(a)
        elif transform == "jvp_of_grad":
            out = func.jvp(func.grad(f), (a,), (lib.tensor(np.array([1.0, 2.0, -1.0, 0.5])),))[1]
        else:
            out = func.jvp(f, (a,), (lib.tensor(np.array([1.0, 2.0, -1.0, 0.5])),))[1]
        results.append(out.detach().numpy())
    np.testing.assert_allclose(results[0], results[1], rtol=1e-10, atol=1e-12)


# ---- vmap: writing a batched value into a tensor that is not batched --------------------

def _vmap_error(lib, fn, *args) -> str:
    with pytest.raises(RuntimeError) as info:
        lib.func.vmap(fn, in_dims=(None, 0))(*args)
    return str(info.value).split(" is not possible")[0]


SETITEM_CASES = {
    "int": lambda x, v: x.__setitem__(0, v),  # a select written by copy_
    "same_shape_slice": lambda x, v: x[:1].__setitem__(Ellipsis, v.reshape(1)),
    "broadcast_slice": lambda x, v: x.__setitem__(slice(1, None), v.reshape(1)),
    "zero_d_into_more": lambda x, v: x.__setitem__(Ellipsis, v),  # fill_
    "none_and_slice": lambda x, v: x.__setitem__((None, slice(1, None)), v),
    "python_bool": lambda x, v: x.__setitem__(True, v),
    "zero_d_int_tensor": lambda x, v: x.__setitem__(_lib_of(x).tensor(0), v),
    "index_tensor": lambda x, v: x.__setitem__(_lib_of(x).tensor([0, 2]), v),
    "bool_mask": lambda x, v: x.__setitem__(_lib_of(x).tensor([True, False, True]), v),
    "list": lambda x, v: x.__setitem__([1], v),
    "fill_": lambda x, v: x.fill_(v),
    "copy_": lambda x, v: x.copy_(v),
}


def _lib_of(x):
    return torch if isinstance(x, torch.Tensor) else gg


@pytest.mark.parametrize("name", list(SETITEM_CASES))
def test_vmap_setitem_of_a_batched_value_names_the_op_as_torch(name):
    fn = SETITEM_CASES[name]
    expected = _vmap_error(torch, fn, torch.zeros(3), torch.ones(2))
    assert _vmap_error(gg, fn, gg.zeros(3), gg.ones(2)) == expected


@pytest.mark.parametrize("index", ["k", "k_and_slice", "k_of_a_view", "k_add"])
def test_vmap_setitem_with_a_batched_index_names_index_put(index):
    def body(lib):
        def fn(x, k):
            if index == "k":
                x[k] = 1.0
            elif index == "k_and_slice":
                x.view(3, 1)[k, :] = lib.ones(())
            elif index == "k_of_a_view":
                x[:2][k] = 2.0
            else:
                x[k] += 1.0
            return x
        return fn
    expected = _vmap_error(torch, body(torch), torch.zeros(3), torch.tensor([0, 1]))
    assert expected.startswith("vmap: index_put_(self")
    assert _vmap_error(gg, body(gg), gg.zeros(3), gg.tensor([0, 1])) == expected


def test_contiguous_copies_only_a_non_contiguous_tensor():
    """Writes into ``t().contiguous()`` or a strided slice's ``contiguous()`` must not reach
    the original (its values nor its gradient); a contiguous tensor is returned as is."""
    outs = []
    for lib in (torch, gg):
        x = lib.arange(6.0).reshape(2, 3)
        assert x.contiguous() is x and x.is_contiguous() and not x.t().is_contiguous()
        y = x.t().contiguous()
        y[0, 0] = 7.0
        z = x[:, ::2].contiguous()
        z.add_(100)
        a = lib.ones(2, 3, requires_grad=True)
        b = a * 1
        b.t().contiguous().mul_(3)
        b.sum().backward()
        outs.append((x.tolist(), y.tolist(), a.grad.tolist(), b.tolist()))
    assert outs[0] == outs[1]


def test_augmented_assignments_are_in_place():
    """``**=``, ``//=``, ``%=``, ``&=``, ``|=``, ``^=`` write through a view into its base,
    as ``+=`` does."""
    outs = []
    for lib in (torch, gg):
        x = lib.arange(1.0, 7.0).reshape(2, 3)
        row = x[0]
        row **= 2
        other = x[1]
        other //= 2
        other %= 2
        flags = lib.tensor([[True, False]])
        view = flags[0]
        view |= lib.tensor([False, True])
        ints = lib.tensor([6, 5])
        part = ints[:]
        part &= 3
        part ^= 1
        outs.append((x.tolist(), flags.tolist(), ints.tolist()))
    assert outs[0] == outs[1]


def test_in_place_on_a_view_made_under_no_grad_is_refused_with_grad_on():
    """PyTorch forbids it as ambiguous; inside no_grad, or on views of tensors that need no
    gradient, it is allowed."""
    for lib in (torch, gg):
        for modify in (lambda v: v.add_(1), lambda v: v.zero_(), lambda v: v.mul_(2)):
            x = lib.tensor([1.0, 2.0], requires_grad=True)
            base = x * 2
            for source in (x, base):
                with lib.no_grad():
                    view = source[0:1]
                with pytest.raises(RuntimeError, match="A view was created in no_grad mode"):
                    modify(view)
        b = lib.tensor([1.0, 2.0], requires_grad=True) * 2
        with lib.no_grad():
            b[0:1].add_(1)
        plain = lib.ones(3)
        plain[:2].add_(1)
        assert plain.tolist() == [2.0, 2.0, 1.0] and b.tolist() == [3.0, 4.0]


def test_contiguous_result_is_contiguous():
    for lib in (torch, gg):
        x = lib.arange(6.0).reshape(2, 3).t()
        assert not x.clone().is_contiguous()
        assert x.contiguous().is_contiguous()
        assert lib.ones(3, 1).expand(3, 4).contiguous().is_contiguous()
