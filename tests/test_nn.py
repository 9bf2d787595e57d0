"""graphgrad.nn against PyTorch with copied weights: module forward and backward,
Linear, Embedding, unfold/fold, init statistics, and the Module API (registration,
state_dict, repr, train/eval, to, hooks' registration names, load_state_dict).
Losses, layers, normalisation, attention, recurrent layers, hooks, containers and
nn.utils have their own test_nn_*.py files."""


from __future__ import annotations

import math
from collections import OrderedDict

import numpy as np
import pytest
import torch
from helpers import ATOL, RTOL, copy_weights, rand

import graphgrad as gg
from graphgrad import nn
from graphgrad.nn import functional as F
from graphgrad.nn import init


def compare(gg_mod, t_mod, *inputs, grad_inputs=True):
    """Forward values, input gradients and parameter gradients of sum(out * r)."""
    gx = [gg.tensor(a, requires_grad=grad_inputs and a.dtype.kind == "f") for a in inputs]
    tx = [torch.tensor(a, requires_grad=grad_inputs and a.dtype.kind == "f") for a in inputs]
    out_g, out_t = gg_mod(*gx), t_mod(*tx)
    np.testing.assert_allclose(out_g.detach().numpy(), out_t.detach().numpy(), RTOL, ATOL)
    r = np.random.default_rng(1).standard_normal(tuple(out_t.shape))
    (out_g * gg.tensor(r)).sum().backward()
    (out_t * torch.tensor(r)).sum().backward()
    for a, b in zip(gx, tx, strict=True):
        if b.requires_grad:
            np.testing.assert_allclose(a.grad.numpy(), b.grad.numpy(), RTOL, ATOL)
    t_params = dict(t_mod.named_parameters())
    for name, p in gg_mod.named_parameters():
        np.testing.assert_allclose(p.grad.numpy(), t_params[name].grad.numpy(), RTOL, ATOL,
                                   err_msg=name)


MODULES = [
    ("linear", lambda m: m.Linear(5, 3), [(4, 5)]),
    ("linear_nobias", lambda m: m.Linear(5, 3, bias=False), [(2, 7, 5)]),
    ("conv2d", lambda m: m.Conv2d(2, 4, 3), [(2, 2, 8, 8)]),
    ("conv2d_pad_stride", lambda m: m.Conv2d(3, 2, (3, 2), stride=2, padding=1), [(2, 3, 7, 6)]),
    ("conv2d_dilation_groups", lambda m: m.Conv2d(4, 6, 3, dilation=2, groups=2, padding=2),
     [(1, 4, 8, 8)]),
    ("conv2d_same", lambda m: m.Conv2d(1, 3, 3, padding="same"), [(2, 1, 8, 8)]),
    ("maxpool", lambda m: m.MaxPool2d(2), [(2, 3, 8, 8)]),
    ("maxpool_pad_stride", lambda m: m.MaxPool2d(3, stride=2, padding=1), [(2, 2, 7, 7)]),
    ("maxpool_ceil", lambda m: m.MaxPool2d(2, ceil_mode=True), [(1, 2, 5, 5)]),
    ("avgpool", lambda m: m.AvgPool2d(2), [(2, 3, 8, 8)]),
    ("layernorm", lambda m: m.LayerNorm(6), [(3, 6)]),
    ("layernorm_2d", lambda m: m.LayerNorm((4, 5)), [(2, 4, 5)]),
    ("relu", lambda m: m.ReLU(), [(4, 5)]),
    ("tanh", lambda m: m.Tanh(), [(4, 5)]),
    ("sigmoid", lambda m: m.Sigmoid(), [(4, 5)]),
    ("gelu", lambda m: m.GELU(), [(4, 5)]),
    ("gelu_tanh", lambda m: m.GELU(approximate="tanh"), [(4, 5)]),
    ("softplus", lambda m: m.Softplus(beta=2.0), [(4, 5)]),
    ("silu", lambda m: m.SiLU(), [(4, 5)]),
    ("leaky_relu", lambda m: m.LeakyReLU(0.2), [(4, 5)]),
    ("softmax", lambda m: m.Softmax(dim=1), [(4, 5)]),
    ("log_softmax", lambda m: m.LogSoftmax(dim=-1), [(4, 5)]),
    ("flatten", lambda m: m.Flatten(), [(2, 3, 4)]),
    ("unflatten", lambda m: m.Unflatten(1, (2, 3)), [(4, 6)]),
    ("identity", lambda m: m.Identity(), [(4, 5)]),
    ("dropout_eval", lambda m: m.Dropout(0.5).eval(), [(4, 5)]),
    ("sequential_cnn", lambda m: m.Sequential(
        m.Conv2d(1, 4, 3, padding=1), m.ReLU(), m.MaxPool2d(2), m.Flatten(),
        m.Linear(64, 10)), [(3, 1, 8, 8)]),
    ("sequential_mlp", lambda m: m.Sequential(m.Linear(4, 8), m.Tanh(), m.LayerNorm(8),
                                              m.Linear(8, 2)), [(5, 4)]),
]


@pytest.mark.parametrize("name,make,shapes", MODULES, ids=[m[0] for m in MODULES])
def test_module_matches_torch(name, make, shapes):
    t_mod = make(torch.nn).double()
    gg_mod = make(nn).double()
    if list(t_mod.parameters()):
        copy_weights(gg_mod, t_mod)
    compare(gg_mod, t_mod, *[rand(*s, seed=i) for i, s in enumerate(shapes)])


def test_linear_uses_one_fused_op_for_a_matrix_of_examples():
    """2-D input: one op (PyTorch records AddmmBackward0 there); batches of matrices:
    the same op on their rows as one matrix, reshaped back (PyTorch: a view of an
    addmm); the same values and gradients as the composite either way."""
    w = gg.tensor(rand(3, 5), requires_grad=True)
    b = gg.tensor(rand(3, seed=1), requires_grad=True)
    assert repr(F.linear(gg.tensor(rand(4, 5)), w, b).grad_fn).startswith("<LinearBackward0")
    assert repr(F.linear(gg.tensor(rand(4, 5)), w).grad_fn).startswith("<LinearBackward0")
    batched = F.linear(gg.tensor(rand(2, 4, 5)), w, b)
    assert repr(batched.grad_fn).startswith("<ReshapeBackward0")
    assert repr(batched.grad_fn.next_functions[0][0]).startswith("<LinearBackward0")
    x = rand(4, 5, seed=2)
    fused = F.linear(gg.tensor(x), w, b)
    composite = gg.tensor(x) @ w.mT + b
    np.testing.assert_allclose(fused.detach().numpy(), composite.detach().numpy(), 1e-15)
    gw = gg.autograd.grad(fused.sum(), [w, b])
    cw = gg.autograd.grad(composite.sum(), [w, b])
    for a, c in zip(gw, cw, strict=True):
        np.testing.assert_allclose(a.numpy(), c.numpy(), 1e-15)


@pytest.mark.parametrize("shapes", [((4, 3), (2, 5), (2,)), ((4, 3), (2, 3), (5,)),
                                    ((4, 3), (2, 3), (5, 1))])
def test_linear_errors_match_torch(shapes):
    (xs, ws, bs) = shapes
    with pytest.raises(RuntimeError) as t_err:
        torch.nn.functional.linear(torch.ones(xs), torch.ones(ws), torch.ones(bs))
    with pytest.raises(RuntimeError) as g_err:
        F.linear(gg.ones(*xs), gg.ones(*ws), gg.ones(*bs))
    assert str(t_err.value) in str(g_err.value)


def test_embedding_matches_torch():
    t_mod = torch.nn.Embedding(10, 3, padding_idx=2).double()
    gg_mod = nn.Embedding(10, 3, padding_idx=2).double()
    copy_weights(gg_mod, t_mod)
    idx = np.array([[1, 2, 3], [2, 2, 9]])
    compare(gg_mod, t_mod, idx, grad_inputs=False)
    assert np.all(gg_mod.weight.grad.numpy()[2] == 0)
    assert np.all(nn.Embedding(5, 2, padding_idx=0).weight.detach().numpy()[0] == 0)


def test_functional_unfold_fold_match_torch():
    x = rand(2, 3, 7, 6)
    kw = dict(kernel_size=(2, 3), padding=1, stride=2, dilation=(1, 2))
    cols_t = torch.nn.functional.unfold(torch.tensor(x), **kw)
    cols_g = F.unfold(gg.tensor(x), **kw)
    np.testing.assert_allclose(cols_g.numpy(), cols_t.numpy(), RTOL, ATOL)
    back_t = torch.nn.functional.fold(cols_t, (7, 6), **kw)
    np.testing.assert_allclose(F.fold(cols_g, (7, 6), **kw).detach().numpy(), back_t.numpy(),
                               RTOL, ATOL)


def test_conv2d_second_derivative_matches_torch():
    """Patches are made of ops, so conv2d differentiates twice (double backward)."""
    x, w = rand(1, 2, 5, 5), rand(3, 2, 3, 3, seed=1)
    gx, gw = gg.tensor(x, requires_grad=True), gg.tensor(w, requires_grad=True)
    tx, tw = torch.tensor(x, requires_grad=True), torch.tensor(w, requires_grad=True)
    (g1,) = gg.autograd.grad((F.conv2d(gx, gw, padding=1) ** 2).sum(), gx, create_graph=True)
    (t1,) = torch.autograd.grad((torch.nn.functional.conv2d(tx, tw, padding=1) ** 2).sum(), tx,
                                create_graph=True)
    (g2,) = gg.autograd.grad(g1.sum(), gw)
    (t2,) = torch.autograd.grad(t1.sum(), tw)
    np.testing.assert_allclose(g2.numpy(), t2.numpy(), RTOL, 1e-10)


def test_dropout_train_mode_scales_and_zeroes():
    gg.manual_seed(0)
    d = nn.Dropout(0.25)
    out = d(gg.ones(1000, 100)).numpy()
    assert set(np.unique(out).tolist()) <= {0.0, float(np.float32(1 / 0.75))}
    assert abs((out == 0).mean() - 0.25) < 0.01
    assert d.eval()(gg.ones(3)).tolist() == [1.0, 1.0, 1.0]


# ---- init ----------------------------------------------------------------------------

def test_calculate_gain_matches_torch():
    for nl, param in [("linear", None), ("sigmoid", None), ("tanh", None), ("relu", None),
                      ("leaky_relu", None), ("leaky_relu", 0.2), ("selu", None),
                      ("conv2d", None)]:
        assert init.calculate_gain(nl, param) == torch.nn.init.calculate_gain(nl, param)


@pytest.mark.parametrize("fn,kw,bound,std", [
    ("kaiming_uniform_", {}, math.sqrt(6 / 200), None),
    ("kaiming_uniform_", {"a": math.sqrt(5)}, 1 / math.sqrt(200), None),
    ("kaiming_uniform_", {"mode": "fan_out", "nonlinearity": "relu"}, math.sqrt(6 / 300),
     None),
    ("xavier_uniform_", {"gain": 2.0}, 2 * math.sqrt(6 / 500), None),
    ("kaiming_normal_", {"nonlinearity": "relu"}, None, math.sqrt(2 / 200)),
    ("xavier_normal_", {}, None, math.sqrt(2 / 500)),
    ("normal_", {"std": 0.3}, None, 0.3),
    ("uniform_", {"a": -0.5, "b": 0.5}, 0.5, None),
])
def test_init_statistics(fn, kw, bound, std):
    """(300, 200) weight: fan_in 200, fan_out 300. Bounds are exact; the sample std is
    within 3% of PyTorch's formula (60,000 draws)."""
    gg.manual_seed(0)
    w = getattr(init, fn)(gg.empty(300, 200), **kw).numpy()
    if bound is not None:
        assert np.abs(w).max() <= bound
        assert np.abs(w).max() > 0.99 * bound
        np.testing.assert_allclose(w.std(), bound / math.sqrt(3), rtol=0.03)
    else:
        np.testing.assert_allclose(w.std(), std, rtol=0.03)
        assert abs(w.mean()) < 0.03 * std


def test_conv_fan_includes_receptive_field_and_constants():
    w = init.kaiming_uniform_(gg.empty(8, 4, 3, 3))
    assert np.abs(w.numpy()).max() <= math.sqrt(6 / 36)
    assert init.zeros_(gg.ones(3)).tolist() == [0, 0, 0]
    assert init.ones_(gg.zeros(2)).tolist() == [1, 1]
    assert init.constant_(gg.zeros(2), 0.5).tolist() == [0.5, 0.5]
    assert np.array_equal(init.eye_(gg.zeros(2, 3)).numpy(), np.eye(2, 3))
    q = init.orthogonal_(gg.empty(4, 6)).numpy()
    np.testing.assert_allclose(q @ q.T, np.eye(4), atol=1e-6)
    with pytest.raises(ValueError, match="fewer than 2 dimensions"):
        init.xavier_uniform_(gg.empty(3))


def test_default_init_bounds_like_torch():
    gg.manual_seed(0)
    lin, conv = nn.Linear(50, 40), nn.Conv2d(3, 8, 5)
    assert np.abs(lin.weight.numpy(force=True)).max() <= 1 / math.sqrt(50)
    assert np.abs(lin.bias.numpy(force=True)).max() <= 1 / math.sqrt(50)
    assert np.abs(conv.weight.numpy(force=True)).max() <= 1 / math.sqrt(75)
    assert np.abs(conv.bias.numpy(force=True)).max() <= 1 / math.sqrt(75)
    np.testing.assert_allclose(lin.weight.numpy(force=True).std(), 1 / math.sqrt(150),
                               rtol=0.1)
    assert lin.weight.dtype == gg.float32 and nn.Linear(2, 2, dtype=gg.float64).weight.dtype \
        == gg.float64


def test_seeded_init_is_reproducible():
    gg.manual_seed(3)
    a = nn.Linear(4, 4).weight.numpy(force=True).copy()
    gg.manual_seed(3)
    assert np.array_equal(a, nn.Linear(4, 4).weight.numpy(force=True))


# ---- Module API ----------------------------------------------------------------------

class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.body = nn.Sequential(nn.Linear(3, 4), nn.ReLU())
        self.heads = nn.ModuleList([nn.Linear(4, 2), nn.Linear(4, 1)])
        self.extra = nn.ModuleDict({"ln": nn.LayerNorm(4)})
        self.scale = nn.Parameter(gg.ones(1))
        self.register_buffer("running", gg.zeros(2))
        self.register_buffer("scratch", gg.zeros(1), persistent=False)

    def forward(self, x):
        h = self.extra["ln"](self.body(x)) * self.scale
        return self.heads[0](h), self.heads[1](h)


def test_registration_and_walking():
    net = Net()
    names = [n for n, _ in net.named_parameters()]
    assert names == ["scale", "body.0.weight", "body.0.bias", "heads.0.weight", "heads.0.bias",
                     "heads.1.weight", "heads.1.bias", "extra.ln.weight", "extra.ln.bias"]
    assert all(isinstance(p, nn.Parameter) and p.requires_grad for p in net.parameters())
    assert [n for n, _ in net.named_modules()] == ["", "body", "body.0", "body.1", "heads",
                                                   "heads.0", "heads.1", "extra", "extra.ln"]
    assert [type(c).__name__ for c in net.children()] == ["Sequential", "ModuleList",
                                                         "ModuleDict"]
    # as PyTorch: a module's own parameters, then its buffers, then its children's
    assert list(net.state_dict()) == ["scale", "running", *names[1:]]
    assert [n for n, _ in net.named_buffers()] == ["running", "scratch"]
    shared = nn.Linear(2, 2)
    assert len(list(nn.Sequential(shared, shared).parameters())) == 2
    assert net.get_submodule("heads.1") is net.heads[1]


def test_torch_module_names_match():
    """The same architecture has the same parameter names and shapes as in PyTorch."""
    def build(m):
        return m.Sequential(OrderedDict(conv=m.Conv2d(1, 2, 3), act=m.ReLU(),
                                        flat=m.Flatten(), fc=m.Linear(72, 3)))
    g = {k: tuple(v.shape) for k, v in build(nn).state_dict().items()}
    t = {k: tuple(v.shape) for k, v in build(torch.nn).state_dict().items()}
    assert g == t


def test_repr_matches_torch():
    def build(m):
        return m.Sequential(m.Linear(4, 8), m.ReLU(), m.Conv2d(1, 4, 3, padding=1),
                            m.MaxPool2d(2), m.Flatten(), m.LayerNorm(5), m.Dropout(0.1),
                            m.GELU(), m.Embedding(10, 3, padding_idx=0), m.CrossEntropyLoss(),
                            m.ModuleList([m.Tanh(), m.Linear(2, 2, bias=False)]))
    assert repr(build(nn)) == repr(build(torch.nn))
    p = nn.Parameter(gg.tensor([1.0, 2.0]))
    assert repr(p) == "Parameter containing:\ntensor([1., 2.], requires_grad=True)"


def test_state_dict_round_trip_and_errors():
    a, b = Net(), Net()
    b.load_state_dict(a.state_dict())
    for (n, p), q in zip(a.named_parameters(), b.parameters(), strict=True):
        assert np.array_equal(p.detach().numpy(), q.detach().numpy()), n
    sd = a.state_dict()
    assert not sd["scale"].requires_grad
    sd["extra_key"] = gg.zeros(1)
    del sd["scale"]
    with pytest.raises(RuntimeError, match='Missing key\\(s\\) in state_dict: "scale"'):
        b.load_state_dict(sd)
    result = b.load_state_dict(sd, strict=False)
    assert result.missing_keys == ["scale"] and result.unexpected_keys == ["extra_key"]
    with pytest.raises(RuntimeError, match="size mismatch for weight"):
        nn.Linear(2, 3).load_state_dict(nn.Linear(2, 4).state_dict())


def test_train_eval_zero_grad_to():
    net = Net()
    assert net.training and all(m.training for m in net.modules())
    net.eval()
    assert not any(m.training for m in net.modules())
    net.train()
    out = net(gg.randn(5, 3))
    (out[0].sum() + out[1].sum()).backward()
    assert all(p.grad is not None for p in net.parameters())
    net.zero_grad()
    assert all(p.grad is None for p in net.parameters())
    ps = list(net.parameters())
    net.to(gg.float64)
    assert all(p.dtype == gg.float64 for p in net.parameters())
    assert all(a is b for a, b in zip(ps, net.parameters(), strict=True))  # identity kept
    assert net.running.dtype == gg.float64
    assert net(gg.randn(2, 3, dtype=gg.float64))[0].dtype == gg.float64


def test_setattr_rules():
    m = nn.Linear(2, 2)
    with pytest.raises(TypeError, match="cannot assign"):
        m.weight = gg.zeros(2, 2)
    m.weight = nn.Parameter(gg.zeros(2, 2))
    assert m.weight.sum().item() == 0
    m.bias = None
    assert [n for n, _ in m.named_parameters()] == ["weight"]
    assert m(gg.ones(1, 2)).tolist() == [[0.0, 0.0]]

    class Early(nn.Module):
        def __init__(self):
            self.fc = nn.Linear(1, 1)
    with pytest.raises(AttributeError, match="before Module.__init__"):
        Early()
    with pytest.raises(NotImplementedError, match='missing the required "forward"'):
        nn.Module()(1)


def test_parameter_is_a_leaf_tensor():
    p = nn.Parameter(gg.randn(3))
    assert isinstance(p, gg.Tensor) and p.is_leaf and p.requires_grad
    q = p * 2
    assert type(q) is gg.Tensor and q.requires_grad
    assert not nn.Parameter(gg.ones(1), requires_grad=False).requires_grad


def test_deepcopy_gives_independent_parameters():
    import copy
    m = nn.Sequential(nn.Linear(2, 3), nn.ReLU())
    m2 = copy.deepcopy(m)
    assert isinstance(m2[0].weight, nn.Parameter) and m2[0].weight is not m[0].weight
    assert np.array_equal(m2[0].weight.detach().numpy(), m[0].weight.detach().numpy())
    m2[0].weight.data.mul_(0)
    assert float(m[0].weight.abs().sum()) > 0


def test_replacing_a_submodule_or_parameter_keeps_its_place():
    """``seq[0] = layer``, ``model.fc = Linear(...)``, ``m.weight = Parameter(...)`` keep
    the name's position (forward order, parameters(), state_dict keys), and deleting from
    Sequential/ModuleList renumbers the rest, as in PyTorch."""
    results = []
    for lib in (torch, gg):
        seq = lib.nn.Sequential(lib.nn.Identity(), lib.nn.ReLU(), lib.nn.Tanh())
        neg = lib.nn.Linear(2, 2, bias=False)
        with lib.no_grad():
            neg.weight.copy_(-lib.eye(2))
        seq[0] = neg
        out = seq(lib.tensor([-1.0, 2.0])).detach().numpy()
        del seq[1]
        mods = lib.nn.ModuleList([lib.nn.ReLU(), lib.nn.Tanh(), lib.nn.Sigmoid()])
        mods[0] = lib.nn.Identity()
        del mods[1]

        class Net(lib.nn.Module):
            def __init__(self, nn):
                super().__init__()
                self.body = nn.Linear(2, 2)
                self.fc = nn.Linear(2, 2)
                self.norm = nn.LayerNorm(2)
        net = Net(lib.nn)
        net.fc = lib.nn.Linear(2, 3)
        net.body.weight = lib.nn.Parameter(lib.ones(2, 2))
        results.append((out.tolist(), [type(m).__name__ for m in seq], list(dict(
            seq.named_children())), [type(m).__name__ for m in mods],
            list(dict(mods.named_children())), list(net.state_dict()),
            [tuple(p.shape) for p in net.parameters()]))
    assert results[0] == results[1]


def test_inplace_activations_and_implicit_softmax_dim_match_torch():
    """``inplace=True`` overwrites the input (and is refused on a leaf that requires grad);
    softmax/log_softmax without ``dim`` pick PyTorch's deprecated implicit dim, warning."""
    import warnings
    outs = []
    for lib in (torch, gg):
        nn_ = lib.nn
        x = lib.tensor([-1.0, 2.0, -3.0])
        same = nn_.ReLU(inplace=True)(x) is x
        others = [lib.tensor([-1.0, 2.0]) for _ in range(4)]
        nn_.LeakyReLU(0.1, inplace=True)(others[0])
        nn_.ELU(inplace=True)(others[1])
        nn_.SiLU(inplace=True)(others[2])
        nn_.functional.dropout(others[3], 1.0, inplace=True)
        a = lib.ones(2, 3, requires_grad=True)
        nn_.ReLU(inplace=True)(a * -2 + 3).sum().backward()
        with pytest.raises(RuntimeError, match="a leaf Variable that requires grad"):
            nn_.functional.relu(lib.ones(2, requires_grad=True), inplace=True)
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            implicit = [nn_.Softmax()(lib.arange(6.0).reshape(2, 3)),
                        nn_.functional.log_softmax(lib.arange(4.0)),
                        nn_.functional.softmax(lib.arange(8.0).reshape(2, 2, 2))]
        outs.append((same, x.tolist(), [np.round(o.numpy(), 6).tolist() for o in others],
                     a.grad.tolist(), [np.round(o.numpy(), 6).tolist() for o in implicit],
                     sorted({str(w.message) for w in caught})))
    assert outs[0] == outs[1]


def test_register_names_are_checked_as_torch():
    calls = [lambda m, lib: m.register_buffer("weight", lib.ones(1)),
             lambda m, lib: m.register_parameter("x.y", None),
             lambda m, lib: m.register_buffer("a.b", None),
             lambda m, lib: m.add_module("a.b", None),
             lambda m, lib: m.register_parameter("", None),
             lambda m, lib: m.register_buffer("", None),
             lambda m, lib: m.add_module("", None),
             lambda m, lib: m.register_parameter(1, None),
             lambda m, lib: m.add_module("weight", lib.nn.ReLU()),
             lambda m, lib: m.register_parameter("bias", lib.nn.Parameter(lib.ones(1)))]
    for call in calls:
        said = []
        for lib in (torch, gg):
            try:
                call(lib.nn.Linear(2, 2), lib)
                said.append("ok")
            except (KeyError, TypeError) as e:
                said.append(f"{type(e).__name__}: {e}")
        assert said[0] == said[1]


@pytest.mark.parametrize("make", ["ELU(inplace=True)", "SiLU(inplace=True)",
                                  "LeakyReLU(0.1, inplace=True)", "ReLU(inplace=True)"])
def test_inplace_activation_after_an_op_trains(make):
    """The in-place activation's backward reads the value before the overwrite (to the
    second derivative), as PyTorch's elu_/silu_ do."""
    outs = []
    for lib in (torch, gg):
        x = lib.tensor([[-1.0, 2.0, 0.5]], dtype=lib.float64, requires_grad=True)
        y = eval(f"lib.nn.{make}", {"lib": lib})(x * 1.5)  # noqa: S307 - the test's own text
        (g,) = lib.autograd.grad(y.sum(), x, create_graph=True)
        (h,) = lib.autograd.grad((g * g * x).sum(), x)  # x: ReLU's g alone is constant
        outs.append((y.detach().numpy(), g.detach().numpy(), h.numpy()))
    for got, want in zip(outs[1], outs[0], strict=True):
        np.testing.assert_allclose(got, want, rtol=1e-12)


def test_load_state_dict_assign_and_non_tensor_entries_as_torch():
    outs = []
    for lib in (torch, gg):
        m = lib.nn.Sequential(lib.nn.Linear(2, 2))
        m.load_state_dict({"0.weight": lib.ones(2, 2, dtype=lib.float64),
                           "0.bias": lib.zeros(2, dtype=lib.float64)}, assign=True)
        with pytest.raises(RuntimeError, match='While copying the parameter named "weight", '
                                               "expected .*Tensor or Tensor-like object"):
            lib.nn.Linear(2, 2).load_state_dict({"weight": [[1.0, 2.0], [3.0, 4.0]],
                                                 "bias": lib.zeros(2)})
        outs.append((str(m[0].weight.dtype).split(".")[-1], type(m[0].weight).__name__,
                     m[0].weight.requires_grad, m[0].weight.tolist(),
                     list(dict(m.named_parameters()))))
    assert outs[0] == outs[1]
