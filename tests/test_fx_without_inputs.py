"""graphgrad.fx as torch.fx is used: ``symbolic_trace`` with no example inputs records
what torch.fx records (calls that need an unknown rank as call_function/call_method
nodes run when the graph runs), ``ShapeProp`` fills in the shapes, and
``Interpreter``/``Transformer``/``wrap``/``Tracer`` subclasses written once for both
libraries give the same results. torch.fx runs the same programs in the same tests."""

from __future__ import annotations

import types

import numpy as np
import pytest

import graphgrad as gg
from graphgrad import fx
from graphgrad.fx.passes.shape_prop import ShapeProp

from capture_corpus import CORPUS
from lecture_cases import branch, external, shape_dependent

torch = pytest.importorskip("torch")
pytest.importorskip("torch.fx")   # torch.fx, imported as a submodule of torch
from torch.fx.passes.shape_prop import ShapeProp as TorchShapeProp  # noqa: E402

CONTROL_FLOW = "symbolically traced variables cannot be used as inputs to control flow"


def _arrays(*shapes, seed=0):
    rng = np.random.default_rng(seed)
    return [rng.standard_normal(s) for s in shapes]


def _np(out):
    out = out if isinstance(out, (tuple, list)) else (out,)
    return [o.detach().numpy() for o in out]


def sequence(graph) -> list[tuple[str, str]]:
    """(opcode, target name) of every node, as torch.fx and graphgrad's view give them."""
    return [(n.op, n.target if isinstance(n.target, str) else n.target.__name__)
            for n in graph.nodes]


def issue_example(lib):
    return lambda x, y: lib.relu(x @ y + 1.0).sum(dim=0) * 2


def positive_sum(x):   # the lecture's example of control flow on a traced value
    if x.sum() > 0:
        return x
    return -x


# ---- the issue's examples and the lecture's ------------------------------------------------

def test_the_issue_example_traces_without_inputs_as_torch_fx_does():
    gm = fx.symbolic_trace(issue_example(gg))
    want = torch.fx.symbolic_trace(issue_example(torch))
    assert sequence(gm.fx_graph) == sequence(want.graph)
    # one graph, right for inputs of several ranks and sizes
    for xs, ys in (((3, 4), (4, 5)), ((2, 3, 4), (4, 2)), ((4,), (4, 3))):
        x, y = _arrays(xs, ys)
        np.testing.assert_allclose(_np(gm(gg.tensor(x), gg.tensor(y)))[0],
                                   want(torch.tensor(x), torch.tensor(y)).numpy(), rtol=1e-12)


def test_control_flow_on_any_traced_value_raises_torch_fx_trace_error():
    for fn in (positive_sum, lambda x: 1 if gg.softmax(x, dim=-1).max() > 0 else 0,
               lambda x: 1 if x.sum(-1).mean() else 0):
        with pytest.raises(fx.TraceError) as info:
            fx.symbolic_trace(fn)
        assert str(info.value).splitlines()[0] == CONTROL_FLOW
        with pytest.raises(torch.fx.proxy.TraceError, match=CONTROL_FLOW):
            torch.fx.symbolic_trace(types.FunctionType(
                fn.__code__, {**fn.__globals__, "gg": torch}, None, None, fn.__closure__))


def test_iterating_a_proxy_raises_as_torch_fx_does():
    def loop(x):
        return [v * 2 for v in gg.softmax(x, dim=-1)]

    with pytest.raises(fx.TraceError, match="^Proxy object cannot be iterated"):
        fx.symbolic_trace(loop)
    with pytest.raises(fx.TraceError, match="^Proxy object cannot be iterated"):
        fx.symbolic_trace(shape_dependent)


def test_the_lecture_functions_without_inputs():
    with pytest.raises(fx.TraceError, match=CONTROL_FLOW):
        fx.symbolic_trace(branch)
    gm = fx.symbolic_trace(external)        # the random number is frozen: the same twice
    x = gg.tensor(1.0)
    assert gm(x).item() == gm(x).item()


def test_example_inputs_stay_an_option():
    x = gg.tensor(_arrays((3, 4))[0])
    gm = fx.symbolic_trace(lambda x: gg.softmax(x, dim=-1), example_inputs=(x,))
    assert [n.op for n in gm.fx_graph.nodes] == ["placeholder", "call_function", "output"]
    assert gm.graph.nodes[1].kind == "call"   # an op node: the rank was known


# ---- every corpus function torch.fx traces without inputs --------------------------------

def _torch_version(fn):
    """The corpus function run against torch (it is written against ``gg`` and ``F``)."""
    globs = {**fn.__globals__, "gg": torch, "F": torch.nn.functional, "nn": torch.nn}
    return types.FunctionType(fn.__code__, globs, fn.__name__, fn.__defaults__, fn.__closure__)


def _torch_traces(fn) -> bool:
    try:
        torch.fx.symbolic_trace(_torch_version(fn))
    except Exception:  # noqa: BLE001 - what torch.fx cannot trace is not asked of graphgrad
        return False
    return True


FUNCTIONS = [c for c in CORPUS if isinstance(c.fn, types.FunctionType)]
MODULES = [c for c in CORPUS if not isinstance(c.fn, types.FunctionType)]


@pytest.mark.parametrize("case", FUNCTIONS, ids=repr)
def test_corpus_function_traces_without_inputs(case):
    assert _torch_traces(case.fn)   # every corpus function is torch.fx-traceable
    gm = fx.symbolic_trace(case.fn)
    rng = np.random.default_rng(1)
    inputs = case.make_inputs(rng)
    outs = _np(gm(*inputs))
    for got, want in zip(outs, _np(case.fn(*inputs)), strict=True):
        np.testing.assert_allclose(got, want, rtol=1e-12, atol=1e-12)
    # and gradients: the calls made when the graph runs are recorded by autograd
    xs = [x.detach().clone().requires_grad_() for x in inputs]
    ys = [x.detach().clone().requires_grad_() for x in inputs]
    sum(o.sum() for o in (gm(*xs) if isinstance(gm(*xs), tuple) else (gm(*xs),))).backward()
    out = case.fn(*ys)
    sum(o.sum() for o in (out if isinstance(out, tuple) else (out,))).backward()
    for a, b in zip(xs, ys, strict=True):
        np.testing.assert_allclose(a.grad.numpy(), b.grad.numpy(), rtol=1e-10, atol=1e-12)


@pytest.mark.parametrize("case", MODULES, ids=repr)
def test_corpus_module_traces_without_inputs(case):
    gm = fx.symbolic_trace(case.fn)
    inputs = case.make_inputs(np.random.default_rng(2))
    for got, want in zip(_np(gm(*inputs)), _np(case.fn(*inputs)), strict=True):
        np.testing.assert_allclose(got, want, rtol=1e-12, atol=1e-12)


# ---- ShapeProp --------------------------------------------------------------------------

def test_shape_prop_fills_in_what_tracing_without_inputs_left_unknown():
    gm = fx.symbolic_trace(issue_example(gg))
    assert gm.fx_graph.nodes[5].meta["tensor_meta"].shape is None   # sum: rank unknown
    x, y = _arrays((3, 4), (4, 5))
    ShapeProp(gm).propagate(gg.tensor(x), gg.tensor(y))
    tgm = torch.fx.symbolic_trace(issue_example(torch))
    TorchShapeProp(tgm).propagate(torch.tensor(x), torch.tensor(y))
    want = [tuple(n.meta["tensor_meta"].shape) for n in tgm.graph.nodes if n.op != "output"]
    got = [n.meta["tensor_meta"].shape for n in gm.fx_graph.nodes if n.op != "output"]
    assert got == want
    assert all(n.meta["tensor_meta"].dtype == np.float64
               for n in gm.fx_graph.nodes if n.op != "output")
    # the graph still serves other shapes
    x3, y3 = _arrays((2, 3, 4), (4, 2))
    np.testing.assert_allclose(_np(gm(gg.tensor(x3), gg.tensor(y3)))[0],
                               tgm(torch.tensor(x3), torch.tensor(y3)).numpy(), rtol=1e-12)


# ---- Interpreter, Transformer, wrap, Tracer: one subclass for both libraries -------------

def _interpreters(lib):
    class SwapRelu(lib.fx.Interpreter):
        """torch.fx's documentation example: relu becomes sigmoid, counting the opcodes."""

        def __init__(self, gm):
            super().__init__(gm)
            self.ops = []

        def run_node(self, n):
            self.ops.append(n.op)
            return super().run_node(n)

        def call_function(self, target, args, kwargs):
            if target is lib.relu:
                return lib.sigmoid(*args)
            return super().call_function(target, args, kwargs)

    class NegAdd(lib.fx.Transformer):
        def call_function(self, target, args, kwargs):
            if getattr(target, "__name__", "") == "add":
                return lib.sub(*args)
            return super().call_function(target, args, kwargs)

    return SwapRelu, NegAdd


def test_interpreter_and_transformer_subclasses_match_torch_fx():
    x, y = _arrays((3, 4), (4, 5))
    results = {}
    for lib in (gg, torch):
        swap, neg_add = _interpreters(lib)
        gm = lib.fx.symbolic_trace(issue_example(lib))
        interp = swap(gm)
        out = interp.run(lib.tensor(x), lib.tensor(y))
        new = neg_add(gm).transform()
        results[lib.__name__] = (out.detach().numpy(), interp.ops,
                                 new(lib.tensor(x), lib.tensor(y)).detach().numpy(),
                                 sequence(new.graph if lib is torch else new.fx_graph))
    g, t = results["graphgrad"], results["torch"]
    np.testing.assert_allclose(g[0], t[0], rtol=1e-12)
    assert g[1] == t[1]
    np.testing.assert_allclose(g[2], t[2], rtol=1e-12)
    assert g[3] == t[3]


def scaled(x, k):   # a function torch.fx and graphgrad.fx keep as one node (wrap)
    return x * k + len(x.shape)


fx.wrap("scaled")
torch.fx.wrap("scaled")


def uses_scaled(x):
    return scaled(x.relu(), 3.0).sum()


def test_wrap_keeps_a_function_as_one_call_function_node():
    gm = fx.symbolic_trace(uses_scaled)
    tgm = torch.fx.symbolic_trace(uses_scaled)   # written for both: methods only
    assert sequence(gm.fx_graph) == sequence(tgm.graph)
    (x,) = _arrays((3, 2))
    np.testing.assert_allclose(gm(gg.tensor(x)).item(), tgm(torch.tensor(x)).item())


def test_tracer_subclass_with_is_leaf_module_and_create_proxy():
    def make(lib):
        class Block(lib.nn.Module):
            def __init__(self):
                super().__init__()
                self.lin = lib.nn.Linear(3, 3, dtype=lib.float64)

            def forward(self, x):
                return lib.relu(self.lin(x))

        class Net(lib.nn.Module):
            def __init__(self):
                super().__init__()
                self.block = Block()

            def forward(self, x):
                return self.block(x) * 2

        class BlocksAreLeaves(lib.fx.Tracer):
            def is_leaf_module(self, m, qualname):
                return type(m).__name__ == "Block" or super().is_leaf_module(m, qualname)

        class ViaCreateProxy(lib.fx.Tracer):   # a leaf made by hand, with create_proxy
            def call_module(self, m, forward, args, kwargs):
                if type(m).__name__ == "Block":
                    return self.create_proxy("call_module", self.path_of_module(m), args,
                                             kwargs)
                return super().call_module(m, forward, args, kwargs)

        return Net(), BlocksAreLeaves, ViaCreateProxy

    results = {}
    for lib in (gg, torch):
        lib.manual_seed(0)
        net, leaves, by_hand = make(lib)
        graphs = (leaves().trace(net), by_hand().trace(net))
        view = (lambda g: g) if lib is torch else gg.fx.FxGraph
        results[lib.__name__] = [sequence(view(g)) for g in graphs]
        assert results[lib.__name__][0] == results[lib.__name__][1]
    assert results["graphgrad"] == results["torch"]
    assert ("call_module", "block") in results["torch"][0]


def test_a_graph_module_traced_again_and_deep_copied():
    import copy
    gm = fx.symbolic_trace(issue_example(gg))
    again = fx.symbolic_trace(gm)   # its recorded calls are recorded again as they were
    assert sequence(again.graph) == sequence(gm.graph)
    copied = copy.deepcopy(gm)
    assert copied.ir is not gm.ir and copied.code == gm.code
    x, y = _arrays((2, 3, 4), (4, 2))
    want = issue_example(gg)(gg.tensor(x), gg.tensor(y)).numpy()
    for m in (again, copied):
        np.testing.assert_allclose(m(gg.tensor(x), gg.tensor(y)).numpy(), want, rtol=1e-12)
