"""The compiled backward frees each saved activation after its last read (boxed inputs,
backends/array_program.py ``array_function(boxed=True)``), as eager backward frees what
each node saved: its peak memory is not every activation at once."""

from __future__ import annotations

import re
import weakref

import numpy as np

import graphgrad as gg
from graphgrad.compiler import segments


def _model():
    gg.manual_seed(0)
    layers = []
    for _ in range(6):
        layers += [gg.nn.Linear(256, 256), gg.nn.Tanh()]
    return gg.nn.Sequential(*layers)


def _compiled_op(cf):
    (op,) = [op for op in segments(cf)[0].compiled.__globals__["_train"].built.values()
             if op is not None]
    return op


def test_the_backward_program_takes_a_box_and_drops_inputs_after_their_last_use():
    model = _model()
    cf = gg.compile(lambda x: model(x).sum())
    cf(gg.randn(8, 256)).backward()
    src = _compiled_op(cf).backward_arrays.source
    head = src.splitlines()
    assert head[0] == "def arrays(args):" and head[2].strip() == "args.clear()", src
    n_inputs = head[1].count("x")
    for i in range(n_inputs):   # every saved value is dropped inside the program
        assert any(line.strip().startswith("del ") and f"x{i}" in line.replace(",", " ").split()
                   for line in head[3:]), (i, src)


def test_saved_values_are_freed_while_the_backward_runs():
    model = _model()
    cf = gg.compile(lambda x: model(x).sum())
    x = gg.randn(16, 256)
    cf(x).backward()
    bwd = _compiled_op(cf).backward_arrays
    lines = bwd.source.splitlines()
    n_inputs = lines[1].count("x")
    box = [np.random.default_rng(i).standard_normal(  # any arrays of the right shapes
        tuple(p.spec.shape)).astype(p.spec.dtype) for i, p in
        enumerate(_compiled_op(cf).backward_graph.inputs)]
    refs = [weakref.ref(a) for a in box]
    want = bwd(list(box))
    # the last statement's function: when it runs, every input deleted before it is gone
    k = max(i for i, ln in enumerate(lines) if re.match(r"\s+t\d+ = _f\d+\(", ln))
    fn_name = re.match(r"\s+t\d+ = (_f\d+)\(", lines[k]).group(1)
    gone_by_then = {int(v[1:]) for ln in lines[:k] if ln.strip().startswith("del ")
                    for v in ln.strip()[4:].split(", ") if v.startswith("x")}
    assert gone_by_then, bwd.source
    seen = {}
    real = bwd.__globals__[fn_name]

    def spy(*args, **kwargs):
        seen["alive"] = {i for i, r in enumerate(refs) if r() is not None}
        return real(*args, **kwargs)

    bwd.__globals__[fn_name] = spy
    try:
        again, box = list(box), None   # (the program's box: its only reference)
        got = bwd(again)
    finally:
        bwd.__globals__[fn_name] = real
    assert not seen["alive"] & gone_by_then, (seen, gone_by_then, bwd.source)
    assert len(seen["alive"]) < n_inputs
    for a, b in zip(got, want, strict=True):
        np.testing.assert_array_equal(a, b)


def test_compiled_training_equals_eager():
    x = gg.randn(64, 256)
    model = _model()
    model(x).sum().backward()
    grads = [p.grad.numpy().copy() for p in model.parameters()]
    cf = gg.compile(lambda x: model(x).sum())
    for _ in range(2):   # (the first call captures and compiles)
        model.zero_grad()
        cf(x).backward()
    for p, g in zip(model.parameters(), grads, strict=True):
        np.testing.assert_allclose(p.grad.numpy(), g, rtol=1e-5, atol=1e-5)


def test_retain_graph_backward_twice_still_gives_the_same_gradients():
    model = _model()
    cf = gg.compile(lambda x: model(x).sum())
    x = gg.randn(4, 256)
    loss = cf(x)
    loss.backward(retain_graph=True)
    first = [p.grad.numpy().copy() for p in model.parameters()]
    loss.backward()
    for p, g in zip(model.parameters(), first, strict=True):
        np.testing.assert_allclose(p.grad.numpy(), 2 * g, rtol=1e-6)


def _spy_on_last_call(bwd, probe):
    """Run ``probe()`` when the backward program makes its last op call; returns a
    function that undoes the spy."""
    lines = bwd.source.splitlines()
    k = max(i for i, ln in enumerate(lines) if re.match(r"\s+t\d+ = _f\d+\(", ln))
    fn_name = re.match(r"\s+t\d+ = (_f\d+)\(", lines[k]).group(1)
    real = bwd.__globals__[fn_name]

    def spy(*args, **kwargs):
        probe()
        return real(*args, **kwargs)

    bwd.__globals__[fn_name] = spy
    return lambda: bwd.__globals__.__setitem__(fn_name, real)


def test_the_output_gradient_is_freed_inside_the_compiled_backward():
    # the engine hands the compiled op its cotangent in a box (Op.boxed_grad): the
    # program drops it after its last read, as it drops the saved activations
    model = _model()
    cf = gg.compile(lambda x: model(x))
    x = gg.randn(64, 256)
    (cf(x) ** 2).sum().backward()
    refs, alive = [], []
    undo = _spy_on_last_call(_compiled_op(cf).backward_arrays,
                             lambda: alive.append(refs[0]() is not None))
    try:
        out = cf(x)
        out.register_hook(lambda g: refs.append(weakref.ref(g._array)))
        loss = (out ** 2).sum()
        del out
        loss.backward()
    finally:
        undo()
    assert alive == [False]


def test_the_compiled_output_is_released_before_its_backward_runs():
    # a plain eager pass drops a value nobody reads any more (conv's output under a
    # ReLU): the compiled model's output too, though it is the graph's first large node
    model = _model()
    cf = gg.compile(lambda x: model(x))
    x = gg.randn(64, 256)
    cf(x).sum().backward()
    refs, alive = [], []
    undo = _spy_on_last_call(_compiled_op(cf).backward_arrays,
                             lambda: alive.append(refs[0]() is not None))
    model.zero_grad()
    try:
        out = cf(x)
        refs.append(weakref.ref(out._array))
        loss = out.sum()
        del out
        loss.backward()
    finally:
        undo()
    assert alive == [False]
    want = [p.grad._array.copy() for p in model.parameters()]
    model.zero_grad()
    model(x).sum().backward()
    for p, w in zip(model.parameters(), want, strict=True):
        np.testing.assert_allclose(p.grad._array, w, rtol=1e-5, atol=1e-6)
