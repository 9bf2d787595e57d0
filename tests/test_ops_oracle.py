"""Every op against PyTorch, driven by the case table in ``op_cases.py``: forward values,
first derivatives (the vjp of a random projection), second derivatives (the gradient of
a random projection of the first-order gradients taken with ``create_graph=True``, with
respect to the inputs and to the projection's own weights), and the dtypes that float32
and integer inputs give (type promotion over every pair of operands is in
``test_type_promotion.py``). Also: every registered op has a case, each case dispatches the
ops it names, and no gradient rule touches raw NumPy.

Examples come from hypothesis, derandomized so that a run is reproducible; set
``GG_OP_RANDOM=1`` to explore fresh examples and ``GG_OP_EXAMPLES=n`` for more of them.
"""

from __future__ import annotations

import inspect
import io
import os
import re
import textwrap
import tokenize
import warnings

import numpy as np
import pytest
import torch
from hypothesis import HealthCheck, Phase, given, settings
from hypothesis import strategies as st
from op_cases import CASES

import graphgrad as gg
from graphgrad.ops import REGISTRY
from graphgrad.tensor import Mode, dispatch, pop_mode, push_mode

_RANDOM = os.environ.get("GG_OP_RANDOM") == "1"
_N = int(os.environ.get("GG_OP_EXAMPLES", "4"))
# reproducible runs skip shrinking: the examples are small already, and the known-bug
# (xfail) cases would otherwise shrink on every run
SETTINGS = settings(max_examples=_N, deadline=None, derandomize=not _RANDOM,
                    database=None if not _RANDOM else settings.default.database,
                    phases=list(Phase) if _RANDOM else [Phase.explicit, Phase.generate],
                    suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much])

SEEDS = st.integers(0, 2**32 - 1)


def params(cases):
    """pytest parameters of the cases, with the known bugs marked xfail (not strict: an
    example may miss the bug)."""
    return [pytest.param(c, id=c.name, marks=[pytest.mark.xfail(reason=c.xfail)] if c.xfail
                         else []) for c in cases]


GRAD_CASES = [c for c in CASES if c.grad and c.torch_grad]
GRAD2_CASES = [c for c in GRAD_CASES if c.grad2]
FLOAT32_CASES = [c for c in CASES if c.float32]


# ---- helpers -------------------------------------------------------------------------


def _is_float(a) -> bool:
    return np.asarray(a).dtype.kind == "f"


def make_inputs(fw, example, dtype=np.float64):
    """The example's arrays as tensors of framework ``fw`` (``gg`` or ``torch``); float
    arrays become ``dtype`` leaves that require grad unless listed in ``nograd``."""
    out = []
    for i, a in enumerate(example.arrays):
        a = np.asarray(a)
        if a.dtype.kind == "f":
            out.append(fw.tensor(a.astype(dtype), requires_grad=i not in example.nograd))
        else:
            out.append(fw.tensor(a))
    return out


def diff_positions(example) -> list[int]:
    return [i for i, a in enumerate(example.arrays)
            if _is_float(a) and i not in example.nograd]


def flat(out) -> list:
    """A case's result as a list of tensors (tuples, named tuples and lists unpacked)."""
    if isinstance(out, (tuple, list)):
        return [t for o in out for t in flat(o)]
    return [out]


def dtype_name(t) -> str:
    return str(t.dtype).rsplit(".", 1)[-1]


def to_numpy(t) -> np.ndarray:
    if isinstance(t, torch.Tensor) and t._is_zerotensor():  # PyTorch's symbolic zeros
        return np.zeros(tuple(t.shape))
    return np.asarray(t.detach().numpy())


def assert_matches(g, t, rtol, atol, what=""):
    """graphgrad tensor ``g`` equals torch tensor ``t``: shape, dtype and values."""
    assert tuple(g.shape) == tuple(t.shape), f"{what}shape {tuple(g.shape)} != {tuple(t.shape)}"
    assert dtype_name(g) == dtype_name(t), f"{what}dtype {g.dtype} != {t.dtype}"
    a, b = to_numpy(g), to_numpy(t)
    if a.dtype.kind in "fc":
        np.testing.assert_allclose(a, b, rtol=rtol, atol=atol, equal_nan=True, err_msg=what)
    else:
        np.testing.assert_array_equal(a, b, err_msg=what)


def assert_grads_match(gs, ts, like, rtol, atol, what):
    """Gradients that match; an absent gradient (None) counts as zeros."""
    assert len(gs) == len(ts)
    for i, (g, t, x) in enumerate(zip(gs, ts, like, strict=True)):
        if g is None and t is None:
            continue
        if g is not None:  # graphgrad's gradient has the input's shape and dtype
            assert tuple(g.shape) == tuple(x.shape), f"{what} {i}: shape {tuple(g.shape)}"
            assert dtype_name(g) == dtype_name(x), f"{what} {i}: dtype {g.dtype}"
        a = to_numpy(g) if g is not None else np.zeros(tuple(x.shape))
        b = to_numpy(t) if t is not None else np.zeros(tuple(x.shape))
        np.testing.assert_allclose(a, b, rtol=rtol, atol=atol, equal_nan=True,
                                   err_msg=f"{what} {i}")


def call(case, fw, inputs, example):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)  # size-mismatch warnings of losses
        fn = case.gg_fn if fw is gg else case.torch_fn
        return flat(fn(*inputs, **example.static))


def projection(fw, outs, weights):
    """sum_i sum(out_i * w_i) over the outputs that carry a gradient (None: none do)."""
    total = None
    for o, w in zip(outs, weights, strict=True):
        if o.dtype.is_floating_point and o.requires_grad:
            term = (o * w).sum()
            total = term if total is None else total + term
    return total


def grads_of(fw, scalar, wrt, **kw):
    if scalar is None or not scalar.requires_grad:
        return [None] * len(wrt)
    return list(fw.autograd.grad(scalar, wrt, allow_unused=True, **kw))


def _weights(fw, arrays, dtype, requires_grad=False):
    return [fw.tensor(a.astype(dtype), requires_grad=requires_grad) for a in arrays]


def _random_like(rng, tensors):
    return [rng.standard_normal(tuple(t.shape)) for t in tensors]


# ---- the table covers the registry -------------------------------------------------------


def test_every_registered_op_has_a_case():
    covered = {op for c in CASES for op in c.ops}
    missing = sorted(set(REGISTRY) - covered)
    assert not missing, f"ops without a case in op_cases.py: {missing}"


def test_cases_name_registered_ops():
    unknown = sorted({op for c in CASES for op in c.ops} - set(REGISTRY))
    assert not unknown, f"cases name ops that are not registered: {unknown}"


class _Recorder(Mode):
    """Notes the name of every op dispatched while it is on the stack."""

    def __init__(self):
        self.seen: set[str] = set()

    def process(self, op, args, params):
        self.seen.add(op.__name__)
        with self.lowered():
            return dispatch(op, args, params)


@pytest.mark.parametrize("case", CASES, ids=[c.name for c in CASES])
@settings(SETTINGS, max_examples=1)
@given(data=st.data())
def test_case_dispatches_its_ops(case, data):
    example = data.draw(case.inputs)
    inputs = make_inputs(gg, example)
    rec = _Recorder()
    push_mode(rec)
    try:
        call(case, gg, inputs, example)
    except Exception:
        if case.xfail:  # the known bug may stop the call before its ops run
            pytest.xfail(case.xfail)
        raise
    finally:
        pop_mode(rec)
    assert set(case.ops) <= rec.seen, f"{case.name} dispatched {sorted(rec.seen)}"


def _rule_sources(op):
    for attr in ("vjp", "jvp"):
        rule = getattr(op, attr, None)
        if rule is None or not callable(rule):
            continue
        try:
            yield attr, inspect.getsource(rule)
        except (OSError, TypeError):
            continue


def _code_only(source: str) -> str:
    """The source without comments and strings (docstrings may mention np.)."""
    out = []
    for tok in tokenize.generate_tokens(io.StringIO(textwrap.dedent(source)).readline):
        if tok.type not in (tokenize.COMMENT, tokenize.STRING):
            out.append(tok.string)
    return " ".join(out)


_RAW_ARRAY = re.compile(r"\b(np|xp|numpy|cupy)\s*\.")


@pytest.mark.parametrize("name", sorted(REGISTRY))
def test_rules_are_graphgrad_programs(name):
    """STYLE rule 2: vjp (and jvp) rules call graphgrad ops, never NumPy."""
    for attr, source in _rule_sources(REGISTRY[name]):
        hit = _RAW_ARRAY.search(_code_only(source))
        assert hit is None, f"{name}.{attr} touches raw arrays: {hit.group(0)!r}"


# ---- forward values -------------------------------------------------------------------------


@pytest.mark.parametrize("case", params(CASES))
@SETTINGS
@given(data=st.data())
def test_forward(case, data):
    example = data.draw(case.inputs)
    g_in, t_in = make_inputs(gg, example), make_inputs(torch, example)
    g_out, t_out = call(case, gg, g_in, example), call(case, torch, t_in, example)
    assert len(g_out) == len(t_out), f"{len(g_out)} outputs, torch gives {len(t_out)}"
    for i, (g, t) in enumerate(zip(g_out, t_out, strict=True)):
        assert_matches(g, t, case.rtol, case.atol, f"output {i}: ")
        if not g.dtype.is_floating_point:
            assert not g.requires_grad, f"output {i} ({g.dtype}) requires grad"
        elif case.grad and any(x.requires_grad for x in g_in):
            assert g.requires_grad, f"output {i} does not require grad"


# ---- first and second derivatives -------------------------------------------------------------


@pytest.mark.parametrize("case", params(GRAD_CASES))
@SETTINGS
@given(data=st.data())
def test_first_derivative(case, data):
    """``backward()`` of sum(out * r) for a random r: ``.grad`` is J^T r for every float
    input."""
    example = data.draw(case.inputs)
    rng = np.random.default_rng(data.draw(SEEDS))
    pos = diff_positions(example)
    g_in, t_in = make_inputs(gg, example), make_inputs(torch, example)
    g_out, t_out = call(case, gg, g_in, example), call(case, torch, t_in, example)
    r = _random_like(rng, g_out)
    for fw, outs in ((gg, g_out), (torch, t_out)):
        loss = projection(fw, outs, _weights(fw, r, np.float64))
        if loss is not None and loss.requires_grad:
            loss.backward()
    assert_grads_match([g_in[i].grad for i in pos], [t_in[i].grad for i in pos],
                       [g_in[i] for i in pos], case.rtol * 10, case.atol * 10,
                       "gradient of input")


@pytest.mark.parametrize("case", params(GRAD2_CASES))
@SETTINGS
@given(data=st.data())
def test_second_derivative(case, data):
    """Differentiate sum(grad_i * s_i) again, the grads taken with create_graph=True of
    sum(out * r): with respect to the inputs (the Hessian along s) and to r (which checks
    that each vjp rule is itself differentiable in its cotangent)."""
    example = data.draw(case.inputs)
    rng = np.random.default_rng(data.draw(SEEDS))
    pos = diff_positions(example)
    results = []
    for fw in (gg, torch):  # graphgrad first: its output shapes size r and s for both
        inputs = make_inputs(fw, example)
        outs = call(case, fw, inputs, example)
        if fw is gg:
            r = _random_like(rng, outs)
            s = _random_like(rng, [inputs[i] for i in pos])
        wrt = [inputs[i] for i in pos]
        r_leaves = _weights(fw, r, np.float64, requires_grad=True)
        first = grads_of(fw, projection(fw, outs, r_leaves), wrt, create_graph=True)
        total = None
        for g, w in zip(first, _weights(fw, s, np.float64), strict=True):
            if g is not None and g.requires_grad:
                total = (g * w).sum() if total is None else total + (g * w).sum()
        results.append((grads_of(fw, total, wrt + r_leaves), wrt + r_leaves))
    (gs, like), (ts, _) = results
    assert_grads_match(gs, ts, like, case.rtol * 100, case.atol * 100,
                       "second derivative w.r.t. (inputs..., r...)")


# ---- dtypes ---------------------------------------------------------------------------------


@pytest.mark.parametrize("case", params(FLOAT32_CASES))
@SETTINGS
@given(data=st.data())
def test_float32_dtypes(case, data):
    """float32 inputs (integer and bool ones as they are) give torch's output dtypes,
    values to float32 precision, and float32 gradients."""
    example = data.draw(case.inputs)
    g_in = make_inputs(gg, example, np.float32)
    t_in = make_inputs(torch, example, np.float32)
    g_out, t_out = call(case, gg, g_in, example), call(case, torch, t_in, example)
    assert len(g_out) == len(t_out)
    for i, (g, t) in enumerate(zip(g_out, t_out, strict=True)):
        assert_matches(g, t, 2e-4, 2e-4, f"output {i}: ")
    if not (case.grad and case.torch_grad):
        return
    pos = diff_positions(example)
    ones = [np.ones(tuple(o.shape)) for o in g_out]
    gs = grads_of(gg, projection(gg, g_out, _weights(gg, ones, np.float32)),
                  [g_in[i] for i in pos])
    ts = grads_of(torch, projection(torch, t_out, _weights(torch, ones, np.float32)),
                  [t_in[i] for i in pos])
    for i, (g, t) in enumerate(zip(gs, ts, strict=True)):
        if g is not None and t is not None:
            assert_matches(g, t, 2e-3, 2e-3, f"gradient {i}: ")
