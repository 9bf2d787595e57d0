"""Parameter and module containers against PyTorch: ParameterList, ParameterDict,
Sequential editing, ModuleList (pop, add, repr of repeats), get_parameter/buffer/
submodule, and half()."""


from __future__ import annotations

import pytest
import torch
from helpers import close

import graphgrad as gg
from graphgrad import nn


# ---- parameter containers, Sequential editing, get_parameter, half ------------------------
def both(fn):
    """``fn(lib)`` for graphgrad and torch; the reprs must agree (up to the name)."""
    g, t = fn(gg), fn(torch)
    assert repr(g).replace("graphgrad.", "") == repr(t).replace("torch.", ""), (g, t)
    return g, t


def test_parameter_list_matches_torch():
    def make(lib):
        pl = lib.nn.ParameterList([lib.nn.Parameter(lib.ones(3, 4)), lib.zeros(2), "x"])
        pl.append(lib.ones(1))
        pl += [lib.nn.Parameter(lib.zeros(2, 2))]
        return pl

    g, t = both(make)
    assert len(g) == len(t) == 5
    assert isinstance(g[1], nn.Parameter) and g[1].requires_grad and g[2] == "x"
    assert [n for n, _ in g.named_parameters()] == [n for n, _ in t.named_parameters()]
    assert list(g.state_dict()) == list(t.state_dict())
    assert g[-1] is g[4] and len(g[1:4]) == 3 and isinstance(g[1:4], nn.ParameterList)
    g[0] = gg.full((2,), 5.0)
    assert isinstance(g[0], nn.Parameter) and g.get_parameter("0") is g[0]
    for lib, pl in ((gg, g), (torch, t)):
        with pytest.raises(IndexError, match="index 5 is out of range"):
            pl[5]
        with pytest.raises(TypeError, match="ParameterList.extend should be called with an "
                           "iterable, but got"):
            pl.extend(lib.ones(2))
        with pytest.raises(RuntimeError, match="ParameterList should not be called."):
            pl(1)
    both(lambda lib: lib.nn.ParameterList())


def test_parameter_list_parameters_train():
    class M(nn.Module):
        def __init__(self):
            super().__init__()
            self.ws = nn.ParameterList([nn.Parameter(gg.ones(2)) for _ in range(3)])

        def forward(self, x):
            for w in self.ws:
                x = x * w
            return x.sum()

    m = M()
    opt = gg.optim.SGD(m.parameters(), lr=0.5)
    m(gg.tensor([1.0, 2.0])).backward()
    opt.step()
    for w in m.ws:
        close(w, [0.5, 0.0])


def test_parameter_dict_matches_torch():
    def make(lib):
        pd = lib.nn.ParameterDict({"b": lib.ones(2), "a": lib.nn.Parameter(lib.zeros(3))})
        pd["c"] = lib.ones(2, 2, dtype=lib.float64)
        pd.update([("d", lib.zeros(1))])
        pd.setdefault("e", lib.ones(4))
        return pd

    g, t = both(make)
    assert list(g) == list(t) == ["a", "b", "c", "d", "e"]  # a dict is taken sorted
    assert list(g.keys()) == list(t.keys())
    assert [n for n, _ in g.named_parameters()] == [n for n, _ in t.named_parameters()]
    assert "a" in g and "z" not in g and g.get("z", 3) == 3
    assert isinstance(g["c"], nn.Parameter)
    for pd in (g, t):
        assert pd.pop("a").shape[0] == 3
        assert pd.popitem()[0] == "e"
    assert list(g) == list(t) == ["b", "c", "d"]
    g2, t2 = g | make(gg), t | make(torch)
    assert list(g2) == list(t2)
    for pd in (g, t):
        with pytest.raises(AttributeError, match="'ParameterDict' object has no attribute 'zz'"):
            pd["zz"]
        with pytest.raises(TypeError, match="cannot be used as a key as it is not a string "
                           r"\(type is 'int'\)"):
            pd[1]
        with pytest.raises(ValueError, match="ParameterDict update sequence element #0 has "
                           "length 3; 2 is required"):
            pd.update([("a", 1, 2)])
    g.clear()
    assert len(g) == 0 and not list(g.parameters())


def test_sequential_editing_matches_torch():
    def layers(lib):
        return [lib.nn.Linear(2, 2), lib.nn.ReLU(), lib.nn.Tanh(), lib.nn.Identity()]

    def edit(lib):
        a, b, c, d = layers(lib)
        s = lib.nn.Sequential(a, b)
        s.insert(1, c).insert(-1, d).insert(4, lib.nn.Sigmoid())
        s.extend([lib.nn.ReLU()])
        s.pop(0)
        s = s + lib.nn.Sequential(lib.nn.Tanh())
        s += lib.nn.Sequential(lib.nn.ReLU())
        return s

    g, t = both(edit)
    assert [k for k, _ in g.named_children()] == [k for k, _ in t.named_children()]
    both(lambda lib: lib.nn.Sequential(lib.nn.ReLU(), lib.nn.Tanh()) * 2)
    both(lambda lib: 2 * lib.nn.Sequential(lib.nn.ReLU()))
    s = nn.Sequential(nn.ReLU())
    s *= 3
    assert len(s) == 3 and s[0] is s[2]
    for lib in (gg, torch):
        seq = lib.nn.Sequential(lib.nn.ReLU())
        with pytest.raises(IndexError, match="Index out of range: 3"):
            seq.insert(3, lib.nn.ReLU())
        with pytest.raises(ValueError, match="add operator supports only objects of "
                           "Sequential class"):
            seq + [lib.nn.ReLU()]
        with pytest.raises(ValueError, match="Non-positive multiplication factor 0"):
            seq * 0
        with pytest.raises(AssertionError, match="module should be of type"):
            seq.insert(0, 3)


def test_module_list_pop_add_match_torch():
    def edit(lib):
        ml = lib.nn.ModuleList([lib.nn.ReLU(), lib.nn.Tanh(), lib.nn.Sigmoid()])
        ml.pop(1)
        ml += [lib.nn.Identity()]
        return ml + lib.nn.ModuleList([lib.nn.ReLU()])

    both(edit)
    with pytest.raises(TypeError, match="ModuleList.extend should be called with an iterable, "
                       "but got int"):
        nn.ModuleList().extend(3)


def test_get_parameter_buffer_submodule_match_torch():
    def make(lib):
        return lib.nn.Sequential(lib.nn.Linear(2, 2, bias=False), lib.nn.BatchNorm1d(2))

    g, t = both(make)
    assert g.get_parameter("0.weight") is g[0].weight
    assert g.get_buffer("1.running_mean") is g[1].running_mean
    assert g.get_submodule("1") is g[1] and g.get_submodule("") is g
    for m in (g, t):
        for call, target, msg in [(m.get_parameter, "0.foo", "Linear has no attribute `foo`"),
                                  (m.get_parameter, "2.weight",
                                   "Sequential has no attribute `2`"),
                                  (m.get_parameter, "0.in_features",
                                   "`in_features` is not an nn.Parameter"),
                                  (m.get_parameter, "0.bias", "`bias` is not an nn.Parameter"),
                                  (m.get_submodule, "0.weight", "`weight` is not an nn.Module"),
                                  (m.get_buffer, "1.weight", "`weight` is not a buffer")]:
            with pytest.raises(AttributeError, match=msg):
                call(target)


def test_half_casts_floating_parameters_and_buffers():
    m = nn.Sequential(nn.Linear(3, 2), nn.BatchNorm1d(2)).half()
    assert {p.dtype for p in m.parameters()} == {gg.float16}
    assert m[1].running_mean.dtype == gg.float16
    assert m[1].num_batches_tracked.dtype == gg.int64  # integers stay
    assert m(gg.randn(4, 3).half()).dtype == gg.float16


def test_module_list_repr_groups_repeats_as_torch():
    both(lambda lib: lib.nn.ModuleList([lib.nn.Linear(2, 2), lib.nn.Linear(2, 2),
                                        lib.nn.ReLU(), lib.nn.Linear(2, 2)]))
    both(lambda lib: lib.nn.ModuleList())
    with pytest.raises(RuntimeError, match="activation should be relu/gelu, not tanh"):
        nn.TransformerEncoderLayer(8, 2, activation="tanh")
