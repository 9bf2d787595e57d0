"""``graphgrad.func`` (grad, grad_and_value, vjp, jvp, linearize, jacrev, jacfwd, hessian,
hvp, vmap) against ``torch.func`` on random float64 inputs: results, pytrees, argnums,
has_aux, in_dims/out_dims/chunk_size, nesting to depth 3, which results require grad,
the misuse errors in PyTorch's wording, and a per-op jvp/vmap sweep driven by the op
registry (cases in ``jvp_vmap_cases.py``)."""

from __future__ import annotations

import re
import warnings
import zlib

import numpy as np
import pytest
import torch
import torch.func as TF
from hypothesis import HealthCheck, Phase, given, settings
from hypothesis import strategies as st
from jvp_vmap_cases import CASES, TORCH

import graphgrad as gg
from graphgrad import func as F
from graphgrad.ops import REGISTRY
from graphgrad.tensor import Mode, dispatch, pop_mode, push_mode

SETTINGS = settings(max_examples=15, deadline=None)

# ---- helpers -------------------------------------------------------------------------


def rng_for(name: str) -> np.random.Generator:
    return np.random.default_rng(zlib.crc32(name.encode()))


def G(a):
    return gg.tensor(np.asarray(a))


def T(a):
    return torch.tensor(np.asarray(a))


def both(*arrays):
    """The same arrays as graphgrad and as torch tensors."""
    return [G(a) for a in arrays], [T(a) for a in arrays]


def _flatten(tree, path="") -> tuple[list, list]:
    """Leaves and a description of the containers (namedtuples and torch's structseqs
    count as tuples)."""
    if isinstance(tree, dict):
        leaves, shape = [], [("dict", tuple(tree))]
        for k in tree:
            sub, sub_shape = _flatten(tree[k], f"{path}[{k!r}]")
            leaves += sub
            shape += sub_shape
        return leaves, shape
    if isinstance(tree, (tuple, list)):
        kind = "list" if isinstance(tree, list) else "tuple"
        leaves, shape = [], [(kind, len(tree))]
        for i, c in enumerate(tree):
            sub, sub_shape = _flatten(c, f"{path}[{i}]")
            leaves += sub
            shape += sub_shape
        return leaves, shape
    return [(path, tree)], [("leaf",)]


def dtype_name(t) -> str:
    return str(t.dtype).split(".")[-1]


def close(g, t, rtol=1e-9, atol=1e-11):
    """graphgrad pytree ``g`` equals torch pytree ``t``: same containers, and leaves of
    the same shape, dtype and values."""
    gl, gs = _flatten(g)
    tl, ts = _flatten(t)
    assert gs == ts, (gs, ts)
    for (path, a), (_, b) in zip(gl, tl, strict=True):
        assert isinstance(a, gg.Tensor), (path, type(a))
        assert tuple(a.shape) == tuple(b.shape), (path, a.shape, b.shape)
        assert dtype_name(a) == dtype_name(b), (path, a.dtype, b.dtype)
        np.testing.assert_allclose(a.detach().numpy(), b.detach().numpy(), rtol=rtol,
                                   atol=atol, equal_nan=True, err_msg=path)


def const(like, array):
    """``array`` as a constant of ``like``'s framework (for functions shared by both)."""
    return G(array) if isinstance(like, gg.Tensor) else T(array)


def no_grad_tree(tree) -> bool:
    return all(not leaf.requires_grad for _, leaf in _flatten(tree)[0])


# ---- grad and grad_and_value ---------------------------------------------------------

SCALAR_FNS = {
    "sin_sum": lambda m, x: m.sin(x).sum(),
    "quadratic": lambda m, x: (x * x.flip(0)).sum() + (x ** 3).mean(),
    "logsumexp": lambda m, x: m.logsumexp(x * 2, dim=0),
    "softmax_ce": lambda m, x: -m.log_softmax(x, dim=0)[1],
    "tanh_norm": lambda m, x: m.tanh(x).norm() * m.sigmoid(x).prod(),
}


@pytest.mark.parametrize("name", SCALAR_FNS)
def test_grad_matches_torch(name):
    fn = SCALAR_FNS[name]
    (x,), (xt,) = both(rng_for(name).standard_normal(5))
    close(F.grad(lambda a: fn(gg, a))(x), TF.grad(lambda a: fn(TORCH, a))(xt))
    g, v = F.grad_and_value(lambda a: fn(gg, a))(x)
    gt, vt = TF.grad_and_value(lambda a: fn(TORCH, a))(xt)
    close(g, gt)
    close(v, vt)


@SETTINGS
@given(shape=st.lists(st.integers(1, 4), min_size=0, max_size=3), seed=st.integers(0, 99))
def test_grad_any_shape(shape, seed):
    rng = np.random.default_rng(seed)
    (x, w), (xt, wt) = both(rng.standard_normal(shape), rng.standard_normal(shape))
    f = lambda a, b: (a.tanh() ** 2 * b).sum() + (a * b).exp().mean()  # noqa: E731
    close(F.grad(f, argnums=(0, 1))(x, w), TF.grad(f, argnums=(0, 1))(xt, wt))


def three_args():
    rng = rng_for("three")
    return both(rng.standard_normal(3), rng.standard_normal((2, 3)), rng.standard_normal(2))


def f3(a, b, c):
    return ((b @ a.sin()) * c).sum() + (a * a).sum() * c.prod()


@pytest.mark.parametrize("argnums", [0, 1, 2, -1, -3, (0, 2), (2, 0), (-1, 1), (0, 1, 2)])
def test_grad_argnums(argnums):
    gs, ts = three_args()
    close(F.grad(f3, argnums=argnums)(*gs), TF.grad(f3, argnums=argnums)(*ts))
    r, v = F.grad_and_value(f3, argnums=argnums)(*gs)
    rt, vt = TF.grad_and_value(f3, argnums=argnums)(*ts)
    close((r, v), (rt, vt))


def test_grad_pytree_arguments():
    rng = rng_for("tree")
    arrays = [rng.standard_normal(s) for s in [(3,), (2, 3), (2,), (3,)]]

    def params(m):
        return {"w": m.tensor(arrays[0]), "layers": [m.tensor(arrays[1]), (m.tensor(arrays[2]),)]}

    def f(p, x):
        return ((p["layers"][0] @ (p["w"] * x)).tanh() * p["layers"][1][0]).sum()

    x, xt = G(arrays[3]), T(arrays[3])
    close(F.grad(f)(params(gg), x), TF.grad(f)(params(torch), xt))
    close(F.grad(f, argnums=(1, 0))(params(gg), x), TF.grad(f, argnums=(1, 0))(params(torch), xt))


def test_grad_has_aux():
    (x,), (xt,) = both(rng_for("aux").standard_normal(4))

    def f(a):
        y = a.sin()
        return y.sum(), {"y": y, "n": [a.cos()]}

    g, aux = F.grad(f, has_aux=True)(x)
    gt, auxt = TF.grad(f, has_aux=True)(xt)
    close((g, aux), (gt, auxt))
    (g, (v, aux)) = F.grad_and_value(f, has_aux=True)(x)
    (gt, (vt, auxt)) = TF.grad_and_value(f, has_aux=True)(xt)
    close((g, v, aux), (gt, vt, auxt))


def test_grad_unused_input_is_zeros():
    gs, ts = three_args()
    f = lambda a, b, c: (a * 2).sum()  # noqa: E731
    r = F.grad(f, argnums=(0, 1, 2))(*gs)
    close(r, TF.grad(f, argnums=(0, 1, 2))(*ts))
    assert not r[1].numpy().any()


def test_grad_output_independent_of_input():
    (x,), (xt,) = both(np.ones(3))
    close(F.grad(lambda a: gg.tensor(2.0, dtype=gg.float64))(x),
          TF.grad(lambda a: torch.tensor(2.0, dtype=torch.float64))(xt))


def test_grad_kwargs_are_not_differentiated():
    (x, s), (xt, st_) = both(np.arange(3.0), np.array(2.0))
    f = lambda a, *, scale: (a * scale).sum()  # noqa: E731
    close(F.grad(f)(x, scale=s), TF.grad(f)(xt, scale=st_))


def test_grad_ignores_enclosing_no_grad():
    (x,), (xt,) = both(np.arange(3.0))
    with gg.no_grad():
        g = F.grad(lambda a: (a ** 2).sum())(x)
    with torch.no_grad():
        gt = TF.grad(lambda a: (a ** 2).sum())(xt)
    close(g, gt)


@pytest.mark.parametrize("bad, message", [
    (lambda a: a * 2, r"grad_and_value\(f\)\(\*args\): Expected f\(\*args\) to return a scalar "
                      r"Tensor, got tensor with 1 dims. Maybe you wanted to use the vjp or "
                      r"jacrev APIs instead\?"),
    (lambda a: a.sum().reshape(1), r"Expected f\(\*args\) to return a scalar Tensor, got "
                                   r"tensor with 1 dims"),
    (lambda a: 3.0, r"grad_and_value\(f\)\(\*args\): Expected f\(\*args\) to return a Tensor, "
                    r"got <class 'float'>"),
], ids=["vector_output", "shape_1_output", "float_output"])
def test_grad_output_errors(bad, message):
    (x,), (xt,) = both(np.ones(3))
    with pytest.raises(RuntimeError, match=message):
        TF.grad(bad)(xt)
    with pytest.raises(RuntimeError, match=message):
        F.grad(bad)(x)


def test_grad_has_aux_misuse():
    (x,), (xt,) = both(np.ones(3))
    msg = (r"grad_and_value\(f\)\(\*args\): output of function f should be a tuple: "
           r"\(output, aux\) if has_aux is True")
    for grad, a in [(TF.grad, xt), (F.grad, x)]:
        with pytest.raises(RuntimeError, match=msg):
            grad(lambda v: v.sum(), has_aux=True)(a)


@pytest.mark.parametrize("argnums, message", [
    (3, r"Got argnum=3, but only 3 positional inputs"),
    (-4, r"Got argnum=-4, but only 3 positional inputs"),
    ((), r"argnums must be non-empty"),
    ((0, 0), r"argnums elements must be unique, got \(0, 0\)"),
    ((0, -3), r"argnums elements must be unique, got"),  # torch shows them normalized
    ((0, 1.0), r"argnum must be int, got: <class 'float'>"),
    ([0, 1], r"argnums must be int or Tuple\[int, \.\.\.\], got: <class 'list'>"),
    (1.5, r"argnums must be int or Tuple\[int, \.\.\.\], got: <class 'float'>"),
])
def test_argnums_errors(argnums, message):
    gs, ts = three_args()
    for mod, args in [(TF, ts), (F, gs)]:
        for transform in (mod.grad, mod.jacrev, mod.jacfwd):
            with pytest.raises(RuntimeError, match=message):
                transform(f3, argnums=argnums)(*args)


def test_non_tensor_argument_error():
    msg = r"Thing passed to transform API must be Tensor, got <class 'float'>"
    with pytest.raises(ValueError, match=msg):
        TF.grad(lambda a: a * 2)(3.0)
    with pytest.raises(ValueError, match=msg):
        F.grad(lambda a: a * 2)(3.0)


# ---- vjp -----------------------------------------------------------------------------


def test_vjp_multiple_primals_and_pytree_output():
    gs, ts = three_args()

    def f(a, b, c):
        return {"lin": b @ a, "pair": [(a * c.sum()).sin(), (b * c[:, None]).exp().sum()]}

    out, fn = F.vjp(f, *gs)
    outt, fnt = TF.vjp(f, *ts)
    close(out, outt)
    rng = rng_for("vjp_ct")
    cts = [rng.standard_normal(s) for s in [(2,), (3,), ()]]

    def cot(m):
        return {"lin": m.tensor(cts[0]), "pair": [m.tensor(cts[1]), m.tensor(cts[2])]}

    res = fn(cot(gg))
    close(res, fnt(cot(torch)))
    assert isinstance(res, tuple) and len(res) == 3
    close(fn(cot(gg)), res)  # the vjp function can be called again


def test_vjp_has_aux():
    (x,), (xt,) = both(rng_for("vjp_aux").standard_normal(3))
    f = lambda a: (a.sin(), {"c": a.cos()})  # noqa: E731
    out, fn, aux = F.vjp(f, x, has_aux=True)
    outt, fnt, auxt = TF.vjp(f, xt, has_aux=True)
    close((out, aux), (outt, auxt))
    close(fn(G(np.ones(3))), fnt(T(np.ones(3))))


def test_vjp_errors():
    (x,), (xt,) = both(np.ones(3))
    for mod, a in [(TF, xt), (F, x)]:
        _, fn = mod.vjp(lambda v: v * 2, a)
        with pytest.raises(RuntimeError, match="Expected pytree structure of cotangents to be "
                                               "the same as pytree structure of outputs to the "
                                               "function"):
            fn((a, a))
        with pytest.raises(RuntimeError, match=r"vjp\(f, \.\.\.\): All outputs of f must be "
                                               r"floating-point or complex Tensors, got Tensor "
                                               r"with dtype \w+\.bool"):
            mod.vjp(lambda v: v > 0, a)
        with pytest.raises(RuntimeError, match=r"vjp\(f, \*primals\): Expected f to be a "
                                               r"function that has non-empty output"):
            mod.vjp(lambda v: (), a)
        with pytest.raises(RuntimeError, match=r"vjp\(f, \*primals\): output of function f "
                                               r"should be a tuple: \(output, aux\) if has_aux"):
            mod.vjp(lambda v: v, a, has_aux=True)


# ---- jvp and linearize ---------------------------------------------------------------


def test_jvp_multiple_primals_pytrees():
    gs, ts = three_args()
    rng = rng_for("jvp_t")
    tangents = [rng.standard_normal(tuple(t.shape)) for t in ts]

    def f(p, c):
        a, b = p["a"], p["b"]
        return (b @ a.sin()) * c, {"s": (a * c.sum()).exp()}

    out, tan = F.jvp(f, ({"a": gs[0], "b": gs[1]}, gs[2]),
                     ({"a": G(tangents[0]), "b": G(tangents[1])}, G(tangents[2])))
    outt, tant = TF.jvp(f, ({"a": ts[0], "b": ts[1]}, ts[2]),
                        ({"a": T(tangents[0]), "b": T(tangents[1])}, T(tangents[2])))
    close((out, tan), (outt, tant))


def test_jvp_has_aux_and_independent_output():
    (x, v), (xt, vt) = both(*rng_for("jvp_aux").standard_normal((2, 3)))
    f = lambda a: ((a.sin(), a * 0 + const(a, np.arange(3.0))), a.cos())  # noqa: E731
    res = F.jvp(f, (x,), (v,), has_aux=True)
    rest = TF.jvp(f, (xt,), (vt,), has_aux=True)
    close(res, rest)
    # an output that does not depend on the input gets a zero tangent
    close(F.jvp(lambda a: G(np.ones(2)), (x,), (v,)), TF.jvp(lambda a: T(np.ones(2)), (xt,), (vt,)))


@pytest.mark.parametrize("call, message", [
    (lambda mod, x: mod.jvp(lambda a: a, [x], [x]),
     r"jvp\(f, primals, tangents\): Expected primals to be a tuple. E.g. it should be valid to "
     r"call f\(\*primals\)."),
    (lambda mod, x: mod.jvp(lambda a, b: a, (x, x), (x,)),
     r"jvp\(f, primals, tangents\): Expected primals and tangents to have the same python "
     r"structure. For example, if primals is a tuple of 3 tensors, tangents also must be. Got "
     r"primals with structure"),
    (lambda mod, x: mod.jvp(lambda: x, (), ()),
     r"jvp\(f, primals, tangents\): Expected primals to contain at least one Tensor."),
    (lambda mod, x: mod.jvp(lambda a: a, (x,), (1.0,)),
     r"jvp\(f, primals, tangents\): Expected tangents to only contain Tensors, got "
     r"<class 'float'>"),
    (lambda mod, x: mod.jvp(lambda a: x * 2, (x,), (x,), strict=True),
     r"jvp\(f, primals, tangents, strict=True\): The output of f is independent of the inputs. "
     r"This is not allowed with strict=True."),
    (lambda mod, x: mod.jvp(lambda a: 3.0, (x,), (x,)),
     r"jvp\(f, primals, tangents\): expected f\(\*(args|primals)\) to return only tensors, got "
     r"unsupported type <class 'float'>"),
    (lambda mod, x: mod.jvp(lambda a: a, (x,), (x,), has_aux=True),
     r"jvp\(f, primals, tangents\): output of function f should be a tuple: \(output, aux\) if "
     r"has_aux is True"),
    (lambda mod, x: mod.jvp(lambda a: a, (x,), (x[:2],)),
     r"Trying to set a forward gradient that has a different size than that of the original "
     r"Tensor, this is not supported. Tensor is of size \[3\] while the given forward gradient "
     r"is of size \[2\]."),
], ids=["primals_not_tuple", "structure_mismatch", "no_primals", "non_tensor_tangent",
        "strict_independent", "non_tensor_output", "has_aux_not_tuple", "tangent_size"])
def test_jvp_errors(call, message):
    (x,), (xt,) = both(np.ones(3))
    with pytest.raises(RuntimeError, match=message):
        call(TF, xt)
    with pytest.raises(RuntimeError, match=message):
        call(F, x)


def test_jvp_tangents_must_match_primals_structure():
    (x,), (xt,) = both(np.ones(3))
    msg = r"Expected primals and tangents to have the same python structure"
    with pytest.raises(RuntimeError, match=msg):
        TF.jvp(lambda a: a, (xt,), xt)
    with pytest.raises(RuntimeError, match=msg):
        F.jvp(lambda a: a, (x,), x)


def test_linearize_matches_torch():
    rng = rng_for("linearize")
    (x, u, w), (xt, ut, wt) = both(*rng.standard_normal((3, 4)))
    f = lambda a: (a.sin() * a.sum(), a.exp().cumsum(0))  # noqa: E731
    out, fn = F.linearize(f, x)
    with warnings.catch_warnings():  # torch's linearize traces with make_fx, which warns
        warnings.simplefilter("ignore")
        outt, fnt = TF.linearize(f, xt)
    close(out, outt)
    close(fn(u), fnt(ut))
    close(fn(w), fnt(wt))
    assert no_grad_tree(out) and no_grad_tree(fn(u))


# ---- jacrev, jacfwd, hessian, hvp ----------------------------------------------------

JAC_FNS = {
    "vec_to_vec": (lambda a: a.sin() * a.sum(), [(4,)]),
    "mat_to_vec": (lambda a: (a.exp() @ a[0]).tanh(), [(3, 3)]),
    "vec_to_scalar": (lambda a: (a ** 2).sum().sqrt(), [(5,)]),
    "scalar_to_mat": (lambda a: a * const(a, np.arange(6.0).reshape(2, 3)), [()]),
    "two_in_two_out": (lambda a, b: ((a[:, None] * b).sin(), (a.sum() * b).exp()),
                       [(2,), (2, 3)]),
}


@pytest.mark.parametrize("name", JAC_FNS)
def test_jacobians_match_torch(name):
    fn, shapes = JAC_FNS[name]
    rng = rng_for(name)
    gs, ts = both(*[rng.standard_normal(s) for s in shapes])
    argnums = tuple(range(len(gs))) if len(gs) > 1 else 0
    ref = TF.jacrev(fn, argnums=argnums)(*ts)
    close(F.jacrev(fn, argnums=argnums)(*gs), ref)
    close(F.jacfwd(fn, argnums=argnums)(*gs), ref)
    close(F.jacrev(fn, argnums=argnums, chunk_size=1)(*gs), ref)
    close(F.jacrev(fn, argnums=argnums, chunk_size=2)(*gs), ref)


@SETTINGS
@given(n=st.integers(1, 4), m=st.integers(1, 4), k=st.integers(1, 3), seed=st.integers(0, 99),
       chunk=st.one_of(st.none(), st.integers(1, 5)))
def test_jacobians_any_shape(n, m, k, seed, chunk):
    rng = np.random.default_rng(seed)
    (a, b), (at, bt) = both(rng.standard_normal((m, n)), rng.standard_normal((n, k)))
    f = lambda x, y: ((x @ y).tanh(), (x.sum(0) * y.sum(1)).sin())  # noqa: E731
    ref = TF.jacrev(f, argnums=(0, 1))(at, bt)
    close(F.jacrev(f, argnums=(0, 1), chunk_size=chunk)(a, b), ref)
    close(F.jacfwd(f, argnums=(0, 1))(a, b), ref)


def test_jacobian_pytrees_in_and_out():
    rng = rng_for("jac_tree")
    arrays = [rng.standard_normal(s) for s in [(3,), (2, 3), (3,)]]

    def p(m):
        return {"w": m.tensor(arrays[0]), "b": [m.tensor(arrays[1])]}

    def h(q, x):
        return {"o": (q["b"][0] @ (q["w"] * x)).tanh(), "l": [q["w"].sin(), x.sum()]}

    x, xt = G(arrays[2]), T(arrays[2])
    for argnums in [0, 1, (1, 0)]:
        ref = TF.jacrev(h, argnums=argnums)(p(torch), xt)
        close(F.jacrev(h, argnums=argnums)(p(gg), x), ref)
        close(F.jacfwd(h, argnums=argnums)(p(gg), x), ref)


def test_jacrev_has_aux():
    (x,), (xt,) = both(rng_for("jr_aux").standard_normal(3))
    f = lambda a: (a.sin() * a.sum(), {"c": a.cos()})  # noqa: E731
    close(F.jacrev(f, has_aux=True)(x), TF.jacrev(f, has_aux=True)(xt))


def test_jacfwd_has_aux():
    (x,), (xt,) = both(rng_for("jf_aux").standard_normal(3))
    f = lambda a: (a.sin() * a.sum(), {"c": a.cos()})  # noqa: E731
    close(F.jacfwd(f, has_aux=True)(x), TF.jacfwd(f, has_aux=True)(xt))


def test_jac_misuse_errors():
    (x,), (xt,) = both(np.ones(3))
    for mod, a in [(TF, xt), (F, x)]:
        with pytest.raises(ValueError, match="jacrev: `chunk_size` should be greater than 0."):
            mod.jacrev(lambda v: v, chunk_size=0)(a)
        for jac in (mod.jacrev, mod.jacfwd):
            with pytest.raises(RuntimeError, match=r"output of function f should be a tuple: "
                                                   r"\(output, aux\) if has_aux is True"):
                jac(lambda v: v, has_aux=True)(a)


@pytest.mark.parametrize("argnums", [0, 1, (0, 1), (1, 0)])
def test_hessian_argnums(argnums):
    rng = rng_for(f"hess{argnums}")
    (a, b), (at, bt) = both(rng.standard_normal(3), rng.standard_normal(3))
    f = lambda x, y: ((x * y).sin().sum() * (x ** 2).sum() + (y.exp() * x).sum())  # noqa: E731
    H = F.hessian(f, argnums=argnums)(a, b)
    close(H, TF.hessian(f, argnums=argnums)(at, bt))
    assert no_grad_tree(H)


def test_hvp_is_hessian_times_vector():
    rng = rng_for("hvp")
    (x, y, u, v), (xt, yt, ut, vt) = both(*rng.standard_normal((4, 3)))
    f = lambda a, b: (a.sin() * b).sum() * (a * b).sum()  # noqa: E731
    res = F.hvp(f, (x, y), (u, v))
    ref = TF.jvp(TF.grad(f, argnums=(0, 1)), (xt, yt), (ut, vt))[1]
    close(res, ref)
    H = TF.hessian(f, argnums=(0, 1))(xt, yt)
    close(res[0], H[0][0] @ ut + H[0][1] @ vt)


# ---- vmap ----------------------------------------------------------------------------


def test_vmap_in_dims_variants():
    rng = rng_for("in_dims")
    A, B, C = rng.standard_normal((5, 2, 3)), rng.standard_normal((3, 4, 5)), \
        rng.standard_normal((2, 4))
    f = lambda p, q: p[0] @ p[1] + q  # noqa: E731
    (a, b, c), (at, bt, ct) = both(A, B, C)
    for dims in [((0, -1), None), ((0, 2), None), ((-3, -1), None)]:
        close(F.vmap(f, in_dims=dims)((a, b), c), TF.vmap(f, in_dims=dims)((at, bt), ct))
    # a dict in_dims for a dict argument, a scalar argument unmapped
    g = lambda d, s: d["x"] * d["y"] * s  # noqa: E731
    (x, y), (xt, yt) = both(rng.standard_normal((2, 3)), rng.standard_normal((3, 2)))
    close(F.vmap(g, in_dims=({"x": 0, "y": 1}, None))({"x": x, "y": y}, 2.0),
          TF.vmap(g, in_dims=({"x": 0, "y": 1}, None))({"x": xt, "y": yt}, 2.0))


def test_vmap_kwargs_are_not_mapped():
    (x, k), (xt, kt) = both(np.arange(6.0).reshape(2, 3), np.arange(3.0))
    f = lambda a, scale=1: a * scale  # noqa: E731
    close(F.vmap(f)(x, scale=k), TF.vmap(f)(xt, scale=kt))


@pytest.mark.parametrize("out_dims", [0, 1, -1, (0, 1), (1, -1), (2, 0)])
def test_vmap_out_dims(out_dims):
    (x,), (xt,) = both(rng_for("out_dims").standard_normal((5, 3, 4)))
    f = lambda a: (a.sin(), a.sum(0))  # noqa: E731
    close(F.vmap(f, out_dims=out_dims)(x), TF.vmap(f, out_dims=out_dims)(xt))


def test_vmap_pytree_out_dims():
    (x,), (xt,) = both(rng_for("tree_out").standard_normal((5, 3)))
    f = lambda a: {"s": a.sum(), "l": [a, a * 2]}  # noqa: E731
    od = {"s": 0, "l": [1, 0]}
    close(F.vmap(f, out_dims=od)(x), TF.vmap(f, out_dims=od)(xt))


def test_vmap_unbatched_output_is_expanded():
    (x, y), (xt, yt) = both(np.ones((4, 3)), np.arange(3.0))
    close(F.vmap(lambda a: y * 2)(x), TF.vmap(lambda a: yt * 2)(xt))


def test_vmap_out_dims_none_for_unbatched_output():
    (x, y), (xt, yt) = both(np.ones((4, 3)), np.arange(3.0))
    f = lambda a, b: (a * b, b.sum())  # noqa: E731
    close(F.vmap(f, in_dims=(0, None), out_dims=(0, None))(x, y),
          TF.vmap(f, in_dims=(0, None), out_dims=(0, None))(xt, yt))


def test_vmap_out_dims_none_single_output():
    (x, y), (xt, yt) = both(np.ones((4, 3)), np.arange(3.0))
    close(F.vmap(lambda a: y, out_dims=None)(x), TF.vmap(lambda a: yt, out_dims=None)(xt))


@pytest.mark.parametrize("out_dims", [2, -3])
def test_vmap_out_dims_out_of_range(out_dims):
    (x,), (xt,) = both(np.ones((4, 3)))
    with pytest.raises(IndexError, match="Dimension out of range"):
        TF.vmap(lambda a: a, out_dims=out_dims)(xt)
    with pytest.raises(IndexError, match="Dimension out of range"):
        F.vmap(lambda a: a, out_dims=out_dims)(x)


@pytest.mark.parametrize("chunk_size", [1, 2, 3, 5, 10])
def test_vmap_chunk_size(chunk_size):
    rng = rng_for("chunks")
    (a, b, c), (at, bt, ct) = both(rng.standard_normal((5, 2, 3)), rng.standard_normal((3, 4, 5)),
                                   rng.standard_normal((2, 4)))
    f = lambda p, q: (p[0] @ p[1] + q, p[0].sum())  # noqa: E731
    kw = {"in_dims": ((0, -1), None), "out_dims": (1, 0), "chunk_size": chunk_size}
    close(F.vmap(f, **kw)((a, b), c), TF.vmap(f, **kw)((at, bt), ct))


def test_vmap_randomness():
    x = gg.zeros(5, 3, dtype=gg.float64)
    with pytest.raises(RuntimeError, match="vmap: called random operation while in randomness "
                                           "error mode"):
        F.vmap(lambda a: a + gg.randn(3, dtype=gg.float64))(x)
    same = F.vmap(lambda a: a + gg.randn(3, dtype=gg.float64), randomness="same")(x).numpy()
    assert same.shape == (5, 3) and np.ptp(same, axis=0).max() == 0
    diff = F.vmap(lambda a: a + gg.randn(3, dtype=gg.float64), randomness="different")(x).numpy()
    assert diff.shape == (5, 3) and np.ptp(diff, axis=0).min() > 0


def test_vmap_of_vmap():
    rng = rng_for("vv")
    (x, y), (xt, yt) = both(rng.standard_normal((4, 5, 3)), rng.standard_normal((3, 5)))
    f = lambda a, b: (a * b).sum() * a  # noqa: E731
    close(F.vmap(F.vmap(f, in_dims=(0, 1)), in_dims=(0, None))(x, y),
          TF.vmap(TF.vmap(f, in_dims=(0, 1)), in_dims=(0, None))(xt, yt))
    close(F.vmap(F.vmap(f, in_dims=(1, None)), in_dims=(None, 0), out_dims=1)(x[0], y),
          TF.vmap(TF.vmap(f, in_dims=(1, None)), in_dims=(None, 0), out_dims=1)(xt[0], yt))
    close(F.vmap(F.vmap(F.vmap(lambda a: a.exp() / a.exp().sum())))(x[..., None]),
          TF.vmap(TF.vmap(TF.vmap(lambda a: a.exp() / a.exp().sum())))(xt[..., None]))


@SETTINGS
@given(shape=st.lists(st.integers(1, 3), min_size=1, max_size=3), data=st.data())
def test_vmap_broadcasting_binary_ops(shape, data):
    """The second operand's example shape is a random broadcastable suffix; both are mapped
    over random (possibly negative) dims, or the second is unmapped."""
    rng = np.random.default_rng(data.draw(st.integers(0, 99)))
    suffix = shape[data.draw(st.integers(0, len(shape))):]
    dx = data.draw(st.integers(-len(shape) - 1, len(shape)))
    dy = data.draw(st.one_of(st.none(), st.integers(-len(suffix) - 1, len(suffix))))
    xb = np.moveaxis(rng.standard_normal((4, *shape)), 0, dx)
    yb = rng.uniform(0.5, 2, suffix) if dy is None else \
        np.moveaxis(rng.uniform(0.5, 2, (4, *suffix)), 0, dy)
    (x, y), (xt, yt) = both(xb, yb)
    f = lambda a, b: (a * b + a / b - b ** a.tanh(), gg_or_t_max(a, b))  # noqa: E731
    close(F.vmap(f, in_dims=(dx, dy))(x, y), TF.vmap(f, in_dims=(dx, dy))(xt, yt))


def gg_or_t_max(a, b):
    return (gg if isinstance(a, gg.Tensor) else torch).maximum(a, b)


@pytest.mark.parametrize("call, message", [
    (lambda mod, x, y: mod.vmap(lambda a, b: a + b)(x, y[:4]),
     r"vmap: Expected all tensors to have the same size in the mapped dimension, got sizes "
     r"\[5, 4\] for the mapped dimension"),
    (lambda mod, x, y: mod.vmap(lambda a, b: a + b, in_dims=(0,))(x, y),
     r"vmap\(<lambda>, in_dims=\(0,\), \.\.\.\)\(<inputs>\): in_dims is not compatible with the "
     r"structure of `inputs`. in_dims has structure"),
    (lambda mod, x, y: mod.vmap(lambda d: d["a"], in_dims=({"a": 0},))({"a": x, "b": y}),
     r"in_dims is not compatible with the structure of `inputs`"),
    (lambda mod, x, y: mod.vmap(lambda a, b: a + b, in_dims="0")(x, y),
     r"vmap\(<lambda>, in_dims=0, \.\.\.\)\(<inputs>\): expected `in_dims` to be int or a "
     r"\(potentially nested\) tuple matching the structure of inputs, got: <class 'str'>."),
    (lambda mod, x, y: mod.vmap(lambda a, b: a + b, in_dims=(2, 0))(x, y),
     r"vmap\(<lambda>, in_dims=\(2, 0\), \.\.\.\)\(<inputs>\): Got in_dim=2 for some input, but "
     r"that input is a Tensor of dimensionality 2 so expected in_dim to satisfy -2 <= in_dim < "
     r"2."),
    (lambda mod, x, y: mod.vmap(lambda a, b: a + b, in_dims=(0, -3))(x, y),
     r"Got in_dim=-3 for some input, but that input is a Tensor of dimensionality 2"),
    (lambda mod, x, y: mod.vmap(lambda a, b: a, in_dims=(0, 0))(x, 1.0),
     r"Got in_dim=0 for an input but the input is of type <class 'float'>. We cannot vmap over "
     r"non-Tensor arguments, please use None as the respective in_dim"),
    (lambda mod, x, y: mod.vmap(lambda: x)(),
     r"vmap\(<lambda>\)\(<inputs>\): got no inputs. Maybe you forgot to add inputs, or you are "
     r"trying to vmap over a function with no inputs. The latter is unsupported."),
    (lambda mod, x, y: mod.vmap(lambda a: 1.0)(x),
     r"vmap\(<lambda>, \.\.\.\): `<lambda>` must only return Tensors, got type <class 'float'>. "
     r"Did you mean to set out_dims= to None for output\?"),
    (lambda mod, x, y: mod.vmap(lambda a: (a, a), out_dims=(0, 0, 0))(x),
     r"out_dims is not compatible with the structure of `outputs`"),
    (lambda mod, x, y: mod.vmap(lambda a: a, chunk_size=0)(x),
     r"vmap: chunk_size should be None or greater than 0. \(got 0\)"),
], ids=["mapped_sizes_differ", "in_dims_too_short", "in_dims_dict_keys", "in_dims_str",
        "in_dim_too_large", "in_dim_too_negative", "in_dim_for_float", "no_inputs", "float_output",
        "out_dims_too_long", "chunk_size_zero"])
def test_vmap_misuse_errors(call, message):
    (x, y), (xt, yt) = both(np.ones((5, 3)), np.ones((5, 3)))
    with pytest.raises(ValueError, match=message):
        call(TF, xt, yt)
    with pytest.raises(ValueError, match=message):
        call(F, x, y)


def test_vmap_randomness_flag_error():
    (x,), (xt,) = both(np.ones((5, 3)))
    msg = r"Only allowed values for randomness are 'error', 'different', or 'same'. Got bad"
    for mod, a in [(TF, xt), (F, x)]:
        with pytest.raises(RuntimeError, match=msg):
            mod.vmap(lambda v: v, randomness="bad")(a)


def test_vmap_nothing_mapped_error():
    (x,), (xt,) = both(np.ones((5, 3)))
    msg = "vmap: Expected at least one Tensor to vmap over"
    with pytest.raises(ValueError, match=msg):
        TF.vmap(lambda a, b: a + b, in_dims=(None, None))(xt, xt)
    with pytest.raises(ValueError, match=msg):
        F.vmap(lambda a, b: a + b, in_dims=(None, None))(x, x)


@pytest.mark.parametrize("variant", ["tuple", "list", "dict", "tuple_and_top_level_none"])
def test_vmap_nested_in_dims_with_none(variant):
    (a, b), (at, bt) = both(rng_for("nested_none").standard_normal((5, 3)), np.arange(3.0))
    calls = {
        "tuple": lambda mod, x, y: mod.vmap(lambda d: d[0] * d[1], in_dims=((0, None),))((x, y)),
        "list": lambda mod, x, y: mod.vmap(lambda d: d[0] * d[1][0],
                                           in_dims=((0, [None]),))((x, [y])),
        "dict": lambda mod, x, y: mod.vmap(lambda d: d["a"] * d["b"],
                                           in_dims=({"a": 0, "b": None},))({"a": x, "b": y}),
        "tuple_and_top_level_none": lambda mod, x, y: mod.vmap(
            lambda d, e: d[0] * d[1] + e, in_dims=((0, None), None))((x, y), y),
    }
    close(calls[variant](F, a, b), calls[variant](TF, at, bt))


def test_vmap_in_dims_dict_keys_must_match():
    (x,), (xt,) = both(np.ones((5, 3)))
    msg = r"in_dims is not compatible with the structure of `inputs`"
    with pytest.raises(ValueError, match=msg):
        TF.vmap(lambda d: d["a"], in_dims=({"b": 0},))({"a": xt})
    with pytest.raises(ValueError, match=msg):
        F.vmap(lambda d: d["a"], in_dims=({"b": 0},))({"a": x})


def test_vmap_in_dims_list_is_rejected():
    (x,), (xt,) = both(np.ones((5, 3)))
    msg = r"expected `in_dims` to be int or a \(potentially nested\) tuple"
    with pytest.raises(ValueError, match=msg):
        TF.vmap(lambda a, b: a + b, in_dims=[0, 0])(xt, xt)
    with pytest.raises(ValueError, match=msg):
        F.vmap(lambda a, b: a + b, in_dims=[0, 0])(x, x)


def test_vmap_item_and_control_flow_errors():
    (x,), (xt,) = both(np.arange(6.0).reshape(2, 3) - 2)

    def branchy(a):
        if a.sum() > 0:
            return a
        return -a

    for mod, a in [(TF, xt), (F, x)]:
        with pytest.raises(RuntimeError, match=r"vmap: It looks like you're calling \.item\(\) "
                                               r"on a Tensor"):
            mod.vmap(lambda v: v * v.sum().item())(a)
        with pytest.raises(RuntimeError, match="vmap: It looks like you're attempting to use a "
                                               "Tensor in some data-dependent control flow"):
            mod.vmap(branchy)(a)
    # on an unbatched tensor the same code runs
    close(F.vmap(lambda v: v * x[0].sum().item())(x), TF.vmap(lambda v: v * xt[0].sum().item())(xt))


# ---- composition ---------------------------------------------------------------------

rng0 = rng_for("compose")
W0, X0, Y0, C0, T0 = (rng0.standard_normal(3), rng0.standard_normal((5, 3)),
                      rng0.standard_normal(5), rng0.standard_normal(3), rng0.standard_normal(3))


def loss(w, x, y):
    return ((x * w).sum().tanh() - y) ** 2


def vec(a):
    return a.sin() * a.sum()


def scal(a):
    return (a.sin() * a.sum()).sum() + (a ** 4).sum()


COMPOSITIONS = {
    "grad_grad_grad": (lambda m: m.grad(m.grad(m.grad(lambda a: a.sin() * a.exp()))),
                       lambda: (np.array(0.7),)),
    "grad4": (lambda m: m.grad(m.grad(m.grad(m.grad(lambda a: (a * a).tanh())))),
              lambda: (np.array(0.3),)),
    "jacfwd_jacrev": (lambda m: m.jacfwd(m.jacrev(scal)), lambda: (W0,)),
    "jacrev_jacrev": (lambda m: m.jacrev(m.jacrev(scal)), lambda: (W0,)),
    "jacfwd_jacfwd": (lambda m: m.jacfwd(m.jacfwd(scal)), lambda: (W0,)),
    "jacrev_jacfwd": (lambda m: m.jacrev(m.jacfwd(scal)), lambda: (W0,)),
    "jacfwd_jacrev_jacrev": (lambda m: m.jacfwd(m.jacrev(m.jacrev(scal))), lambda: (W0,)),
    "jacrev_jacrev_jacrev": (lambda m: m.jacrev(m.jacrev(m.jacrev(vec))), lambda: (W0,)),
    "jacrev_hessian": (lambda m: m.jacrev(m.hessian(scal)), lambda: (W0,)),
    "jacrev_grad": (lambda m: m.jacrev(m.grad(scal)), lambda: (W0,)),
    "grad_of_jacrev_sum": (lambda m: m.grad(lambda a: m.jacrev(vec)(a).sum()), lambda: (W0,)),
    "grad_of_jacfwd_sum": (lambda m: m.grad(lambda a: m.jacfwd(vec)(a).sum()), lambda: (W0,)),
    "vmap_grad_batched": (lambda m: m.vmap(m.grad(loss)), lambda: (X0 * 2, X0, Y0)),
    "vmap_grad_wrt_x": (lambda m: m.vmap(m.grad(loss, argnums=1), in_dims=(None, 0, 0)),
                        lambda: (W0, X0, Y0)),
    "vmap_jacfwd": (lambda m: m.vmap(m.jacfwd(vec)), lambda: (X0,)),
    "vmap_jacfwd_unbatched_w": (lambda m: m.vmap(m.jacfwd(lambda w, x: (w * x).sin()),
                                                 in_dims=(None, 0)), lambda: (W0, X0)),
    "vmap_vmap_grad": (lambda m: m.vmap(m.vmap(m.grad(lambda a: (a.sin() ** 2).sum()))),
                       lambda: (np.stack([X0, X0 * 2]),)),
    "vmap_jvp": (lambda m: m.vmap(lambda x, t: m.jvp(vec, (x,), (t,))[1]),
                 lambda: (X0, X0 * 2)),
    "vmap_jvp_unbatched_primal": (lambda m: m.vmap(lambda t: m.jvp(vec, (const(t, W0),),
                                                                   (t,))[1]), lambda: (X0,)),
    "vmap_hvp_tangents": (lambda m: m.vmap(lambda v: m.jvp(m.grad(scal), (const(v, W0),),
                                                           (v,))[1]), lambda: (X0,)),
    "grad_of_vmap_loss": (lambda m: m.grad(lambda w, x, y: m.vmap(loss, in_dims=(None, 0, 0))(
        w, x, y).mean()), lambda: (W0, X0, Y0)),
    "jacrev_of_vmap": (lambda m: m.jacrev(m.vmap(vec)), lambda: (X0,)),
    "jacfwd_of_vmap": (lambda m: m.jacfwd(m.vmap(vec)), lambda: (X0,)),
    "jacrev_of_vmap_inner_unbatched": (lambda m: lambda w, x: m.jacrev(
        lambda v: m.vmap(lambda r: (v * r).sin().sum())(x))(w), lambda: (W0, X0)),
    "jvp_of_vjp": (lambda m: lambda x, c, t: m.jvp(lambda a, b: m.vjp(vec, a)[1](b)[0],
                                                   (x, c), (t, t)), lambda: (W0, C0, T0)),
    "vjp_of_jvp": (lambda m: lambda x, t, c: m.vjp(lambda a, b: m.jvp(vec, (a,), (b,))[1],
                                                   x, t)[1](c), lambda: (W0, T0, C0)),
    "grad_of_jvp": (lambda m: m.grad(lambda w, t: m.jvp(scal, (w,), (t,))[1]),
                    lambda: (W0, T0)),
    "jvp_jvp_jvp": (lambda m: lambda x, t: m.jvp(lambda a: m.jvp(lambda b: m.jvp(
        scal, (b,), (t,))[1], (a,), (t,))[1], (x,), (t,)), lambda: (W0, T0)),
    "grad_grad_argnums": (lambda m: m.grad(lambda x, y: m.grad(lambda a, b: (a * b).sin(),
                                                               argnums=1)(x, y) * x,
                                           argnums=(0, 1)),
                          lambda: (np.array(0.3), np.array(0.4))),
}


@pytest.mark.parametrize("name", COMPOSITIONS)
def test_composition_matches_torch(name):
    build, args = COMPOSITIONS[name]
    gs, ts = both(*args())
    out = build(F)(*gs)
    close(out, build(TF)(*ts))
    assert no_grad_tree(out)


def test_perturbation_confusion():
    """d/dx [x * d/dy (x + y)] = 1 and d/dx [x * d/dy (x * y)] = 2x: each level keeps its own
    perturbation."""
    one = gg.tensor(1.0, dtype=gg.float64)
    fj = lambda x: x * F.jvp(lambda y: x + y, (one,), (one,))[1]  # noqa: E731
    assert F.jvp(fj, (one,), (one,))[1].item() == 1.0
    assert F.grad(lambda x: x * F.grad(lambda y: x + y)(one))(one).item() == 1.0
    assert F.grad(lambda x: x * F.grad(lambda y: x * y)(one))(one).item() == 2.0
    fj2 = lambda x: x * F.jvp(lambda y: x * y, (one,), (one,))[1]  # noqa: E731
    assert F.jvp(fj2, (one,), (one,))[1].item() == 2.0
    assert F.grad(fj2)(one).item() == 2.0


# reverse mode inside vmap w.r.t. an *unbatched* input: the per-example gradient must not
# be summed over the batch (per-sample gradients, torch.func's headline example)
VMAP_REVERSE = {
    "vmap_grad_unbatched_w": (lambda m: m.vmap(m.grad(loss), in_dims=(None, 0, 0)),
                              lambda: (W0, X0, Y0)),
    "vmap_vjp_unbatched_primal": (lambda m: m.vmap(lambda w, x: m.vjp(
        lambda a: (a * x).sin(), w)[1](x)[0], in_dims=(None, 0)), lambda: (W0, X0)),
    "vmap_jacrev": (lambda m: m.vmap(m.jacrev(vec)), lambda: (X0,)),
    "vmap_hessian": (lambda m: m.vmap(m.hessian(scal)), lambda: (X0,)),
    "vmap_jacrev_unbatched_w": (lambda m: m.vmap(m.jacrev(lambda w, x: (w * x).sin()),
                                                 in_dims=(None, 0)), lambda: (W0, X0)),
    # a tensor batched at an outer vmap level, differentiated by transforms inside it
    "vmap_jacrev_argnums": (lambda m: m.vmap(m.jacrev(lambda w, x: (w * x).sin() * w.sum(),
                                                      argnums=(0, 1)), in_dims=(None, 0)),
                            lambda: (W0, X0)),
    "vmap_jacfwd_jacrev": (lambda m: m.vmap(m.jacfwd(m.jacrev(scal))), lambda: (X0,)),
    "vmap_jacrev_jacrev": (lambda m: m.vmap(m.jacrev(m.jacrev(scal))), lambda: (X0[:2],)),
    "vmap_hessian_mlp_input": (lambda m: m.vmap(m.hessian(
        lambda x, w: (x @ w).tanh().sum() + (x ** 2).sum()), in_dims=(0, None)),
        lambda: (X0, np.outer(W0, C0))),
    "vmap_vmap_jacrev": (lambda m: m.vmap(m.vmap(m.jacrev(vec))),
                         lambda: (X0.reshape(5, 1, 3),)),
    "vmap_jacrev_in_dims_1": (lambda m: m.vmap(m.jacrev(vec), in_dims=1), lambda: (X0.T,)),
    "vmap_grad_grad": (lambda m: m.vmap(m.grad(lambda x: m.grad(lambda y: (y ** 3).sin())(x))),
                       lambda: (X0[:, 0],)),
    "vmap_vjp_batched_cotangents_too": (lambda m: m.vmap(
        lambda x, c: m.vmap(m.vjp(vec, x)[1])(c)), lambda: (X0, np.stack([np.eye(3)] * 5))),
    "jacrev_of_vmap": (lambda m: m.jacrev(m.vmap(vec)), lambda: (X0[:2],)),
    "jacfwd_of_vmap_grad": (lambda m: m.jacfwd(m.vmap(m.grad(scal))), lambda: (X0[:2],)),
    "vmap_hvp": (lambda m: m.vmap(lambda x, v: m.jvp(m.grad(scal), (x,), (v,))[1]),
                 lambda: (X0, X0[::-1].copy())),
    "vmap_vjp_of_jvp": (lambda m: m.vmap(lambda x, v: m.vjp(
        lambda a: m.jvp(vec, (a,), (v,))[1], x)[1](v)[0]), lambda: (X0, X0[::-1].copy())),
}


@pytest.mark.parametrize("name", list(VMAP_REVERSE))
def test_reverse_mode_inside_vmap(name):
    build, args = VMAP_REVERSE[name]
    gs, ts = both(*args())
    close(build(F)(*gs), build(TF)(*ts))


@pytest.mark.parametrize("m", [F, TF], ids=["graphgrad", "torch"])
def test_backward_inside_vmap_is_refused(m):
    w = (G if m is F else T)(W0).requires_grad_(True)

    def f(x):
        (x * w).sum().backward()
        return x
    with pytest.raises(RuntimeError, match=r"backward\(\) called inside a functorch transform"):
        m.vmap(f)((G if m is F else T)(X0))
    assert w.grad is None


def test_outer_backward_through_vmap_of_jacrev():
    """The vmap's result is recorded physically: an outer backward reaches the inputs."""
    (x,), (xt,) = both(X0)
    x.requires_grad_(True)
    xt.requires_grad_(True)
    (F.vmap(F.jacrev(vec))(x) ** 2).sum().backward()
    (TF.vmap(TF.jacrev(vec))(xt) ** 2).sum().backward()
    close(x.grad, xt.grad)


# ---- which results require grad ------------------------------------------------------


def test_results_on_plain_inputs_do_not_require_grad():
    (x, v), (xt, vt) = both(*rng_for("plain").standard_normal((2, 3)))
    results = [F.grad(scal)(x), F.grad_and_value(scal)(x), F.jacrev(vec)(x), F.jacfwd(vec)(x),
               F.hessian(scal)(x), F.jvp(vec, (x,), (v,)), F.vjp(vec, x)[0],
               F.vjp(vec, x)[1](v), F.hvp(scal, (x,), (v,)), F.linearize(vec, x)[1](v),
               F.vmap(vec)(x[None])]
    for r in results:
        assert no_grad_tree(r)
    torch_results = [TF.grad(scal)(xt), TF.jacrev(vec)(xt), TF.hessian(scal)(xt)]
    assert all(no_grad_tree(r) for r in torch_results)


@pytest.mark.parametrize("transform", ["grad", "vjp"])
def test_aux_does_not_require_grad(transform):
    (x,), (xt,) = both(np.arange(3.0))
    f = lambda a: (a.sin().sum(), a.cos())  # noqa: E731
    if transform == "grad":
        aux, auxt = F.grad(f, has_aux=True)(x)[1], TF.grad(f, has_aux=True)(xt)[1]
    else:
        aux, auxt = F.vjp(f, x, has_aux=True)[2], TF.vjp(f, xt, has_aux=True)[2]
    assert not auxt.requires_grad
    assert not aux.requires_grad


def test_maml_grad_through_func_grad():
    rng = rng_for("maml")
    w0, d = rng.standard_normal(3), rng.standard_normal(3)
    w, wt = gg.tensor(w0, requires_grad=True), torch.tensor(w0, requires_grad=True)
    g, gt = F.grad(scal)(w), TF.grad(scal)(wt)
    assert g.requires_grad and gt.requires_grad
    g.sum().backward()
    gt.sum().backward()
    close(w.grad, wt.grad)

    # one inner SGD step, then the outer loss on other data
    inner = lambda p, x: ((p * x).tanh() ** 2).sum()  # noqa: E731
    w, wt = gg.tensor(w0, requires_grad=True), torch.tensor(w0, requires_grad=True)
    w1 = w - 0.1 * F.grad(inner)(w, G(d))
    w1t = wt - 0.1 * TF.grad(inner)(wt, T(d))
    inner(w1, G(d * 2)).backward()
    inner(w1t, T(d * 2)).backward()
    close(w.grad, wt.grad)


@pytest.mark.parametrize("transform", ["jacrev", "jacfwd", "hessian"])
def test_outer_backward_through_jacobians(transform):
    w0 = rng_for("outer" + transform).standard_normal(3)
    w, wt = gg.tensor(w0, requires_grad=True), torch.tensor(w0, requires_grad=True)
    fn = scal if transform == "hessian" else vec
    J = getattr(F, transform)(fn)(w)
    Jt = getattr(TF, transform)(fn)(wt)
    assert J.requires_grad
    (J ** 2).sum().backward()
    (Jt ** 2).sum().backward()
    close(w.grad, wt.grad)


# ---- per-op jvp and vmap, driven by the registry -------------------------------------

VMAP_SIZE = 5


class _Recorder(Mode):
    """Records which ops a function dispatches."""

    def __init__(self):
        self.seen: set[str] = set()

    def process(self, op, args, params):
        self.seen.add(op.__name__)
        with self.lowered():
            return dispatch(op, args, params)


def _as(m, a):
    return gg.tensor(a) if m is gg else torch.tensor(a)


def _case_inputs(case, seed_extra=""):
    return case.make(rng_for(case.name + seed_extra))


def _diff_indices(case, arrays):
    if case.diff is not None:
        return case.diff
    return tuple(i for i, a in enumerate(arrays) if np.asarray(a).dtype.kind == "f")


@pytest.mark.parametrize("case", [c for c in CASES if c.jvp], ids=lambda c: c.name)
def test_op_jvp_matches_torch(case):
    arrays = _case_inputs(case)
    diff = _diff_indices(case, arrays)
    rng = rng_for(case.name + "tangent")
    tangents = [rng.standard_normal(np.shape(arrays[i])) for i in diff]

    def run(m, jvp):
        ts = [_as(m, a) for a in arrays]

        def f(*d):
            full = list(ts)
            for i, v in zip(diff, d, strict=True):
                full[i] = v
            return case.fn(m, *full)
        return jvp(f, tuple(ts[i] for i in diff), tuple(_as(m, t) for t in tangents))

    close(run(gg, F.jvp), run(TORCH, TF.jvp), rtol=case.rtol)


def _vmap_variants(case, arrays):
    if case.in_dims:
        return list(case.in_dims)
    n = len(arrays)
    variants = [(0,) * n, ((-1 if np.ndim(arrays[0]) else 0),) + (None,) * (n - 1)]
    if n > 1:
        variants.append((None,) + (0,) * (n - 1))
    return variants


def _batched(case, dims):
    samples = [_case_inputs(case, f"sample{k}") for k in range(VMAP_SIZE)]
    return [samples[0][i] if d is None else np.stack([s[i] for s in samples], axis=d)
            for i, d in enumerate(dims)]


@pytest.mark.parametrize("case", CASES, ids=lambda c: c.name)
def test_op_vmap_matches_torch(case):
    for dims in _vmap_variants(case, _case_inputs(case)):
        arrays = _batched(case, dims)
        gs, ts = [gg.tensor(a) for a in arrays], [torch.tensor(a) for a in arrays]
        gfn = F.vmap(lambda *xs: case.fn(gg, *xs), in_dims=dims)
        tfn = TF.vmap(lambda *xs: case.fn(TORCH, *xs), in_dims=dims)
        if case.vmap_error:
            with pytest.raises(RuntimeError, match="vmap"):
                tfn(*ts)
            with pytest.raises(RuntimeError, match="vmap"):
                gfn(*gs)
            continue
        close(gfn(*gs), tfn(*ts), rtol=case.rtol)


def _float_outputs(case) -> bool:
    out = case.fn(gg, *[gg.tensor(a) for a in _case_inputs(case)])
    return all(leaf.is_floating_point() for _, leaf in _flatten(out)[0])


JAC_CASES = [c for c in CASES if c.jvp and _float_outputs(c)]


@pytest.mark.parametrize("case", JAC_CASES, ids=lambda c: c.name)
@pytest.mark.parametrize("mode", ["jacfwd", "jacrev"])
def test_op_jacobians_match_torch(case, mode):
    """jacfwd runs each jvp rule under vmap, jacrev each vjp rule under vmap."""
    arrays = _case_inputs(case)
    diff = _diff_indices(case, arrays)

    def run(m, jac):
        ts = [_as(m, a) for a in arrays]

        def f(*d):
            full = list(ts)
            for i, v in zip(diff, d, strict=True):
                full[i] = v
            return case.fn(m, *full)
        return jac(f, argnums=tuple(range(len(diff))))(*[ts[i] for i in diff])

    close(run(gg, getattr(F, mode)), run(TORCH, getattr(TF, mode)), rtol=case.rtol)


@pytest.mark.parametrize("case", CASES, ids=lambda c: c.name)
def test_op_case_dispatches_its_ops(case):
    rec = _Recorder()
    tensors = [gg.tensor(a) for a in _case_inputs(case)]
    push_mode(rec)
    try:
        case.fn(gg, *tensors)
    finally:
        pop_mode(rec)
    assert set(case.ops) <= rec.seen, (case.ops, rec.seen)


# graphgrad's own ops: tests may register throwaway ops of their own (e.g. a wrong vjp)
BUILTIN = {n: op for n, op in REGISTRY.items() if op.__module__.startswith("graphgrad.")}


def test_every_registered_op_has_jvp_and_vmap_cases():
    vmapped = {op for c in CASES for op in c.ops}
    jvped = {op for c in CASES if c.jvp for op in c.ops}
    missing_vmap = sorted(set(BUILTIN) - vmapped)
    missing_jvp = sorted(n for n, op in BUILTIN.items() if op.differentiable and n not in jvped)
    assert not missing_vmap, f"ops without a vmap case: {missing_vmap}"
    assert not missing_jvp, f"differentiable ops without a jvp case: {missing_jvp}"
    unknown = sorted(vmapped - set(REGISTRY))
    assert not unknown, f"cases name ops that are not registered: {unknown}"


def test_every_registered_op_has_rules():
    for name, op in BUILTIN.items():
        assert op.batch is not None, f"{name} has no batching rule"
        if op.differentiable:
            assert op.jvp is not None, f"{name} has no jvp rule"


def test_vmap_getitem_batched_index():
    rng = rng_for("batched_index")
    (x, i), (xt, it) = both(rng.standard_normal((5, 4)), rng.integers(0, 4, (5, 2)))
    close(F.vmap(lambda a, j: a[j])(x, i), TF.vmap(lambda a, j: a[j])(xt, it))


# ---- the shared op table (op_cases.py): jvp and vmap of every case -------------------
# op_cases.py is another table, with hypothesis-drawn shapes and static arguments; it is
# reused here when it imports. A vmap batch stacks the example with copies whose float
# values are permuted (the value domain is kept); int and bool arrays are repeated.

try:
    from op_cases import CASES as _ALL_SHARED
except ImportError:  # pragma: no cover - the table is optional for this file
    _ALL_SHARED = []
# cases the table itself marks as a known forward bug are left to its own tests
SHARED_CASES = [c for c in _ALL_SHARED if not getattr(c, "xfail", None)]

SHARED_SETTINGS = settings(max_examples=2, deadline=None, derandomize=True, database=None,
                           phases=[Phase.explicit, Phase.generate],  # no shrinking
                           suppress_health_check=list(HealthCheck))


def _shared_floats(example):
    return [i for i, a in enumerate(example.arrays)
            if np.asarray(a).dtype.kind == "f" and i not in example.nograd]


def _torch_refusal(case, ex) -> str | None:
    """The forward oracle's business comes first: why torch itself rejects the example,
    or None when it runs."""
    try:
        case.torch_fn(*[torch.tensor(np.asarray(a)) for a in ex.arrays], **ex.static)
    except Exception as e:  # noqa: BLE001 - any refusal: the example is not checked here
        return f"torch rejects the example: {type(e).__name__}: {e}"
    return None


def _skip_if_nothing_was_checked(name: str, unchecked: list[str], checked: int) -> None:
    """A case none of whose drawn examples could be compared is a visible skip naming the
    case and why, never a silent pass."""
    if not checked:
        reasons = "; ".join(sorted(set(unchecked))) or "no example was drawn"
        pytest.skip(f"{name}: no example was checked ({reasons})")


@pytest.mark.skipif(not SHARED_CASES, reason="tests/op_cases.py is not available")
@pytest.mark.parametrize("case", [c for c in SHARED_CASES if c.grad], ids=lambda c: c.name)
def test_shared_case_jvp_matches_torch(case):
    unchecked, checked = [], []
    _shared_jvp(case, unchecked, checked)
    _skip_if_nothing_was_checked(case.name, unchecked, len(checked))


@SHARED_SETTINGS
@given(data=st.data())
def _shared_jvp(case, unchecked, checked, data):
    ex = data.draw(case.inputs)
    diff = _shared_floats(ex)
    if not diff:
        unchecked.append("no float input that takes a tangent")
        return
    refusal = _torch_refusal(case, ex)
    if refusal is not None:
        unchecked.append(refusal)
        return
    rng = np.random.default_rng(data.draw(st.integers(0, 2**32 - 1)))
    tangents = [rng.standard_normal(np.shape(ex.arrays[i])) for i in diff]

    def run(lib, fn, jvp):
        ts = [lib.tensor(np.asarray(a)) for a in ex.arrays]

        def f(*d):
            full = list(ts)
            for i, v in zip(diff, d, strict=True):
                full[i] = v
            return fn(*full, **ex.static)
        return jvp(f, tuple(ts[i] for i in diff), tuple(lib.tensor(t) for t in tangents))

    close(run(gg, case.gg_fn, F.jvp), run(torch, case.torch_fn, TF.jvp), rtol=case.rtol,
          atol=case.atol)
    checked.append(ex)


def _shared_batch(example, dims, rng):
    out = []
    for a, d in zip(example.arrays, dims, strict=True):
        a = np.asarray(a)
        if d is None:
            out.append(a)
            continue
        copies = [a] + [rng.permutation(a.reshape(-1)).reshape(a.shape) if a.dtype.kind == "f"
                        else a for _ in range(VMAP_SIZE - 1)]
        out.append(np.stack(copies, axis=d))
    return out


def _shared_dims(example, variant):
    """all0: every input mapped over dim 0; floats_last: float inputs mapped over their
    last dim, int and bool inputs (indices, masks) unmapped."""
    if variant == "all0":
        return (0,) * len(example.arrays)
    return tuple((-1 if np.ndim(a) else 0) if np.asarray(a).dtype.kind == "f" else None
                 for a in example.arrays)


@pytest.mark.skipif(not SHARED_CASES, reason="tests/op_cases.py is not available")
@pytest.mark.parametrize("case", SHARED_CASES, ids=lambda c: c.name)
@pytest.mark.parametrize("variant", ["all0", "floats_last"])
def test_shared_case_vmap_matches_torch(case, variant):
    unchecked, checked = [], []
    _shared_vmap(case, variant, unchecked, checked)
    _skip_if_nothing_was_checked(f"{case.name}[{variant}]", unchecked, len(checked))


@SHARED_SETTINGS
@given(data=st.data())
def _shared_vmap(case, variant, unchecked, checked, data):
    ex = data.draw(case.inputs)
    dims = _shared_dims(ex, variant)
    if all(d is None for d in dims):
        unchecked.append("the case has no array input" if not dims else
                         "no input is mapped: floats_last maps float inputs only")
        return
    refusal = _torch_refusal(case, ex)
    if refusal is not None:
        unchecked.append(refusal)
        return
    rng = np.random.default_rng(data.draw(st.integers(0, 2**32 - 1)))
    arrays = _shared_batch(ex, dims, rng)
    gfn = F.vmap(lambda *xs: case.gg_fn(*xs, **ex.static), in_dims=dims)
    tfn = TF.vmap(lambda *xs: case.torch_fn(*xs, **ex.static), in_dims=dims)
    try:
        ref = tfn(*[torch.tensor(a) for a in arrays])
    except Exception as e:  # noqa: BLE001 - dynamic shapes, .item(): torch cannot vmap it
        if str(e).startswith(_TORCH_INDEX_PUT_BUG):
            ref = _per_example(case, ex, arrays, dims)
        else:  # graphgrad must refuse as well, with PyTorch's error where it shares it
            error, message = _VMAP_REFUSALS.get(case.name, (type(e), re.escape(str(e))))
            with pytest.raises(error, match=message):
                gfn(*[gg.tensor(a) for a in arrays])
            checked.append(ex)
            return
    if isinstance(ref, torch.Tensor):
        ref = _per_example_if_torch_vmap_differs(case, ex, arrays, dims, ref)
    close(gfn(*[gg.tensor(a) for a in arrays]), ref, rtol=case.rtol, atol=case.atol)
    checked.append(ex)


# where torch's vmap refuses a case, graphgrad raises torch's exception type with torch's
# message, except for these cases, whose refusal graphgrad words (or types) its own way
_DYNAMIC_MASK = "vmap: We do not support batching operators that can support dynamic shape"
_DYNAMIC_NONZERO = "vmap: nonzero has a data-dependent output shape, which cannot be batched"
_VMAP_REFUSALS = {
    "masked_select": (RuntimeError, re.escape(_DYNAMIC_MASK)),  # torch: "...over `mask`..."
    "nonzero": (RuntimeError, re.escape(_DYNAMIC_NONZERO)),  # torch: "...aten::nonzero"
    "nonzero_tuple": (RuntimeError, re.escape(_DYNAMIC_NONZERO)),  # torch: no batching rule
    # torch raises RuntimeError "When vmap-ing torch.nn.functional.one_hot, please provide
    # an explicit positive num_classes argument."
    "one_hot": (NotImplementedError, re.escape("vmap: one_hot needs an explicit num_classes")),
}


# torch's vmap of x[..., i] = v with a batched index after a slice lays the indexed
# result out wrongly and refuses the values; per example it works
_TORCH_INDEX_PUT_BUG = "shape mismatch: value tensor of shape"


def _per_example(case, ex, arrays, dims):
    """The oracle vmap stands for: torch's eager results per example, stacked."""
    size = next(np.asarray(a).shape[d] for a, d in zip(arrays, dims, strict=True)
                if d is not None)
    rows = [case.torch_fn(*[torch.tensor(np.take(a, b, axis=d) if d is not None else a)
                            for a, d in zip(arrays, dims, strict=True)], **ex.static)
            for b in range(size)]
    return torch.stack(rows)


def _per_example_if_torch_vmap_differs(case, ex, arrays, dims, ref):
    """torch's vmap departs from its own eager result for a batched 0-d index tensor among
    separated index tensors (``a[i, :, j]``: eager treats the 0-d ``i`` as an int): where
    the shapes differ, the per-example results are the oracle."""
    loop = _per_example(case, ex, arrays, dims)
    return loop if loop.shape != ref.shape else ref


# ---- deterministic repros of the bugs the shared sweep classifies --------------------


@pytest.mark.parametrize("name", ["softmax", "log_softmax", "cumsum"])
def test_vmap_dim0_of_a_0d_example(name):
    (x,), (xt,) = both(np.arange(3.0))
    close(F.vmap(lambda a: getattr(gg, name)(a, 0))(x),
          TF.vmap(lambda a: getattr(torch, name)(a, 0))(xt))


def _setitem_first(a, v):
    out = a * 1.0
    out[0] = v
    return out


@pytest.mark.parametrize("in_dims", [(0, 0), (0, None)])
def test_vmap_setitem_into_a_batched_tensor(in_dims):
    (a, v), (at, vt) = both(np.zeros((2, 3)), np.arange(2.0) + 1)
    if in_dims[1] is None:
        v, vt = v[0], vt[0]
    close(F.vmap(_setitem_first, in_dims=in_dims)(a, v),
          TF.vmap(_setitem_first, in_dims=in_dims)(at, vt))


def test_vmap_setitem_batched_value_into_unbatched_tensor():
    (a, v), (at, vt) = both(np.zeros(3), np.arange(2.0) + 1)
    with pytest.raises(RuntimeError, match="vmap: inplace arithmetic"):
        TF.vmap(_setitem_first, in_dims=(None, 0))(at, vt)
    with pytest.raises(RuntimeError):
        F.vmap(_setitem_first, in_dims=(None, 0))(a, v)


def test_int_true_division_by_a_0d_int_tensor():
    (a, b), (at, bt) = both(np.array([3, 4]), np.array(3))
    close(a / b, at / bt)
    close(F.vmap(lambda x: x / b)(a), TF.vmap(lambda x: x / bt)(at))


# ---- batched index tensors and in-place ops inside vmap ----------------------------

_XI = rng_for("batched_index_cases").standard_normal((5, 4, 3, 6))
_I = rng_for("batched_index_i").integers(0, 3, (5, 2))
_J = rng_for("batched_index_j").integers(0, 6, (5, 2, 1))
_V = rng_for("batched_index_v").standard_normal((5, 2))


def _tensor(m, a):
    return (G if m is F else T)(a)


def _put_rows(m, a, k, v):
    a = a.clone()
    a[k] = v
    return a


def _inplace_chain(m, a, v):
    a = a * 1.0
    a.mul_(v)
    a.add_(1.0)
    a[0] = v[1]
    return a


def _grad_through_inplace(m, a):
    def f(z):
        b = z * 2
        b.mul_(z)
        b[0] = z[1] ** 3
        return b.sum()
    return m.grad(f)(a)


BATCHED_INDEX_CASES = {
    "x[i]": (lambda m, a, k: a[k], (_XI[:, :, 0, 0], _I), 0),
    "x[:, i]": (lambda m, a, k: a[:, k], (_XI, _I), 0),
    "x[:, i, j]": (lambda m, a, k, j: a[:, k, j], (_XI, _I, _J[:, :, 0]), 0),
    "x[..., i, :]": (lambda m, a, k: a[..., k, :], (_XI, _I), 0),
    "x[i, :, j] (separated)": (lambda m, a, k, j: a[k, :, j], (_XI, _I, _J), 0),
    "x[:, i, :, j] (separated)": (lambda m, a, k, j: a[:, k, :, j], (_XI[:, None], _I, _J), 0),
    "unbatched x[i]": (lambda m, a, k: a[k], (_XI[0, :, 0, 0], _I), (None, 0)),
    "unbatched x[:, i]": (lambda m, a, k: a[:, k], (_XI[0], _I), (None, 0)),
    "x[0-d i]": (lambda m, a, k: a[k], (_XI[:, :, 0, 0], _I[:, 0]), 0),
    "index_select": (lambda m, a, k: m_mod(m).index_select(a, 1, k), (_XI[:, :, :, 0], _I), 0),
    "gather": (lambda m, a, k: m_mod(m).gather(a, 1, k),
               (_XI[:, :, :, 0], rng_for("gather").integers(0, 3, (5, 4, 2))), 0),
    "index_put": (lambda m, a, k, v: m_mod(m).index_put(a, (k,), v), (_XI[:, :, 0, 0], _I, _V), 0),
    "index_put accumulate": (lambda m, a, k, v: m_mod(m).index_put(a, (k,), v, accumulate=True),
                             (_XI[:, :, 0, 0], _I, _V), 0),
    "index_put unbatched base": (lambda m, a, k, v: m_mod(m).index_put(a, (k,), v),
                                 (_XI[0, :, 0, 0], _I, _V), (None, 0, 0)),
    "x[i] = v": (_put_rows, (_XI[:, :, :, 0], _I, _XI[:, 0, :, 0]), 0),
    "x[i] = unbatched v": (_put_rows, (_XI[:, :, :, 0], _I, _XI[0, 0, :, 0]), (0, 0, None)),
    "x[unbatched i] = v": (_put_rows, (_XI[:, :, :, 0], _I[0], _XI[:, 0, :, 0]), (0, None, 0)),
    "mul_, add_, setitem": (_inplace_chain, (_XI[:, :, 0, 0], _XI[:, :, 1, 0]), 0),
    "in-place by an unbatched tensor": (_inplace_chain, (_XI[:, :, 0, 0], _XI[0, :, 1, 0]),
                                        (0, None)),
    "grad through in-place": (lambda m, a: _grad_through_inplace(m, a), (_XI[:, :, 0, 0],), 0),
}


def m_mod(m):
    return gg if m is F else torch


@pytest.mark.parametrize("name", list(BATCHED_INDEX_CASES))
def test_vmap_batched_index_and_inplace(name):
    fn, arrays, in_dims = BATCHED_INDEX_CASES[name]
    gs, ts = both(*arrays)
    close(F.vmap(lambda *a: fn(F, *a), in_dims=in_dims)(*gs),
          TF.vmap(lambda *a: fn(TF, *a), in_dims=in_dims)(*ts))


def test_vmap_setitem_after_a_slice_matches_the_examples():
    """x[:, i] = v with a batched i: torch's vmap refuses it (a layout bug), so the oracle
    is torch per example."""
    a, k, v = _XI[:, :, :, 0], _I, _V

    def put(m, x, i, w):
        x = x.clone()
        x[:, i] = w
        return x
    got = F.vmap(lambda *t: put(F, *t))(*both(a, k, v)[0])
    close(got, torch.stack([put(TF, *both(a[b], k[b], v[b])[1]) for b in range(5)]))


def test_vmap_inplace_on_an_input_writes_through():
    (x,), (xt,) = both(_XI[:, :, 0, 0])
    F.vmap(lambda a: a.add_(1.0) * 2)(x)
    TF.vmap(lambda a: a.add_(1.0) * 2)(xt)
    close(x, xt)


def test_vmap_batched_bool_mask_is_refused():
    (x, mask), (xt, maskt) = both(_XI[:, :, 0, 0], _XI[:, :, 1, 0] > 0)
    msg = "Attempting to batch over indexing with a boolean mask"
    with pytest.raises(RuntimeError, match=msg):
        TF.vmap(lambda a, m: a[m])(xt, maskt)
    with pytest.raises(RuntimeError, match=msg):
        F.vmap(lambda a, m: a[m])(x, mask)


def test_vmap_inplace_batched_into_unbatched_is_refused():
    (a, v), (at, vt) = both(_XI[0, :, 0, 0], _XI[:, :, 0, 0])
    with pytest.raises(RuntimeError, match=r"vmap: index_put_\(self, \*extra_args\) is not "):
        TF.vmap(lambda x, w: x.index_put_((T(_I[0]),), w[:2]), in_dims=(None, 0))(at, vt)
    with pytest.raises(RuntimeError, match=r"vmap: index_put_\(self, \*extra_args\) is not "):
        F.vmap(lambda x, w: x.index_put_((G(_I[0]),), w[:2]), in_dims=(None, 0))(a, v)
    with pytest.raises(RuntimeError, match="vmap: inplace arithmetic"):
        F.vmap(lambda x, w: x.mul_(w), in_dims=(None, 0))(a, v)
    with pytest.raises(RuntimeError, match="vmap: inplace arithmetic"):
        F.vmap(lambda x, w: x.copy_(w), in_dims=(None, 0))(a, v)


def _two_inplace(m):
    def f(x):
        b = x * 1
        b.mul_(x)
        b[1] = b[0] * 3  # reads b between the two changes
        return (b.sin() ** 2).sum()
    return f


def _inplace_on_view(m):
    def f(x):
        b = x * 1
        v = b[1:]
        y = v * 2  # reads the view before the change
        v.mul_(x[0])
        return b.sin().sum() + (y * v).sum()
    return f


INPLACE_UNDER_TRANSFORMS = {
    "vmap_grad_two_inplace": lambda m: m.vmap(m.grad(_two_inplace(m))),
    "vmap_grad_inplace_on_view": lambda m: m.vmap(m.grad(_inplace_on_view(m))),
    "vmap_jacfwd_grad_inplace": lambda m: m.vmap(m.jacfwd(m.grad(_two_inplace(m)))),
    "vmap_hessian_inplace": lambda m: m.vmap(m.hessian(_inplace_on_view(m))),
    "vmap_jvp_inplace": lambda m: m.vmap(lambda x: m.jvp(_two_inplace(m), (x,), (x.cos(),))[1]),
}


@pytest.mark.parametrize("name", list(INPLACE_UNDER_TRANSFORMS))
def test_inplace_inside_vmap_under_transforms(name):
    (x,), (xt,) = both(_XI[:, :, 0, 0])
    close(INPLACE_UNDER_TRANSFORMS[name](F)(x), INPLACE_UNDER_TRANSFORMS[name](TF)(xt))


def test_inplace_inside_vmap_on_a_saved_tensor_is_detected():
    def f(x):
        b = x * 1
        z = b.sin().sum()  # sin saves b
        b.mul_(2.0)
        return z
    (x,), (xt,) = both(_XI[:, :, 0, 0])
    msg = "one of the variables needed for gradient computation has been modified by an inplace"
    with pytest.raises(RuntimeError, match=msg):
        TF.vmap(TF.grad(f))(xt)
    with pytest.raises(RuntimeError, match=msg):
        F.vmap(F.grad(f))(x)
