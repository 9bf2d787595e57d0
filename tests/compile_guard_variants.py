"""Generated variants for ``graphgrad.compile``'s guards: compile, call, change one thing
the captured graph read, call again, and compare with eager. A variant is *stale* when
the second compiled call differs from eager (a guard missed the change).

Each template is Python source run in a fresh namespace (fresh code objects, globals and
classes, so no variant shares a cache with another); its ``mutations`` are statements
run in that namespace between the two calls. ``python tests/compile_guard_variants.py``
prints JSON measures; ``tests/test_compile_guards.py`` runs a deterministic sample.
"""

from __future__ import annotations

import itertools
import json
import sys
import warnings
from dataclasses import dataclass

import numpy as np

# template name -> (source defining ``make()``: the callable to compile, and optionally
# ``make_arg()``: a second argument, ``ARG``), the mutations (statements run in the
# template's namespace, where ``OBJ`` is the compiled target; ``V`` is replaced by a value)
_TEMPLATES: dict[str, tuple[str, list[str]]] = {
    "class_attr_via_instance": ("""
class C(nn.Module):
    k = 2.0
    def forward(self, x):
        return x * self.k + 1.0
class D(C):
    pass
def make():
    return D()
""", ["C.k = V", "D.k = V", "OBJ.k = V", "OBJ.__dict__['k'] = V"]),
    "class_attr_via_class": ("""
class C:
    k = 2.0
class D(C):
    pass
def f(x):
    return x * D.k - C.k
def make():
    return f
""", ["C.k = V", "D.k = V", "C.k = V; D.k = V + 1.0"]),
    "class_attr_via_type": ("""
class C:
    k = 2.0
    def __init__(self):
        self.w = 1.0
def f(x, o):
    return x * type(o).k + o.__class__.k * o.w
def make():
    return f
def make_arg():
    return C()
""", ["C.k = V", "ARG.w = V", "ARG.__class__.k = V"]),
    "helper_defaults": ("""
def helper(x, a=2.0, *, b=1.25):
    return x * a + b
def other(x, a=2.0, *, b=1.25):
    return x - a * b
def f(x):
    return helper(x) + 1.0
def make():
    return f
""", ["helper.__defaults__ = (V,)", "helper.__kwdefaults__ = {'b': V}",
      "helper.__code__ = other.__code__", "helper = other"]),
    "own_defaults": ("""
def f(x, a=2.0, *, b=1.25):
    return x * a + b
def g(x, a=2.0, *, b=1.25):
    return x - a - b
def make():
    return f
""", ["f.__defaults__ = (V,)", "f.__kwdefaults__ = {'b': V}", "f.__code__ = g.__code__"]),
    "closure_cells": ("""
def make():
    scale = 2.0
    def helper(x):
        return x * scale
    def f(x):
        return helper(x) + scale
    def set_scale(v):
        nonlocal scale
        scale = v
    global SET
    SET = set_scale
    return f
""", ["SET(V)"]),
    "instance_method": ("""
class C(nn.Module):
    def scale(self, x):
        return x * 2.0
    def forward(self, x):
        return self.scale(x) + 1.0
def make():
    return C()
""", ["OBJ.scale = lambda x: x * V", "OBJ.scale = types.MethodType(lambda self, x: x - V, OBJ)",
      "OBJ.forward = lambda x: x * V", "C.scale = lambda self, x: x + V"]),
    "submodule_method": ("""
class Inner(nn.Module):
    def forward(self, x):
        return x * 2.0
class C(nn.Module):
    def __init__(self):
        super().__init__()
        self.inner = Inner()
    def forward(self, x):
        return self.inner(x) + 1.0
def make():
    return C()
""", ["OBJ.inner.forward = lambda x: x * V", "Inner.forward = lambda self, x: x + V",
      "OBJ.inner = Inner(); OBJ.inner.forward = lambda x: x - V"]),
    "hooks": ("""
class Inner(nn.Module):
    def forward(self, x):
        return x * 2.0
class C(nn.Module):
    def __init__(self):
        super().__init__()
        self.inner = Inner()
    def forward(self, x):
        return self.inner(x) + 1.0
def make():
    return C()
""", ["OBJ.register_forward_hook(lambda m, a, out: out * V)",
      "OBJ.register_forward_pre_hook(lambda m, a: (a[0] + V,))",
      "OBJ.inner.register_forward_hook(lambda m, a, out: out * V)",
      "OBJ.inner.register_forward_pre_hook(lambda m, a: (a[0] - V,))"]),
    "class_method_patched": ("""
class Base:
    def combine(self, x):
        return x * 2.0
class C(Base):
    pass
def f(x, o):
    return o.combine(x) + 1.0
def make():
    return f
def make_arg():
    return C()
""", ["C.combine = lambda self, x: x * V", "Base.combine = lambda self, x: x + V",
      "ARG.combine = lambda x: x - V"]),
    "training_flags": ("""
class Inner(nn.Module):
    def forward(self, x):
        return x * 2.0 if self.training else x * 3.0
class C(nn.Module):
    def __init__(self):
        super().__init__()
        self.inner = Inner()
    def forward(self, x):
        y = self.inner(x)
        return y + 1.0 if self.training else y - 1.0
def make():
    return C()
""", ["OBJ.eval()", "OBJ.inner.eval()", "OBJ.inner.training = False"]),
    "globals": ("""
G = 2.0
def gfun(x):
    return x * 2.0
class Holder:
    val = 1.0
H = Holder()
def f(x):
    return gfun(x) * G + H.val + min(G, 10.0)
def make():
    return f
""", ["G = V", "gfun = lambda x: x - V", "H.val = V", "Holder.val = V", "H = Holder(); H.val = V",
      "min = lambda a, b: V"]),
    "module_state": ("""
class C(nn.Module):
    def __init__(self):
        super().__init__()
        self.lin = nn.Linear(3, 3)
        self.alpha = 2.0
    def forward(self, x):
        return self.lin(x) * self.alpha
def make():
    return C()
""", ["OBJ.alpha = V", "OBJ.lin = nn.Linear(3, 3)",
      "OBJ.lin.weight = nn.Parameter(torch.ones(3, 3) * V)",
      "torch.nn.init.constant_(OBJ.lin.bias, V)"]),
    "super_and_descriptors": ("""
class Base(nn.Module):
    k = 2.0
    def forward(self, x):
        return x * 2.0
class C(Base):
    @staticmethod
    def st(x):
        return x + 1.0
    @classmethod
    def cm(cls, x):
        return x * cls.k
    @property
    def p(self):
        return self.k * 3.0
    def forward(self, x):
        return super().forward(x) + self.st(x) + self.cm(x) + self.p
def make():
    return C()
""", ["Base.forward = lambda self, x: x * V", "C.st = staticmethod(lambda x: x - V)",
      "Base.k = V", "C.cm = classmethod(lambda cls, x: x + V)"]),
    "module_globals": ("""
mymod = types.ModuleType("mymod")
mymod.val = 2.0
GT = torch.ones(3)
def deco(fn):
    def wrapper(*a):
        return fn(*a)
    wrapper.inner = fn
    return wrapper
@deco
def helper(x, a=2.0):
    return x * a
def f(x):
    return helper(x) * mymod.val + GT
def make():
    return f
""", ["mymod.val = V", "GT.mul_(V)", "GT = torch.full((3,), V)",
      "helper.inner.__defaults__ = (V,)"]),
    "containers_and_buffers": ("""
class C(nn.Module):
    def __init__(self):
        super().__init__()
        self.layers = nn.ModuleList([nn.Linear(3, 3)])
        self.register_buffer("b", torch.ones(3))
        self.sizes = [1.0, 2.0]
    def forward(self, x):
        for layer in self.layers:
            x = layer(x)
        return x + self.b * self.sizes[0]
def make():
    return C()
""", ["OBJ.layers.append(nn.Linear(3, 3))", "OBJ.b = torch.full((3,), V)",
      "OBJ.sizes[0] = V", "OBJ.b.add_(V)"]),
    "other_instance": ("""
class C(nn.Module):
    def __init__(self):
        super().__init__()
        self.lin = nn.Linear(3, 3)
        self.k = 2.0
    def forward(self, x):
        return self.lin(x) * self.k
def f(x, m):
    return m(x) + 1.0
def make():
    return f
def make_arg():
    return C()
""", ["ARG = C()", "ARG = C(); ARG.k = V", "ARG = C(); ARG.lin = nn.Linear(3, 3, bias=False)",
      "ARG = C(); ARG.register_forward_hook(lambda m, a, out: out * V)"]),
}

_VALUES = (0.5, -1.5, 3.0, 7.25)
_BACKENDS = ("default", "eager")
_SHAPES = ((3,), (2, 3))


@dataclass(frozen=True)
class Variant:
    template: str
    mutation: str
    value: float
    backend: str
    shape: tuple

    @property
    def name(self) -> str:
        return f"{self.template}[{self.mutation.replace('V', repr(self.value))}|" \
               f"{self.backend}|{self.shape}]"


def variants() -> list[Variant]:
    """Every variant, in a fixed order."""
    out = []
    for (name, (_, muts)), value, backend, shape in itertools.product(
            _TEMPLATES.items(), _VALUES, _BACKENDS, _SHAPES):
        for m in muts:
            out.append(Variant(name, m, value, backend, shape))
    return out


def run_variant(v: Variant, torch) -> dict:
    """Run one variant; ``torch`` is the framework module (graphgrad)."""
    import types
    src, _ = _TEMPLATES[v.template]
    ns: dict = {"__name__": "guard_variant", "torch": torch, "nn": torch.nn, "types": types}
    exec(compile(src, f"<template {v.template}>", "exec"), ns)  # noqa: S102 - our source
    target = ns["make"]()
    ns["OBJ"] = target
    ns["ARG"] = ns["make_arg"]() if "make_arg" in ns else None
    compiled = torch.compile(target, backend=v.backend)
    x = torch.tensor(np.linspace(-1.0, 1.0, int(np.prod(v.shape))).reshape(v.shape),
                     dtype=torch.float32)

    def both():
        args = (x,) if ns["ARG"] is None else (x, ns["ARG"])   # (a mutation may rebind it)
        return (_array(compiled(*args)), _array(target(*args)))

    c0, e0 = both()
    exec(v.mutation.replace("V", repr(v.value)), ns)  # noqa: S102 - our source
    c1, e1 = both()
    return {"wrong_before": not _same(c0, e0), "stale": not _same(c1, e1),
            "sensitive": not _same(e0, e1)}


def _array(t) -> np.ndarray:
    return np.asarray(t.detach().numpy(), dtype=np.float64)


def _same(a: np.ndarray, b: np.ndarray) -> bool:
    return a.shape == b.shape and bool(np.allclose(a, b, rtol=1e-5, atol=1e-6))


def measure(sample: list[Variant] | None = None) -> dict:
    import graphgrad
    todo = variants() if sample is None else sample
    stale, wrong, insensitive, errors = [], [], [], []
    totals = dict.fromkeys(_COUNTED, 0)   # what the compiler did, over all variants
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        for v in todo:
            graphgrad.compiler.reset()
            try:
                r = run_variant(v, graphgrad)
            except Exception as e:  # noqa: BLE001 - counted and named in the report
                errors.append(f"{v.name}: {type(e).__name__}: {e}")
                continue
            for key in _COUNTED:
                totals[key] += graphgrad.compiler.counters[key]
            if r["stale"]:
                stale.append(v.name)
            if r["wrong_before"]:
                wrong.append(v.name)
            if not r["sensitive"]:
                insensitive.append(v.name)
    graphgrad.compiler.reset()
    return {"variants": len(todo), "templates": len({v.template for v in todo}),
            "stale": len(stale), "wrong_before_mutation": len(wrong),
            "insensitive": len(insensitive), "errors": len(errors),
            "compiler": totals, "stale_by_template": _by_template(stale),
            "stale_examples": stale[:20],
            "error_examples": errors[:10], "insensitive_examples": insensitive[:10]}


_COUNTED = ("graphs", "recompiles", "cache_hits", "graph_breaks", "eager_fallbacks")


def _by_template(names: list[str]) -> dict:
    out: dict[str, int] = {}
    for n in names:
        key = n.split("[")[0]
        out[key] = out.get(key, 0) + 1
    return out


if __name__ == "__main__":
    print(json.dumps(measure(), indent=1))
    sys.exit(0)
