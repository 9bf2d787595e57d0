"""graphgrad.compile's guards see every change to what a captured graph read (class
attributes, function code and defaults, replaced methods, hooks, training flags, globals),
hold modules weakly, share graphs between instances of a class, and stop recompiling at
Dynamo's limits. Recompiles are counted with a counting backend, never timed."""

from __future__ import annotations

import gc
import warnings
import weakref

import numpy as np
import pytest

import graphgrad as gg
from graphgrad import compiler, nn
from graphgrad.dynamo import FailOnRecompileLimitHit, RecompileError, config, counters

from compile_guard_variants import measure, variants


@pytest.fixture(autouse=True)
def _fresh():
    compiler.reset()
    old = config.suppress_errors, config.recompile_limit
    config.suppress_errors = False
    config.check_stack_effect = True
    yield
    config.suppress_errors, config.recompile_limit = old
    config.check_stack_effect = False
    config.fail_on_recompile_limit_hit = config.error_on_recompile = False
    compiler.reset()


class Counting:
    """A backend that counts the graphs it is handed (each one is a compile)."""

    def __init__(self):
        self.n = 0

    def __call__(self, gm, examples):
        self.n += 1
        return gm.forward   # PyTorch's way: the GraphModule's own forward


def _close(a, b) -> None:
    np.testing.assert_allclose(a.detach().numpy(), b.detach().numpy(), rtol=1e-6, atol=1e-6)


# ---- the generated variants -------------------------------------------------------------------

def test_generated_variants_are_never_stale():
    vs = variants()
    assert len(vs) >= 400 and len({v.template for v in vs}) >= 9
    out = measure(vs)   # all of them: about a second
    assert out["errors"] == 0, out["error_examples"]
    assert out["insensitive"] == 0, out["insensitive_examples"]   # each mutation matters
    assert out["wrong_before_mutation"] == 0
    assert out["stale"] == 0, out["stale_examples"]
    assert out["compiler"]["eager_fallbacks"] == 0   # every call ran compiled graphs


# ---- each mutation kind recompiles once, and only when something changed ------------------------

class K(nn.Module):
    k = 2.0

    def __init__(self):
        super().__init__()
        self.lin = nn.Linear(3, 3)

    def scale(self, x):
        return x * self.k

    def forward(self, x):
        return self.scale(self.lin(x)) + 1.0


def _calls(cm, m, x, n=3):
    for _ in range(n):
        _close(cm(x), m(x))


@pytest.mark.parametrize("mutate", [
    lambda m: setattr(K, "k", 5.0),                             # class attribute
    lambda m: setattr(m, "k", 7.0),                             # instance shadow
    lambda m: setattr(m, "scale", lambda x: x - 1.0),           # method on the instance
    lambda m: setattr(K, "scale", lambda self, x: x * 4.0),     # method on the class
    lambda m: setattr(m, "forward", lambda x: x * 3.0),         # forward on the instance
    lambda m: m.register_forward_hook(lambda mod, a, out: out * 2.0),
    lambda m: m.register_forward_pre_hook(lambda mod, a: (a[0] + 1.0,)),
    lambda m: m.lin.register_forward_hook(lambda mod, a, out: out * -1.0),
], ids=["class-attr", "instance-shadow", "instance-method", "class-method", "forward",
        "forward-hook", "pre-hook", "submodule-hook"])
def test_each_mutation_is_seen(mutate, monkeypatch):
    monkeypatch.setattr(K, "k", 2.0)
    monkeypatch.setattr(K, "scale", K.scale)
    be = Counting()
    m = K()
    cm = gg.compile(m, backend=be)
    x = gg.randn(2, 3)
    _calls(cm, m, x)
    assert be.n == 1 and counters["recompiles"] == 0   # unchanged state: cache hits
    mutate(m)
    _calls(cm, m, x)
    assert be.n <= 2


def test_hook_removed_after_compile_is_no_longer_run():
    m = K()
    handle = m.lin.register_forward_hook(lambda mod, a, out: out * 10.0)
    cm = gg.compile(m)
    x = gg.randn(2, 3)
    _close(cm(x), m(x))
    handle.remove()
    _close(cm(x), m(x))


def test_helper_code_defaults_and_closure():
    def make():
        c = 2.0

        def helper(x, a=1.0, *, b=0.5):
            return x * a + b + c

        def f(x):
            return helper(x)

        def other(x, a=1.0, *, b=0.5):
            return x - a - b - c

        def set_c(v):
            nonlocal c
            c = v
        return f, helper, other, set_c

    f, helper, other, set_c = make()
    be = Counting()
    cf = gg.compile(f, backend=be)
    x = gg.randn(3)
    _close(cf(x), f(x))
    for change in (lambda: setattr(helper, "__defaults__", (4.0,)),
                   lambda: setattr(helper, "__kwdefaults__", {"b": -3.0}),
                   lambda: set_c(9.0),
                   lambda: setattr(helper, "__code__", other.__code__)):
        change()
        _close(cf(x), f(x))
        _close(cf(x), f(x))
    assert be.n == 5   # one compile per change, a cache hit on each second call


def test_class_attribute_through_the_class_and_type():
    class C:
        k = 2.0

    def f(x, o):
        return x * C.k + type(o).k

    cf = gg.compile(f)
    x, o = gg.randn(3), C()
    _close(cf(x, o), f(x, o))
    C.k = -4.0
    _close(cf(x, o), f(x, o))


def test_training_flag_of_a_submodule():
    m = nn.Sequential(nn.Linear(3, 3), nn.Dropout(0.5))
    cm = gg.compile(m)
    x = gg.randn(4, 3)
    m.eval()
    _close(cm(x), m(x))
    m[1].train()   # the submodule's flag alone: dropout runs again, on the same seed
    gg.manual_seed(0)
    a = cm(x)
    gg.manual_seed(0)
    b = m(x)
    _close(a, b)
    assert (a == 0).any() and not (m[0](x) == 0).any()   # some outputs were dropped
    m.eval()
    _close(cm(x), m(x))


# ---- instances of one class share graphs; nothing is kept alive -------------------------------

def test_many_instances_of_a_class_share_one_graph():
    be = Counting()
    x = gg.randn(2, 3)
    with warnings.catch_warnings():
        warnings.simplefilter("error")   # no recompile-limit warning
        for _ in range(12):
            m = K()
            _close(gg.compile(m, backend=be)(x), m(x))
    assert be.n == 1 and counters["eager_fallbacks"] == 0

    def f(mod, x):
        return mod(x) * 2.0
    cf = gg.compile(f, backend=be)
    for _ in range(12):
        m = K()
        _close(cf(m, x), f(m, x))
    assert be.n == 2


def test_identity_of_two_modules_is_guarded():
    class Pair(nn.Module):
        def __init__(self, a, b):
            super().__init__()
            self.a, self.b = a, b

        def forward(self, x):
            return self.a(x) * 2.0 if self.a is self.b else self.a(x) - self.b(x)

    lin = nn.Linear(3, 3)
    f = gg.compile(lambda m, x: m(x))
    x = gg.randn(3)
    for p in (Pair(lin, lin), Pair(lin, nn.Linear(3, 3)), Pair(lin, lin)):
        _close(f(p, x), p(x))


def test_a_deleted_model_is_freed_with_its_cache_entries():
    x = gg.randn(2, 3)
    m = K()
    cm = gg.compile(m)
    cm(x)
    ref = weakref.ref(m)
    del m, cm
    gc.collect()
    assert ref() is None

    def f(mod, x):
        return mod(x) + 1.0
    cf = gg.compile(f)
    m = K()
    cf(m, x)
    ref = weakref.ref(m)
    del m
    gc.collect()
    assert ref() is None


def test_an_object_guarded_by_identity_takes_its_entries_with_it():
    class Holder:
        def __init__(self, v):
            self.v = v

    def f(x, h):
        return x * h.v

    cf = gg.compile(f)
    x = gg.randn(3)
    h = Holder(2.0)
    _close(cf(x, h), f(x, h))
    assert len(cf.roots) == 1
    ref = weakref.ref(h)
    del h
    gc.collect()
    assert ref() is None and len(cf.roots) == 0   # the entry went with it
    h2 = Holder(3.0)
    _close(cf(x, h2), f(x, h2))


# ---- Dynamo's recompile limits ---------------------------------------------------------------

def _scale(x, n):
    return x * n


def test_recompile_limit_warns_once_naming_the_guard_then_runs_eagerly():
    config.cache_size_limit = 3   # PyTorch's alias
    assert config.recompile_limit == 3
    be = Counting()
    f = gg.compile(_scale, backend=be)
    x = gg.ones(2)
    with warnings.catch_warnings(record=True) as w:
        warnings.simplefilter("always")
        for n in range(6):
            assert f(x, n)[0].item() == n
        for n in range(6):   # entries already compiled are still used
            assert f(x, n)[0].item() == n
    assert be.n == 3 and counters["eager_fallbacks"] == 6
    msgs = [str(m.message) for m in w if "recompile_limit" in str(m.message)]
    assert len(msgs) == 1
    assert "hit config.recompile_limit (3)" in msgs[0] and "function: '_scale'" in msgs[0]
    assert "last reason: 0/2: n == 2" in msgs[0]


def test_fail_on_recompile_limit_hit_and_fullgraph_raise():
    config.recompile_limit = 2
    config.fail_on_recompile_limit_hit = True
    f = gg.compile(_scale)
    x = gg.ones(2)
    f(x, 0)
    f(x, 1)
    with pytest.raises(FailOnRecompileLimitHit, match="fail_on_recompile_limit_hit"):
        f(x, 2)
    config.fail_on_recompile_limit_hit = False
    compiler.reset()
    g = gg.compile(_scale, fullgraph=True)
    g(x, 0)
    g(x, 1)
    with pytest.raises(FailOnRecompileLimitHit, match="fullgraph=True"):
        g(x, 2)


def test_error_on_recompile():
    config.error_on_recompile = True
    f = gg.compile(_scale)
    x = gg.ones(2)
    f(x, 1)
    f(x, 1)
    with pytest.raises(RecompileError, match="Recompiling function _scale"):
        f(x, 2)


def test_a_compiled_function_with_defaults_is_freed():
    def make():
        def f(x, a=2.0):
            return x * a
        return f

    f = make()
    cf = gg.compile(f)
    cf(gg.ones(2))
    ref = weakref.ref(f)
    del f, cf
    gc.collect()
    assert ref() is None


def test_compile_counts_match_torch_dynamo():
    """PyTorch as the oracle of when to recompile: a recompile limit of 3 with 6 distinct
    strings compiles 3 times (every result right), and 4 instances of a module class
    compile once."""
    torch = pytest.importorskip("torch")

    def count(lib, reset, set_limit):
        n = [0]

        def backend(gm, examples):   # the same backend for both: a GraphModule each
            n[0] += 1
            return gm.forward

        def g(x, s):
            return x * len(s)

        class M(lib.nn.Module):
            def __init__(self):
                super().__init__()
                self.lin = lib.nn.Linear(3, 3)

            def forward(self, x):
                return self.lin(x).relu()

        reset()
        set_limit(3)
        cg = lib.compile(g, backend=backend)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            outs = [cg(lib.ones(2), "a" * (i + 1))[0].item() for i in range(6)]
        limited = n[0]
        set_limit(8)
        for _ in range(4):
            m = M()
            x = lib.ones(2, 3)
            np.testing.assert_allclose(lib.compile(m, backend=backend)(x).detach().numpy(),
                                       m(x).detach().numpy(), rtol=1e-6)
        return limited, n[0] - limited, outs

    ours = count(gg, compiler.reset, lambda v: setattr(config, "recompile_limit", v))
    dynamo = torch._dynamo
    old = dynamo.config.recompile_limit

    def set_theirs(v):
        dynamo.config.recompile_limit = v
    try:
        theirs = count(torch, dynamo.reset, set_theirs)
    finally:
        dynamo.config.recompile_limit = old
        dynamo.reset()
    assert ours == theirs == (3, 1, [1.0, 2.0, 3.0, 4.0, 5.0, 6.0])


def test_module_parameters_are_read_from_their_store():
    """A parameter is read from the module's ``_parameters`` in the guard and the step
    (``Module.__getattr__``, reached after the class lookup fails, runs for none of
    them), guarded against an instance attribute of its name: one put in the instance's
    ``__dict__`` afterwards (shadowing it, as for Python) recompiles."""
    backend = Counting()
    model = nn.Sequential(nn.Linear(3, 4), nn.ReLU(), nn.Linear(4, 2))
    cm = gg.compile(model, backend=backend)
    x = gg.ones(2, 3)
    _close(cm(x), model(x))
    calls = []
    orig = nn.Module.__getattr__

    def counted(self, name):
        calls.append(name)
        return orig(self, name)
    nn.Module.__getattr__ = counted
    try:
        _close(cm(x), model(x))
        calls.clear()
        cm(x)
    finally:
        nn.Module.__getattr__ = orig
    assert backend.n == 1 and not calls, calls
    model[2].__dict__["weight"] = nn.Parameter(gg.ones(2, 4))   # shadows _parameters'
    _close(cm(x), model(x))
    assert backend.n == 2


def test_a_class_attribute_of_a_parameter_name_is_read_as_an_attribute():
    """Where the class defines the name (a property here), ``Module.__getattr__`` is not
    what the lookup reaches: the read stays an attribute read."""
    class Scaled(nn.Linear):
        @property
        def scale(self):
            return self.weight * 2

        def forward(self, x):
            return x @ self.scale.T

    m = Scaled(3, 2)
    cm = gg.compile(m)
    x = gg.ones(2, 3)
    _close(cm(x), m(x))
    with gg.no_grad():
        m.weight.mul_(3)
    _close(cm(x), m(x))


def test_guard_reads_each_shared_source_once():
    """The guard function binds a submodule read by several guards to one local (one
    ``Module.__getattr__`` per call, not one per guard), and still sees a change behind
    that local: a replaced weight of another shape recompiles."""
    backend = Counting()
    model = nn.Sequential(nn.Linear(3, 4), nn.ReLU(), nn.Linear(4, 2))
    cm = gg.compile(model, backend=backend)
    x = gg.ones(2, 3)
    _close(cm(x), model(x))
    from graphgrad.dynamo.eval_frame import all_compiled
    (entry,) = [f for f in all_compiled() if f.roots]
    src = entry.roots[0].guard.source
    assert src.count("['0']") == 1 and src.count("['2']") == 1, src
    assert src.count("._parameters['weight']") == 2, src
    assert entry.roots[0].guard((model, x), {}, ()) and not entry.roots[0].guard((model,), {}, ())
    model[2].weight = nn.Parameter(gg.ones(5, 4))
    model[2].bias = nn.Parameter(gg.zeros(5))
    _close(cm(x), model(x))
    assert backend.n == 2
