"""The ``.code`` every capture frontend prints reads like PyTorch code and runs as
printed: exec'd alone (a fresh namespace, nothing but the text), its ``forward`` gives
what the IR's interpreter gives on the same graph. Graphs from fx.symbolic_trace,
jit.trace, jit.script and graphgrad.compile, over the capture corpus."""

from __future__ import annotations

import numpy as np
import pytest

import graphgrad as gg
from graphgrad import fx, jit
from graphgrad.graph import Interpreter
from graphgrad.graph.readable_code import attribute_input

from capture_corpus import CORPUS


def _leaves(out):
    return list(out) if isinstance(out, (tuple, list)) else [out]


def _exec(code: str, name: str = "forward"):
    namespace: dict = {}
    exec(compile(code, "<printed>", "exec"), namespace)  # noqa: S102 - the text under test
    return namespace[name]


def _same(printed, interpreted):
    printed, interpreted = _leaves(printed), _leaves(interpreted)
    assert len(printed) == len(interpreted)
    for a, b in zip(printed, interpreted, strict=True):
        np.testing.assert_allclose(a.detach().numpy(), b.detach().numpy(), rtol=1e-12)


def _reads_like_pytorch(code: str) -> None:
    assert code.count("import graphgrad") == 1
    assert "REGISTRY[" not in code.split("import graphgrad", 1)[1].split("\ndef ", 1)[1]


@pytest.mark.parametrize("case", CORPUS, ids=repr)
def test_symbolic_trace_code_runs_as_printed(case):
    gm = fx.symbolic_trace(case.fn)
    inputs = case.make_inputs(np.random.default_rng(3))
    _reads_like_pytorch(gm.code)
    _same(_exec(gm.code)(gm, *inputs), Interpreter(gm.ir, gm.state()).run(*inputs))


@pytest.mark.parametrize("case", CORPUS, ids=repr)
def test_jit_trace_code_runs_as_printed(case):
    inputs = case.make_inputs(np.random.default_rng(3))
    traced = jit.trace(case.fn, inputs)
    _reads_like_pytorch(traced.code)
    args = [*inputs, *traced.captured()]
    # a traced module's parameters are read as ``self.fc.weight``: only the user's inputs
    # (and tensors that are no module state) are arguments of the code
    code_args = [a for a, p in zip(args, traced.ir.inputs, strict=True)
                 if attribute_input(p) is None]
    _same(_exec(traced.code)(traced, *code_args), Interpreter(traced.ir).run(*args))


@pytest.mark.parametrize("case", [c for c in CORPUS if c.script_ok], ids=repr)
def test_jit_script_code_runs_as_printed(case):
    scripted = jit.script(case.fn)
    inputs = case.make_inputs(np.random.default_rng(3))
    compiled = scripted._for(list(inputs))
    args = [*inputs, *[get() for get in compiled.lifts.getters]]
    _reads_like_pytorch(scripted.code)
    forward = _exec(scripted.code)
    code_args = [a for a, p in zip(args, compiled.graph.inputs, strict=True)
                 if attribute_input(p) is None]
    printed = forward(scripted, *code_args) if isinstance(case.fn, gg.nn.Module) \
        else forward(*code_args)
    _same(printed, Interpreter(compiled.graph, scripted.submodules()).run(*args))


@pytest.mark.parametrize("case", CORPUS, ids=repr)
def test_compile_backend_code_runs_as_printed(case):
    handed = []

    def backend(gm, example_inputs):
        handed.append((gm, list(example_inputs)))
        return gm.forward

    gg.compiler.reset()
    inputs = case.make_inputs(np.random.default_rng(3))
    gg.compile(case.fn, backend=backend)(*inputs)
    assert handed
    for gm, example in handed:
        _reads_like_pytorch(gm.code)
        _same(_exec(gm.code)(gm, *example), Interpreter(gm.ir, gm.state()).run(*example))
    gg.compiler.reset()


# ---- graphs with what a module cannot print ----------------------------------------------

_BIG = gg.tensor(np.linspace(-1.0, 1.0, 100), dtype=gg.float64)   # > 64 elements


def _scaled(x):
    return (x * _BIG).sum(-1)


@pytest.mark.parametrize("capture", ["fx", "trace"])
def test_a_large_constant_is_an_attribute_and_the_code_runs_alone(capture):
    """torch.fx reads a global tensor by get_attr (``self._tensor_constant0``); jit.trace
    bakes it into the graph as a constant, which the code reads as an attribute too."""
    x = gg.tensor(np.random.default_rng(4).normal(size=(3, 100)))
    gm = fx.symbolic_trace(_scaled) if capture == "fx" else jit.trace(_scaled, (x,))
    code = gm.code
    attribute = "_tensor_constant0" if capture == "fx" else "_code_constant0"
    assert "not self-contained" not in code and f"self.{attribute}" in code
    assert getattr(gm, attribute).shape == (100,)
    _same(_exec(code)(gm, x), _scaled(x))


def _noisy(x):
    return x * gg.rand_like(x)


def test_a_random_draw_is_named_in_the_header_and_runs_with_the_programs_globals():
    x = gg.randn(4, dtype=gg.float64)
    traced = jit.trace(_noisy, (x,), check_trace=False)
    head = [line for line in traced.code.splitlines() if line.startswith("# not self-contained")]
    assert len(head) == 1 and "_random" in head[0]
    with pytest.raises(NameError, match="_random"):   # what the header says: not alone
        _exec(traced.code)(traced, x)
    namespace = dict(traced._python.globals)            # with the program's globals it runs
    exec(compile(traced.code, "<printed>", "exec"), namespace)  # noqa: S102
    gg.manual_seed(5)
    (printed,) = namespace["forward"](traced, x)
    gg.manual_seed(5)
    _same(printed, _noisy(x))


class _Twice(gg.autograd.Function):
    @staticmethod
    def forward(ctx, x):
        return x * 2

    @staticmethod
    def backward(ctx, g):
        return g * 2


def test_a_custom_function_is_named_in_the_header():
    traced = jit.trace(lambda x: _Twice.apply(x) + 1, (gg.randn(3),))
    (head,) = [line for line in traced.code.splitlines()
               if line.startswith("# not self-contained")]
    assert "_TwiceFunction" in head
