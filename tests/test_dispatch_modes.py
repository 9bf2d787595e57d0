"""The dispatch stack (graphgrad.tensor.modes): modes see op calls and in-place writes,
the hooks a mode does not implement behave as plain eager mode, every node is built by
the one constructor, and nothing outside the tensor layer touches the stack's state."""

from __future__ import annotations

import pathlib

import numpy as np
import pytest

import graphgrad as gg
from graphgrad.func import vmap
from graphgrad.nn import Parameter
from graphgrad.tensor import Mode, Value, active_modes, dispatch, pop_mode, push_mode

ROOT = pathlib.Path(gg.__file__).parent


class Recorder(Mode):
    """Passes every call down and remembers what it saw."""

    def __init__(self):
        self.ops: list[str] = []
        self.writes: list[str] = []

    def process(self, op, args, params):
        self.ops.append(op.__name__)
        with self.lowered():
            return dispatch(op, args, params)

    def process_inplace(self, t, fn, args, kw, name, below):
        self.writes.append(name)
        return below(fn)


def _with(mode: Mode, fn):
    push_mode(mode)
    try:
        return fn()
    finally:
        pop_mode(mode)


def test_inplace_writes_go_down_the_stack_like_op_calls():
    x = gg.tensor([1.0, 2.0])
    rec = Recorder()
    out = _with(rec, lambda: x.add_(1.0).mul_(2.0))
    assert out is x
    np.testing.assert_array_equal(x.numpy(), [4.0, 6.0])
    assert rec.writes == ["add_", "mul_"]
    assert rec.ops == ["Add", "Mul"]  # the new values are op calls the mode also sees
    assert x._version == 2


def test_a_mode_can_change_what_is_written():
    class Doubling(Mode):
        def process(self, op, args, params):
            with self.lowered():
                return dispatch(op, args, params)

        def process_inplace(self, t, fn, args, kw, name, below):
            return below(lambda old, *a, **k: fn(old, *a, **k) * 2.0)

    x = gg.tensor([1.0, 2.0])
    _with(Doubling(), lambda: x.add_(1.0))
    np.testing.assert_array_equal(x.numpy(), [4.0, 6.0])


def test_fill_is_written_directly_when_no_mode_changes_it():
    x = gg.zeros(3)
    rec = Recorder()
    _with(rec, lambda: x.fill_(5.0))
    np.testing.assert_array_equal(x.numpy(), [5.0, 5.0, 5.0])
    assert rec.writes == ["fill_"] and rec.ops == []  # no op: the value went in as is


def test_recorded_inplace_through_a_mode_keeps_gradients():
    a = gg.tensor([1.0, 2.0, 3.0], requires_grad=True)

    def f():
        y = a * 1.0
        y.mul_(a)
        return y.sum()
    rec = Recorder()
    loss = _with(rec, f)
    loss.backward()
    np.testing.assert_allclose(a.grad.numpy(), 2 * a.detach().numpy())
    assert rec.writes == ["mul_"]


def test_unimplemented_hooks_behave_as_eager():
    class Plain(Mode):
        def process(self, op, args, params):
            with self.lowered():
                return dispatch(op, args, params)

    m = Plain()
    t = gg.tensor(2.5)
    assert _with(m, lambda: (bool(t), float(t), int(t))) == (True, 2.5, 2)
    assert not m.batches(t) and m.randomness is None
    with pytest.raises(NotImplementedError, match="does not process op calls"):
        Mode().process(None, (), {})


def test_lowered_takes_the_mode_off_the_stack_and_puts_it_back():
    rec = Recorder()
    push_mode(rec)
    try:
        assert active_modes()[-1] is rec
        with rec.lowered():
            assert rec not in active_modes()
        assert active_modes()[-1] is rec
    finally:
        pop_mode(rec)
    assert rec not in active_modes()


def test_popping_out_of_order_is_refused():
    a, b = Recorder(), Recorder()
    push_mode(a)
    push_mode(b)
    try:
        with pytest.raises(RuntimeError, match="popped out of order"):
            pop_mode(a)
    finally:
        pop_mode(b)
        pop_mode(a)


def test_vmap_mode_says_which_tensors_it_batches():
    seen = []

    def f(row):
        seen.append([m.batches(row) for m in active_modes()])
        return row * 2

    vmap(f)(gg.ones(3, 2))
    assert seen == [[True]]


@pytest.mark.parametrize("make", [
    lambda: gg.tensor([1.0]),
    lambda: gg.tensor([1.0], requires_grad=True) * 2,
    lambda: Parameter(gg.ones(2)),
    lambda: gg.ones(2, 2)[0],
])
def test_every_node_has_every_slot(make):
    t = make()
    for slot in Value.__slots__:
        if slot != "__weakref__":
            getattr(t, slot)  # an unset slot raises AttributeError


def test_only_the_tensor_layer_touches_the_stack_state():
    users = []
    for path in ROOT.rglob("*.py"):
        text = path.read_text()
        if "modes import per_thread" in text or "modes.per_thread" in text:
            users.append(path.relative_to(ROOT).as_posix())
    assert users == ["tensor/dispatch.py"]
    hooks = [p.relative_to(ROOT).as_posix() for p in ROOT.rglob("*.py")
             if "_unwrap_for_autograd" in p.read_text() or 'hasattr(top,' in p.read_text()]
    assert hooks == []
