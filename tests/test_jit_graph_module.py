"""jit.trace and jit.script hand out fx GraphModules, as every capture frontend does:
``.graph`` is the torch.fx-style view (``.ir`` the IR), a traced or scripted module's
parameters and buffers are ``get_attr`` nodes reaching its attributes, ``.code`` reads
them as ``self.fc.weight``, and a pass written for torch.fx edits the graph the result
runs after ``recompile()``."""

from __future__ import annotations

import numpy as np

import graphgrad as gg
from graphgrad import fx, jit
from graphgrad.fx.graph_module import resolve_qualname
from graphgrad.graph import Graph


class Net(gg.nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = gg.nn.Linear(3, 4)
        self.out = gg.nn.Linear(4, 2)

    def forward(self, x):
        return self.out(gg.relu(self.fc(x)))


def _gelu_for_relu(gm) -> int:
    """torch.fx's canonical pass: retarget every relu call; the count it replaced."""
    n = 0
    for node in gm.graph.nodes:
        if node.op == "call_function" and node.target is gg.relu:
            node.target = gg.nn.functional.gelu
            n += 1
    gm.graph.lint()
    gm.recompile()
    return n


def _eager_gelu(net: Net, x):
    return net.out(gg.nn.functional.gelu(net.fc(x)))


def _close(a, b):
    np.testing.assert_allclose(a.detach().numpy(), b.detach().numpy(), rtol=1e-6, atol=1e-7)


def test_traced_module_is_a_graph_module_with_its_parameters_as_get_attr():
    gg.manual_seed(0)
    net = Net()
    traced = jit.trace(net, gg.randn(5, 3))
    assert isinstance(traced, fx.GraphModule) and type(traced).__name__ == "TracedFunction"
    assert isinstance(traced.ir, Graph) and traced.graph.graph is traced.ir
    attrs = [n for n in traced.graph.nodes if n.op == "get_attr"]
    assert [n.target for n in attrs] == ["fc.weight", "fc.bias", "out.weight", "out.bias"]
    for n in attrs:   # the module's own tensors, reached from the GraphModule
        assert resolve_qualname(traced, n.target) is resolve_qualname(net, n.target)
    assert [name for name, _ in traced.named_parameters()] == [
        "fc.weight", "fc.bias", "out.weight", "out.bias"]
    assert "def forward(self, x):" in traced.code and "self.fc.weight" in traced.code
    assert "class Net(graphgrad.nn.Module):" in traced.print_readable(print_output=False)
    x = gg.randn(5, 3)
    namespace: dict = {}
    exec(compile(traced.code, "<traced>", "exec"), namespace)  # noqa: S102 - text under test
    (printed,) = namespace["forward"](traced, x)
    _close(printed, net(x))
    _close(fx.Interpreter(traced).run(x), net(x))


def test_a_torch_fx_pass_runs_on_a_traced_module():
    gg.manual_seed(1)
    net = Net()
    traced = jit.trace(net, gg.randn(5, 3))
    assert _gelu_for_relu(traced) == 1
    assert "gelu" in traced.code and "relu" not in traced.code
    x = gg.randn(7, 3)
    _close(traced(x), _eager_gelu(net, x))


def test_a_replaced_parameter_is_seen_by_the_trace():
    gg.manual_seed(2)
    net = Net()
    traced = jit.trace(net, gg.randn(5, 3))
    net.out.weight = gg.nn.Parameter(gg.zeros(2, 4))
    assert traced.out.weight is net.out.weight
    x = gg.randn(3, 3)
    _close(traced(x), net(x))


def test_scripted_module_is_a_graph_module_and_a_pass_runs_on_it():
    gg.manual_seed(3)
    net = Net()
    scripted = jit.script(net)
    assert isinstance(scripted, fx.GraphModule) and type(scripted).__name__ == "ScriptFunction"
    ops = [(n.op, n.target) for n in scripted.graph.nodes]
    assert ("call_module", "fc") in ops and ("call_function", gg.relu) in ops
    assert ("get_attr", "fc.weight") in ops
    assert [name for name, _ in scripted.named_parameters()] == [
        name for name, _ in net.named_parameters()]
    for shape in [(2, 3), (6, 3), (2, 5, 3)]:   # one graph from source, every rank
        x = gg.randn(*shape)
        _close(fx.Interpreter(scripted).run(x), net(x))
    assert _gelu_for_relu(scripted) == 1
    assert "gelu(t0)" in scripted.code and "relu" not in scripted.code
    for shape in [(4, 3), (2, 2, 3)]:
        x = gg.randn(*shape)
        _close(scripted(x), _eager_gelu(net, x))
    assert "class Net(graphgrad.nn.Module):" in scripted.print_readable(print_output=False)


def test_scripted_function_has_the_graph_module_face():
    def f(x, w):
        return gg.tanh(x @ w).sum(-1)

    scripted = jit.script(f)
    assert isinstance(scripted, fx.GraphModule)
    assert [n.op for n in scripted.graph.nodes] == [
        "placeholder", "placeholder", "call_function", "call_function", "call_method",
        "output"]
    assert "def forward(x, w):" in scripted.code
    x, w = gg.randn(4, 3), gg.randn(3, 2)
    _close(scripted(x, w), f(x, w))


class _Dropped(gg.nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = gg.nn.Linear(3, 3)
        self.drop = gg.nn.Dropout(0.5)

    def forward(self, x):
        return self.drop(self.fc(x))


def test_eval_and_state_dict_are_the_modules():
    net = _Dropped()
    scripted = jit.script(net)
    scripted.eval()   # as in PyTorch: the scripted module's flags are the module's
    assert not net.training and not net.drop.training
    x = gg.randn(4, 3)
    _close(scripted(x), net(x))   # eval: no dropout mask, deterministic
    traced = jit.trace(net, (x,))
    assert list(traced.state_dict()) == list(net.state_dict()) == list(scripted.state_dict())


class _GeluForRelu(fx.Transformer):
    def call_function(self, target, args, kwargs):
        if target is gg.relu:
            return gg.nn.functional.gelu(*args, **kwargs)
        return super().call_function(target, args, kwargs)


def test_an_fx_transformer_rewrites_a_traced_and_a_scripted_module():
    gg.manual_seed(4)
    net = Net()
    x = gg.randn(6, 3)
    for captured in (jit.trace(net, (x,)), jit.script(net)):
        new = _GeluForRelu(captured).transform()
        assert isinstance(new, fx.GraphModule)
        assert [n.target for n in new.graph.nodes if n.op == "get_attr"][:2] == [
            "fc.weight", "fc.bias"]
        _close(new(x), _eager_gelu(net, x))
