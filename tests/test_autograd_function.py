"""Custom ``autograd.Function``s against PyTorch: the extending-autograd tutorial's
examples, ``setup_context``, double backward, forward AD, vmap, and PyTorch's errors.
Each Function is written once and defined for both libraries by ``_both``."""

from __future__ import annotations

import numpy as np
import pytest
import torch

import graphgrad as gg
from graphgrad.autograd import function as gg_function


def _both(make):
    """The Function ``make(lib, Function, once_differentiable)`` builds, for graphgrad
    and for torch."""
    return (make(gg, gg.autograd.Function, gg_function.once_differentiable),
            make(torch, torch.autograd.Function, torch.autograd.function.once_differentiable))


def _exp(lib, base, once):
    class Exp(base):
        @staticmethod
        def forward(ctx, i):
            result = i.exp()
            ctx.save_for_backward(result)
            return result

        @staticmethod
        def backward(ctx, grad_output):
            (result,) = ctx.saved_tensors
            return grad_output * result
    return Exp


def _legendre(lib, base, once):
    class LegendrePolynomial3(base):
        @staticmethod
        def forward(ctx, input):
            ctx.save_for_backward(input)
            return 0.5 * (5 * input ** 3 - 3 * input)

        @staticmethod
        def backward(ctx, grad_output):
            (input,) = ctx.saved_tensors
            return grad_output * 1.5 * (5 * input ** 2 - 1)
    return LegendrePolynomial3


def _cube_setup_context(lib, base, once):
    class Cube(base):  # the tutorial's cube, with one output
        @staticmethod
        def forward(x):
            return x ** 3

        @staticmethod
        def setup_context(ctx, inputs, output):
            ctx.save_for_backward(inputs[0])
            ctx.save_for_forward(inputs[0])

        @staticmethod
        def backward(ctx, grad_output):
            (x,) = ctx.saved_tensors
            return grad_output * 3 * x ** 2

        @staticmethod
        def jvp(ctx, x_t):
            (x,) = ctx.saved_tensors
            return 3 * x ** 2 * x_t

        @staticmethod
        def vmap(info, in_dims, x):
            return x ** 3, in_dims[0]
    return Cube


def _scale_by(lib, base, once):
    class ScaleBy(base):  # a non-tensor argument, needs_input_grad
        @staticmethod
        def forward(ctx, x, k, y):
            ctx.k = k
            ctx.save_for_backward(x, y)
            ctx.seen = ctx.needs_input_grad
            return x * k + y * y

        @staticmethod
        def backward(ctx, g):
            x, y = ctx.saved_tensors
            assert ctx.needs_input_grad == ctx.seen
            return (g * ctx.k if ctx.needs_input_grad[0] else None, None,
                    2 * g * y if ctx.needs_input_grad[2] else None)
    return ScaleBy


def _square(lib, base, once):
    class Square(base):  # the double-backward tutorial's first example
        @staticmethod
        def forward(ctx, x):
            ctx.save_for_backward(x)
            return x ** 2

        @staticmethod
        def backward(ctx, grad_out):
            (x,) = ctx.saved_tensors
            return grad_out * 2 * x
    return Square


def _square_once(lib, base, once):
    class SquareOnce(base):
        @staticmethod
        def forward(ctx, x):
            ctx.save_for_backward(x)
            return x ** 2

        @staticmethod
        @once
        def backward(ctx, g):
            (x,) = ctx.saved_tensors
            return 2 * x * g
    return SquareOnce


def _tensors(values, requires_grad=True):
    return (gg.tensor(values, dtype=gg.float64, requires_grad=requires_grad),
            torch.tensor(values, dtype=torch.float64, requires_grad=requires_grad))


@pytest.mark.parametrize("make", [_exp, _legendre, _cube_setup_context, _square_once],
                         ids=lambda m: m.__name__)
def test_values_and_gradients_match_torch(make):
    g_fn, t_fn = _both(make)
    values = np.random.default_rng(0).standard_normal((2, 3))
    gx, tx = _tensors(values)
    gy, ty = g_fn.apply(gx), t_fn.apply(tx)
    np.testing.assert_allclose(gy.detach().numpy(), ty.detach().numpy(), rtol=1e-12)
    assert gy.grad_fn.name() == ty.grad_fn.name()
    (gy * gy).sum().backward()
    (ty * ty).sum().backward()
    np.testing.assert_allclose(gx.grad.numpy(), tx.grad.numpy(), rtol=1e-12)


@pytest.mark.parametrize("make", [_exp, _legendre, _cube_setup_context, _square],
                         ids=lambda m: m.__name__)
def test_double_backward_through_a_backward_written_in_ops(make):
    g_fn, t_fn = _both(make)
    gx, tx = _tensors([0.3, -1.2, 2.0])
    (gg1,) = gg.autograd.grad(g_fn.apply(gx).sum(), gx, create_graph=True)
    (tg1,) = torch.autograd.grad(t_fn.apply(tx).sum(), tx, create_graph=True)
    (gg2,) = gg.autograd.grad(gg1.sum(), gx)
    (tg2,) = torch.autograd.grad(tg1.sum(), tx)
    np.testing.assert_allclose(gg2.numpy(), tg2.numpy(), rtol=1e-12)
    # and as the tutorial checks it: gradcheck and gradgradcheck (finite differences)
    x = gg.tensor([0.3, -1.2, 2.0], dtype=gg.float64, requires_grad=True)
    assert gg.autograd.gradcheck(g_fn.apply, (x,))
    assert gg.autograd.gradgradcheck(g_fn.apply, (x,))


def test_once_differentiable_gives_a_gradient_that_is_not_differentiable():
    g_fn, t_fn = _both(_square_once)
    gx, tx = _tensors([1.0, 2.0])
    (gg1,) = gg.autograd.grad(g_fn.apply(gx).sum(), gx, create_graph=True)
    (tg1,) = torch.autograd.grad(t_fn.apply(tx).sum(), tx, create_graph=True)
    assert gg1.requires_grad == tg1.requires_grad is False


@pytest.mark.parametrize("wanted", [(True, True), (True, False), (False, True)])
def test_non_tensor_arguments_and_needs_input_grad(wanted):
    g_fn, t_fn = _both(_scale_by)
    gx, tx = _tensors([1.0, 2.0], wanted[0])
    gy, ty = _tensors([3.0, -1.0], wanted[1])
    g_out, t_out = g_fn.apply(gx, 2.5, gy), t_fn.apply(tx, 2.5, ty)
    np.testing.assert_allclose(g_out.detach().numpy(), t_out.detach().numpy())
    g_out.sum().backward()
    t_out.sum().backward()
    for g, t in ((gx, tx), (gy, ty)):
        assert (g.grad is None) == (t.grad is None)
        if t.grad is not None:
            np.testing.assert_allclose(g.grad.numpy(), t.grad.numpy())


def test_forward_ad_calls_the_jvp_staticmethod():
    g_fn, t_fn = _both(_cube_setup_context)
    x, v = [0.5, -2.0], [1.0, 3.0]
    g_out = gg.func.jvp(g_fn.apply, (gg.tensor(x),), (gg.tensor(v),))
    t_out = torch.func.jvp(t_fn.apply, (torch.tensor(x),), (torch.tensor(v),))
    for a, b in zip(g_out, t_out, strict=True):
        np.testing.assert_allclose(a.numpy(), b.numpy())


def test_vmap_calls_the_vmap_staticmethod():
    g_fn, t_fn = _both(_cube_setup_context)
    x = np.random.default_rng(1).standard_normal((4, 3))
    np.testing.assert_allclose(gg.func.vmap(g_fn.apply)(gg.tensor(x)).numpy(),
                               torch.vmap(t_fn.apply)(torch.tensor(x)).numpy())


def test_generate_vmap_rule_runs_the_forward_under_vmap():
    class Sin(gg.autograd.Function):
        generate_vmap_rule = True

        @staticmethod
        def forward(x):
            return x.sin() * x.sum()

        @staticmethod
        def setup_context(ctx, inputs, output):
            ctx.save_for_backward(inputs[0])

        @staticmethod
        def backward(ctx, g):
            raise AssertionError("not called")
    x = np.random.default_rng(2).standard_normal((4, 3))
    got = gg.func.vmap(Sin.apply)(gg.tensor(x)).numpy()
    np.testing.assert_allclose(got, np.sin(x) * x.sum(axis=1, keepdims=True), rtol=1e-12)


# ---- PyTorch's errors ---------------------------------------------------------------------

def _wrong_count(lib, base, once):
    class Bad(base):
        @staticmethod
        def forward(ctx, a, b):
            return a * b

        @staticmethod
        def backward(ctx, g):
            return g
    return lambda x: Bad.apply(x, x)


def _wrong_shape(lib, base, once):
    class BadShape(base):
        @staticmethod
        def forward(ctx, a):
            return a * 2

        @staticmethod
        def backward(ctx, g):
            return lib.ones(2)
    return BadShape.apply


def _no_backward(lib, base, once):
    class NoBackward(base):
        @staticmethod
        def forward(ctx, a):
            return a * 2
    return NoBackward.apply


def _saved_then_modified(lib, base, once):
    class Keeps(base):
        @staticmethod
        def forward(ctx, a):
            ctx.save_for_backward(a)
            return a * 2

        @staticmethod
        def backward(ctx, g):
            (a,) = ctx.saved_tensors
            return g * a

    def run(x):
        z = x * 1
        out = Keeps.apply(z)
        with lib.no_grad():
            pass
        z.add_(1)
        return out
    return run


@pytest.mark.parametrize("make", [_wrong_count, _wrong_shape, _no_backward,
                                  _saved_then_modified], ids=lambda m: m.__name__)
def test_backward_errors_match_torch(make):
    g_run, t_run = _both(make)
    gx, tx = _tensors([1.0, 2.0, 3.0])
    try:
        t_run(tx).sum().backward()
    except (RuntimeError, NotImplementedError, TypeError) as e:
        t_err = e
    else:
        pytest.fail("torch accepted it")
    with pytest.raises(type(t_err)) as g_err:
        g_run(gx).sum().backward()
    # (for a saved tensor PyTorch names the node that made it "Add", elsewhere "AddBackward0")
    clean = [str(e).replace("torch.", "").replace("graphgrad.", "").split(", which")[0]
             for e in (t_err, g_err.value)]
    assert clean[1] == clean[0]


def test_missing_jvp_and_vmap_errors_match_torch():
    def make(lib, base, once):
        class Plain(base):
            @staticmethod
            def forward(a):
                return a * 2

            @staticmethod
            def setup_context(ctx, inputs, output):
                pass

            @staticmethod
            def backward(ctx, g):
                return g * 2
        return Plain
    g_fn, t_fn = _both(make)
    with pytest.raises(NotImplementedError) as t_err:
        torch.func.jvp(t_fn.apply, (torch.ones(3),), (torch.ones(3),))
    with pytest.raises(NotImplementedError, match=str(t_err.value)):
        gg.func.jvp(g_fn.apply, (gg.ones(3),), (gg.ones(3),))
    with pytest.raises(RuntimeError) as t_err:
        torch.vmap(t_fn.apply)(torch.ones(2, 3))
    with pytest.raises(RuntimeError) as g_err:
        gg.func.vmap(g_fn.apply)(gg.ones(2, 3))
    assert str(g_err.value) == str(t_err.value)


def test_a_second_backward_without_retain_graph_raises():
    g_fn, _ = _both(_exp)
    x = gg.ones(2, requires_grad=True)
    y = g_fn.apply(x * 1).sum()
    y.backward()
    with pytest.raises(RuntimeError, match="backward through the graph a second time"):
        y.backward()


class _Scaled(gg.autograd.Function):
    """exp whose backward is deliberately 10x the true one: graphs must call it."""

    @staticmethod
    def forward(ctx, i):
        result = i.exp()
        ctx.save_for_backward(result)
        return result

    @staticmethod
    def backward(ctx, g):
        (result,) = ctx.saved_tensors
        return g * result * 10


def _uses_scaled(x):
    return _Scaled.apply(x) * 2


@pytest.mark.parametrize("capture", ["trace", "compile"])
def test_captured_graphs_run_the_function_as_one_node_with_its_backward(capture):
    fn = (gg.jit.trace(_uses_scaled, (gg.ones(3),)) if capture == "trace"
          else gg.compile(_uses_scaled))
    for values in ([0.0, 1.0, -1.0], [2.0, 0.5, 0.0]):
        x = gg.tensor(values, dtype=gg.float64, requires_grad=True)
        out = fn(x)
        np.testing.assert_allclose(out.detach().numpy(), 2 * np.exp(values), rtol=1e-12)
        out.sum().backward()
        np.testing.assert_allclose(x.grad.numpy(), 20 * np.exp(values), rtol=1e-12)
    if capture == "trace":
        assert "_ScaledFunction(x" in fn.code
        assert sum(n.op is _Scaled._op for n in fn.ir.nodes if n.kind == "call") == 1


# ---- several outputs -----------------------------------------------------------------

def _cube_two_outputs(lib, base, once):
    class MyCube(base):  # the tutorial's cube: the result and its derivative
        generate_vmap_rule = True

        @staticmethod
        def forward(x):
            return x ** 3, 3 * x ** 2

        @staticmethod
        def setup_context(ctx, inputs, output):
            ctx.save_for_backward(inputs[0], output[1])
            ctx.save_for_forward(inputs[0])

        @staticmethod
        def backward(ctx, grad_output, grad_dx):
            x, dx = ctx.saved_tensors
            return grad_output * dx + grad_dx * 6 * x

        @staticmethod
        def jvp(ctx, tx):
            (x,) = ctx.saved_tensors
            return 3 * x ** 2 * tx, 6 * x * tx
    return MyCube


def _sort_with_indices(lib, base, once):
    class Sort(base):  # a float output and an integer one marked non-differentiable
        @staticmethod
        def forward(ctx, x):
            values, indices = x.sort()
            ctx.mark_non_differentiable(indices)
            ctx.save_for_backward(indices)
            return values, indices

        @staticmethod
        def backward(ctx, g_values, g_indices):
            (indices,) = ctx.saved_tensors
            return g_values[indices.argsort()]
    return Sort


def _run_both(g_fn, t_fn, body):
    return body(gg, g_fn), body(torch, t_fn)


def test_several_outputs_values_gradients_and_second_order_match_torch():
    g_fn, t_fn = _both(_cube_two_outputs)

    def body(lib, fn):
        x = lib.tensor([1.0, -2.0, 0.5], dtype=lib.float64, requires_grad=True)
        r, dx = fn.apply(x)
        (g,) = lib.autograd.grad((r * lib.tensor([1.0, 2.0, 3.0], dtype=lib.float64)).sum()
                                 + dx.sum(), x, create_graph=True)
        (gg2,) = lib.autograd.grad(g.pow(2).sum(), x)
        x.grad = None
        fn.apply(x)[1].sum().backward()  # one output used: the other's gradient is zero
        return [a.detach().numpy() for a in (r, dx, g, gg2, x.grad)]
    for a, b in zip(*_run_both(g_fn, t_fn, body), strict=True):
        np.testing.assert_allclose(a, b, rtol=1e-12)


def test_several_outputs_under_forward_ad_and_vmap_match_torch():
    g_fn, t_fn = _both(_cube_two_outputs)

    def body(lib, fn):
        x = lib.tensor(np.arange(6.0).reshape(2, 3) - 2, dtype=lib.float64)
        _, tangents = lib.func.jvp(fn.apply, (x,), (lib.ones_like(x),))
        batched = lib.func.vmap(fn.apply)(x)
        jac = lib.func.jacrev(lambda a: fn.apply(a)[1])(x[0])
        return [t.numpy() for t in (*tangents, *batched, jac)]
    for a, b in zip(*_run_both(g_fn, t_fn, body), strict=True):
        np.testing.assert_allclose(a, b, rtol=1e-12)


def test_non_differentiable_integer_output_is_returned_as_it_is():
    g_fn, t_fn = _both(_sort_with_indices)

    def body(lib, fn):
        x = lib.tensor([3.0, -1.0, 2.0], dtype=lib.float64, requires_grad=True)
        values, indices = fn.apply(x)
        (values * lib.tensor([1.0, 2.0, 3.0], dtype=lib.float64)).sum().backward()
        return (values.detach().numpy(), indices.numpy(), indices.requires_grad,
                values.requires_grad, x.grad.numpy())
    g, t = _run_both(g_fn, t_fn, body)
    for a, b in zip(g, t, strict=True):
        np.testing.assert_array_equal(a, b)
    assert g[1].dtype == np.int64


def _two_out_graph(x):
    r, dx = _CubeTwo.apply(x)
    return r + dx


_CubeTwo = _cube_two_outputs(gg, gg.autograd.Function, gg_function.once_differentiable)


@pytest.mark.parametrize("capture", ["trace", "compile"])
def test_captured_graphs_unpack_several_outputs(capture):
    fn = (gg.jit.trace(_two_out_graph, (gg.ones(3, dtype=gg.float64),)) if capture == "trace"
          else gg.compile(_two_out_graph))
    for values in ([0.0, 1.0, -1.0], [2.0, 0.5, 0.0]):
        v = np.array(values)
        x = gg.tensor(values, dtype=gg.float64, requires_grad=True)
        out = fn(x)
        np.testing.assert_allclose(out.detach().numpy(), v ** 3 + 3 * v ** 2, rtol=1e-12)
        out.sum().backward()
        np.testing.assert_allclose(x.grad.numpy(), 3 * v ** 2 + 6 * v, rtol=1e-12)


# ---- inputs written in place (mark_dirty) ----------------------------------------------

def _mul_inplace(lib, base, once):
    class MulInplace(base):
        @staticmethod
        def forward(ctx, x, y):
            x.mul_(y)
            ctx.mark_dirty(x)
            ctx.save_for_backward(x, y)
            return x

        @staticmethod
        def backward(ctx, g):
            out, y = ctx.saved_tensors
            return g * y, g * out / y
    return MulInplace


def test_mark_dirty_returns_the_input_with_new_history_as_torch():
    g_fn, t_fn = _both(_mul_inplace)

    def body(lib, fn):
        a = lib.tensor([1.0, 2.0, 3.0], dtype=lib.float64, requires_grad=True)
        y = lib.tensor([2.0, 3.0, 4.0], dtype=lib.float64, requires_grad=True)
        x = a * 1
        before = x._version
        out = fn.apply(x, y)
        (out * out).sum().backward()
        return out is x, x._version - before, a.grad.numpy(), y.grad.numpy(), x.detach().numpy()
    g, t = _run_both(g_fn, t_fn, body)
    assert g[:2] == t[:2] == (True, 2)
    for a, b in zip(g[2:], t[2:], strict=True):
        np.testing.assert_allclose(a, b, rtol=1e-12)


@pytest.mark.parametrize("case", ["leaf", "saved_before", "not_returned"])
def test_mark_dirty_errors_match_torch(case):
    def run(lib, fn):
        if case == "leaf":
            fn.apply(lib.ones(2, requires_grad=True), lib.ones(2))
        elif case == "saved_before":
            b = lib.tensor([1.0, 2.0], requires_grad=True)
            x = b * 1
            z = x * x
            fn.apply(x, lib.tensor([2.0, 2.0]))
            z.sum().backward()
        else:
            class Bad(lib.autograd.Function):
                @staticmethod
                def forward(ctx, x):
                    x.add_(1)
                    ctx.mark_dirty(x)
                    return x * 2

                @staticmethod
                def backward(ctx, g):
                    return g
            Bad.apply(lib.ones(2) * 1)
    g_fn, t_fn = _both(_mul_inplace)
    with pytest.raises(RuntimeError) as t_err:
        run(torch, t_fn)
    with pytest.raises(RuntimeError) as g_err:
        run(gg, g_fn)
    first = str(t_err.value).split(":")[0].split("[")[0]
    assert str(g_err.value).startswith(first)
