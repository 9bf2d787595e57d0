"""graphgrad.jit.trace: the lecture's outcomes for JIT tracing (branch: TracerWarning and
only the branch taken; shape_dependent: right for other shapes; external: an error
naming ``np.random.rand`` and its line, or with strict=False a warning and a frozen
value), the capture corpus (outputs and gradients equal eager's on fresh inputs),
modules that keep training, check_trace, external code, in-place ops, printing."""

from __future__ import annotations

import inspect
import random
import time
import warnings

import numpy as np
import pytest

import graphgrad as gg
from graphgrad import jit, nn
from graphgrad.func.pytree import tree_flatten
from graphgrad.graph import Interpreter, python_code, to_dot
from graphgrad.jit.tracing import ExternalCallError, TracingCheckError

from capture_corpus import CORPUS
from lecture_cases import branch, external, shape_dependent
from random_cases import (DropoutBlock, check_random_capture, check_stop_gradient,
                          dropout_layer, inputs_of, noisy, stop_gradient)

TracerWarning = jit.TracerWarning
BOOL_WARNING = ("Converting a tensor to a Python boolean might cause the trace to be incorrect. "
                "We can't record the data flow of Python values, so this value will be "
                "treated as a constant in the future. This means that the trace might not "
                "generalize to other inputs!")


def _line_of(fn, text: str) -> int:
    lines, first = inspect.getsourcelines(fn)
    return first + next(k for k, line in enumerate(lines) if text in line)


def _trace(fn, example, **kw):
    """Trace, returning the TracedFunction and the warnings it gave."""
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        traced = jit.trace(fn, example, **kw)
    return traced, caught


def _calls(graph) -> list[str]:
    return [n.op.__name__ for n in graph.nodes if n.kind == "call"]


def _close(a, b) -> bool:
    return np.allclose(a._array, b._array, rtol=1e-10, atol=1e-12)


# ---- the lecture's three functions -----------------------------------------------------

def test_branch_warns_and_keeps_only_the_branch_taken():
    traced, caught = _trace(branch, (gg.tensor(2.0),))
    [w] = [w for w in caught if issubclass(w.category, TracerWarning)]
    assert str(w.message) == BOOL_WARNING
    assert w.filename.endswith("lecture_cases.py")
    assert w.lineno == _line_of(branch, "if x < 0")
    assert _calls(traced.ir) == ["Sub"]           # no Lt, no Add: x - 1 only
    assert traced(gg.tensor(5.0)).item() == 4.0      # right where the example's branch holds
    assert traced(gg.tensor(-1.0)).item() == -2.0    # silently wrong on the other branch
    assert branch(gg.tensor(-1.0)).item() == 0.0


def test_branch_traced_on_a_negative_example_holds_the_other_branch():
    traced, _ = _trace(branch, (gg.tensor(-3.0),))
    assert _calls(traced.ir) == ["Add"]
    assert traced(gg.tensor(-1.0)).item() == 0.0
    assert traced(gg.tensor(1.0)).item() == 2.0      # eager gives 0


@pytest.mark.parametrize("shape", [(4, 5), (1, 7), (3, 3), (6, 2)])
def test_shape_dependent_is_right_for_other_shapes(shape):
    traced, caught = _trace(shape_dependent, (gg.randn(2, 3, dtype=gg.float64),))
    assert not [w for w in caught if issubclass(w.category, TracerWarning)]
    kinds = [n.kind for n in traced.ir.nodes]
    assert "shape" in kinds and "Reshape" in _calls(traced.ir)
    traced.ir.verify()
    x = gg.randn(*shape, dtype=gg.float64)
    assert traced(x).shape == (shape[1], shape[0])
    assert _close(traced(x), shape_dependent(x))
    a, b = x.detach().requires_grad_(), x.detach().requires_grad_()
    (traced(a) ** 2).sum().backward()
    (shape_dependent(b) ** 2).sum().backward()
    assert _close(a.grad, b.grad)


def test_external_raises_naming_the_call_and_its_line():
    with pytest.raises(ExternalCallError) as info:
        jit.trace(external, (gg.tensor([1.0, 2.0]),))
    msg = str(info.value)
    assert "np.random.rand()" in msg and "numpy.random.rand" in msg
    assert f'lecture_cases.py", line {_line_of(external, "np.random.rand")}' in msg
    assert "return x + np.random.rand()" in msg
    assert "strict=False" in msg
    assert np.random.rand.__module__ is not None and not hasattr(np.random.rand,
                                                                 "__graphgrad_original__")


def test_external_with_strict_false_warns_and_freezes_the_value():
    traced, caught = _trace(external, (gg.tensor([1.0]),), strict=False, check_trace=False)
    [w] = [w for w in caught if issubclass(w.category, TracerWarning)]
    assert "np.random.rand()" in str(w.message) and "frozen" in str(w.message)
    assert w.lineno == _line_of(external, "np.random.rand")
    x = gg.tensor([0.0])
    first, second = traced(x).item(), traced(x).item()
    assert first == second                                  # the same number every call
    assert external(x).item() != external(x).item()         # eager: a fresh one each call


def test_check_trace_catches_the_frozen_random_number():
    with pytest.raises(TracingCheckError, match="Graphs differed across invocations"), \
            pytest.warns(TracerWarning, match="frozen"):
        jit.trace(external, (gg.tensor([1.0]),), strict=False)


# ---- the corpus: outputs and gradients equal eager's on fresh inputs ---------------------

@pytest.mark.parametrize("case", [c for c in CORPUS if c.trace_ok], ids=repr)
def test_corpus_matches_eager(case):
    traced, caught = _trace(case.fn, case.make_inputs(np.random.default_rng(0)))
    messages = {str(w.message) for w in caught if issubclass(w.category, TracerWarning)}
    assert not messages  # (conv2d is one op: it no longer slices its input by sizes)
    traced.ir.verify()
    fresh = case.make_inputs(np.random.default_rng(1))
    a = [x.detach().requires_grad_() for x in fresh]
    b = [x.detach().requires_grad_() for x in fresh]
    got, want = tree_flatten(traced(*a))[0], tree_flatten(case.fn(*b))[0]
    assert len(got) == len(want)
    for g, w in zip(got, want, strict=True):
        assert g.shape == w.shape and _close(g, w)
    params = list(case.fn.parameters()) if isinstance(case.fn, nn.Module) else []
    for p in params:
        p.grad = None
    sum((g * g).sum() for g in got).backward()
    grads = [p.grad for p in params]
    for p in params:
        p.grad = None
    sum((w * w).sum() for w in want).backward()
    for x, y in zip(a, b, strict=True):
        assert _close(x.grad, y.grad)
    for g, p in zip(grads, params, strict=True):
        assert _close(g, p.grad)
    # the printed program computes what the interpreter computes
    args = [*fresh, *traced.captured()]
    printed = python_code(traced.ir).fn(*args)
    for g, w in zip(printed, Interpreter(traced.ir).run(*args), strict=True):
        assert _close(g, w)


# ---- modules -------------------------------------------------------------------------------

def test_module_parameters_stay_live_so_training_works():
    gg.manual_seed(1)
    model = nn.Sequential(nn.Linear(4, 8, dtype=gg.float64), nn.Tanh(),
                          nn.Linear(8, 1, dtype=gg.float64))
    twin = nn.Sequential(nn.Linear(4, 8, dtype=gg.float64), nn.Tanh(),
                         nn.Linear(8, 1, dtype=gg.float64))
    twin.load_state_dict(model.state_dict())
    x = gg.randn(16, 4, dtype=gg.float64)
    y = gg.randn(16, 1, dtype=gg.float64)
    traced, _ = _trace(model, (x,))
    names = [p.name for p in traced.ir.inputs]
    assert names == ["input", "0_weight", "0_bias", "2_weight", "2_bias"]  # input, then state
    opt = gg.optim.SGD(model.parameters(), lr=0.1)
    opt_twin = gg.optim.SGD(twin.parameters(), lr=0.1)
    for _ in range(5):
        for net, o in ((traced, opt), (twin, opt_twin)):
            o.zero_grad()
            ((net(x) - y) ** 2).mean().backward()
            o.step()
    assert _close(traced(x), twin(x))
    assert _close(model(x), twin(x))


def test_dropout_in_training_mode_is_a_random_node_and_eval_mode_has_none():
    model = nn.Sequential(nn.Linear(3, 3, dtype=gg.float64), nn.Dropout(0.5))
    traced, caught = _trace(model, (gg.randn(4, 3, dtype=gg.float64),))
    [w] = [w for w in caught if issubclass(w.category, TracerWarning)]
    assert str(w.message).startswith("Trace had nondeterministic nodes. Did you forget call "
                                      ".eval() on your model? Nodes:\n\trandom_uniform")
    assert [n.kind for n in traced.ir.nodes].count("random") == 1
    x = gg.randn(50, 3, dtype=gg.float64)
    assert not np.array_equal(traced(x).detach().numpy(), traced(x).detach().numpy())
    model.eval()   # the training flag is the module's state at trace time, as in PyTorch
    traced, caught = _trace(model, (gg.randn(4, 3, dtype=gg.float64),))
    assert "random" not in [n.kind for n in traced.ir.nodes] and not caught
    assert _close(traced(x), model(x))


@pytest.mark.parametrize("fn", [dropout_layer, noisy, DropoutBlock],
                         ids=lambda f: f.__name__)
def test_random_capture_corpus(fn):
    fn = fn() if isinstance(fn, type) else fn
    inputs = inputs_of(fn)
    traced, caught = _trace(fn, inputs)
    assert [str(w.message).split(".")[0] for w in caught] == [
        "Trace had nondeterministic nodes"]   # no other warning, and the check passes
    check_random_capture(traced, fn, inputs)
    bigger = inputs_of(fn, rows=9)   # the draws follow the traced sizes
    gg.manual_seed(2)
    got = traced(*bigger)
    gg.manual_seed(2)
    np.testing.assert_array_equal(got.detach().numpy(), fn(*bigger).detach().numpy())


def test_random_sizes_follow_traced_sizes():
    def f(x):
        return x + gg.rand(x.shape[0], 1, dtype=gg.float64)
    traced, caught = _trace(f, (gg.zeros(3, 2, dtype=gg.float64),))
    [node] = [n for n in traced.ir.nodes if n.kind == "random"]
    assert node.spec.shape == (None, 1) and len(caught) == 1   # the nondeterminism note
    z = gg.zeros(5, 2, dtype=gg.float64)
    gg.manual_seed(4)
    got = traced(z)
    gg.manual_seed(4)
    np.testing.assert_array_equal(got.numpy(), f(z).numpy())
    gg.manual_seed(4)   # the printed code draws the same way
    (printed,) = python_code(traced.ir).fn(z)
    np.testing.assert_array_equal(printed.numpy(), got.numpy())


def test_a_draw_from_a_users_generator_is_frozen_with_a_warning():
    g = gg.Generator().manual_seed(0)

    def noisy_g(x):
        return x + gg.rand(3, dtype=gg.float64, generator=g)
    with pytest.raises(TracingCheckError, match="Tensor-valued Constant nodes differed"), \
            pytest.warns(TracerWarning, match="draws random numbers"):
        jit.trace(noisy_g, (gg.zeros(3, dtype=gg.float64),))
    traced, caught = _trace(noisy_g, (gg.zeros(3, dtype=gg.float64),), check_trace=False)
    [w] = caught   # said at trace time, naming the line
    assert str(w.message).startswith("`gg.rand(3, dtype=gg.float64, generator=g)` draws "
                                     "random numbers, which the trace freezes into the graph")
    assert w.lineno == _line_of(noisy_g, "gg.rand")
    z = gg.zeros(3, dtype=gg.float64)
    assert _close(traced(z), traced(z))


def test_check_trace_leaves_the_generator_as_it_found_it():
    gg.manual_seed(9)
    jit.trace(noisy, inputs_of(noisy), check_trace=False)
    unchecked = gg.rand(3).numpy()
    gg.manual_seed(9)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        jit.trace(noisy, inputs_of(noisy))
    np.testing.assert_array_equal(gg.rand(3).numpy(), unchecked)


# ---- check_trace ---------------------------------------------------------------------------

def test_check_inputs_on_the_other_branch_show_the_graphs_differ():
    with pytest.raises(TracingCheckError, match="Graphs differed across invocations") as info, \
            pytest.warns(TracerWarning):
        jit.trace(branch, (gg.tensor(1.0),), check_inputs=[(gg.tensor(-1.0),)])
    assert "Sub" in str(info.value) and "Add" in str(info.value)
    torch = pytest.importorskip("torch")
    with pytest.raises(torch.jit._trace.TracingCheckError) as oracle, \
            warnings.catch_warnings():
        warnings.simplefilter("ignore")
        torch.jit.trace(branch, (torch.tensor(1.0),), check_inputs=[(torch.tensor(-1.0),)])
    head = "\n".join(str(oracle.value).splitlines()[:3])   # the diff itself is ours
    assert head == ("Tracing failed sanity checks!\nERROR: Graphs differed across "
                    "invocations!\n\tGraph diff:")
    assert str(info.value).startswith(head + "\n\t\t")


def test_check_inputs_of_another_shape_pass_for_a_shape_generic_trace():
    jit.trace(shape_dependent, (gg.randn(2, 3),), check_inputs=[(gg.randn(5, 4),)])


# ---- sizes, conversions, external code ---------------------------------------------------

def test_size_arithmetic_is_recorded():
    def f(x):
        n, m = x.shape
        return x.reshape(m * n // 2, 2) * (n / 2) + (m - 1) ** 2 + x.sum() / x.numel()
    traced, caught = _trace(f, (gg.randn(2, 6, dtype=gg.float64),))
    assert not caught
    for shape in [(4, 3), (1, 2), (5, 6)]:
        x = gg.randn(*shape, dtype=gg.float64)
        assert _close(traced(x), f(x))


def test_view_by_batch_size_generalizes():
    def flatten_batch(x):
        return x.view(x.size(0), -1)
    traced, _ = _trace(flatten_batch, (gg.randn(2, 3, 4),))
    assert traced(gg.randn(7, 3, 4)).shape == (7, 12)


def test_new_tensors_sized_by_traced_sizes_follow_the_input():
    def f(x):
        buf = x.new_zeros(x.shape[0], 2)
        buf[:, 0] = x
        return buf + x.new_full((x.shape[0], 1), 3.0)
    traced, caught = _trace(f, (gg.randn(3, dtype=gg.float64),))
    assert not caught
    x = gg.randn(6, dtype=gg.float64)
    assert _close(traced(x), f(x))


def test_like_constructors_warn_that_they_are_constants():
    def f(x):
        return gg.where(x > 0, x, gg.zeros_like(x))
    traced, caught = _trace(f, (gg.randn(3, dtype=gg.float64),))
    [w] = caught
    assert str(w.message).startswith("`gg.zeros_like(x)` makes a constant of the example's "
                                     "shape [3]")
    assert w.lineno == _line_of(f, "zeros_like")


def test_sizes_that_become_plain_ints_warn():
    def f(x):
        return x + gg.zeros(x.shape[0])
    _, caught = _trace(f, (gg.randn(3),))
    [w] = caught
    assert str(w.message).startswith("Converting a tensor to a Python integer might cause the "
                                     "trace to be incorrect.")
    assert w.lineno == _line_of(f, "gg.zeros")


def _torch_tracer_warnings(fn, example) -> list[str]:
    """What torch.jit.trace (the oracle) warns for the same function on torch tensors."""
    torch = pytest.importorskip("torch")
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        torch.jit.trace(fn, example, check_trace=False)
    return [str(w.message) for w in caught if w.category is torch.jit.TracerWarning]


CONVERSIONS = {"float": lambda x: float(x.sum()), "int": lambda x: int(x.sum()),
               "item": lambda x: x.sum().item(), "tolist": lambda x: x.sum().tolist(),
               "len": lambda x: len(x)}


@pytest.mark.parametrize("kind", sorted(CONVERSIONS))
def test_python_number_conversions_warn_as_pytorch_and_specialize(kind):
    torch = pytest.importorskip("torch")

    def f(x):
        return x * CONVERSIONS[kind](x)
    traced, caught = _trace(f, (gg.ones(3, dtype=gg.float64),))
    expected = _torch_tracer_warnings(f, (torch.ones(3, dtype=torch.float64),))
    assert [str(w.message) for w in caught] == expected and len(expected) == 1
    assert caught[0].lineno == CONVERSIONS[kind].__code__.co_firstlineno  # the user's line
    assert _close(traced(gg.full((3,), 2.0, dtype=gg.float64)),
                  gg.full((3,), 6.0, dtype=gg.float64))   # 2 * 3: the example's value, frozen


def test_branch_warning_is_pytorchs():
    torch = pytest.importorskip("torch")
    _, caught = _trace(branch, (gg.tensor(1.0),))
    assert [str(w.message) for w in caught] == _torch_tracer_warnings(branch,
                                                                       (torch.tensor(1.0),))


def test_numpy_conversion_with_strict_false_warns_as_pytorch():
    torch = pytest.importorskip("torch")

    def f(x):
        return x * float(x.numpy().sum())
    _, caught = _trace(f, (gg.ones(2),), strict=False)
    ours = [str(w.message) for w in caught]
    theirs = _torch_tracer_warnings(f, (torch.ones(2),))
    assert ours[0] == theirs[0]     # "Converting a tensor to a NumPy array might cause ..."


def test_iteration_warns():
    _, caught = _trace(lambda x: sum(r for r in x), (gg.ones(3, 2),))
    assert str(caught[0].message).startswith("Iterating over a tensor might cause")


@pytest.mark.parametrize("fn, text", [
    (lambda x: x * time.time(), "time.time()"),
    (lambda x: x * random.random(), "random.random()"),
    (lambda x: x * random.uniform(0, 1), "random.uniform(0, 1)"),
    (lambda x: x * np.random.randn(), "np.random.randn()"),
    (lambda x: np.sin(x), "np.sin(x)"),
    (lambda x: x - np.mean(x), "np.mean(x)"),
    (lambda x: gg.tensor(x.numpy()) * 2, "x.numpy()"),
    (lambda x: gg.tensor(np.asarray(x)), "np.asarray(x)")])
def test_external_code_raises_naming_it(fn, text):
    with pytest.raises(ExternalCallError) as info:
        jit.trace(fn, (gg.ones(2),))
    assert f"`{text}`" in str(info.value)
    assert f'test_jit_trace.py", line {_line_of(test_external_code_raises_naming_it, text)}' \
        in str(info.value)


def test_print_and_numpy_constants_are_allowed(capsys):
    def f(x):
        print("shape", x.shape)
        return np.ones(3) + x * np.float64(2.0)
    traced, caught = _trace(f, (gg.zeros(3, dtype=gg.float64),))
    assert not caught and "shape graphgrad.Size([3])" in capsys.readouterr().out
    assert _close(traced(gg.ones(3, dtype=gg.float64)), gg.full((3,), 3.0, dtype=gg.float64))


# ---- in-place ops ----------------------------------------------------------------------------

def test_inplace_ops_are_recorded():
    def f(x):
        y = x.clone()
        y.add_(1)
        y[0] = 0
        y *= x
        out = gg.zeros(3, dtype=gg.float64)   # a buffer filled from traced values
        out[0] = y.sum()
        out[1:] = y[1, :2]
        z = x.clone()
        z.fill_(2.0)
        return out * 2, z + x
    traced, caught = _trace(f, (gg.randn(3, 2, dtype=gg.float64),))
    assert not caught
    x = gg.randn(3, 2, dtype=gg.float64)
    for g, w in zip(traced(x), f(x), strict=True):
        assert _close(g, w)


def test_unrecorded_change_through_a_view_warns():
    def f(x):
        y = x.clone()
        y[0].mul_(0)       # a view of y changed in place: y's node is out of date
        return y * 1
    _, caught = _trace(f, (gg.randn(3, 2, dtype=gg.float64),), check_trace=False)
    assert any("changed in place" in str(w.message) for w in caught)


# ---- outputs, inputs, printing ---------------------------------------------------------------

def test_list_outputs_need_strict_false():
    def f(x):
        return [x + 1, x * 2]
    with pytest.raises(RuntimeError, match="Encountering a list at the output of the tracer"):
        jit.trace(f, (gg.ones(2),))
    traced, _ = _trace(f, (gg.ones(2),), strict=False)
    out = traced(gg.ones(2))
    assert isinstance(out, list) and _close(out[1], gg.full((2,), 2.0))


def test_bad_inputs():
    with pytest.raises(TypeError, match="Type 'int' cannot be traced"):
        jit.trace(lambda x: x, (3,))
    traced = jit.trace(lambda x: x * 2, gg.ones(2))          # one Tensor: wrapped in a tuple
    with pytest.raises(TypeError, match="traced with 1 input"):
        traced(gg.ones(2), gg.ones(2))


def test_printing_and_drawing():
    traced, _ = _trace(shape_dependent, (gg.randn(2, 3, dtype=gg.float64),))
    assert "placeholder" in traced.tabular() and "Reshape" in traced.tabular()
    assert traced.code.splitlines()[1] == "# graphgrad.jit.trace on inputs f64[2, 3]"
    assert "def forward(self, x):" in traced.code   # a GraphModule's forward
    assert "tuple(x.shape)" in traced.code and "int(" in traced.code
    assert to_dot(traced.ir).startswith("digraph")
    x = gg.randn(4, 2, dtype=gg.float64)
    (printed,) = python_code(traced.ir).fn(x)
    assert _close(printed, shape_dependent(x))
    assert repr(traced).startswith("<TracedFunction shape_dependent(x: f64[2, 3])")


def test_detach_and_data_are_stop_gradient_nodes():
    traced, caught = _trace(stop_gradient, inputs_of(stop_gradient))
    assert _calls(traced.ir).count("Detach") == 1 and not caught
    check_stop_gradient(traced)

    def f(x):
        return x * (x * 2).data
    traced, _ = _trace(f, (gg.ones(2),))
    assert _calls(traced.ir) == ["Mul", "Detach", "Mul"]
    x = gg.full((2,), 3.0, requires_grad=True)
    traced(x).sum().backward()
    assert _close(x.grad, gg.full((2,), 6.0))


def test_traced_function_composes_with_transforms():
    from graphgrad import func

    def f(x):
        return (gg.tanh(x) ** 2).sum() * x.shape[0]
    traced, _ = _trace(f, (gg.randn(3, dtype=gg.float64),))
    x = gg.randn(3, dtype=gg.float64)
    assert _close(func.grad(traced)(x), func.grad(f)(x))
    assert _close(func.hessian(traced)(x), func.hessian(f)(x))   # second order, by extension
    assert jit.TracerWarning is TracerWarning and issubclass(ExternalCallError, RuntimeError)


def test_loop_over_range_of_a_size_unrolls_and_check_inputs_catch_it():
    def loop_in_traced_fn(x):            # PyTorch's documentation example
        result = x[0]
        for i in range(x.size(0)):
            result = result * x[i]
        return result
    traced, _ = _trace(loop_in_traced_fn, (gg.rand(3, 4, 5),))
    assert _calls(traced.ir).count("Mul") == 3           # unrolled for the example
    with pytest.raises(TracingCheckError, match="Graphs differed across invocations"):
        jit.trace(loop_in_traced_fn, (gg.rand(3, 4, 5),), check_inputs=[(gg.rand(4, 5, 6),)])


def test_an_unused_draw_stays_so_seeded_calls_match_the_function():
    def f(x):
        gg.rand_like(x)          # drawn and dropped: later draws depend on it
        return x + gg.rand(3, dtype=gg.float64)
    traced, _ = _trace(f, (gg.zeros(3, dtype=gg.float64),))
    assert [n.kind for n in traced.ir.nodes].count("random") == 2
    z = gg.zeros(3, dtype=gg.float64)
    gg.manual_seed(6)
    got = traced(z)
    gg.manual_seed(6)
    np.testing.assert_array_equal(got.numpy(), f(z).numpy())
