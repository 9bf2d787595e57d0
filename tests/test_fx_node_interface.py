"""torch.fx's node interface on graphgrad's IR (``gm.fx_graph``, ``fx.node_view``): the
same programs traced by torch.fx and captured by graphgrad.compile give the same call
sequence, and passes written once against torch.fx's interface (op replacement, dead
code elimination, counting ops) run on both with the same results."""

from __future__ import annotations

import numpy as np
import pytest

import graphgrad as gg
from graphgrad import compiler, fx
from graphgrad.ops import REGISTRY

torch = pytest.importorskip("torch")


@pytest.fixture(autouse=True)
def _fresh():
    compiler.reset()
    yield
    compiler.reset()


# ---- the programs, written once for each library --------------------------------------

def _mlp(lib):
    def mlp(x, w1, w2):
        h = lib.relu(x @ w1 + 1.0)
        return (h @ w2).sum(dim=-1), h.tanh()
    return mlp


def _residual(lib):
    def residual(x, w1, w2):
        y = lib.relu(x @ w1)
        y = y @ w2
        return lib.relu(y + x) * 0.5
    return residual


def _dead(lib):
    def dead(x, w1, w2):
        unused = (x @ w1).exp()   # noqa: F841  (recorded, then dead)
        return lib.relu(x @ w1) @ w2
    return dead


PROGRAMS = {"mlp": (_mlp, ((4, 3), (3, 5), (5, 2))),
            "residual": (_residual, ((4, 3), (3, 3), (3, 3))),
            "dead": (_dead, ((4, 3), (3, 5), (5, 2)))}


def _arrays(shapes, seed=0):
    rng = np.random.default_rng(seed)
    return [rng.standard_normal(s).astype(np.float32) for s in shapes]


def _capture(fn, arrays, edit=None):
    """graphgrad.compile with a backend that records the GraphModule it is handed (and
    applies ``edit`` to its fx view first); returns (gm, outputs)."""
    handed = []

    def backend(gm, example_inputs):
        if edit is not None:
            edit(gm.fx_graph)
            gm.recompile()
        handed.append(gm)
        return gm.forward

    out = gg.compile(fn, backend=backend)(*[gg.tensor(a) for a in arrays])
    (gm,) = handed
    return gm, out


def _numpy(out):
    out = out if isinstance(out, tuple) else (out,)
    return [o.detach().numpy() for o in out]


# ---- passes written once, against torch.fx's interface --------------------------------

def call_names(graph) -> list[str]:
    """The calls in order, by name (torch.fx: call_function targets' ``__name__``,
    call_method targets are names already)."""
    return [n.target if isinstance(n.target, str) else n.target.__name__
            for n in graph.nodes if n.op in ("call_function", "call_method")]


def replace_target(graph, old, new) -> int:
    count = 0
    for n in graph.nodes:
        if n.op == "call_function" and n.target is old:
            n.target = new
            count += 1
    return count


def bypass(graph, target) -> int:
    """Make each call of ``target`` dead (its users read its input), then sweep."""
    count = 0
    for n in graph.nodes:
        if n.op == "call_function" and n.target is target:
            n.replace_all_uses_with(n.args[0])
            count += 1
    graph.eliminate_dead_code()
    graph.lint()
    return count


# ---- tests ------------------------------------------------------------------------------

@pytest.mark.parametrize("name", ["mlp", "residual"])
def test_call_sequences_match_torch_fx(name):
    make, shapes = PROGRAMS[name]
    want = call_names(torch.fx.symbolic_trace(make(torch)).graph)
    gm, _ = _capture(make(gg), _arrays(shapes))
    assert call_names(gm.fx_graph) == want


@pytest.mark.parametrize("name", PROGRAMS)
def test_symbolic_trace_call_sequences_match_torch_fx(name):
    """graphgrad's own symbolic_trace records dead code too, as torch.fx does."""
    make, shapes = PROGRAMS[name]
    want = call_names(torch.fx.symbolic_trace(make(torch)).graph)
    examples = tuple(gg.tensor(a) for a in _arrays(shapes))   # sum(dim=-1) reads the rank
    assert call_names(fx.symbolic_trace(make(gg), example_inputs=examples).fx_graph) == want


@pytest.mark.parametrize("name", ["mlp", "residual"])
def test_relu_to_gelu_pass_runs_on_both(name):
    make, shapes = PROGRAMS[name]
    arrays = _arrays(shapes)
    tgm = torch.fx.symbolic_trace(make(torch))
    assert replace_target(tgm.graph, torch.relu, torch.nn.functional.gelu) >= 1
    tgm.recompile()
    want = _numpy(tgm(*[torch.tensor(a) for a in arrays]))

    F = gg.nn.functional
    gm, out = _capture(make(gg), arrays,
                       edit=lambda g: replace_target(g, gg.relu, F.gelu))
    assert "gelu(" in gm.code and "relu(" not in gm.code
    assert [n.op for n in gm.ir.nodes if n.kind == "call"].count(REGISTRY["Gelu"]) >= 1
    for a, b in zip(_numpy(out), want, strict=True):
        np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-6)
    unedited = _numpy(make(gg)(*[gg.tensor(a) for a in arrays]))
    assert not np.allclose(unedited[0], want[0])   # the edit took effect


def test_dead_code_elimination_matches_torch_fx():
    make, shapes = PROGRAMS["dead"]
    arrays = _arrays(shapes)
    tgm = torch.fx.symbolic_trace(make(torch))
    assert tgm.graph.eliminate_dead_code()
    tgm.recompile()
    gm = fx.symbolic_trace(make(gg))   # graphgrad.compile's capture drops dead code itself
    view = gm.fx_graph
    assert "exp" in call_names(view)
    assert view.eliminate_dead_code() and not view.eliminate_dead_code()
    view.lint()
    gm.recompile()
    assert call_names(view) == call_names(tgm.graph) == ["matmul", "relu", "matmul"]
    assert "exp" not in gm.code
    got = _numpy(gm(*[gg.tensor(a) for a in arrays]))
    want = _numpy(tgm(*[torch.tensor(a) for a in arrays]))
    np.testing.assert_allclose(got[0], want[0], rtol=1e-5, atol=1e-6)


def test_replace_all_uses_and_erase_on_both():
    make, shapes = PROGRAMS["residual"]
    arrays = _arrays(shapes)
    tgm = torch.fx.symbolic_trace(make(torch))
    assert bypass(tgm.graph, torch.relu) == 2
    tgm.recompile()
    gm, out = _capture(make(gg), arrays, edit=lambda g: bypass(g, gg.relu))
    assert call_names(gm.fx_graph) == call_names(tgm.graph)
    assert "relu" not in call_names(gm.fx_graph)
    want = _numpy(tgm(*[torch.tensor(a) for a in arrays]))
    np.testing.assert_allclose(_numpy(out)[0], want[0], rtol=1e-5, atol=1e-6)

    # erase_node refuses a node that still has users, with torch.fx's message
    view = gm.fx_graph
    (matmul, *_) = view.find_nodes(op="call_function", target=gg.matmul)
    with pytest.raises(RuntimeError, match="Tried to erase Node matmul but it still had"):
        view.erase_node(matmul)


def test_counting_ops_the_torch_fx_way():
    make, shapes = PROGRAMS["mlp"]
    gm, _ = _capture(make(gg), _arrays(shapes))
    tgm = torch.fx.symbolic_trace(make(torch))
    got = [n for n in gm.fx_graph.nodes if n.op == "call_function"]
    want = [n for n in tgm.graph.nodes if n.op in ("call_function", "call_method")]
    assert len(got) == len(want) == 6
    assert [n.op for n in gm.fx_graph.nodes].count("placeholder") == 3
    assert len(gm.fx_graph.find_nodes(op="call_function", target=gg.matmul)) == 2
    assert gm.fx_graph.find_nodes(op="output")[0].args == ((got[4], got[5]),)


def test_node_fields_and_table():
    make, shapes = PROGRAMS["mlp"]
    gm, _ = _capture(make(gg), _arrays(shapes))
    view = gm.fx_graph
    assert gm.fx_graph is view is gm.graph and view.graph is gm.ir   # one IR, one cached view
    relu = view.find_nodes(op="call_function", target=gg.relu)[0]
    assert relu.target is gg.relu and relu.node.op is REGISTRY["Relu"]
    assert [a.name for a in relu.args] == ["add"] and relu.kwargs == {}
    assert sorted(u.name for u in relu.users) == ["matmul_1", "tanh"]
    assert relu.meta["tensor_meta"].shape == (4, 5)
    assert relu.meta["tensor_meta"].dtype == np.float32
    total = view.find_nodes(op="call_function", target=gg.sum)[0]
    assert total.kwargs["keepdim"] is False
    x = view.nodes[0]
    assert (x.op, x.target, x.name) == ("placeholder", "x", "x")
    table = view.tabular().splitlines()
    assert table[0].split() == ["opcode", "name", "target", "args", "kwargs"]
    assert table[1].startswith("----")
    assert table[7].split()[:4] == ["call_function", "relu", "relu", "(add,)"]


def test_retargeting_maps_back_to_op_classes():
    from graphgrad.fx.node_view import op_of, public_function
    F = gg.nn.functional
    assert op_of(F.gelu) is REGISTRY["Gelu"] and op_of(gg.relu) is REGISTRY["Relu"]
    assert op_of(torch.relu) is REGISTRY["Relu"]   # by name, as a torch.fx pass writes it
    assert op_of(REGISTRY["Tanh"]) is REGISTRY["Tanh"]
    assert public_function(REGISTRY["LogSoftmax"]).__name__ == "log_softmax"
    with pytest.raises(ValueError, match="names no graphgrad op"):
        op_of(print)

    view = fx.symbolic_trace(lambda x: gg.relu(x) + 1.0).fx_graph
    with pytest.raises(TypeError, match="only a call_function node"):
        view.nodes[0].target = F.gelu


def insert_neg_after(graph, target, neg) -> None:
    """torch.fx's insertion idiom: a new node after each call of ``target``, which then
    takes over that call's users."""
    for n in list(graph.nodes):
        if n.op == "call_function" and n.target is target:
            with graph.inserting_after(n):
                new = graph.call_function(neg, (n,))
            n.replace_all_uses_with(new, delete_user_cb=lambda user, new=new: user is not new)
    graph.lint()


@pytest.mark.parametrize("name", ["mlp", "residual"])
def test_inserting_nodes_runs_on_both(name):
    make, shapes = PROGRAMS[name]
    arrays = _arrays(shapes)
    tgm = torch.fx.symbolic_trace(make(torch))
    insert_neg_after(tgm.graph, torch.relu, torch.neg)
    tgm.recompile()
    gm, out = _capture(make(gg), arrays, edit=lambda g: insert_neg_after(g, gg.relu, gg.neg))
    assert call_names(gm.fx_graph) == call_names(tgm.graph)
    assert call_names(gm.fx_graph).count("neg") >= 1
    want = _numpy(tgm(*[torch.tensor(a) for a in arrays]))
    for a, b in zip(_numpy(out), want, strict=True):
        np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-6)
    neg = gm.fx_graph.find_nodes(op="call_function", target=gg.neg)[0]
    assert neg.meta["tensor_meta"].shape == neg.args[0].meta["tensor_meta"].shape
    with pytest.raises(NotImplementedError, match="makes call_function and call_method nodes"):
        gm.fx_graph.create_node("placeholder", "y")
