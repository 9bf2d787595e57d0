"""Grad mode, the dispatch stack and the static API's default graphs are per thread, as
PyTorch's grad mode (and TF's default graph stack) are. Each test forces the
interleaving it is about with barriers inside the two threads' work, so it checks what
the code decided, never how long anything took."""

from __future__ import annotations

import threading

import numpy as np
import pytest

import graphgrad as gg
from graphgrad import static
from graphgrad.func import vmap
from graphgrad.tensor import active_modes

TIMEOUT_S = 30.0  # only a broken rendezvous waits this long


def _in_thread(fn) -> threading.Thread:
    errors = []

    def run():
        try:
            fn()
        except BaseException as e:  # noqa: BLE001 - re-raised in the main thread
            errors.append(e)
    t = threading.Thread(target=run)
    t.errors = errors
    t.start()
    return t


def _join(t: threading.Thread) -> None:
    t.join(TIMEOUT_S)
    assert not t.is_alive(), "the helper thread did not finish"
    if t.errors:
        raise t.errors[0]


def test_no_grad_in_one_thread_leaves_the_others_recording():
    inside, done = threading.Barrier(2, timeout=TIMEOUT_S), threading.Barrier(2,
                                                                               timeout=TIMEOUT_S)

    def inference():
        with gg.no_grad():
            inside.wait()   # the main thread computes while this one is in no_grad
            done.wait()
    t = _in_thread(inference)
    inside.wait()
    x = gg.tensor([1.0, 2.0], requires_grad=True)
    y = (x * 3.0).sum()
    assert gg.is_grad_enabled() and y.requires_grad
    done.wait()
    _join(t)
    y.backward()
    np.testing.assert_array_equal(x.grad.numpy(), [3.0, 3.0])


def test_a_new_thread_starts_in_the_default_state():
    seen = {}

    def probe():
        seen["grad"] = gg.is_grad_enabled()
        seen["modes"] = active_modes()
    with gg.no_grad():
        vmap(lambda r: (_join(_in_thread(probe)), r * 2)[1])(gg.ones(1, 2))
    assert seen == {"grad": True, "modes": ()}
    assert gg.is_grad_enabled() and active_modes() == ()


def test_two_threads_each_in_no_grad_restore_their_own_mode():
    a_in, b_out = threading.Barrier(2, timeout=TIMEOUT_S), threading.Barrier(2,
                                                                             timeout=TIMEOUT_S)

    def a():
        with gg.no_grad():
            a_in.wait()
            b_out.wait()  # a leaves no_grad after b has left its own

    def b():
        a_in.wait()
        with gg.no_grad():
            pass
        b_out.wait()
    ta, tb = _in_thread(a), _in_thread(b)
    _join(ta)
    _join(tb)
    assert gg.is_grad_enabled()


def test_a_vmap_level_is_invisible_to_other_threads():
    inside, done = threading.Barrier(2, timeout=TIMEOUT_S), threading.Barrier(2,
                                                                               timeout=TIMEOUT_S)

    def batched(row):
        inside.wait()   # the main thread draws random numbers while this level is active
        done.wait()
        return row * 2
    t = _in_thread(lambda: vmap(batched)(gg.ones(3, 2)))
    inside.wait()
    assert active_modes() == ()
    gg.randn(2)  # under the other thread's vmap (randomness="error") this would raise
    done.wait()
    _join(t)


def test_a_failing_level_does_not_stay_on_the_stack():
    def fails(row):
        raise ValueError("inside vmap")
    with pytest.raises(ValueError, match="inside vmap"):
        vmap(fails)(gg.ones(2, 2))
    assert active_modes() == ()
    gg.randn(2)


def _train(steps: int, step_barrier=None) -> list[float]:
    gg.manual_seed(0)
    rng = np.random.default_rng(0)
    model = gg.nn.Linear(3, 1).double()
    opt = gg.optim.SGD(model.parameters(), lr=0.1)
    x = gg.tensor(rng.standard_normal((8, 3)))
    y = gg.tensor(rng.standard_normal((8, 1)))
    losses = []
    for _ in range(steps):
        opt.zero_grad()
        loss = ((model(x) - y) ** 2).mean()
        if step_barrier is not None:
            step_barrier[0].wait()  # the other thread is inside no_grad now
            step_barrier[1].wait()
        loss.backward()
        assert all(p.grad is not None for p in model.parameters())
        opt.step()
        losses.append(loss.item())
    return losses


def test_training_beside_an_inference_thread_loses_no_gradient():
    steps = 20
    expected = _train(steps)
    barriers = (threading.Barrier(2, timeout=TIMEOUT_S), threading.Barrier(2, timeout=TIMEOUT_S))
    model = gg.nn.Linear(3, 1)

    def inference():
        for _ in range(steps):
            with gg.no_grad():
                barriers[0].wait()
                model(gg.ones(2, 3))
                barriers[1].wait()
    t = _in_thread(inference)
    got = _train(steps, barriers)
    _join(t)
    np.testing.assert_allclose(got, expected, rtol=1e-12)


def test_static_default_graphs_are_per_thread():
    g = static.Graph()
    inside, done = threading.Barrier(2, timeout=TIMEOUT_S), threading.Barrier(2,
                                                                               timeout=TIMEOUT_S)

    def build():
        with g.as_default():
            inside.wait()
            done.wait()
    t = _in_thread(build)
    inside.wait()
    assert static.get_default_graph() is not g
    done.wait()
    _join(t)
