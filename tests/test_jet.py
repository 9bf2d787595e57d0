"""Taylor mode (func.jet): every op's Taylor rule against nested reverse mode in graphgrad
and in PyTorch to order 4 (float64, hypothesis shapes with broadcasting and 0-d), closed
forms to order 10, jet's conventions, and jet composed with vmap and grad."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

import graphgrad as gg
from graphgrad import func, nn
from graphgrad.func.jet import jet_coefficients

ORDER = 4
DT = gg.float64


def _nested(lib, f, xs, vs, w, order):
    """[d^k/dt^k sum(w * f(x + t v)) at t = 0, k = 0..order] by nesting reverse mode."""
    t = lib.zeros((), dtype=lib.float64, requires_grad=True)
    y = f(*[x + t * v for x, v in zip(xs, vs, strict=True)])
    cur = (y * w).sum()
    out = [float(cur)]
    for _ in range(order):
        if not cur.requires_grad:
            out.append(0.0)
            cur = lib.zeros((), dtype=lib.float64, requires_grad=False)
            continue
        (g,) = lib.autograd.grad(cur, t, create_graph=True, allow_unused=True)
        cur = g if g is not None else lib.zeros((), dtype=lib.float64)
        out.append(float(cur))
    return out


def _jet_directional(f, xs, vs, w, order):
    series = tuple([v] + [gg.zeros_like(v)] * (order - 1) for v in vs)
    y, terms = func.jet(f, tuple(xs), series)
    # the same seed with symbolic zeros (None), the path taylor_derivatives takes
    _, lean = jet_coefficients(f, tuple(xs), tuple([v] + [None] * (order - 1) for v in vs),
                               order)
    for k, (t, c) in enumerate(zip(terms, lean[0], strict=True), start=1):
        c = gg.zeros_like(t) if c is None else c * math.factorial(k)
        np.testing.assert_allclose(t.detach().numpy(), c.detach().numpy(), rtol=1e-13,
                                   atol=1e-13)
    return [float((y * w).sum())] + [float((t * w).sum()) for t in terms]


def check(f_gg, f_torch, arrays, order=ORDER, seed=0):
    rng = np.random.default_rng(seed)
    dirs = [rng.standard_normal(a.shape) for a in arrays]
    xs = [gg.tensor(a, dtype=DT) for a in arrays]
    vs = [gg.tensor(d, dtype=DT) for d in dirs]
    out_shape = f_gg(*xs).shape
    w = rng.standard_normal(tuple(out_shape))
    got = _jet_directional(f_gg, xs, vs, gg.tensor(w, dtype=DT), order)
    want_gg = _nested(gg, f_gg, xs, vs, gg.tensor(w, dtype=DT), order)
    want_torch = _nested(torch, f_torch, [torch.tensor(a) for a in arrays],
                         [torch.tensor(d) for d in dirs], torch.tensor(w), order)
    np.testing.assert_allclose(got, want_torch, rtol=1e-8, atol=1e-9)
    np.testing.assert_allclose(got, want_gg, rtol=1e-8, atol=1e-9)


shapes = st.lists(st.integers(1, 3), min_size=0, max_size=3).map(tuple)
SETTINGS = settings(max_examples=8, deadline=None, derandomize=True)


def _positive(a):
    return np.abs(a) + 0.5


def _unit(a):
    """Inside (-0.8, 0.8): away from asin's and atanh's branch points, tan's poles."""
    return 0.8 * np.tanh(a)


def _off_kinks(a, at=0.0):
    d = a - at
    return at + np.sign(d + (d == 0)) * (np.abs(d) + 0.15)


def _array(shape, seed):
    return np.random.default_rng(seed).standard_normal(shape)


# functions of one tensor with the same name in both libraries: name -> input transform
SAME_NAME = {"exp": None, "log": _positive, "sin": None, "cos": None, "tanh": None,
             "sigmoid": None, "sqrt": _positive, "rsqrt": _positive,
             "reciprocal": _positive, "erf": None, "expm1": None, "log1p": _positive,
             "relu": _off_kinks, "abs": _off_kinks, "sinh": None, "cosh": None,
             "tan": _unit, "asin": _unit, "acos": _unit, "atan": None, "asinh": None,
             "acosh": lambda a: _positive(a) + 1.0, "atanh": _unit, "log2": _positive,
             "log10": _positive, "exp2": None}
# name: (graphgrad f, torch f, input transform)
UNARY = {name: (getattr(gg, name), getattr(torch, name), prep)
         for name, prep in SAME_NAME.items()}
UNARY.update({
    "softplus": (lambda x: nn.functional.softplus(x, beta=1.5),
                 lambda x: torch.nn.functional.softplus(x, beta=1.5), None),
    "pow3": (lambda x: x ** 3, lambda x: x ** 3, None),
    "pow2.5": (lambda x: x ** 2.5, lambda x: x ** 2.5, _positive),
    "rpow": (lambda x: 1.7 ** x, lambda x: 1.7 ** x, None),
    "neg": (lambda x: -x, lambda x: -x, None),
    "clamp": (lambda x: gg.clamp(x, -0.5, 0.5), lambda x: torch.clamp(x, -0.5, 0.5),
              lambda a: _off_kinks(_off_kinks(a, 0.5), -0.5)),
    "sign": (lambda x: gg.sign(x) * x, lambda x: torch.sign(x) * x, _off_kinks),
    "cast_clone": (lambda x: x.clone().to(gg.float64), lambda x: x.clone(), None),
    "gelu": (nn.functional.gelu, torch.nn.functional.gelu, None),
    "gelu_tanh": (lambda x: nn.functional.gelu(x, approximate="tanh"),
                  lambda x: torch.nn.functional.gelu(x, approximate="tanh"), None),
})


@pytest.mark.parametrize("name", sorted(UNARY))
@SETTINGS
@given(shape=shapes, seed=st.integers(0, 2 ** 16))
def test_unary_rules(name, shape, seed):
    f_gg, f_torch, prep = UNARY[name]
    a = _array(shape, seed)
    check(f_gg, f_torch, [prep(a) if prep else a], seed=seed)


def _broadcast_pair(shape, drop, ones):
    """A second shape that broadcasts against ``shape``: leading dims dropped, some 1s."""
    b = list(shape[drop:])
    for i in range(len(b)):
        if ones >> i & 1:
            b[i] = 1
    return tuple(b)


BINARY = {
    "add": (lambda a, b: a + b, lambda a, b: a + b, None),
    "sub": (lambda a, b: a - b, lambda a, b: a - b, None),
    "mul": (lambda a, b: a * b, lambda a, b: a * b, None),
    "div": (lambda a, b: a / b, lambda a, b: a / b, _positive),
    "pow": (lambda a, b: b ** a, lambda a, b: b ** a, _positive),
    "maximum": (gg.maximum, torch.maximum, None),
    "minimum": (gg.minimum, torch.minimum, None),
    "remainder": (lambda a, b: a % b, lambda a, b: a % b, lambda b: _positive(b) + 1.0),
    "fmod": (gg.fmod, torch.fmod, lambda b: _positive(b) + 1.0),
    "where": (lambda a, b: gg.where(gg.tensor(np.sign(a.detach().numpy()) > 0), a, b),
              lambda a, b: torch.where(torch.sign(a.detach()) > 0, a, b), None),
}


@pytest.mark.parametrize("name", sorted(BINARY))
@SETTINGS
@given(shape=shapes, drop=st.integers(0, 3), ones=st.integers(0, 7),
       seed=st.integers(0, 2 ** 16), swap=st.booleans())
def test_binary_rules_broadcasting(name, shape, drop, ones, swap, seed):
    f_gg, f_torch, prep_b = BINARY[name]
    sa, sb = shape, _broadcast_pair(shape, drop, ones)
    if swap:
        sa, sb = sb, sa
    a, b = _array(sa, seed), _array(sb, seed + 1)
    if name in ("maximum", "minimum"):
        b = b + 0.3  # no ties
    check(f_gg, f_torch, [a, prep_b(b) if prep_b else b], seed=seed)


@pytest.mark.parametrize("sa,sb", [((3, 4), (4, 2)), ((4,), (4, 2)), ((3, 4), (4,)),
                                   ((2, 3, 4), (4, 2)), ((4,), (4,))])
def test_matmul_rule(sa, sb):
    check(lambda a, b: a @ b, lambda a, b: a @ b, [_array(sa, 1), _array(sb, 2)])


def test_linear_rule_with_and_without_bias():
    x, w, b = _array((5, 3), 1), _array((4, 3), 2), _array((4,), 3)
    check(nn.functional.linear, torch.nn.functional.linear, [x, w, b])
    check(nn.functional.linear, torch.nn.functional.linear, [x, w])


REDUCTIONS = {
    "sum": (lambda x: x.sum(dim=-1), lambda x: x.sum(dim=-1)),
    "sum_all": (lambda x: x.sum(), lambda x: x.sum()),
    "mean": (lambda x: x.mean(dim=0, keepdim=True), lambda x: x.mean(dim=0, keepdim=True)),
    "softmax": (lambda x: x.softmax(dim=-1), lambda x: x.softmax(dim=-1)),
    "log_softmax": (lambda x: x.log_softmax(dim=0), lambda x: x.log_softmax(dim=0)),
    "logsumexp": (lambda x: x.logsumexp(dim=-1), lambda x: x.logsumexp(dim=-1)),
    "logsumexp_keep": (lambda x: x.logsumexp(dim=0, keepdim=True),
                       lambda x: x.logsumexp(dim=0, keepdim=True)),
    "cumsum": (lambda x: x.cumsum(0), lambda x: x.cumsum(0)),
    "reshape": (lambda x: x.reshape(-1), lambda x: x.reshape(-1)),
    "transpose": (lambda x: x.transpose(0, -1).exp(), lambda x: x.transpose(0, -1).exp()),
    "getitem": (lambda x: x[..., :1] * x[0], lambda x: x[..., :1] * x[0]),
    "cat": (lambda x: gg.cat([x, x.sin()], dim=0), lambda x: torch.cat([x, x.sin()], dim=0)),
    "stack": (lambda x: gg.stack([x, x * x], dim=-1),
              lambda x: torch.stack([x, x * x], dim=-1)),
    "tril": (lambda x: gg.tril(x.reshape(x.shape[0], -1)),
             lambda x: torch.tril(x.reshape(x.shape[0], -1))),
    "scatter_add": (lambda x: gg.zeros(4, dtype=DT).scatter_add(
        0, gg.tensor([0, 2, 2, 3][:x.shape[0]]), x.reshape(x.shape[0], -1)[:, 0]),
        lambda x: torch.zeros(4, dtype=torch.float64).scatter_add(
        0, torch.tensor([0, 2, 2, 3][:x.shape[0]]), x.reshape(x.shape[0], -1)[:, 0])),
    "expand": (lambda x: x.unsqueeze(0).expand(2, *x.shape).tanh(),
               lambda x: x.unsqueeze(0).expand(2, *x.shape).tanh()),
}


@pytest.mark.parametrize("name", sorted(REDUCTIONS))
@SETTINGS
@given(shape=st.lists(st.integers(1, 3), min_size=1, max_size=3).map(tuple),
       seed=st.integers(0, 2 ** 16))
def test_reduction_and_shape_rules(name, shape, seed):
    f_gg, f_torch = REDUCTIONS[name]
    check(lambda x: f_gg(x.exp()), lambda x: f_torch(x.exp()), [_array(shape, seed)],
          seed=seed)


# ---- closed forms to order 10 -----------------------------------------------------------

X0 = 0.37


def _derivatives(f, order=10):
    return [float(t) for t in func.taylor_derivatives(f, gg.tensor(X0, dtype=DT), 1.0, order)]


def test_sin_exp_closed_form():
    got = _derivatives(lambda x: x.sin() * x.exp())
    want = [2 ** (k / 2) * math.exp(X0) * math.sin(X0 + k * math.pi / 4) for k in range(11)]
    np.testing.assert_allclose(got, want, rtol=1e-12)


def test_lorentzian_closed_form():
    # d^n/dx^n 1/(1+x^2) = (-1)^n n! sin((n+1) acot x) / (1+x^2)^((n+1)/2)
    got = _derivatives(lambda x: 1 / (1 + x * x))
    theta = math.atan2(1.0, X0)
    want = [(-1) ** n * math.factorial(n) * math.sin((n + 1) * theta)
            / (1 + X0 * X0) ** ((n + 1) / 2) for n in range(11)]
    np.testing.assert_allclose(got, want, rtol=1e-11)


def test_tanh_closed_form():
    # d/dx P(tanh x) = P'(T) (1 - T^2): exact integer polynomials in T = tanh x
    poly = np.polynomial.Polynomial([0, 1])
    one_minus_t2 = np.polynomial.Polynomial([1, 0, -1])
    want = []
    for _ in range(11):
        want.append(poly(math.tanh(X0)))
        poly = poly.deriv() * one_minus_t2
    np.testing.assert_allclose(_derivatives(lambda x: x.tanh()), want, rtol=1e-11, atol=1e-12)


def test_exp_sin_closed_form():
    sympy = pytest.importorskip("sympy")
    s = sympy.Symbol("s")
    expr = sympy.exp(sympy.sin(s))
    want = [float(sympy.diff(expr, s, k).subs(s, sympy.Rational(37, 100)).evalf(30))
            for k in range(11)]
    np.testing.assert_allclose(_derivatives(lambda x: x.sin().exp()), want, rtol=1e-11)


# ---- jet's API and conventions --------------------------------------------------------

def test_factorial_scaling():
    x = gg.tensor([0.3, -0.8], dtype=DT)
    v, u = gg.tensor([1.0, 2.0], dtype=DT), gg.tensor([0.5, -1.0], dtype=DT)
    _, deriv = func.jet(gg.exp, (x,), ([v, u],))
    _, coeff = func.jet(gg.exp, (x,), ([v, u / 2],), factorial_scaled=False)
    np.testing.assert_allclose(deriv[0].numpy(), coeff[0].numpy())
    np.testing.assert_allclose(deriv[1].numpy(), 2 * coeff[1].numpy())
    # y(t) = exp(x + v t + u t^2 / 2): y'' = (v^2 + u) exp(x)
    np.testing.assert_allclose(deriv[1].numpy(), ((v * v + u) * x.exp()).numpy())


def test_jet_on_module_and_pytree_output():
    gg.manual_seed(0)
    net = nn.Sequential(nn.Linear(3, 5), nn.Tanh(), nn.Linear(5, 2)).to(DT)
    x, v = gg.randn(4, 3, dtype=DT), gg.randn(4, 3, dtype=DT)
    derivs = func.taylor_derivatives(net, x, v, 3)
    torch_net = torch.nn.Sequential(torch.nn.Linear(3, 5), torch.nn.Tanh(),
                                    torch.nn.Linear(5, 2)).double()
    torch_net.load_state_dict({k: torch.tensor(p.detach().numpy())
                               for k, p in net.state_dict().items()})
    w = np.random.default_rng(0).standard_normal((4, 2))
    want = _nested(torch, torch_net, [torch.tensor(x.numpy())], [torch.tensor(v.numpy())],
                   torch.tensor(w), 3)
    np.testing.assert_allclose([float((d * gg.tensor(w)).sum()) for d in derivs], want,
                               rtol=1e-10)
    out, series = func.jet(lambda a: (a.sin(), {"c": a.cos()}), (x,), ([v, v],))
    assert isinstance(series, tuple) and set(series[1]) == {"c"}
    np.testing.assert_allclose(series[0][0].numpy(), (x.cos() * v).numpy())


def test_op_without_rule_names_it():
    from graphgrad.ops import Op

    class _Cube(Op):  # an op without a Taylor rule (the leading _ keeps it unregistered)
        @staticmethod
        def forward(a):
            return a ** 3

        @staticmethod
        def vjp(g, out, a):
            return (g * 3 * a * a,)
    x = gg.tensor([1.0, 2.0], dtype=DT)
    with pytest.raises(NotImplementedError, match="the op _Cube has no Taylor rule"):
        func.jet(lambda a: _Cube.apply(a), (x,), ([x],))


def test_kink_conventions_follow_the_jvp():
    """At a kink the series is the vjp/jvp's (PyTorch's) choice, documented in jet: 0 for
    relu and abs at 0 (JAX: x_k / 2 and +x_k), ties of maximum and amax averaged (as
    JAX), x_k on a clamp's bound (PyTorch's inclusive mask)."""
    x = gg.tensor([0.0, 0.0, 1.0], dtype=DT)
    v = gg.tensor([1.0, -2.0, 3.0], dtype=DT)

    def first(f, a=x):
        return func.taylor_derivatives(f, a, v, 2)[1].numpy()
    np.testing.assert_array_equal(first(gg.relu), [0.0, 0.0, 3.0])
    np.testing.assert_array_equal(first(gg.abs), [0.0, 0.0, 3.0])
    np.testing.assert_array_equal(first(lambda a: gg.clamp(a, 0.0, 0.5)), [1.0, -2.0, 0.0])
    np.testing.assert_array_equal(first(lambda a: gg.maximum(a, gg.zeros(3, dtype=DT))),
                                  [0.5, -1.0, 3.0])  # JAX relu = max(x, 0) gives this
    tie = gg.tensor([2.0, 2.0, 1.0], dtype=DT)
    np.testing.assert_array_equal(first(lambda a: a.amax(), tie), -0.5)
    # each first coefficient is the jvp
    for f in (gg.relu, gg.abs, lambda a: gg.clamp(a, 0.0, 1.0)):
        np.testing.assert_array_equal(first(f), func.jvp(f, (x,), (v,))[1].numpy())


def test_constant_output_and_symbolic_zero_terms():
    x = gg.tensor(0.5, dtype=DT)
    _, series = func.jet(lambda a: gg.ones(()) * 3.0, (x,), ([x, x],))
    assert [float(t) for t in series] == [0.0, 0.0]


def test_jet_under_vmap_matches_per_point():
    xs = gg.randn(5, 3, dtype=DT)
    v = gg.tensor([1.0, 0.5, -1.0], dtype=DT)

    def f(x):
        return (x.sin() * x.tanh()).sum()

    def third(x):
        return func.taylor_derivatives(f, x, v, 3)[3]

    batched = func.vmap(third)(xs)
    each = [float(third(xs[i])) for i in range(5)]
    np.testing.assert_allclose(batched.numpy(), each, rtol=1e-12)


def test_grad_of_a_jet_coefficient_wrt_parameters():
    """What training a PINN needs: d/dW of a second derivative computed by jet."""
    rng = np.random.default_rng(3)
    w0, x0 = rng.standard_normal((4, 2)), rng.standard_normal((6, 2))
    v0 = rng.standard_normal((6, 2))
    w = gg.tensor(w0, requires_grad=True)
    second = func.taylor_derivatives(lambda x: (x @ w.T).tanh().sum(), gg.tensor(x0),
                                     gg.tensor(v0), 2)[2]
    (gw,) = gg.autograd.grad(second, w)
    tw = torch.tensor(w0, requires_grad=True)
    x, v = torch.tensor(x0), torch.tensor(v0)
    t = torch.zeros((), dtype=torch.float64, requires_grad=True)
    y = ((x + t * v) @ tw.T).tanh().sum()
    (d1,) = torch.autograd.grad(y, t, create_graph=True)
    (d2,) = torch.autograd.grad(d1, t, create_graph=True)
    (want,) = torch.autograd.grad(d2, tw)
    np.testing.assert_allclose(float(second), float(d2), rtol=1e-12)
    np.testing.assert_allclose(gw.numpy(), want.numpy(), rtol=1e-10)


def test_cli_demo_shows_nesting_and_jet(capsys):
    from graphgrad.cli import main
    assert main(["demo", "--order", "8"]) == 0
    out = capsys.readouterr().out
    assert "nested grad" in out and "jet" in out and "closed form" in out
    assert len([ln for ln in out.splitlines() if ln.strip()[:1].isdigit()]) == 8


def test_jvp_of_a_jet_coefficient():
    """Forward mode over Taylor mode: the tangent of the 4th directional derivative."""
    v = gg.tensor([1.0, -0.5, 2.0], dtype=DT)

    def fourth(x):
        return func.taylor_derivatives(lambda t: (t.sin() * t.tanh()).sum(), x, v, 4)[4]
    x0, u0 = np.array([0.3, -0.2, 0.9]), np.array([0.7, 0.1, -0.4])
    _, tangent = func.jvp(fourth, (gg.tensor(x0),), (gg.tensor(u0),))
    # torch: the 4th derivative along v by nesting, then its directional derivative along u
    x, u, tv = torch.tensor(x0, requires_grad=True), torch.tensor(u0), torch.tensor(v.numpy())
    t = torch.zeros((), dtype=torch.float64, requires_grad=True)
    y = ((x + t * tv).sin() * (x + t * tv).tanh()).sum()
    for _ in range(4):
        (y,) = torch.autograd.grad(y, t, create_graph=True)
    (gx,) = torch.autograd.grad(y, x)
    np.testing.assert_allclose(float(tangent), float((gx * u).sum()), rtol=1e-10)


def test_jet_and_laplacian_inside_compile():
    """graphgrad.compile runs them correctly; dynamo's policy runs graphgrad.func eagerly,
    so they are a graph break, not captured (graphgrad/dynamo/policy.py)."""
    def f(x):
        return func.taylor_derivatives(lambda t: t.sin() * t.tanh(), x, gg.ones_like(x), 4)[4]

    def g(x):
        return func.laplacian(lambda p: (p.sin() * p.tanh()).sum(-1))(x)
    x, xb = gg.randn(5, dtype=DT), gg.randn(4, 3, dtype=DT)
    np.testing.assert_allclose(gg.compile(f)(x).numpy(), f(x).numpy(), rtol=1e-14)
    np.testing.assert_allclose(gg.compile(g)(xb).numpy(), g(xb).numpy(), rtol=1e-14)
