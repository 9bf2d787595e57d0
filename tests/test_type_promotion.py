"""Type promotion against PyTorch over the whole table: every pair of operands drawn from
every dtype as a tensor and as a 0-d tensor and the Python numbers bool, int, float and
complex, through ``graphgrad.backend.result_type`` / ``promote_types`` (against
``torch.result_type`` / ``torch.promote_types``), through the binary ops (dtype and
values), and through the shape rule of the graph builders; and every unary float op on
bool and integer tensors, under both default dtypes.

One deliberate difference: PyTorch gives complex32 for float16 with a complex number;
NumPy has no complex32, so graphgrad gives complex64 there (the test expects that).
"""

from __future__ import annotations

import contextlib
import itertools
import warnings

import numpy as np
import pytest
import torch

import graphgrad as gg
from graphgrad.backend import promote_types, result_type
from graphgrad.ops import REGISTRY
from graphgrad.ops.base import spec_of

DTYPES = ["bool", "uint8", "int8", "int16", "int32", "int64", "float16", "float32", "float64",
          "complex64", "complex128"]
NUMBERS = {"True": True, "int": 3, "float": 2.5, "complex": 1 + 2j}


def _values(dtype: str) -> list:
    return [True, False] if dtype == "bool" else [1, 2]


def operands(fw) -> dict:
    """Every dtype as a tensor (2 elements) and a 0-d tensor, then the Python numbers."""
    out = {}
    for d in DTYPES:
        dt = getattr(fw, d)
        out[d] = fw.tensor(_values(d), dtype=dt)
        out[f"{d}_0d"] = fw.tensor(_values(d)[0], dtype=dt)
    out.update(NUMBERS)
    return out


G, T = operands(gg), operands(torch)
PAIRS = [(a, b) for a, b in itertools.product(G, G) if a not in NUMBERS or b not in NUMBERS]


def torch_name(dtype) -> str:
    """PyTorch's dtype name, with complex32 read as graphgrad's complex64 (see above)."""
    name = str(dtype).rsplit(".", 1)[-1]
    return {"complex32": "complex64", "bool_": "bool"}.get(name, name)


def _as_numpy(t) -> np.ndarray:
    if isinstance(t, torch.Tensor) and t.dtype == torch.complex32:
        t = t.to(torch.complex64)
    return np.asarray(t.detach().numpy())


@contextlib.contextmanager
def default_dtype(name: str):
    g_old, t_old = gg.get_default_dtype(), torch.get_default_dtype()
    gg.set_default_dtype(getattr(gg, name))
    torch.set_default_dtype(getattr(torch, name))
    try:
        yield
    finally:
        gg.set_default_dtype(g_old)
        torch.set_default_dtype(t_old)


# ---- the dtype functions ---------------------------------------------------------------


def _as_array(v):
    return v._array if isinstance(v, gg.Tensor) else v


@pytest.mark.parametrize("default", ["float32", "float64"])
def test_result_type_matches_torch(default):
    with default_dtype(default):
        wrong = [f"{a}, {b}: {result_type(_as_array(G[a]), _as_array(G[b]))} (torch: "
                 f"{torch.result_type(T[a], T[b])})" for a, b in PAIRS
                 if result_type(_as_array(G[a]), _as_array(G[b])).name
                 != torch_name(torch.result_type(T[a], T[b]))]
    assert not wrong, "\n".join(wrong)


def test_promote_types_matches_torch():
    for a, b in itertools.product(DTYPES, DTYPES):
        got = promote_types(np.dtype(a), np.dtype(b)).name
        assert got == torch_name(torch.promote_types(getattr(torch, a), getattr(torch, b))), \
            (a, b)


# ---- binary ops: dtype and values --------------------------------------------------------

BINARY = {
    "add": lambda m, a, b: a + b, "sub": lambda m, a, b: a - b, "mul": lambda m, a, b: a * b,
    "div": lambda m, a, b: a / b, "pow": lambda m, a, b: a ** b,
    "div_floor": lambda m, a, b: m.div(a, b, rounding_mode="floor"),
    "remainder": lambda m, a, b: a % b, "floor_divide": lambda m, a, b: a // b,
    "maximum": lambda m, a, b: m.maximum(a, b), "minimum": lambda m, a, b: m.minimum(a, b),
    "atan2": lambda m, a, b: m.atan2(a, b), "lt": lambda m, a, b: a < b,
    "where": lambda m, a, b: m.where(m.tensor([True, False]), a, b),
    "cat": lambda m, a, b: m.cat([a, b]),
}
# PyTorch refuses these (bool arithmetic it has no kernel for, division of integers by
# False, complex maximum, ComplexHalf kernels), so they have no dtype to compare
_REFUSED = (RuntimeError, TypeError, NotImplementedError)


def _mismatch(op: str, a: str, b: str) -> str | None:
    """"" when graphgrad gives PyTorch's dtype and values, what differs when it does not,
    None when PyTorch refuses the combination."""
    fn = BINARY[op]
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", UserWarning)  # "ComplexHalf support is experimental"
            t = fn(torch, T[a], T[b])
    except _REFUSED:
        return None
    with np.errstate(all="ignore"):
        g = fn(gg, G[a], G[b])
    if g.dtype.name != torch_name(t.dtype):
        return f"dtype {g.dtype.name} (torch: {torch_name(t.dtype)})"
    x, y = _as_numpy(g), _as_numpy(t)
    tol = 1e-3 if g.dtype.name in ("float16", "complex64") and "float16" in (a + b) else 1e-6
    try:
        if x.dtype.kind in "fc":
            np.testing.assert_allclose(x, y, rtol=tol, atol=tol, equal_nan=True)
        else:
            np.testing.assert_array_equal(x, y)
    except AssertionError:
        return f"values {x.tolist()} (torch: {y.tolist()})"
    return ""


@pytest.mark.parametrize("op", sorted(BINARY))
def test_binary_type_promotion(op):
    """Every pair of operands, one op per test: PyTorch's dtype and values."""
    wrong = []
    for a, b in PAIRS:
        why = _mismatch(op, a, b)
        if why:
            wrong.append(f"{a} {op} {b}: {why}")
    assert not wrong, f"{len(wrong)} of {len(PAIRS)} pairs differ:\n" + "\n".join(wrong)


def test_binary_promotion_under_float64_default():
    """Python floats and integer division follow the default dtype."""
    with default_dtype("float64"):
        for expr in ("a + 2.5", "a / a", "a * 1j", "b + 2.5", "c + 1j"):
            env = {"a": "int32", "b": "bool", "c": "float32"}
            g = eval(expr, {k: G[v] for k, v in env.items()})  # noqa: S307 - fixed expressions
            t = eval(expr, {k: T[v] for k, v in env.items()})  # noqa: S307
            assert g.dtype.name == torch_name(t.dtype), expr


def test_shape_rule_dtypes_match_eager():
    """The graph builders' dtype rule (``infer``) gives what eager execution gives."""
    add = REGISTRY["Add"]
    for a, b in PAIRS:
        if "bool" in a and "bool" in b:
            continue
        eager = (G[a] + G[b]).dtype.name
        spec = add.infer(spec_of(G[a]), spec_of(G[b]))
        assert np.dtype(spec.dtype).name == eager, (a, b)


def test_mixed_integers_compute_in_the_result_dtype():
    """int8 with a 0-d int64 is computed in int8: the 0-d value wraps around first, as in
    PyTorch (NumPy would compute in int64)."""
    for fn in (lambda m, a, b: m.maximum(a, b), lambda m, a, b: a // b,
               lambda m, a, b: a + b):
        g = fn(gg, gg.tensor([1, -7], dtype=gg.int8), gg.tensor(300))
        t = fn(torch, torch.tensor([1, -7], dtype=torch.int8), torch.tensor(300))
        assert g.dtype.name == "int8"
        assert g.tolist() == t.tolist()


# ---- unary float ops on integers -----------------------------------------------------------

UNARY = ["exp", "expm1", "log", "log1p", "log2", "log10", "sin", "cos", "tan", "tanh",
         "sinh", "cosh", "asin", "acos", "atan", "sigmoid", "sqrt", "rsqrt", "reciprocal",
         "erf"]
_INT_VALUES = {"bool": [True, False, True], "uint8": [0, 1, 2, 7, 200],
               "int8": [-100, -3, 0, 1, 2, 7], "int16": [-3, 0, 1, 2, 300],
               "int32": [-3, 0, 1, 2, 70000], "int64": [-3, 0, 1, 2, 9]}


@pytest.mark.parametrize("default", ["float32", "float64"])
@pytest.mark.parametrize("op", UNARY)
def test_unary_float_ops_on_integers(op, default):
    """Integer and bool inputs compute in the default dtype (NumPy would give float16 for
    bool, uint8 and int8 and float32 for int16), with PyTorch's values."""
    with default_dtype(default), np.errstate(all="ignore"):
        for d, values in _INT_VALUES.items():
            g = getattr(gg, op)(gg.tensor(values, dtype=getattr(gg, d)))
            t = getattr(torch, op)(torch.tensor(values, dtype=getattr(torch, d)))
            assert g.dtype.name == torch_name(t.dtype) == default, (op, d)
            tol = 1e-6 if default == "float32" else 1e-13
            np.testing.assert_allclose(_as_numpy(g), _as_numpy(t), rtol=tol, atol=tol,
                                       equal_nan=True, err_msg=f"{op}({d})")


def test_sign_and_square_of_bool():
    """sign keeps bool (NumPy has no loop for it); square is pow(x, 2): int64."""
    for op in ("sign", "square"):
        g = getattr(gg, op)(gg.tensor([True, False]))
        t = getattr(torch, op)(torch.tensor([True, False]))
        assert g.dtype.name == torch_name(t.dtype) and g.tolist() == t.tolist(), op


def test_promotion_under_vmap_uses_the_examples_ranks():
    """A batched 0-d example promotes as a 0-d tensor (physically it has the batch dim)."""
    cases = {
        "0-d float32 example + float16 tensor": (lambda m: m.ones(3, dtype=m.float16),
                                                 lambda m: m.ones(4, dtype=m.float32)),
        "0-d int8 example + int64 tensor": (lambda m: m.ones(3, dtype=m.int64),
                                            lambda m: m.ones(4, dtype=m.int8)),
        "0-d float64 example + int32 tensor": (lambda m: m.ones(3, dtype=m.int32),
                                               lambda m: m.ones(4, dtype=m.float64)),
    }
    for name, (other, batch) in cases.items():
        for nested in (False, True):
            dtypes = []
            for m, vmap in ((gg, gg.func.vmap), (torch, torch.func.vmap)):
                y = other(m)
                fn = vmap(lambda a, y=y: a + y)
                x = batch(m)
                if nested:
                    fn, x = vmap(fn), x.reshape(2, 2)
                dtypes.append(torch_name(fn(x).dtype))
            assert dtypes[0] == dtypes[1], (name, nested, dtypes)


def test_public_result_type_and_promote_types_match_torch():
    names = ["bool", "uint8", "int8", "int16", "int32", "int64", "float16", "float32",
             "float64", "complex64", "complex128"]
    for a in names:
        for b in names:
            assert str(gg.promote_types(getattr(gg, a), getattr(gg, b))).split(".")[1] == \
                str(torch.promote_types(getattr(torch, a), getattr(torch, b))).split(".")[1]
    for other in (2, 2.5, True, 1j):
        for a in names:
            x = gg.ones(2, dtype=getattr(gg, a))
            t = torch.ones(2, dtype=getattr(torch, a))
            expected = str(torch.result_type(t, other)).split(".")[1]
            if expected == "complex32":  # NumPy has no complex32: the next one up
                expected = "complex64"
            assert str(gg.result_type(x, other)).split(".")[1] == expected
