"""Differential fuzzing of graphgrad.compile: generated small Python functions mixing
tensor ops, Python arithmetic, ifs on tensors and on Python values, loops, helper calls
with keyword arguments, closures, globals, tuples/lists/dicts, run compiled and eagerly
on many inputs that take different paths; compiled == eager every time. Guard
soundness: a changed global, shape, dtype or Python argument never reuses a stale graph.
"""

from __future__ import annotations

import math
import random

import numpy as np
import pytest

import graphgrad as gg
from graphgrad import compiler
from graphgrad.dynamo import config, counters


@pytest.fixture(autouse=True)
def _fresh():
    compiler.reset()
    old = config.suppress_errors, config.recompile_limit
    config.suppress_errors = False
    config.check_stack_effect = True
    config.recompile_limit = 200   # every input is run compiled, none falls back to eager
    yield
    config.suppress_errors, config.recompile_limit = old
    config.check_stack_effect = False


def same(want, got) -> None:
    """Equal results: same types, dtypes, shapes and values (nested)."""
    if isinstance(want, gg.Tensor):
        assert isinstance(got, gg.Tensor), (want, got)
        assert want.dtype == got.dtype and want.shape == got.shape, (want, got)
        assert want.layout is got.layout, (want, got)
        if want.is_sparse:  # compared as the dense tensors they stand for
            want, got = want.to_dense(), got.to_dense()
        np.testing.assert_allclose(got.detach().numpy(), want.detach().numpy(), rtol=1e-6,
                                   atol=1e-6)
    elif isinstance(want, (tuple, list)):
        assert type(want) is type(got) and len(want) == len(got), (want, got)
        for a, b in zip(want, got, strict=True):
            same(a, b)
    elif isinstance(want, dict):
        assert type(got) is dict and list(want) == list(got), (want, got)
        for key in want:
            same(want[key], got[key])
    else:
        assert type(want) is type(got) and want == got, (want, got)


# ---- the generator ------------------------------------------------------------------------------

_HELPERS = '''
def h_affine(a, k=2, *, b=1.0):
    return a * k + b

def h_pair(a, b):
    return a - b, a + b

def h_star(*ts, k=1):
    return sum(ts) * k

def h_branchy(a):
    if a.mean() > 0:
        return a * 0.5
    return -a
'''


# statement templates of the extended generator: calls that run for real, in-place
# updates, tensor values read as Python numbers, star-args, nested functions,
# comprehensions, f-strings, reads and writes of global state
_EXTENDED = {
    "external": ["{v} = {a} * float(np.cos(n) + math.sqrt(abs(n - 1)))"],
    "inplace": ["{v} = {a} * 1", "{v}.add_(1.5)", "{v} += {b}", "{v}.mul_(0.5)"],
    "item": ["s = float({a}.sum().item())", "{v} = {b} * s if s > 0 else {b} - s"],
    "star": ["args = [{a}, {b}]", "{v} = h_star(*args, **{{'k': n + 1}})"],
    "inner": ["def inner(t, k=n):", "    return t * k + {a}", "{v} = inner({b})"],
    "comprehension": ["parts = [t * (i + 1) for i, t in enumerate(({a}, {b}))]",
                      "named = {{f'p{{i}}': t for i, t in enumerate(parts)}}",
                      "{v} = parts[-1] - named['p0']"],
    "fstring": ["tag = f'{{n}}-{{flag!r}}'", "{v} = {a} * len(tag)"],
    "global_state": ["LOG.append(n)", "STATE['k'] = STATE.get('k', 0) + 1",
                     "{v} = {a} + LOG[-1] * 0.5"],
    "no_grad": ["with gg.no_grad():", "    {v} = {a} * 2 + {b}",
                "    if {v}.sum() > 0:", "        {v} = {v} - 1"],
    # values that change on every call, used through objects made at run time
    "runtime_values": ["u = RNG.random()", "arr = np.full(2, u) * RNG.randint(1, 3)",
                       "{v} = {a} * float(arr.sum()) + u",
                       "if arr.max() > 1.5:", "    {v} = {v} - int(u * 10)"],
}


class _Gen:
    """Writes one random function ``f(x, n, flag)`` as source text."""

    def __init__(self, rng: random.Random, extended: bool = False):
        self.r = rng
        self.extended = extended
        self.lines: list[str] = []
        self.tensors = ["x"]
        self.ints = ["n"]
        self.k = 0

    def new(self, prefix: str = "t") -> str:
        self.k += 1
        return f"{prefix}{self.k}"

    def c(self) -> str:
        return self.r.choice(["0.5", "2", "-1.5", "3", "0.25", "G_SCALE", "n", "cfg['w']"])

    def tensor_expr(self) -> str:
        a, b = self.r.choice(self.tensors), self.r.choice(self.tensors)
        return self.r.choice([
            f"{a} * {self.c()} + {b}", f"gg.tanh({a}) - {b} * {self.c()}",
            f"({a} - {b}).abs() + 1", f"h_affine({a}, k={self.c()}, b=0.5)",
            f"h_affine({a})", f"{a}.exp().clamp(max=5.0) * 0.1", f"gg.relu({a}) + {b}",
            f"h_pair({a}, {b})[{self.r.choice([0, 1])}]", f"h_branchy({a})",
            f"scale_by({a})", f"{a} / (1 + {b} * {b})", f"{a}.sum(0, keepdim=True) + {b}",
            f"{a}.detach() * 2 + {b}", f"{a}.to(gg.float32).double() - {b}",
            f"{a}.clone().mul_(2) + {b}.contiguous()",
        ])

    def stmt(self, depth: int, ind: str) -> None:
        kinds = ["assign"] * 4 + ["tif", "pif", "loop", "containers", "while",
                                  "intmath"] * (depth < 2)
        if self.extended:
            kinds += ["external", "inplace", "item", "star", "inner", "comprehension",
                      "fstring", "global_state", "runtime_values", "no_grad"]
        kind = self.r.choice(kinds)
        if kind in _EXTENDED:
            v = self.new()
            a, b = self.r.choice(self.tensors), self.r.choice(self.tensors)
            for line in _EXTENDED[kind]:
                self.lines.append(ind + line.format(v=v, a=a, b=b))
            self.tensors.append(v)
            return
        if kind == "assign":
            v = self.new()
            self.lines.append(f"{ind}{v} = {self.tensor_expr()}")
            self.tensors.append(v)
        elif kind == "tif":
            a = self.r.choice(self.tensors)
            cond = self.r.choice([f"{a}.sum() > 0", f"{a}.mean() < 0.3",
                                  f"({a} * 2).max() > 1", f"not {a}.sum() > 1"])
            self.branch(cond, depth, ind)
        elif kind == "pif":
            cond = self.r.choice(["flag", "n > 1", "n % 2 == 0 and flag", "len(cfg) > 2",
                                  "G_SCALE > 1", "x.shape[0] > 2", "x.ndim == 2 or n == 0"])
            self.branch(cond, depth, ind)
        elif kind == "loop":
            acc = self.new("acc")
            a = self.r.choice(self.tensors)
            seq = self.r.choice(["range(n)", "range(2)", "[0.5, 1.5]", "cfg['seq']",
                                 "enumerate([1, 2])"])
            self.lines.append(f"{ind}{acc} = {a} * 0")
            self.lines.append(f"{ind}for it in {seq}:")
            step = "it[1]" if "enumerate" in seq else "it"
            self.lines.append(f"{ind}    {acc} = {acc} + {a} * {step}")
            if self.r.random() < 0.4:
                self.lines.append(f"{ind}    if {acc}.sum() > 2:")
                self.lines.append(f"{ind}        {acc} = {acc} * 0.5")
            self.tensors.append(acc)
        elif kind == "containers":
            a, b = self.r.choice(self.tensors), self.r.choice(self.tensors)
            v = self.new()
            self.lines.append(f"{ind}d = {{'p': {a}, 'q': ({b}, n)}}")
            self.lines.append(f"{ind}lst = [d['p'], d['q'][0]]")
            self.lines.append(f"{ind}lst.append(lst[0] * d['q'][1])")
            self.lines.append(f"{ind}{v} = sum(lst) + len(lst)")
            self.tensors.append(v)
        elif kind == "while":
            a = self.r.choice(self.tensors)
            v = self.new()
            self.lines.append(f"{ind}{v} = {a}")
            self.lines.append(f"{ind}cnt = 0")
            self.lines.append(f"{ind}while {v}.sum() > 0 and cnt < 4:")
            self.lines.append(f"{ind}    {v} = {v} - 1.5")
            self.lines.append(f"{ind}    cnt += 1")
            self.tensors.append(v)
        else:
            m = self.new("m")
            self.lines.append(f"{ind}{m} = (n * 3 + len(cfg['seq'])) // 2 - int(flag)")
            v = self.new()
            self.lines.append(f"{ind}{v} = {self.r.choice(self.tensors)} * {m}")
            self.tensors.append(v)

    def branch(self, cond: str, depth: int, ind: str) -> None:
        saved = list(self.tensors)
        v = self.new()
        self.lines.append(f"{ind}if {cond}:")
        self.lines.append(f"{ind}    {v} = {self.tensor_expr()}")
        self.stmt(depth + 1, ind + "    ")
        self.tensors = list(saved)
        self.lines.append(f"{ind}else:")
        self.lines.append(f"{ind}    {v} = {self.tensor_expr()}")
        self.tensors = saved + [v]

    def source(self) -> str:
        for _ in range(self.r.randint(2, 5)):
            self.stmt(0, "    ")
        last = self.tensors[-1]
        ret = self.r.choice([last, f"({last}, n * 2)", f"[{last}, x]",
                             f"{{'out': {last}, 'n': n}}"])
        return "def f(x, n, flag):\n" + "\n".join(self.lines) + f"\n    return {ret}\n"


def _make(seed: int, extended: bool = False):
    src = _Gen(random.Random(seed), extended).source()
    ns = {"gg": gg, "G_SCALE": 2.0, "cfg": {"w": 0.5, "seq": [1, 2]}, "np": np,
          "math": math, "LOG": [0], "STATE": {}, "RNG": random.Random(0)}
    exec(_HELPERS, ns)  # noqa: S102 - the fuzzer's own code
    # a closure over a value from the enclosing scope
    exec("def _outer(c):\n    def scale_by(t):\n        return t * c\n    return scale_by\n"
         "scale_by = _outer(1.5)\n", ns)  # noqa: S102
    exec(compile(src, f"<fuzz {seed}>", "exec"), ns)  # noqa: S102
    return ns["f"], ns, src


def _inputs(rng: np.random.Generator):
    for shape in [(3,), (3,), (2, 3), (4,)]:
        for n in (0, 1, 2, 3):
            for flag in (True, False):
                scale = rng.choice([-2.0, 0.3, 1.0])
                yield gg.tensor(rng.standard_normal(shape) * scale), n, flag


@pytest.mark.parametrize("seed", range(30))
def test_compiled_equals_eager_on_generated_functions(seed):
    _differential(seed, extended=False)


@pytest.mark.parametrize("seed", range(30))
def test_compiled_equals_eager_with_external_calls_and_state(seed):
    _differential(1000 + seed, extended=True)


def _differential(seed: int, extended: bool) -> None:
    f, ns, src = _make(seed, extended)
    cf = gg.compile(f, backend="eager" if seed % 2 else "default")
    rng = np.random.default_rng(seed)
    for i, (x, n, flag) in enumerate(_inputs(rng)):
        ns["RNG"].seed(i)              # the same "random" values for both runs
        try:
            want = f(x, n, flag)
        except Exception as e:  # noqa: BLE001 - then compiled must raise the same error
            ns["RNG"].seed(i)
            with pytest.raises(type(e)):
                cf(x, n, flag)
            continue
        ns["RNG"].seed(i)
        # positionally, and with keyword arguments (another root entry of the cache)
        same(want, cf(x, n, flag) if n % 2 else cf(x, flag=flag, n=n))
    # guard soundness: globals and a mutable global read by the function change
    x = gg.tensor(rng.standard_normal(3))
    for scale, w, seq in [(3.0, 0.5, [1, 2]), (3.0, -1.0, [1, 2]), (0.5, -1.0, [3]),
                          (0.5, -1.0, [3, 1, 2])]:
        ns["G_SCALE"] = scale
        ns["cfg"]["w"] = w
        ns["cfg"]["seq"] = seq
        same(_seeded(f, ns, x, 2, True), _seeded(cf, ns, x, 2, True))
    # dtype change: a float64 graph is not reused for float32 input
    x32 = gg.tensor(rng.standard_normal(3), dtype=gg.float32)
    same(_seeded(f, ns, x32, 1, False), _seeded(cf, ns, x32, 1, False))
    assert counters["eager_fallbacks"] == 0 and counters["concrete_runs"] == 0, src


def _seeded(fn, ns, *args):
    ns["RNG"].seed(12345)
    return fn(*args)


def test_stale_graph_never_reused_for_changed_python_argument():
    def f(x, n, mode):
        if mode == "double":
            return x * n * 2
        return x + n

    cf = gg.compile(f)
    x = gg.ones(2)
    for n, mode in [(1, "double"), (2, "double"), (2, "add"), (1, "double"), (3, "add")]:
        same(f(x, n, mode), cf(x, n, mode))
    assert counters["recompiles"] == 3      # (1, double) came back from the cache
