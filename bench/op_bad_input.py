"""How graphgrad's ops answer bad and edge inputs, against PyTorch.

A generated probe (fixed seed): every function and Tensor method of a table of ops that
graphgrad and PyTorch both have is called with inputs drawn from lists of bad and edge
values (wrong dtypes, mismatched shapes, out-of-range dims and indices, empty and 0-d
tensors, negative sizes, unknown keywords), in both libraries. Each call is classified:

* ``agree``: both return equal values (shape, dtype, elements), or both raise the same
  exception type with a message free of NumPy's or Python's internals;
* ``silently_wrong``: both return, with different values, shapes or dtypes;
* ``returns_where_torch_raises`` / ``raises_where_torch_returns``;
* ``unhelpful_error``: both raise, but graphgrad's exception type differs or its message
  is NumPy's or an internal one (AttributeError text, "ufunc", "could not be broadcast").

Prints one JSON object: the counts, the counts per op, and a few examples per category.
``--examples N`` sets how many examples to list. Run against another checkout with
``PYTHONPATH=/path/to/checkout python bench/op_bad_input.py``.
"""

from __future__ import annotations

import argparse
import itertools
import json
import random
import re
import warnings
import zlib
from collections import Counter, defaultdict

import numpy as np
import torch

import graphgrad as gg

SEED = 0
PER_PATTERN = 10  # calls drawn per (op, argument pattern)

# ---- the inputs ------------------------------------------------------------------------

# tensors by name: (shape, dtype name, fill)
TENSORS = {
    "f34": ((3, 4), "float32", "normal"), "f4": ((4,), "float32", "normal"),
    "f3": ((3,), "float32", "normal"), "f0d": ((), "float32", "normal"),
    "fempty": ((0, 3), "float32", "normal"), "f234": ((2, 3, 4), "float32", "normal"),
    "d34": ((3, 4), "float64", "normal"), "i34": ((3, 4), "int64", "ints"),
    "i3": ((3,), "int64", "ints"), "i0d": ((), "int64", "ints"),
    "b34": ((3, 4), "bool", "bools"), "f1": ((1,), "float32", "normal"),
    "f43t": ((4, 3), "float32", "transposed"),
}
DIMS = [0, 1, -1, 2, -3, 5, (0, 0), (0, 1), 1.5, None]
INDICES = {"idx_ok": [0, 2], "idx_neg": [-1], "idx_big": [3], "idx_big4": [4],
           "idx_2d": [[0], [1]], "idx_float": [0.0], "idx_empty": []}
SIZES = [(12,), (4, 3), (-1,), (-1, -1), (-2, 6), (5,), (0,), (2, 6), (3, 0)]
SCALARS = [2, -1, 0, 0.5, float("nan"), float("inf"), True, "a", None, [1, 2, 3]]


def _array(name: str, rng: np.random.Generator) -> np.ndarray:
    shape, dtype, fill = TENSORS[name]
    if fill == "normal":
        return rng.standard_normal(shape).astype(dtype)
    if fill == "ints":
        return rng.integers(-3, 5, shape).astype(dtype)
    if fill == "bools":
        return rng.random(shape) < 0.5
    return np.ascontiguousarray(rng.standard_normal(shape[::-1]).astype(dtype))  # transposed


def _make(m, value):
    """A probe value as an object of library ``m``."""
    kind, payload = value
    if kind == "tensor":
        name, arr = payload
        t = m.tensor(arr.copy())
        return t.t() if TENSORS[name][2] == "transposed" else t
    if kind == "index":
        arr = np.asarray(payload)
        return m.tensor(arr if arr.size or arr.dtype.kind == "f" else arr.astype(np.int64))
    return payload


# ---- the ops -----------------------------------------------------------------------------

T, D, I, S, N = "tensor", "dim", "index", "sizes", "scalar"  # argument kinds
ANY = tuple(TENSORS)
FLOATS = ("f34", "f0d", "fempty", "i34", "b34", "f234")

# (name, method?, argument pattern); a pattern lists the kind of each positional argument
OPS = [
    *[(n, False, (T,)) for n in ("exp", "log", "sqrt", "sin", "tanh", "sigmoid", "relu", "abs",
                                 "neg", "floor", "sign", "reciprocal", "erf", "square")],
    *[(n, False, (T, T)) for n in ("add", "sub", "mul", "div", "pow", "maximum", "minimum",
                                   "atan2", "remainder", "fmod", "floor_divide", "eq", "lt",
                                   "logical_and", "bitwise_and", "matmul", "dot", "mm", "outer")],
    *[(n, False, (T, N)) for n in ("add", "mul", "pow", "div", "remainder", "floor_divide")],
    *[(n, False, (T,)) for n in ("sum", "mean", "prod", "amax", "amin", "max", "min", "argmax",
                                 "argmin", "std", "var", "all", "any", "norm", "median")],
    *[(n, False, (T, D)) for n in ("sum", "mean", "prod", "amax", "amin", "max", "min",
                                   "argmax", "argmin", "logsumexp", "softmax", "log_softmax",
                                   "cumsum", "cumprod", "std", "var", "all", "any", "squeeze",
                                   "unsqueeze", "flip", "median", "count_nonzero")],
    *[(n, True, (D, D)) for n in ("transpose", "movedim", "swapaxes")],
    *[(n, True, (S,)) for n in ("reshape", "view", "expand", "repeat", "permute", "tile")],
    ("flatten", True, (D, D)), ("narrow", True, (D, D, D)), ("select", True, (D, D)),
    ("index_select", True, (D, I)), ("gather", True, (D, I)), ("take_along_dim", True, (I, D)),
    ("topk", True, (D,)), ("sort", True, (D,)), ("kthvalue", True, (D,)), ("roll", True, (D,)),
    ("tril", True, (D,)), ("triu", True, (D,)), ("diagonal", True, (D,)), ("chunk", True, (D,)),
    ("split", True, (D,)), ("unbind", True, (D,)), ("diff", True, (D,)), ("t", True, ()),
    ("masked_fill", True, (T, N)), ("where", False, (T, T, T)), ("clamp", True, (N, N)),
    ("fill_", True, (N,)), ("copy_", True, (T,)), ("__getitem__", True, (I,)),
    ("__getitem__", True, (D,)), ("to", True, ("dtype",)), ("view", True, ("dtype",)),
    ("cat", False, ("tensors", D)), ("stack", False, ("tensors", D)),
    ("zeros", False, (S,)), ("ones", False, (S,)), ("arange", False, (N, N)),
    ("linspace", False, (N, N, D)), ("eye", False, (D,)), ("full", False, (S, N)),
    ("one_hot", "F", (T,)), ("embedding", "F", (T, T)), ("cross_entropy", "F", (T, T)),
    ("mse_loss", "F", (T, T)), ("pad", "F", (T, S)), ("linear", "F", (T, T)),
    ("softmax", "F", (T, D)), ("dropout", "F", (T, N)),
]
DTYPES = ["int32", "int16", "float64", "bool", "uint8", "complex64"]


def _candidates(kind: str, rng: np.random.Generator) -> list:
    if kind == T:
        return [("tensor", (n, _array(n, rng))) for n in ANY]
    if kind == D:
        return [("raw", d) for d in DIMS]
    if kind == I:
        return [("index", v) for v in INDICES.values()]
    if kind == S:
        return [("raw", s) for s in SIZES]
    if kind == N:
        return [("raw", s) for s in SCALARS]
    if kind == "dtype":
        return [("dtype", d) for d in DTYPES]
    if kind == "tensors":
        return [("tensors", pair) for pair in (("f34", "f34"), ("f34", "f4"), ("f34", "i34"),
                                               ("f0d", "f0d"), ("fempty", "f34"))]
    raise ValueError(kind)


def _resolve(m, value, rng_arrays: dict):
    kind, payload = value
    if kind == "dtype":
        return getattr(m, payload)
    if kind == "tensors":
        return [m.tensor(rng_arrays[n].copy()) for n in payload]
    return _make(m, value)


def calls(seed: int = SEED):
    """(label, fn(m)) pairs: each fn builds its inputs in namespace ``m`` and calls the op."""
    out = []
    for name, where, pattern in OPS:
        key = zlib.crc32(f"{name}{where}{pattern}".encode())
        rng = np.random.default_rng(seed + key)
        arrays = {n: _array(n, rng) for n in TENSORS}
        receivers = [("tensor", (n, arrays[n])) for n in (ANY if where is True else FLOATS)]
        lists = ([receivers] if where is True else []) + [_candidates(k, rng) for k in pattern]
        combos = list(itertools.product(*lists))
        picked = random.Random(seed + key).sample(combos, min(PER_PATTERN, len(combos)))
        for combo in picked:
            label = f"{name}{'' if where is not True else '[method]'}(" + ", ".join(
                _label(v) for v in combo) + ")"
            out.append((name, label, _caller(name, where, combo, arrays)))
    return out


def _label(value) -> str:
    kind, payload = value
    if kind == "tensor":
        return payload[0]
    return repr(payload)


def _caller(name, where, combo, arrays):
    def call(m):
        args = [_resolve(m, v, arrays) for v in combo]
        if where is True:
            return getattr(args[0], name)(*args[1:])
        if where == "F":
            return getattr(m.nn.functional, name)(*args)
        return getattr(m, name)(*args)
    return call


# ---- classification ----------------------------------------------------------------------

RAW = re.compile(r"could not be broadcast|AxisError|did not contain a loop|ufunc|numpy|"
                 r"zero-size array|attempt to get arg|object has no attribute|object is not|"
                 r"setting an array element|__init__\(\)|inhomogeneous|not supported between|"
                 r"unsupported operand type\(s\) for [^:]*: 'int' and 'tuple'|axis \d|"
                 r"array of dimension|cannot reshape array|broadcast_to|ZeroDivisionError: "
                 r"division by zero|'list' object|'tuple' object|'float' object cannot")


def _numpy(r):
    if isinstance(r, (tuple, list)):
        return [_numpy(v) for v in r]
    if hasattr(r, "detach"):
        return r.detach().numpy()
    return np.asarray(r) if isinstance(r, (int, float, bool)) else r


def _same(a, b) -> bool:
    if isinstance(a, list) or isinstance(b, list):
        return isinstance(a, list) and isinstance(b, list) and len(a) == len(b) and all(
            _same(x, y) for x, y in zip(a, b, strict=True))
    if not isinstance(a, np.ndarray) or not isinstance(b, np.ndarray):
        return type(a) is type(b) and a == b
    if a.shape != b.shape or a.dtype != b.dtype:
        return False
    if a.dtype.kind in "fc":
        return bool(np.allclose(a, b, rtol=1e-5, atol=1e-6, equal_nan=True))
    return bool(np.array_equal(a, b))


def _run(fn, m):
    with warnings.catch_warnings(), np.errstate(all="ignore"):
        warnings.simplefilter("ignore")
        try:
            return fn(m), None
        except Exception as e:  # noqa: BLE001 - the outcome is what is measured
            return None, e


def classify(fn) -> tuple[str, str]:
    t_out, t_err = _run(fn, torch)
    g_out, g_err = _run(fn, gg)
    if t_err is not None and g_err is not None:
        if type(t_err) is not type(g_err) or (RAW.search(str(g_err))
                                               and str(t_err) not in str(g_err)):
            return "unhelpful_error", f"torch {type(t_err).__name__}: {str(t_err)[:90]} | " \
                                      f"graphgrad {type(g_err).__name__}: {str(g_err)[:120]}"
        return "agree", ""
    if t_err is not None:
        return "returns_where_torch_raises", f"torch {type(t_err).__name__}: {str(t_err)[:90]}"
    if g_err is not None:
        return "raises_where_torch_returns", f"graphgrad {type(g_err).__name__}: " \
                                             f"{str(g_err)[:120]}"
    try:
        same = _same(_numpy(t_out), _numpy(g_out))
    except Exception:  # noqa: BLE001 - a result that cannot be compared differs
        same = False
    return ("agree", "") if same else ("silently_wrong", "values, shape or dtype differ")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--examples", type=int, default=4)
    parser.add_argument("--seed", type=int, default=SEED)
    args = parser.parse_args()
    counts, per_op = Counter(), defaultdict(Counter)
    examples = defaultdict(list)
    probes = calls(args.seed)
    for name, label, fn in probes:
        category, why = classify(fn)
        counts[category] += 1
        if category != "agree":
            per_op[name][category] += 1
            if len(examples[category]) < args.examples:
                examples[category].append(f"{label}: {why}")
    worst = sorted(per_op.items(), key=lambda kv: -sum(kv[1].values()))[:15]
    print(json.dumps({
        "calls": len(probes),
        "counts": {k: counts.get(k, 0) for k in ("agree", "silently_wrong",
                                                 "returns_where_torch_raises",
                                                 "raises_where_torch_returns",
                                                 "unhelpful_error")},
        "worst_ops": {k: dict(v) for k, v in worst},
        "examples": examples,
        "torch": torch.__version__,
    }, indent=1))


if __name__ == "__main__":
    main()
