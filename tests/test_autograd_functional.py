"""``graphgrad.autograd.functional`` (jacobian, hessian, vjp, jvp, hvp, vhp) against
``torch.autograd.functional`` and ``torch.func``: Jacobians by every route (reverse-mode
rows, forward-mode columns, vectorized, ``func.jacrev``/``func.jacfwd``) agree; Hessians
of Rosenbrock, a tanh least-squares and a small MLP by every route; create_graph, strict
and the misuse errors in PyTorch's wording."""

from __future__ import annotations

import zlib

import numpy as np
import pytest
import torch
import torch.autograd.functional as TAF
import torch.func as TF
from hypothesis import given, settings
from hypothesis import strategies as st

import graphgrad as gg
from graphgrad import func as F
from graphgrad.autograd import functional as GAF

SETTINGS = settings(max_examples=12, deadline=None)


def rng_for(name: str) -> np.random.Generator:
    return np.random.default_rng(zlib.crc32(name.encode()))


def both(*arrays):
    return [gg.tensor(np.asarray(a)) for a in arrays], [torch.tensor(np.asarray(a))
                                                        for a in arrays]


def lib_of(t):
    return gg if isinstance(t, gg.Tensor) else torch


def const(like, array):
    return gg.tensor(array) if isinstance(like, gg.Tensor) else torch.tensor(array)


def close(g, t, rtol=1e-9, atol=1e-10):
    """Same nesting of tuples (a Tensor where torch has a Tensor), shapes, dtypes, values."""
    if isinstance(t, tuple):
        assert isinstance(g, tuple) and len(g) == len(t), (type(g), g)
        for a, b in zip(g, t, strict=True):
            close(a, b, rtol, atol)
        return
    assert isinstance(g, gg.Tensor), type(g)
    assert tuple(g.shape) == tuple(t.shape), (g.shape, t.shape)
    assert str(g.dtype).split(".")[-1] == str(t.dtype).split(".")[-1]
    np.testing.assert_allclose(g.detach().numpy(), t.detach().numpy(), rtol=rtol, atol=atol)


def requires_grad_any(tree) -> bool:
    if isinstance(tree, tuple):
        return any(requires_grad_any(t) for t in tree)
    return tree.requires_grad


# ---- Jacobians by every route --------------------------------------------------------

ROUTES = {
    "rows": {"vectorize": False, "strategy": "reverse-mode"},
    "columns": {"vectorize": False, "strategy": "forward-mode"},
    "vectorized_reverse": {"vectorize": True, "strategy": "reverse-mode"},
    "vectorized_forward": {"vectorize": True, "strategy": "forward-mode"},
}


def two_by_two(x, y):
    return (x @ y).sin(), (x.sum(0) * y.exp().sum(1)).tanh()


JAC_PROBLEMS = {
    # name: (function, input shapes, inputs passed as a tuple)
    "single_in_single_out": (lambda x: x.sin() * x.sum(), [(4,)], False),
    "matrix_in_matrix_out": (lambda x: (x @ x.T).exp() / (1 + x.sum()), [(2, 3)], False),
    "vector_to_scalar": (lambda x: (x ** 3).sum().sqrt(), [(5,)], False),
    "scalar_to_vector": (lambda x: x * const(x, np.arange(3.0)) + x.exp(), [()], False),
    "single_in_tuple_out": (lambda x: (x.cumsum(0), x.prod().reshape(1), x[1:] * x[:-1]),
                            [(4,)], False),
    "one_tuple_in_single_out": (lambda x: x.softmax(0), [(4,)], True),
    "tuple_in_single_out": (lambda x, y: (x[:, None] * y).logsumexp(0), [(2,), (2, 3)], True),
    "tuple_in_tuple_out": (two_by_two, [(2, 3), (3, 4)], True),
    "output_independent_of_an_input": (lambda x, y: (x.exp(), x.sum() * 2), [(3,), (2,)], True),
}


def _jac_inputs(name):
    fn, shapes, as_tuple = JAC_PROBLEMS[name]
    gs, ts = both(*[rng_for(name).standard_normal(s) for s in shapes])
    if as_tuple:
        return fn, tuple(gs), tuple(ts), as_tuple
    return fn, gs[0], ts[0], as_tuple


@pytest.mark.parametrize("route", ROUTES)
@pytest.mark.parametrize("name", JAC_PROBLEMS)
def test_jacobian_routes_match_torch(name, route):
    fn, g_in, t_in, as_tuple = _jac_inputs(name)
    J = GAF.jacobian(fn, g_in, **ROUTES[route])
    # torch's forward-mode exists only vectorized, and returns lists there instead of the
    # tuples of its other routes: its reverse-mode routes are the reference
    close(J, TAF.jacobian(fn, t_in))
    close(J, TAF.jacobian(fn, t_in, vectorize=True))
    assert not requires_grad_any(J)


@pytest.mark.parametrize("name", JAC_PROBLEMS)
def test_func_jacobians_match_functional(name):
    fn, g_in, t_in, as_tuple = _jac_inputs(name)
    args = g_in if as_tuple else (g_in,)
    targs = t_in if as_tuple else (t_in,)
    argnums = tuple(range(len(args))) if as_tuple else 0
    ref = TF.jacrev(fn, argnums=argnums)(*targs)
    for jac in (F.jacrev, F.jacfwd):
        J = jac(fn, argnums=argnums)(*args)
        close(J, ref)
    close(F.jacrev(fn, argnums=argnums, chunk_size=2)(*args), ref)


@SETTINGS
@given(m=st.integers(1, 3), n=st.integers(1, 4), k=st.integers(1, 3), seed=st.integers(0, 999))
def test_jacobian_routes_agree_any_shape(m, n, k, seed):
    rng = np.random.default_rng(seed)
    (x, y), (xt, yt) = both(rng.standard_normal((m, n)), rng.standard_normal((n, k)))
    ref = TF.jacrev(two_by_two, argnums=(0, 1))(xt, yt)
    for kw in ROUTES.values():
        J = GAF.jacobian(two_by_two, (x, y), **kw)
        close(J, tuple(tuple(r) for r in ref))
    close(F.jacfwd(two_by_two, argnums=(0, 1))(x, y), ref)
    close(F.jacrev(two_by_two, argnums=(0, 1))(x, y), ref)


def test_rows_and_columns_are_one_pass_each():
    """Reverse mode evaluates f once and runs one backward pass per output element; forward
    mode runs f once per input element (the lecture's rows and columns)."""
    calls = []

    def f(x):
        calls.append(1)
        return (x[:2] * x.sum()).sin()  # 2 outputs, 5 inputs

    (x,), (xt,) = both(rng_for("passes").standard_normal(5))
    ref = TAF.jacobian(f, xt)
    calls.clear()
    close(GAF.jacobian(f, x, strategy="reverse-mode"), ref)
    assert len(calls) == 1
    calls.clear()
    close(GAF.jacobian(f, x, strategy="forward-mode"), ref)
    assert len(calls) == 5


def test_jacobian_of_inputs_that_require_grad():
    (x0,), _ = both(rng_for("rg").standard_normal(3))
    x = gg.tensor(x0.numpy(), requires_grad=True)
    xt = torch.tensor(x0.numpy(), requires_grad=True)
    f = lambda a: a.sin() * a.sum()  # noqa: E731
    for kw in ROUTES.values():
        J = GAF.jacobian(f, x, **kw)
        close(J, TAF.jacobian(f, xt))
        assert not J.requires_grad and x.grad is None


@pytest.mark.parametrize("vectorize", [False, True])
def test_jacobian_create_graph(vectorize):
    x0 = rng_for("cg").standard_normal(3)
    x, xt = gg.tensor(x0, requires_grad=True), torch.tensor(x0, requires_grad=True)
    f = lambda a: a.sin() * a.sum()  # noqa: E731
    J = GAF.jacobian(f, x, create_graph=True, vectorize=vectorize)
    Jt = TAF.jacobian(f, xt, create_graph=True, vectorize=vectorize)
    assert J.requires_grad and Jt.requires_grad
    close(J, Jt)
    (J ** 2).sum().backward()
    (Jt ** 2).sum().backward()
    close(x.grad, xt.grad)


# ---- Hessians ------------------------------------------------------------------------


def rosenbrock(x):
    return (100 * (x[1:] - x[:-1] ** 2) ** 2 + (1 - x[:-1]) ** 2).sum()


A_TANH = rng_for("tanh_ls").standard_normal((4, 6))


def tanh_least_squares(x):
    return (const(x, A_TANH) @ x).tanh().pow(2).sum() + 0.5 * (x @ x)


_MLP = [rng_for("mlp").standard_normal(s) for s in [(3, 5), (5,), (5, 2), (2,)]]


def mlp_loss(x):
    w1, b1, w2, b2 = (const(x, a) for a in _MLP)
    out = (x @ w1 + b1).tanh() @ w2 + b2
    return (out ** 2).sum() + lib_of(x).logsumexp(out, dim=0)


HESSIAN_PROBLEMS = {
    "rosenbrock_2": (rosenbrock, 2),
    "rosenbrock_10": (rosenbrock, 10),
    "tanh_least_squares": (tanh_least_squares, 6),
    "mlp_input": (mlp_loss, 3),
}

HESSIAN_ROUTES = {
    "func.hessian": lambda f: F.hessian(f),
    "jacrev(jacrev)": lambda f: F.jacrev(F.jacrev(f)),
    "jacfwd(jacfwd)": lambda f: F.jacfwd(F.jacfwd(f)),
    "jacrev(jacfwd)": lambda f: F.jacrev(F.jacfwd(f)),
    "jacfwd(grad)": lambda f: F.jacfwd(F.grad(f)),
    **{f"functional.{strategy}.vectorize={vec}":
       (lambda f, s=strategy, v=vec: lambda x: GAF.hessian(f, x, vectorize=v,
                                                           outer_jacobian_strategy=s))
       for strategy in ("reverse-mode", "forward-mode") for vec in (False, True)},
}


@pytest.mark.parametrize("route", HESSIAN_ROUTES)
@pytest.mark.parametrize("name", HESSIAN_PROBLEMS)
def test_hessians_match_torch(name, route):
    fn, n = HESSIAN_PROBLEMS[name]
    (x,), (xt,) = both(rng_for(name).standard_normal(n))
    H = HESSIAN_ROUTES[route](fn)(x)
    Ht = TF.hessian(fn)(xt)
    close(H, Ht, rtol=1e-9, atol=1e-8)
    assert not H.requires_grad
    np.testing.assert_allclose(H.numpy(), H.numpy().T, rtol=1e-9, atol=1e-8)


def test_rosenbrock_hessian_at_the_minimum():
    H = F.hessian(rosenbrock)(gg.ones(2, dtype=gg.float64))
    np.testing.assert_allclose(H.numpy(), [[802.0, -400.0], [-400.0, 200.0]])


@pytest.mark.parametrize("name", HESSIAN_PROBLEMS)
def test_torch_functional_hessian_agrees(name):
    """The oracle itself: torch's functional routes against torch.func.hessian (its
    forward-over-reverse route fails on the MLP, so only the reverse ones)."""
    fn, n = HESSIAN_PROBLEMS[name]
    (x,), (xt,) = both(rng_for(name).standard_normal(n))
    Ht = TF.hessian(fn)(xt)
    close(GAF.hessian(fn, x), TAF.hessian(fn, xt), atol=1e-8)
    close(GAF.hessian(fn, x, vectorize=True), TAF.hessian(fn, xt, vectorize=True), atol=1e-8)
    np.testing.assert_allclose(TAF.hessian(fn, xt).numpy(), Ht.numpy(), rtol=1e-9, atol=1e-8)


@pytest.mark.parametrize("vectorize", [False, True])
@pytest.mark.parametrize("strategy", ["reverse-mode", "forward-mode"])
def test_hessian_of_tuple_inputs(strategy, vectorize):
    rng = rng_for("hess_tuple")
    (x, y), (xt, yt) = both(rng.standard_normal(3), rng.standard_normal(2))
    f = lambda a, b: (a.tanh() * b.sum()).sum() + (a ** 2).sum() * (b ** 3).sum()  # noqa: E731
    H = GAF.hessian(f, (x, y), vectorize=vectorize, outer_jacobian_strategy=strategy)
    close(H, TAF.hessian(f, (xt, yt)))


def test_hessian_create_graph():
    x0 = rng_for("hcg").standard_normal(4)
    x, xt = gg.tensor(x0, requires_grad=True), torch.tensor(x0, requires_grad=True)
    H = GAF.hessian(mlp_loss_4, x, create_graph=True)
    Ht = TAF.hessian(mlp_loss_4, xt, create_graph=True)
    assert H.requires_grad
    (H ** 2).sum().backward()
    (Ht ** 2).sum().backward()
    close(x.grad, xt.grad, atol=1e-8)


def mlp_loss_4(x):
    return (x.sin() * x.sum()).exp().sum()


# ---- vjp, jvp, vhp, hvp --------------------------------------------------------------


def vec_fn(x, y):
    return (x * y.sum()).sin(), (x.exp() @ y[:3]).reshape(1)


def scalar_fn(x, y):
    return (x.sin() * y[:3]).sum() * (x * x).sum() + y.prod()


@pytest.mark.parametrize("create_graph", [False, True])
def test_vjp_and_jvp_match_torch(create_graph):
    rng = rng_for("vjp_jvp")
    (x, y, u, w, v), (xt, yt, ut, wt, vt) = both(
        rng.standard_normal(3), rng.standard_normal(4), rng.standard_normal(3),
        rng.standard_normal(1), rng.standard_normal(4))
    out, res = GAF.vjp(vec_fn, (x, y), (u, w), create_graph=create_graph)
    outt, rest = TAF.vjp(vec_fn, (xt, yt), (ut, wt), create_graph=create_graph)
    close((out, res), (outt, rest))
    out, res = GAF.jvp(vec_fn, (x, y), (u, v), create_graph=create_graph)
    outt, rest = TAF.jvp(vec_fn, (xt, yt), (ut, vt), create_graph=create_graph)
    close((out, res), (outt, rest))
    # single tensors in, single tensor out
    f = lambda a: a.sin() * a.sum()  # noqa: E731
    close(GAF.vjp(f, x, u), TAF.vjp(f, xt, ut))
    close(GAF.jvp(f, x, u), TAF.jvp(f, xt, ut))


@pytest.mark.parametrize("name", ["vhp", "hvp"])
def test_vhp_and_hvp_match_torch(name):
    rng = rng_for(name)
    (x, y, u, v), (xt, yt, ut, vt) = both(rng.standard_normal(3), rng.standard_normal(4),
                                          rng.standard_normal(3), rng.standard_normal(4))
    close(getattr(GAF, name)(scalar_fn, (x, y), (u, v)),
          getattr(TAF, name)(scalar_fn, (xt, yt), (ut, vt)))
    close(getattr(GAF, name)(mlp_loss, x, u), getattr(TAF, name)(mlp_loss, xt, ut))
    H = TF.hessian(mlp_loss)(xt)
    close(getattr(GAF, name)(mlp_loss, x, u)[1], H @ ut)


@pytest.mark.parametrize("name", ["vjp", "jvp", "vhp", "hvp"])
def test_create_graph_results_can_be_differentiated(name):
    rng = rng_for("cg" + name)
    x0, v0 = rng.standard_normal(3), rng.standard_normal(3)
    x, xt = gg.tensor(x0, requires_grad=True), torch.tensor(x0, requires_grad=True)
    fn = mlp_loss if name in ("vhp", "hvp") else (lambda a: a.sin() * a.sum())
    _, r = getattr(GAF, name)(fn, x, gg.tensor(v0), create_graph=True)
    _, rt = getattr(TAF, name)(fn, xt, torch.tensor(v0), create_graph=True)
    assert r.requires_grad and rt.requires_grad
    (r ** 2).sum().backward()
    (rt ** 2).sum().backward()
    close(x.grad, xt.grad, atol=1e-9)


@pytest.mark.parametrize("name", ["vjp", "jvp", "vhp"])
def test_v_none_for_a_single_element(name):
    (x,), (xt,) = both(np.array([0.3]))
    fn = (lambda a: (a ** 3).sum()) if name != "jvp" else (lambda a: a ** 3)
    close(getattr(GAF, name)(fn, x), getattr(TAF, name)(fn, xt))


def test_hvp_v_none_for_a_single_element():
    (x,), (xt,) = both(np.array([0.3]))
    close(GAF.hvp(lambda a: (a ** 3).sum(), x), TAF.hvp(lambda a: (a ** 3).sum(), xt))


def test_outputs_independent_of_inputs_give_zeros():
    (x,), (xt,) = both(np.ones(3))
    f = lambda a: a * 0 + const(a, np.arange(3.0))  # noqa: E731
    for kw in ROUTES.values():
        close(GAF.jacobian(f, x, **kw), TAF.jacobian(f, xt))
    g = lambda a: const(a, np.arange(3.0))  # noqa: E731  (does not touch the input at all)
    close(GAF.jacobian(g, x), TAF.jacobian(g, xt))
    close(GAF.vjp(g, x, x), TAF.vjp(g, xt, xt))
    close(GAF.jvp(g, x, x), TAF.jvp(g, xt, xt))


# ---- errors --------------------------------------------------------------------------


@pytest.mark.parametrize("call, exc, message", [
    (lambda mod, x: mod.jacobian(lambda a: a, 1.0), TypeError,
     r"The inputs given to jacobian must be either a Tensor or a tuple of Tensors but the given "
     r"inputs has type <class 'float'>."),
    (lambda mod, x: mod.jacobian(lambda a, b: a, (x, 1.0)), TypeError,
     r"The inputs given to jacobian must be either a Tensor or a tuple of Tensors but the value "
     r"at index 1 has type <class 'float'>."),
    (lambda mod, x: mod.jacobian(lambda a: 3.0, x), TypeError,
     r"The outputs of the user-provided function given to jacobian must be either a Tensor or a "
     r"tuple of Tensors but the given outputs of the user-provided function has type "
     r"<class 'float'>."),
    (lambda mod, x: mod.jacobian(lambda a: a, x, strict=True, vectorize=True), RuntimeError,
     r"torch.autograd.functional.jacobian: `strict=True` and `vectorized=True` are not "
     r"supported together. Please either set `strict=False` or `vectorize=False`."),
    (lambda mod, x: mod.jacobian(lambda a, b: a.sin(), (x, x), strict=True), RuntimeError,
     r"Output 0 of the user-provided function is independent of input 1. This is not allowed "
     r"in strict mode."),
    (lambda mod, x: mod.hessian(lambda a: (a.sum(), a.sum()), x), RuntimeError,
     r"The function given to hessian should return a single Tensor"),
    (lambda mod, x: mod.vjp(lambda a: a, x), RuntimeError,
     r"The vector v can only be None if the user-provided function returns a single Tensor "
     r"with a single element."),
    (lambda mod, x: mod.jvp(lambda a: a, x), RuntimeError,
     r"The vector v can only be None if the input to the user-provided function is a single "
     r"Tensor with a single element."),
], ids=["inputs_float", "inputs_tuple_with_float", "outputs_float", "strict_and_vectorize",
        "strict_independent_input", "hessian_tuple_output", "vjp_v_none", "jvp_v_none"])
def test_functional_errors(call, exc, message):
    (x,), (xt,) = both(np.ones(3))
    with pytest.raises(exc, match=message):
        call(TAF, xt)
    with pytest.raises(exc, match=message):
        call(GAF, x)


def test_strategy_error():
    msg = (r'Expected strategy to be either "forward-mode" or "reverse-mode". Hint: If your '
           r'function has more outputs than inputs, "forward-mode" tends to be more performant. '
           r'Otherwise, prefer to use "reverse-mode".')
    with pytest.raises(AssertionError, match=msg):  # torch asserts
        TAF.jacobian(lambda a: a, torch.ones(3), strategy="sideways")
    with pytest.raises(ValueError, match=msg):  # torch's wording; a check survives -O
        GAF.jacobian(lambda a: a, gg.ones(3), strategy="sideways")


@pytest.mark.parametrize("call, message", [
    (lambda mod, x: mod.hessian(lambda a: a, x),
     r"The Tensor returned by the function given to hessian should contain a single element"),
    (lambda mod, x: mod.hvp(lambda a: a, x, x),
     r"The Tensor returned by the function given to hvp should contain a single element"),
    (lambda mod, x: mod.vhp(lambda a: a, x, x),
     r"The Tensor returned by the function given to vhp should contain a single element"),
    (lambda mod, x: mod.vjp(lambda a: a, x, x[:2]),
     r"v has invalid size: should be (torch|graphgrad).Size\(\[3\]\) but got "
     r"(torch|graphgrad).Size\(\[2\]\)."),
    (lambda mod, x: mod.jvp(lambda a: a, x, x[:2]),
     r"v has invalid size: should be (torch|graphgrad).Size\(\[3\]\) but got "
     r"(torch|graphgrad).Size\(\[2\]\)."),
    (lambda mod, x: mod.vhp(lambda a: (a ** 3).sum(), x),
     r"The vector v can only be None if the input to the user-provided function is a single "
     r"Tensor with a single element."),
    (lambda mod, x: mod.hvp(lambda a: (a ** 3).sum(), x),
     r"The vector v can only be None if the input to the user-provided function is a single "
     r"Tensor with a single element."),
    (lambda mod, x: mod.jacobian(lambda a: x * 0 + 1, x, strict=True),
     r"Output 0 of the user-provided function does not require gradients. The outputs must be "
     r"computed in a differentiable manner from the input when running in strict mode."),
    (lambda mod, x: mod.vjp(lambda a: x * 2, x, x, strict=True),
     r"Output 0 of the user-provided function does not require gradients."),
    (lambda mod, x: mod.jvp(lambda a: x * 2, x, x, strict=True),
     r"Output 0 of the user-provided function does not require gradients."),
    (lambda mod, x: mod.vjp(lambda a, b: (a, b), (x, x), (x,)),
     r"v is a tuple of invalid length: should be 2 but got 1."),
    (lambda mod, x: mod.jvp(lambda a: a, x, (x, x)),
     r"The given v should contain a single Tensor."),
    (lambda mod, x: mod.vhp(lambda a, b: (a * b).sum(), (x, x), (x, x[:2])),
     r"Entry 1 in v has invalid size: should be (torch|graphgrad).Size\(\[3\]\) but got "
     r"(torch|graphgrad).Size\(\[2\]\)."),
    (lambda mod, x: mod.hessian(lambda a: (a.sum(), a.sum()), x),
     r"The function given to hessian should return a single Tensor"),
    (lambda mod, x: mod.vhp(lambda a: a.sum(), x, x, strict=True),
     r"While computing the hessian, found that the jacobian of the user-provided function with "
     r"respect to input 0 is independent of the input."),
    (lambda mod, x: mod.vjp(lambda a: a, x),
     r"The vector v can only be None if the user-provided function returns a single Tensor with "
     r"a single element."),
], ids=["hessian_non_scalar", "hvp_non_scalar", "vhp_non_scalar", "vjp_v_size", "jvp_v_size",
        "vhp_v_none", "hvp_v_none", "strict_jacobian_no_grad", "strict_vjp_no_grad",
        "strict_jvp_no_grad", "vjp_v_length", "jvp_v_not_single", "vhp_v_entry_size",
        "hessian_tuple_output", "strict_vhp_linear", "vjp_v_none"])
def test_functional_error_wording(call, message):
    (x,), (xt,) = both(np.ones(3))
    with pytest.raises(RuntimeError, match=message):
        call(TAF, xt)
    with pytest.raises(RuntimeError, match=message):
        call(GAF, x)


# ---- autograd.grad(is_grads_batched=True) --------------------------------------------

def _batched_grad_inputs(m):
    rng = rng_for("is_grads_batched")
    x = m.tensor(rng.standard_normal(3), requires_grad=True)
    w = m.tensor(rng.standard_normal((2, 3)), requires_grad=True)
    unused = m.tensor(rng.standard_normal(2), requires_grad=True)
    cts = (m.tensor(rng.standard_normal((4, 2))), m.tensor(rng.standard_normal((4,))))
    return x, w, unused, cts


@pytest.mark.parametrize("options", [{}, {"allow_unused": True}, {"materialize_grads": True},
                                     {"create_graph": True}])
def test_grad_is_grads_batched(options):
    results = []
    for m in (gg, torch):
        x, w, unused, cts = _batched_grad_inputs(m)
        outs = ((w @ x).tanh(), (x.sin() * x).sum())
        ins = (x, w, unused) if options.get("allow_unused") or options.get(
            "materialize_grads") else (x, w)
        grads = m.autograd.grad(outs, ins, cts, is_grads_batched=True, **options)
        if options.get("create_graph"):  # the batched gradients are differentiable again
            grads = grads + m.autograd.grad(sum(g.sin().sum() for g in grads), (x, w))
        results.append(grads)
    assert [g is None for g in results[0]] == [g is None for g in results[1]]
    close(*[tuple(g for g in r if g is not None) for r in results])


def test_grad_is_grads_batched_shape_error():
    msg = (r"If `is_grads_batched=True`, we interpret the first dimension of each grad_output "
           r"as the batch dimension\. The sizes of the remaining dimensions are expected to "
           r"match the shape of corresponding output, but a mismatch was detected: "
           r"grad_output\[0\] has a shape of")
    for m in (gg, torch):
        x = m.tensor(np.arange(3.0), requires_grad=True)
        with pytest.raises(RuntimeError, match=msg):
            m.autograd.grad(x.sin(), x, m.ones(4, 2, dtype=m.float64), is_grads_batched=True)
