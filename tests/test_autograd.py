"""Reverse-mode autograd: ``backward``, ``autograd.grad``, ``.grad``, ``grad_fn``, hooks,
grad modes, higher order and in-place semantics, with PyTorch as the oracle."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

import graphgrad as gg

# ---- helpers -------------------------------------------------------------------------


def pair(data, dtype="float64", requires_grad=False):
    """The same leaf in graphgrad and in PyTorch."""
    arr = np.asarray(data, dtype=dtype)
    g = gg.tensor(arr, requires_grad=requires_grad)
    t = torch.tensor(arr, requires_grad=requires_grad)
    return g, t


def close(g, t, rtol=1e-10, atol=1e-12):
    """graphgrad tensor ``g`` equals torch tensor ``t`` in value, shape and dtype."""
    assert g is not None and t is not None, (g, t)
    t = t.detach()
    assert tuple(g.shape) == tuple(t.shape), (g.shape, t.shape)
    assert str(g.dtype).replace("graphgrad.", "") == str(t.dtype).replace("torch.", "")
    np.testing.assert_allclose(g.detach().numpy(), t.numpy(), rtol=rtol, atol=atol)


# ---- .grad: None until backward, accumulation -----------------------------------------


def test_grad_is_none_until_backward():
    x = gg.tensor([1.0, 2.0], requires_grad=True)
    y = (x * x).sum()
    assert x.grad is None
    y.backward()
    np.testing.assert_allclose(x.grad.numpy(), [2.0, 4.0])


def test_backward_twice_with_retain_graph_accumulates():
    x = gg.tensor([1.0, 2.0], requires_grad=True)
    y = (x * x).sum()
    y.backward(retain_graph=True)
    np.testing.assert_allclose(x.grad.numpy(), [2.0, 4.0])
    y.backward()
    np.testing.assert_allclose(x.grad.numpy(), [4.0, 8.0])


def test_accumulation_across_graphs_and_zeroing():
    x = gg.tensor([1.0, 2.0, 3.0], requires_grad=True)
    (x * 2).sum().backward()
    (x * 3).sum().backward()
    np.testing.assert_allclose(x.grad.numpy(), [5.0, 5.0, 5.0])
    x.grad.zero_()
    np.testing.assert_allclose(x.grad.numpy(), [0.0, 0.0, 0.0])
    (x * x).sum().backward()
    np.testing.assert_allclose(x.grad.numpy(), [2.0, 4.0, 6.0])
    x.grad = None
    (x * 4).sum().backward()
    np.testing.assert_allclose(x.grad.numpy(), [4.0, 4.0, 4.0])


@pytest.mark.filterwarnings("ignore:Using backward\\(\\) with create_graph=True:UserWarning")
def test_grad_is_a_plain_leaf_unless_create_graph():
    x = gg.tensor([1.0, 2.0], requires_grad=True)
    (x * x).sum().backward()
    assert x.grad.is_leaf and not x.grad.requires_grad and x.grad.grad_fn is None
    x.grad = None
    (x * x * x).sum().backward(create_graph=True)
    assert x.grad.requires_grad and x.grad.grad_fn is not None
    np.testing.assert_allclose(x.grad.detach().numpy(), [3.0, 12.0])
    # the gradient can itself be differentiated
    (g2,) = gg.autograd.grad(x.grad.sum(), x)
    np.testing.assert_allclose(g2.numpy(), [6.0, 12.0])


def test_accumulated_grad_vs_torch():
    g, t = pair([[0.5, -1.0], [2.0, 3.0]], requires_grad=True)
    for fx, ft in ((g, t), (g, t)):
        (fx.sin() * fx).sum().backward()
        (ft.sin() * ft).sum().backward()
    close(g.grad, t.grad)


# ---- grad_fn, next_functions ---------------------------------------------------------


@pytest.mark.parametrize("expr", [
    lambda x: x + 1, lambda x: x * 2, lambda x: x - 1, lambda x: x / 2, lambda x: x ** 2,
    lambda x: x.exp(), lambda x: x.sin(), lambda x: x.cos(), lambda x: x.tanh(),
    lambda x: x.sigmoid(), lambda x: x.log(), lambda x: -x, lambda x: x.sum(),
    lambda x: x.mean(), lambda x: x.relu(), lambda x: x.sqrt(), lambda x: x.abs(),
    lambda x: x * x, lambda x: x + x,
], ids=["add", "mul", "sub", "div", "pow", "exp", "sin", "cos", "tanh", "sigmoid", "log",
        "neg", "sum", "mean", "relu", "sqrt", "abs", "mul2", "add2"])
def test_grad_fn_names_match_torch(expr):
    g, t = pair([1.0, 2.0, 3.0], requires_grad=True)
    assert expr(g).grad_fn.name() == expr(t).grad_fn.name()


def test_grad_fn_none_for_leaves_and_untracked_results():
    x = gg.tensor([1.0, 2.0], requires_grad=True)
    c = gg.tensor([1.0, 2.0])
    assert x.grad_fn is None
    assert (c * 2).grad_fn is None
    with gg.no_grad():
        assert (x * 2).grad_fn is None


def test_next_functions_structure():
    gx, tx = pair([1.0, 2.0], requires_grad=True)
    gw, tw = pair([3.0, 4.0], requires_grad=True)
    gc, tc = pair([5.0, 6.0])
    gz = (gx * gw).exp() + gc
    tz = (tx * tw).exp() + tc

    def shape_of(fn, depth=0):
        if fn is None:
            return None
        if depth > 10:
            return "..."
        name = fn.name()
        if "AccumulateGrad" in name:
            return "AccumulateGrad"
        return (name, tuple(shape_of(f, depth + 1) for f, _ in fn.next_functions))

    assert shape_of(gz.grad_fn) == shape_of(tz.grad_fn)
    assert shape_of(gz.grad_fn) == (
        "AddBackward0", (("ExpBackward0", (("MulBackward0", ("AccumulateGrad",
                                                             "AccumulateGrad")),)), None))
    # output numbers are 0 for single-output ops; AccumulateGrad names its variable
    mul = gz.grad_fn.next_functions[0][0].next_functions[0][0]
    (acc_x, nx), (acc_w, nw) = mul.next_functions
    assert nx == 0 and nw == 0
    assert acc_x.variable is gx and acc_w.variable is gw
    assert (gx * 2).grad_fn.next_functions[1] == (None, 0)


def test_grad_fn_repr():
    x = gg.tensor([1.0], requires_grad=True)
    assert repr((x * 2).grad_fn).startswith("<MulBackward0 object at 0x")


# ---- is_leaf ---------------------------------------------------------------------------


def test_is_leaf_rules_match_torch():
    def cases(lib):
        a = lib.tensor([1.0, 2.0], requires_grad=True)
        b = lib.tensor([1.0, 2.0])
        with lib.no_grad():
            under_no_grad = a * 2
        return {
            "user leaf requiring grad": a,
            "user tensor not requiring grad": b,
            "op on requires-grad input": a * 2,
            "op on constants": b * 2,
            "detach": (a * 2).detach(),
            "under no_grad": under_no_grad,
            "requires_grad_ on a fresh tensor": lib.zeros(2).requires_grad_(),
        }

    gcases, tcases = cases(gg), cases(torch)
    for name in gcases:
        assert gcases[name].is_leaf == tcases[name].is_leaf, name
        assert gcases[name].requires_grad == tcases[name].requires_grad, name


def test_only_leaves_get_grad():
    x = gg.tensor([1.0, 2.0], requires_grad=True)
    y = x * 2
    y.sum().backward()
    assert x.grad is not None
    with pytest.warns(UserWarning, match="not a leaf Tensor is being accessed"):
        assert y.grad is None


# ---- retain_grad -----------------------------------------------------------------------


def test_retain_grad_on_non_leaf():
    gx, tx = pair([1.0, -2.0, 3.0], requires_grad=True)
    outs = []
    for x in (gx, tx):
        y = x * x
        y.retain_grad()
        assert y.retains_grad
        z = (y.sin() * 3).sum()
        z.backward()
        outs.append((y.grad, x.grad))
    close(outs[0][0], outs[1][0])
    close(outs[0][1], outs[1][1])


def test_retain_grad_accumulates_and_is_idempotent():
    x = gg.tensor([1.0, 2.0], requires_grad=True)
    y = x * 3
    y.retain_grad()
    y.retain_grad()
    (y * y).sum().backward(retain_graph=True)
    (y * y).sum().backward()
    np.testing.assert_allclose(y.grad.numpy(), [12.0, 24.0])


def test_retain_grad_on_leaf_is_a_noop():
    x = gg.tensor([1.0, 2.0], requires_grad=True)
    x.retain_grad()
    assert not x.retains_grad  # as in PyTorch: leaves always keep their grad
    (x * 2).sum().backward()
    np.testing.assert_allclose(x.grad.numpy(), [2.0, 2.0])


# ---- hooks ---------------------------------------------------------------------------


def test_register_hook_docstring_example():
    v = gg.tensor([0.0, 0.0, 0.0], requires_grad=True)
    v.register_hook(lambda grad: grad * 2)
    v.backward(gg.tensor([1.0, 2.0, 3.0]))
    np.testing.assert_allclose(v.grad.numpy(), [2.0, 4.0, 6.0])


def test_hook_on_non_leaf_replaces_upstream_gradient():
    results = []
    for lib in (gg, torch):
        x = lib.tensor([1.0, 2.0], dtype=lib.float64, requires_grad=True)
        y = x * 3
        y.register_hook(lambda g: g * 10)
        (y * y).sum().backward()
        results.append(x.grad)
    close(*results)


def test_hook_returning_none_observes_only():
    seen = []
    x = gg.tensor([1.0, 2.0], requires_grad=True)
    y = x * 3
    y.register_hook(lambda g: seen.append(g.numpy().copy()))
    y.sum().backward()
    assert len(seen) == 1
    np.testing.assert_allclose(seen[0], [1.0, 1.0])
    np.testing.assert_allclose(x.grad.numpy(), [3.0, 3.0])


def test_hook_runs_once_with_the_summed_gradient():
    seen = []
    for lib in (gg, torch):
        x = lib.tensor([1.0], requires_grad=True)
        y = x * 2
        y.register_hook(lambda g, lib=lib: seen.append((lib.__name__, g.tolist())))
        x.register_hook(lambda g, lib=lib: seen.append((lib.__name__, g.tolist())))
        (y * y + y + x).sum().backward()  # y reached by three edges, x by two
    assert seen == [("graphgrad", [5.0]), ("graphgrad", [11.0]),
                    ("torch", [5.0]), ("torch", [11.0])]


def test_removable_handle():
    x = gg.tensor([1.0, 2.0], requires_grad=True)
    calls = []
    h = x.register_hook(lambda g: calls.append(1) or g * 100)
    (x * 2).sum().backward()
    np.testing.assert_allclose(x.grad.numpy(), [200.0, 200.0])
    h.remove()
    h.remove()  # a second remove is harmless, as in PyTorch
    x.grad = None
    (x * 2).sum().backward()
    np.testing.assert_allclose(x.grad.numpy(), [2.0, 2.0])
    assert calls == [1]


def test_several_hooks_run_in_registration_order():
    order = []
    for lib in (gg, torch):
        x = lib.tensor([1.0], requires_grad=True)
        x.register_hook(lambda g, lib=lib: order.append((lib.__name__, "a")) or g + 1)
        x.register_hook(lambda g, lib=lib: order.append((lib.__name__, "b")) or g * 10)
        (x * 1).sum().backward()
        order.append((lib.__name__, x.grad[0].item()))
    assert order == [("graphgrad", "a"), ("graphgrad", "b"), ("graphgrad", 20.0),
                     ("torch", "a"), ("torch", "b"), ("torch", 20.0)]


def test_leaf_hook_runs_before_accumulation():
    x = gg.tensor([1.0, 2.0], requires_grad=True)
    seen_grad = []

    def hook(g):
        seen_grad.append(None if x.grad is None else x.grad.numpy().copy())
        return g * 2

    x.register_hook(hook)
    (x * 1).sum().backward()
    (x * 1).sum().backward()
    assert seen_grad[0] is None  # the hook ran before .grad was written
    np.testing.assert_allclose(seen_grad[1], [2.0, 2.0])  # .grad held only the first pass
    np.testing.assert_allclose(x.grad.numpy(), [4.0, 4.0])  # hooked gradients accumulated


def test_post_accumulate_grad_hook():
    x = gg.tensor([1.0, 2.0], requires_grad=True)
    seen = []
    h = x.register_post_accumulate_grad_hook(lambda p: seen.append(p.grad.numpy().copy()))
    (x * 3).sum().backward()
    (x * 3).sum().backward()
    assert len(seen) == 2
    np.testing.assert_allclose(seen[0], [3.0, 3.0])
    np.testing.assert_allclose(seen[1], [6.0, 6.0])
    h.remove()
    (x * 3).sum().backward()
    assert len(seen) == 2


def test_post_accumulate_hook_as_optimizer_step():
    results = []
    for lib in (gg, torch):
        p = lib.tensor([1.0, -2.0], dtype=lib.float64, requires_grad=True)

        def step(param, lib=lib):
            with lib.no_grad():
                param -= 0.1 * param.grad
            param.grad = None

        p.register_post_accumulate_grad_hook(step)
        for _ in range(3):
            (p * p).sum().backward()
        results.append(p)
    close(*results)


def test_post_accumulate_hook_rejected_on_non_leaf():
    x = gg.tensor([1.0], requires_grad=True)
    with pytest.raises(RuntimeError, match="post accumulate grad hooks cannot be registered on "
                                           "non-leaf tensors"):
        (x * 2).register_post_accumulate_grad_hook(lambda p: None)
    with pytest.raises(RuntimeError) as e:
        (torch.tensor([1.0], requires_grad=True) * 2).register_post_accumulate_grad_hook(
            lambda p: None)
    assert "post accumulate grad hooks cannot be registered on non-leaf tensors" in str(e.value)


# ---- grad modes ----------------------------------------------------------------------


def test_no_grad_context_manager():
    x = gg.tensor([1.0], requires_grad=True)
    assert gg.is_grad_enabled()
    with gg.no_grad():
        assert not gg.is_grad_enabled()
        y = x * 2
    assert gg.is_grad_enabled()
    assert not y.requires_grad and y.grad_fn is None


def test_no_grad_decorator():
    x = gg.tensor([1.0], requires_grad=True)

    @gg.no_grad()
    def f(t):
        assert not gg.is_grad_enabled()
        return t * 2

    assert not f(x).requires_grad
    assert gg.is_grad_enabled()
    assert f.__name__ == "f"


def test_enable_grad_inside_no_grad():
    x = gg.tensor([1.0], requires_grad=True)

    @gg.enable_grad()
    def g(t):
        return t * 2

    with gg.no_grad():
        with gg.enable_grad():
            assert gg.is_grad_enabled()
            y = x * 2
        z = g(x)
        assert not gg.is_grad_enabled()
    assert y.requires_grad and z.requires_grad


def test_set_grad_enabled_function_context_and_decorator():
    x = gg.tensor([1.0], requires_grad=True)
    try:
        gg.set_grad_enabled(False)  # function form: takes effect at once
        assert not gg.is_grad_enabled()
        assert not (x * 2).requires_grad
    finally:
        gg.set_grad_enabled(True)
    assert gg.is_grad_enabled()

    with gg.set_grad_enabled(False):
        assert not gg.is_grad_enabled()
        with gg.set_grad_enabled(True):
            assert (x * 2).requires_grad
        assert not gg.is_grad_enabled()
    assert gg.is_grad_enabled()

    @gg.set_grad_enabled(False)
    def f(t):
        return t * 2

    assert gg.is_grad_enabled()  # decorating does not switch the mode
    assert not f(x).requires_grad
    assert gg.is_grad_enabled()


def test_grad_mode_restored_after_exception():
    with pytest.raises(ValueError):
        with gg.no_grad():
            raise ValueError("boom")
    assert gg.is_grad_enabled()

    @gg.no_grad()
    def f():
        raise ValueError("boom")

    with pytest.raises(ValueError):
        f()
    assert gg.is_grad_enabled()


def test_grad_modes_exported_like_torch():
    for name in ("no_grad", "enable_grad", "set_grad_enabled", "is_grad_enabled"):
        assert getattr(gg, name) is getattr(gg.autograd, name), name


# ---- detach ----------------------------------------------------------------------------


def test_detach_shares_storage_and_version_counter():
    x = gg.tensor([1.0, 2.0, 3.0], requires_grad=True)
    d = x.detach()
    assert d.is_leaf and not d.requires_grad and d.grad_fn is None
    v = x._version
    d[0] = 10.0
    assert x.tolist() == [10.0, 2.0, 3.0]
    assert x._version == v + 1 == d._version
    d.add_(1)
    assert x.tolist() == [11.0, 3.0, 4.0]


def test_detach_cuts_the_graph():
    x = gg.tensor([1.0, 2.0], requires_grad=True)
    y = x * 2
    z = (y.detach() * x).sum()
    z.backward()
    np.testing.assert_allclose(x.grad.numpy(), [2.0, 4.0])  # y treated as a constant


# ---- backward(inputs=...), autograd.grad --------------------------------------------


def test_backward_inputs_restricts_accumulation():
    x = gg.tensor([1.0, 2.0], requires_grad=True)
    w = gg.tensor([3.0, 4.0], requires_grad=True)
    loss = (x * w).sum()
    loss.backward(inputs=[w])
    assert x.grad is None
    np.testing.assert_allclose(w.grad.numpy(), [1.0, 2.0])


def test_backward_inputs_single_tensor_and_non_leaf():
    results = []
    for lib in (gg, torch):
        x = lib.tensor([1.0, 2.0], dtype=lib.float64, requires_grad=True)
        y = x * 3
        loss = (y * y).sum()
        loss.backward(inputs=y)
        results.append((x.grad, y.grad))
    assert results[0][0] is None and results[1][0] is None
    close(results[0][1], results[1][1])


def test_autograd_grad_does_not_touch_dot_grad():
    x = gg.tensor([1.0, 2.0], requires_grad=True)
    (g,) = gg.autograd.grad((x * x).sum(), x)
    assert x.grad is None
    np.testing.assert_allclose(g.numpy(), [2.0, 4.0])
    assert not g.requires_grad


def test_autograd_grad_returns_tuple_in_input_order():
    x = gg.tensor(2.0, requires_grad=True)
    y = gg.tensor(3.0, requires_grad=True)
    out = gg.autograd.grad(x * x * y, [y, x])
    assert isinstance(out, tuple) and len(out) == 2
    assert out[0].item() == 4.0 and out[1].item() == 12.0


def test_autograd_grad_allow_unused():
    x = gg.tensor([1.0, 2.0], requires_grad=True)
    unused = gg.tensor([1.0], requires_grad=True)
    gx, gu = gg.autograd.grad((x * 2).sum(), [x, unused], allow_unused=True)
    np.testing.assert_allclose(gx.numpy(), [2.0, 2.0])
    assert gu is None


def test_autograd_grad_materialize_grads():
    results = []
    for lib in (gg, torch):
        x = lib.tensor([1.0, 2.0], dtype=lib.float64, requires_grad=True)
        unused = lib.tensor([[1.0, 2.0]], dtype=lib.float64, requires_grad=True)
        results.append(lib.autograd.grad((x * 2).sum(), [x, unused], materialize_grads=True))
    (gx, gu), (tx, tu) = results
    close(gx, tx)
    close(gu, tu)
    assert gu.tolist() == [[0.0, 0.0]]


def test_autograd_grad_non_leaf_inputs():
    results = []
    for lib in (gg, torch):
        x = lib.tensor([1.0, -2.0], dtype=lib.float64, requires_grad=True)
        y = x.sin()
        z = (y * y * x).sum()
        results.append(lib.autograd.grad(z, [y, x]))
    close(results[0][0], results[1][0])
    close(results[0][1], results[1][1])


def test_autograd_grad_with_grad_outputs_and_several_outputs():
    results = []
    for lib in (gg, torch):
        x = lib.tensor([1.0, 2.0, 3.0], dtype=lib.float64, requires_grad=True)
        a, b = x * x, x.exp()
        v1 = lib.tensor([1.0, 0.5, -1.0], dtype=lib.float64)
        v2 = lib.tensor([2.0, 0.0, 1.0], dtype=lib.float64)
        results.append(lib.autograd.grad([a, b], x, grad_outputs=[v1, v2]))
    close(results[0][0], results[1][0])


def test_gradient_argument_for_non_scalar_output():
    results = []
    for lib in (gg, torch):
        x = lib.tensor([[1.0, 2.0], [3.0, 4.0]], dtype=lib.float64, requires_grad=True)
        y = x * x + x
        y.backward(lib.tensor([[1.0, 0.5], [0.0, -2.0]], dtype=lib.float64))
        results.append(x.grad)
    close(*results)


def test_scalar_backward_on_one_element_tensor():
    # numel() == 1 is enough for an implicit gradient, as in PyTorch
    x = gg.tensor([[3.0]], requires_grad=True)
    (x * x).backward()
    assert x.grad.tolist() == [[6.0]]


@pytest.mark.parametrize("dim", [None, 0, 1, (0, 1)])
def test_mean_backward(dim):
    def fn(lib):
        x = lib.tensor(np.arange(6.0).reshape(2, 3), requires_grad=True)
        y = x.mean() if dim is None else x.mean(dim=dim)
        (y * y).sum().backward()
        return y, x.grad

    _both(fn)


# ---- graph shapes: diamonds, reuse, deep chains ----------------------------------------


def test_diamond_graph_vs_torch():
    results = []
    for lib in (gg, torch):
        x = lib.tensor(np.array([0.3, -1.2, 2.0]), requires_grad=True)
        a = x.sin()
        b = a * a          # a is used twice by one node
        c = a.exp()        # and once more by another
        d = b * c + a      # the two branches join, and a reaches d a third way
        e = d * d.tanh()   # d reused
        e.sum().backward()
        results.append(x.grad)
    close(*results)


def test_same_input_many_times():
    x = gg.tensor(1.5, requires_grad=True)
    y = x * x * x * x + x + x  # x^4 + 2x
    y.backward()
    assert math.isclose(x.grad.item(), 4 * 1.5 ** 3 + 2, rel_tol=1e-6)


def test_deep_chain_has_no_recursion_limit():
    x = gg.tensor([1.0], dtype=gg.float64, requires_grad=True)
    y = x
    for _ in range(5000):
        y = y * 1.0001
    y.sum().backward()
    np.testing.assert_allclose(x.grad.numpy(), [1.0001 ** 5000], rtol=1e-10)


def test_deep_chain_is_freed_without_recursion():
    x = gg.tensor([1.0], requires_grad=True)
    y = x
    for _ in range(30000):
        y = y * 1.0
    del y  # dropping a deep graph must not overflow the stack
    y = x
    for _ in range(30000):
        y = y + 0.0
    y.sum().backward()
    assert x.grad.tolist() == [1.0]


def test_deep_chain_autograd_grad_and_grad_fn_walk():
    x = gg.tensor(0.5, dtype=gg.float64, requires_grad=True)
    y = x
    for _ in range(5000):
        y = y + x * 0.001
    (g,) = gg.autograd.grad(y, x)
    assert math.isclose(g.item(), 1 + 5000 * 0.001, rel_tol=1e-10)
    # walking grad_fn.next_functions iteratively reaches the leaf
    fn, depth = y.grad_fn, 0
    while fn is not None and "AccumulateGrad" not in fn.name():
        fn = fn.next_functions[0][0]
        depth += 1
    assert depth == 5000


def test_deep_chain_double_backward():
    x = gg.tensor(np.array(0.3), requires_grad=True)
    y = x
    for _ in range(2000):
        y = (y * 0.999).sin() + 0.0
    (g,) = gg.autograd.grad(y, x, create_graph=True)
    (h,) = gg.autograd.grad(g, x)
    tx = torch.tensor(np.array(0.3), requires_grad=True)
    ty = tx
    for _ in range(2000):
        ty = (ty * 0.999).sin() + 0.0
    (tg,) = torch.autograd.grad(ty, tx, create_graph=True)
    (th,) = torch.autograd.grad(tg, tx)
    close(g, tg)
    close(h, th, rtol=1e-8)


# ---- higher order ---------------------------------------------------------------------


def _derivatives(f, x, order):
    """[f'(x), f''(x), ..., f^(order)(x)] elementwise, by repeated graph extension."""
    out, y = [], f(x)
    for _ in range(order):
        (y,) = gg.autograd.grad(y.sum(), x, create_graph=True)
        out.append(y)
    return out


XS = np.array([-2.0, -0.7, 0.0, 0.4, 1.3, 2.5])


@pytest.mark.parametrize("k", [1, 2, 3, 4, 5])
def test_higher_order_sin_times_exp(k):
    # (d/dx)^k [e^x sin x] = 2^(k/2) e^x sin(x + k pi / 4): e^x sin x = Im e^{(1+i)x}, and
    # (1+i)^k = 2^(k/2) e^{i k pi/4}.
    x = gg.tensor(XS, requires_grad=True)
    d = _derivatives(lambda t: t.sin() * t.exp(), x, k)[-1]
    expected = 2 ** (k / 2) * np.exp(XS) * np.sin(XS + k * np.pi / 4)
    np.testing.assert_allclose(d.detach().numpy(), expected, rtol=1e-10, atol=1e-12)


def _tanh_derivative(k, t):
    # Derivatives of tanh as polynomials in t = tanh(x), from p_{k+1}(t) = p_k'(t) (1 - t^2).
    return {
        1: 1 - t ** 2,
        2: -2 * t + 2 * t ** 3,
        3: -2 + 8 * t ** 2 - 6 * t ** 4,
        4: 16 * t - 40 * t ** 3 + 24 * t ** 5,
        5: 16 - 136 * t ** 2 + 240 * t ** 4 - 120 * t ** 6,
    }[k]


def test_tanh_closed_forms_are_right():
    # the closed forms themselves, against the Taylor series tanh x = x - x^3/3 + 2x^5/15 - ...
    assert _tanh_derivative(1, 0.0) == 1 and _tanh_derivative(3, 0.0) == -2
    assert _tanh_derivative(5, 0.0) == 16  # 5! * 2/15
    # and p_{k+1} = p_k' (1 - t^2) checked numerically by central differences in x
    xs = np.linspace(-1.5, 1.5, 7)
    h = 1e-5
    for k in range(1, 5):
        fd = (_tanh_derivative(k, np.tanh(xs + h)) - _tanh_derivative(k, np.tanh(xs - h))) / (2 * h)
        np.testing.assert_allclose(fd, _tanh_derivative(k + 1, np.tanh(xs)), rtol=1e-6,
                                   atol=1e-6)


@pytest.mark.parametrize("k", [1, 2, 3, 4, 5])
def test_higher_order_tanh(k):
    x = gg.tensor(XS, requires_grad=True)
    d = _derivatives(lambda t: t.tanh(), x, k)[-1]
    np.testing.assert_allclose(d.detach().numpy(), _tanh_derivative(k, np.tanh(XS)),
                               rtol=1e-10, atol=1e-12)


def test_higher_order_matches_torch():
    gx, tx = pair(XS, requires_grad=True)
    gy, ty = gx.tanh() * gx.cos(), tx.tanh() * tx.cos()
    for _ in range(4):
        (gy,) = gg.autograd.grad(gy.sum(), gx, create_graph=True)
        (ty,) = torch.autograd.grad(ty.sum(), tx, create_graph=True)
        close(gy, ty, rtol=1e-9)


def test_third_derivative_of_cube():
    x = gg.tensor(3.0, requires_grad=True)
    (g,) = gg.autograd.grad(x ** 3, x, create_graph=True)
    assert g.item() == 27.0 and g.grad_fn is not None
    (h,) = gg.autograd.grad(g, x, create_graph=True)
    assert h.item() == 18.0
    (k,) = gg.autograd.grad(h, x)
    assert k.item() == 6.0


def _mlp_loss(lib, params, inputs, y):
    W1, b1, W2, b2 = params
    h = (inputs @ W1 + b1).tanh()
    out = (h @ W2 + b2).sigmoid()
    return ((out - y) ** 2).sum() / 12 + 0.01 * (W1 * W1).sum()


def test_hessian_vector_product_vs_torch():
    rng = np.random.default_rng(0)
    shapes = [(4, 5), (5,), (5, 2), (2,)]
    P = [rng.standard_normal(s) for s in shapes]
    V = [rng.standard_normal(s) for s in shapes]
    X, Y = rng.standard_normal((6, 4)), rng.random((6, 2))
    results = []
    for lib in (gg, torch):
        params = [lib.tensor(p, requires_grad=True) for p in P]
        vs = [lib.tensor(v) for v in V]
        loss = _mlp_loss(lib, params, lib.tensor(X), lib.tensor(Y))
        grads = lib.autograd.grad(loss, params, create_graph=True)
        dot = sum((g * v).sum() for g, v in zip(grads, vs, strict=True))
        hvp = lib.autograd.grad(dot, params)
        results.append((grads, hvp))
    for g, t in zip(results[0][0], results[1][0], strict=True):
        close(g, t, rtol=1e-9)
    for g, t in zip(results[0][1], results[1][1], strict=True):
        close(g, t, rtol=1e-9)


def test_hvp_is_symmetric():
    # <u, H v> == <v, H u> for the Hessian of a smooth function
    rng = np.random.default_rng(1)
    x = gg.tensor(rng.standard_normal(5), requires_grad=True)
    u, v = gg.tensor(rng.standard_normal(5)), gg.tensor(rng.standard_normal(5))

    def hvp(vec):
        f = (x.sin() * x.exp()).sum() + (x * x).sum() ** 2
        (g,) = gg.autograd.grad(f, x, create_graph=True)
        (h,) = gg.autograd.grad((g * vec).sum(), x)
        return h

    assert math.isclose((u * hvp(v)).sum().item(), (v * hvp(u)).sum().item(), rel_tol=1e-10)


# ---- dtypes and broadcasting ---------------------------------------------------------


def test_mixed_dtypes_grad_keeps_each_leafs_dtype():
    results = []
    for lib in (gg, torch):
        x = lib.tensor([1.0, 2.0], dtype=lib.float32, requires_grad=True)
        w = lib.tensor([3.0, 4.0], dtype=lib.float64, requires_grad=True)
        y = (x * w).sum()
        y.backward()
        results.append((y, x.grad, w.grad))
    (gy, gxg, gwg), (ty, txg, twg) = results
    assert str(gy.dtype) == str(ty.dtype).replace("torch", "graphgrad")
    assert gxg.dtype == gg.float32 and gwg.dtype == gg.float64
    close(gxg, txg)
    close(gwg, twg)


def test_float32_chain_stays_float32():
    x = gg.tensor([1.0, 2.0], requires_grad=True)
    ((x * 2.5).exp() / 3).sum().backward()
    assert x.grad.dtype == gg.float32


@pytest.mark.parametrize("sa,sb", [
    ((3, 1), (1, 4)), ((4,), (3, 4)), ((1,), (2, 3)), ((), (2, 3)), ((2, 1, 3), (4, 1)),
    ((5, 1, 1), (5, 2, 3)),
])
def test_broadcasting_gradients_reduced_to_input_shape(sa, sb):
    rng = np.random.default_rng(len(sa) * 10 + len(sb))
    A, B = rng.standard_normal(sa), rng.standard_normal(sb)
    results = []
    for lib in (gg, torch):
        a = lib.tensor(A, requires_grad=True)
        b = lib.tensor(B, requires_grad=True)
        ((a * b + a / (1 + b * b)) ** 2).sum().backward()
        results.append((a.grad, b.grad))
    close(results[0][0], results[1][0])
    close(results[0][1], results[1][1])


def test_broadcast_with_python_scalar_and_expand():
    results = []
    for lib in (gg, torch):
        a = lib.tensor([[1.0], [2.0]], dtype=lib.float64, requires_grad=True)
        y = a.expand(2, 3) * lib.tensor([1.0, 2.0, 3.0], dtype=lib.float64) + 1.0
        y.sum().backward()
        results.append(a.grad)
    close(*results)


# ---- in-place semantics vs PyTorch -----------------------------------------------------


def _both(fn):
    """Run ``fn(lib)`` for graphgrad and torch; it returns tensors to compare."""
    gout = fn(gg)
    tout = fn(torch)
    for g, t in zip(gout, tout, strict=True):
        if t is None:
            assert g is None
        else:
            close(g, t)
    return gout, tout


def test_setitem_constant_on_non_leaf():
    def fn(lib):
        x = lib.tensor([1.0, 2.0, 3.0], dtype=lib.float64, requires_grad=True)
        y = x * 2
        y[0] = 5
        y.sum().backward()
        return y, x.grad

    (gy, gxg), _ = _both(fn)
    assert gxg.tolist() == [0.0, 2.0, 2.0]


def test_add_inplace_on_non_leaf():
    def fn(lib):
        x = lib.tensor([1.0, 2.0, 3.0], dtype=lib.float64, requires_grad=True)
        y = x * 2
        y.add_(1)
        (y * y).sum().backward()
        return y, x.grad

    _both(fn)


def test_inplace_grad_fn_names_and_versions():
    for lib in (gg, torch):
        x = lib.tensor([1.0, 2.0], requires_grad=True)
        y = x + 0
        v0 = y._version
        y.mul_(x)
        assert y.grad_fn.name() == "MulBackward0", lib
        assert y._version == v0 + 1
        y += 1
        assert y.grad_fn.name() == "AddBackward0", lib
        assert y._version == v0 + 2
        assert not y.is_leaf


def test_mul_inplace_by_input_vs_torch():
    def fn(lib):
        x = lib.tensor([1.0, -2.0, 3.0], dtype=lib.float64, requires_grad=True)
        y = x + 0
        y.mul_(x)     # y = x^2, with the old y saved by the multiplication
        y += x.sin()  # y = x^2 + sin x
        y.sum().backward()
        return y, x.grad

    _both(fn)


def test_setitem_with_tensor_value_requiring_grad():
    def fn(lib):
        x = lib.tensor([1.0, 2.0, 3.0], dtype=lib.float64, requires_grad=True)
        v = lib.tensor(7.0, dtype=lib.float64, requires_grad=True)
        c = lib.tensor([1.0, 10.0, 100.0], dtype=lib.float64)
        y = x * 1
        y[1] = v * 2
        (y * c).sum().backward()
        return y, x.grad, v.grad

    (_, gxg, gvg), _ = _both(fn)
    assert gxg.tolist() == [1.0, 0.0, 100.0] and gvg.item() == 20.0


def test_setitem_into_constant_buffer_makes_it_require_grad():
    def fn(lib):
        v = lib.tensor([2.0, 3.0], dtype=lib.float64, requires_grad=True)
        buf = lib.zeros(2, 3, dtype=lib.float64)
        buf[:, 1] = v * v
        assert buf.requires_grad and not buf.is_leaf
        (buf * lib.arange(6, dtype=lib.float64).reshape(2, 3)).sum().backward()
        return buf, v.grad

    _both(fn)


def test_setitem_slice_and_mask_on_non_leaf():
    def fn(lib):
        x = lib.tensor([[1.0, -2.0], [3.0, -4.0]], dtype=lib.float64, requires_grad=True)
        y = x.exp()
        z = y * 1
        z[z > 1] = 0.0
        z[1] = x[0] * 3
        (z * z).sum().backward()
        return z, x.grad

    _both(fn)


def test_inplace_on_view_of_non_leaf():
    def fn(lib):
        x = lib.tensor([[1.0, -2.0], [3.0, -4.0]], dtype=lib.float64, requires_grad=True)
        z = x * 2
        z[:, 0] += x[:, 1]
        (z * z).sum().backward()
        return z, x.grad

    _both(fn)


def test_inplace_on_add_output_is_allowed():
    # Add saves nothing, so modifying its output in place is fine (as in PyTorch)
    def fn(lib):
        x = lib.tensor([1.0, 2.0], dtype=lib.float64, requires_grad=True)
        y = x + 1
        y.add_(1)
        y.sum().backward()
        return y, x.grad

    _both(fn)


def test_no_grad_update_of_leaves_like_an_optimizer():
    rng = np.random.default_rng(3)
    W0, X, Y = rng.standard_normal((3, 2)), rng.standard_normal((5, 3)), rng.standard_normal(
        (5, 2))

    def fn(lib):
        p = lib.tensor(W0, requires_grad=True)
        X_, Y_ = lib.tensor(X), lib.tensor(Y)
        for _ in range(5):
            loss = ((X_ @ p - Y_) ** 2).mean()
            loss.backward()
            with lib.no_grad():
                p -= 0.1 * p.grad
                p.grad.zero_()
        assert p.is_leaf and p.requires_grad and p.grad_fn is None
        return p, p.grad, loss

    _both(fn)


def test_no_grad_inplace_variants_on_leaf():
    x = gg.tensor([1.0, 2.0], requires_grad=True)
    v = x._version
    with gg.no_grad():
        x.mul_(2)
        x.add_(1)
        x[0] = 0.0
        x.fill_(3.0)
        x.copy_(gg.tensor([4.0, 5.0]))
        x.zero_()
        x.add_(gg.tensor([1.0, 1.0]))
    assert x.is_leaf and x.requires_grad and x.grad_fn is None
    assert x._version == v + 7
    (x * x).sum().backward()
    np.testing.assert_allclose(x.grad.numpy(), [2.0, 2.0])


def test_data_update_invisible_to_autograd():
    x = gg.tensor([1.0, 2.0], requires_grad=True)
    y = x * x
    x.data.mul_(10)  # changes the values; no version bump on x, no error on backward
    y.sum().backward()
    tx = torch.tensor([1.0, 2.0], requires_grad=True)
    ty = tx * tx
    tx.data.mul_(10)
    ty.sum().backward()
    np.testing.assert_allclose(x.grad.numpy(), tx.grad.numpy())


def _decorated(lib, x):
    @lib.no_grad()
    def gen():
        for i in range(2):
            yield (x * i).requires_grad

    @lib.enable_grad()
    def gen_grad():
        yield (x * 2).requires_grad

    @lib.no_grad
    def bare():
        return (x * 2).requires_grad

    @lib.inference_mode
    def bare_inference():
        return (x * 2).requires_grad
    return gen, gen_grad, bare, bare_inference


def test_grad_mode_decorators_on_generators_and_bare():
    """A decorated generator runs its body in the mode at every resumption (the caller's
    mode in between); ``@no_grad``, ``@enable_grad`` and ``@inference_mode`` work bare."""
    outs = []
    for lib in (torch, gg):
        x = lib.ones(2, requires_grad=True)
        gen, gen_grad, bare, bare_inference = _decorated(lib, x)
        g = gen()
        first = next(g)
        between = (x * 3).requires_grad
        rest = list(g)
        with lib.no_grad():
            inside = list(gen_grad())
        outs.append((first, between, rest, inside, bare(), bare_inference()))
    assert outs[0] == outs[1] == (False, True, [False], [True], False, False)


# ---- hooks must keep the gradient's size and type (PyTorch's checks) ---------------------

def _changes_size(g):
    return g.sum().reshape(1)


def _changes_type(g):
    return g.double()


def _returns_a_number(g):
    return 5


@pytest.mark.parametrize("hook", [_changes_size, _changes_type, _returns_a_number])
@pytest.mark.parametrize("leaf", [True, False])
def test_a_hook_that_changes_the_gradient_raises_as_in_torch(hook, leaf):
    import torch

    def run(lib):
        x = lib.ones(3, requires_grad=True)
        y = x if leaf else x * 2
        y.register_hook(lambda g: hook(g))
        (y * 2).sum().backward()
    try:
        run(torch)
    except (RuntimeError, TypeError) as e:  # the oracle's type and wording
        t_err = e
    else:
        pytest.fail("torch accepted the hook")
    with pytest.raises(type(t_err)) as g_err:
        run(gg)
    want = str(t_err).replace("<lambda>", "").replace("torch.", "")
    got = str(g_err.value).replace("<lambda>", "").replace("graphgrad.", "")
    assert got == want
