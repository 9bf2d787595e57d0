"""The CPU-only stand-ins of graphgrad.torch_compat against what CPU-only PyTorch 2.13
answers: values, defaults, warnings, exception types and messages."""

from __future__ import annotations

import subprocess
import sys
import warnings

import numpy as np
import pytest
import torch

import graphgrad as gg
from graphgrad.torch_compat.importer import TorchAliasFinder, graphgrad_name


def _raises_like(ours, theirs, exact: bool = True):
    """Both calls raise the same exception type (and, if ``exact``, the same message)."""
    with pytest.raises(Exception) as want:
        theirs()
    with pytest.raises(type(want.value)) as got:
        ours()
    if exact:
        assert str(got.value) == str(want.value)
    return got.value


def test_accelerator_matches_a_cpu_build():
    for name in ("is_available", "current_accelerator", "device_count"):
        assert getattr(gg.accelerator, name)() == getattr(torch.accelerator, name)()
    _raises_like(gg.accelerator.synchronize, torch.accelerator.synchronize)


def test_default_device_is_the_cpu_only():
    assert repr(gg.get_default_device()) == repr(torch.get_default_device())
    try:
        for d in ("cpu", None, torch.device("cpu")):
            torch.set_default_device(d)
            gg.set_default_device(gg.device("cpu") if d is not None else None)
        # PyTorch's CPU build accepts set_default_device("cuda") (in a fresh process) and
        # raises at the next tensor it creates; graphgrad, which cannot record and honour a
        # CUDA default, raises the same error at once
        out = subprocess.run([sys.executable, "-c", "import torch\n"
                              "torch.set_default_device('cuda')\ntorch.zeros(2)"],
                             capture_output=True, text=True, timeout=600)
        assert "AssertionError: Torch not compiled with CUDA enabled" in out.stderr
        with pytest.raises(AssertionError, match="^Torch not compiled with CUDA enabled"):
            gg.set_default_device("cuda")
        with pytest.raises(RuntimeError, match="CPU only"):
            gg.set_default_device("mps")
    finally:
        torch.set_default_device(None)
    assert repr(gg.get_default_device()) == "device(type='cpu')"


FLAGS = [("cudnn", "enabled"), ("cudnn", "benchmark"), ("cudnn", "deterministic"),
         ("cudnn", "allow_tf32"), ("mkldnn", "enabled"), ("mkldnn", "deterministic"),
         ("cuda.matmul", "allow_tf32"), ("cuda.matmul", "allow_fp16_reduced_precision_reduction"),
         ("cuda.matmul", "allow_bf16_reduced_precision_reduction")]


def _namespace(root, path):
    for part in path.split("."):
        root = getattr(root, part)
    return root


@pytest.mark.parametrize("path,flag", FLAGS)
def test_backend_flags_default_set_and_refuse_non_bools(path, flag):
    ours, theirs = _namespace(gg.backends, path), _namespace(torch.backends, path)
    default = getattr(theirs, flag)
    assert getattr(ours, flag) is default
    try:
        setattr(ours, flag, not default)
        assert getattr(ours, flag) is (not default)
        _raises_like(lambda: setattr(ours, flag, 1), lambda: setattr(theirs, flag, 1))
    finally:
        setattr(ours, flag, default)
        setattr(theirs, flag, default)


def test_backend_probes_match_a_cpu_build():
    b, tb = gg.backends, torch.backends
    assert (b.cudnn.is_available(), b.cudnn.version(), b.cudnn.benchmark_limit) == \
           (tb.cudnn.is_available(), tb.cudnn.version(), tb.cudnn.benchmark_limit)
    assert (b.mps.is_available(), b.mps.is_built()) == (tb.mps.is_available(),
                                                        tb.mps.is_built())
    assert b.mkldnn.is_available() == tb.mkldnn.is_available()
    assert b.cuda.is_built() == tb.cuda.is_built()
    _raises_like(lambda: setattr(b.cuda.matmul, "foo", 1),
                 lambda: setattr(tb.cuda.matmul, "foo", 1))
    # the graph backends are still there beside PyTorch's flags
    assert "eager" in gg.backends.BACKENDS


def test_cuda_module_of_a_cpu_build():
    assert gg.cuda.is_available() is torch.cuda.is_available() is False
    assert gg.cuda.device_count() == torch.cuda.device_count() == 0
    assert gg.cuda.is_bf16_supported() is torch.cuda.is_bf16_supported() is False
    gg.cuda.manual_seed(0)
    with pytest.raises(AttributeError, match="torch.cuda.no_such is not in graphgrad yet"):
        gg.cuda.no_such  # noqa: B018


def _warned(make):
    with warnings.catch_warnings(record=True) as record:
        warnings.simplefilter("always")
        obj = make()
    return obj, [(w.category, str(w.message)) for w in record]


@pytest.mark.parametrize("make", [
    lambda t: t.amp.GradScaler(),
    lambda t: t.amp.GradScaler("cuda", enabled=False),
    lambda t: t.cuda.amp.GradScaler(),
    lambda t: t.amp.GradScaler("cpu", init_scale=8.0, growth_interval=3)])
def test_grad_scaler_construction_warnings_and_state(make):
    ours, our_warnings = _warned(lambda: make(gg))
    theirs, their_warnings = _warned(lambda: make(torch))
    assert our_warnings == their_warnings
    assert ours.is_enabled() == theirs.is_enabled()
    assert ours.state_dict() == theirs.state_dict()
    assert ours.get_scale() == theirs.get_scale()


def _scaled_training(t, inf_steps=(2,), steps=6):
    """A few SGD steps through GradScaler('cpu') with overflows injected; the trace of
    what the scaler did and the final parameters."""
    rng = np.random.default_rng(0)
    w = t.tensor(rng.standard_normal((3, 1)).astype(np.float32), requires_grad=True)
    x = t.tensor(rng.standard_normal((8, 3)).astype(np.float32))
    opt = t.optim.SGD([w], lr=0.1)
    scaler = t.amp.GradScaler("cpu", init_scale=4.0, growth_interval=2)
    trace = []
    for step in range(steps):
        opt.zero_grad()
        loss = (x @ w).pow(2).mean()
        scaled = scaler.scale(loss)
        if step in inf_steps:
            scaled = scaled * float("nan")
        scaled.backward()
        if step == 4:
            scaler.unscale_(opt)
            trace.append(w.grad.detach().numpy().copy())
        result = scaler.step(opt)
        scaler.update()
        trace.append((scaled.item() if step not in inf_steps else "skip", result,
                      scaler.get_scale(), scaler.state_dict()))
    return trace, w.detach().numpy()


def test_grad_scaler_on_cpu_scales_skips_backs_off_and_grows_as_pytorch():
    ours, our_w = _scaled_training(gg)
    theirs, their_w = _scaled_training(torch)
    assert len(ours) == len(theirs)
    for a, b in zip(ours, theirs, strict=True):
        if isinstance(a, np.ndarray):
            np.testing.assert_allclose(a, b, rtol=1e-6)
        else:
            assert a[0] == (b[0] if a[0] == "skip" else pytest.approx(b[0], rel=1e-6))
            assert a[1:] == b[1:]  # step's result (None when skipped), scale, state
    np.testing.assert_allclose(our_w, their_w, rtol=1e-6)


def test_grad_scaler_errors_match():
    def fresh(t):
        w = t.zeros(2, requires_grad=True)
        return w, t.optim.SGD([w], lr=0.1), t.amp.GradScaler("cpu")

    for call in (lambda s, o: s.step(o), lambda s, o: s.update(), lambda s, o: s.unscale_(o)):
        _raises_like(lambda c=call: c(*fresh(gg)[1:][::-1]),
                     lambda c=call: c(*fresh(torch)[1:][::-1]))

    def twice(t):
        w, opt, s = fresh(t)
        s.scale(w.sum()).backward()
        s.unscale_(opt)
        s.unscale_(opt)
    _raises_like(lambda: twice(gg), lambda: twice(torch))

    def step_twice(t):
        w, opt, s = fresh(t)
        s.scale(w.sum()).backward()
        s.step(opt)
        s.step(opt)
    _raises_like(lambda: step_twice(gg), lambda: step_twice(torch))
    _raises_like(lambda: gg.amp.GradScaler("cpu", growth_factor=1.0),
                 lambda: torch.amp.GradScaler("cpu", growth_factor=1.0))
    _raises_like(lambda: gg.amp.GradScaler("cpu", backoff_factor=1.0),
                 lambda: torch.amp.GradScaler("cpu", backoff_factor=1.0))
    _raises_like(lambda: gg.amp.GradScaler("cpu").load_state_dict({}),
                 lambda: torch.amp.GradScaler("cpu").load_state_dict({}))
    _raises_like(lambda: gg.amp.GradScaler("cpu").scale(3),
                 lambda: torch.amp.GradScaler("cpu").scale(3))


def test_grad_scaler_disabled_is_a_pass_through_and_state_round_trips():
    w = gg.ones(2, requires_grad=True)
    opt = gg.optim.SGD([w], lr=0.5)
    scaler = gg.amp.GradScaler(enabled=False)
    loss = w.sum()
    assert scaler.scale(loss) is loss
    loss.backward()
    scaler.unscale_(opt)
    scaler.step(opt)
    scaler.update()
    np.testing.assert_allclose(w.detach().numpy(), [0.5, 0.5])
    src = gg.amp.GradScaler("cpu", init_scale=32.0, growth_interval=7)
    dst = gg.amp.GradScaler("cpu")
    dst.load_state_dict(src.state_dict())
    assert dst.state_dict() == src.state_dict() == {
        "scale": 32.0, "growth_factor": 2.0, "backoff_factor": 0.5, "growth_interval": 7,
        "_growth_tracker": 0}


@pytest.mark.parametrize("make", [
    lambda t: t.autocast("cpu", enabled=False),
    lambda t: t.autocast("cuda"),
    lambda t: t.amp.autocast("cuda", dtype=t.float16),
    lambda t: t.cuda.amp.autocast(),
    lambda t: t.autocast("mps"),
    lambda t: t.autocast(device_type="cpu", dtype=t.float64)])
def test_autocast_that_pytorch_disables_or_leaves_cpu_ops_alone(make):
    ours, our_warnings = _warned(lambda: make(gg))
    theirs, their_warnings = _warned(lambda: make(torch))
    assert our_warnings == their_warnings
    assert ours._enabled == theirs._enabled
    with ours:
        y = gg.ones(2, 2) @ gg.ones(2, 2)
    assert y.dtype == gg.float32

    @make(gg)
    def f(a):
        return a * 2
    assert f(3) == 6


def test_autocast_on_cpu_refuses_to_compute_something_else():
    with pytest.raises(NotImplementedError, match="graphgrad has no bfloat16 yet"):
        gg.autocast("cpu")
    with pytest.raises(NotImplementedError, match="CPU autocast to float16 is not in graphgrad"):
        gg.amp.autocast(device_type="cpu", dtype=gg.float16)
    _raises_like(lambda: gg.autocast(3), lambda: torch.autocast(3))
    _raises_like(lambda: gg.autocast("foo"), lambda: torch.autocast("foo"), exact=False)
    _raises_like(lambda: gg.autocast("cpu", enabled=False)(3),
                 lambda: torch.autocast("cpu", enabled=False)(3))


TYPED = ["FloatTensor", "DoubleTensor", "HalfTensor", "LongTensor", "IntTensor", "ShortTensor",
         "CharTensor", "ByteTensor", "BoolTensor"]
DTYPES = ["float32", "float64", "float16", "int64", "int32", "int16", "int8", "uint8", "bool"]


@pytest.mark.parametrize("name", TYPED)
def test_typed_constructors(name):
    ours, theirs = getattr(gg, name), getattr(torch, name)
    for args in [(2, 3), (), (4,)]:
        a, b = ours(*args), theirs(*args)
        assert (tuple(a.shape), str(a.dtype)) == (tuple(b.shape), str(b.dtype).replace(
            "torch.", "graphgrad."))
    data = [[1, 0], [3, 1]]
    np.testing.assert_array_equal(ours(data).numpy(), theirs(data).numpy())
    assert tuple(ours(gg.Size([2, 5])).shape) == tuple(theirs(torch.Size([2, 5])).shape)
    for dtype in DTYPES:
        assert isinstance(gg.zeros(2, dtype=getattr(gg, dtype)), ours) == \
               isinstance(torch.zeros(2, dtype=getattr(torch, dtype)), theirs)
    assert not isinstance([1.0], ours) and not isinstance(np.zeros(2), ours)


def test_typed_constructor_refuses_another_dtype_and_bad_arguments():
    _raises_like(lambda: gg.FloatTensor(gg.zeros(2, dtype=gg.float64)),
                 lambda: torch.FloatTensor(torch.zeros(2, dtype=torch.float64)), exact=False)
    _raises_like(lambda: gg.FloatTensor(2, "a"), lambda: torch.FloatTensor(2, "a"),
                 exact=False)
    x = gg.zeros(3)
    assert gg.FloatTensor(x) is x


def test_benchmark_timer_and_measurement_statistics():
    from torch.utils.benchmark.utils.common import Measurement, TaskSpec

    timer = gg.utils.benchmark.Timer("y = x * 2", setup="z = 1", globals={"x": 3},
                                     label="mul")
    m = timer.timeit(50)
    assert m.number_per_run == 50 and len(m.raw_times) == 1 and m.label == "mul"
    assert m.times == [m.raw_times[0] / 50] and m.mean == m.median == m.times[0] > 0
    auto = timer.blocked_autorange(min_run_time=0.01)
    assert sum(auto.raw_times) >= 0.01 and auto.number_per_run >= 1
    raw = [0.5, 0.1, 0.3, 0.9, 0.2]
    ours = gg.utils.benchmark.Measurement(10, raw)
    theirs = Measurement(10, raw, TaskSpec("pass", "pass"))
    for stat in ("times", "median", "mean", "iqr"):
        assert getattr(ours, stat) == pytest.approx(getattr(theirs, stat))
    assert "Median" in repr(ours) and "5 measurements, 10 runs per measurement" in repr(ours)


def test_data_parallel_without_gpus_calls_the_module():
    rng = np.random.default_rng(1)
    ours_inner, theirs_inner = gg.nn.Linear(3, 2), torch.nn.Linear(3, 2)
    with gg.no_grad(), torch.no_grad():
        for p, q in zip(ours_inner.parameters(), theirs_inner.parameters(), strict=True):
            values = rng.standard_normal(tuple(q.shape)).astype(np.float32)
            p.copy_(gg.tensor(values))
            q.copy_(torch.tensor(values))
    ours, theirs = gg.nn.DataParallel(ours_inner), torch.nn.DataParallel(theirs_inner)
    assert ours.device_ids == theirs.device_ids == []
    assert list(ours.state_dict()) == list(theirs.state_dict())
    x = rng.standard_normal((4, 3)).astype(np.float32)
    np.testing.assert_allclose(ours(gg.tensor(x)).detach().numpy(),
                               theirs(torch.tensor(x)).detach().numpy(), rtol=1e-6)
    assert gg.nn.parallel.DataParallel is gg.nn.DataParallel
    with pytest.raises(ValueError, match="Default process group has not been initialized"):
        gg.nn.parallel.DistributedDataParallel(ours_inner)


def test_torch_onnx_is_graphgrad_onnx():
    import graphgrad.onnx
    assert graphgrad_name("torch.onnx") == "graphgrad.onnx" and gg.onnx is graphgrad.onnx
    assert graphgrad.onnx.is_in_onnx_export() is False


def test_torch_names_map_to_graphgrad_modules():
    assert graphgrad_name("torch.nn.functional") == "graphgrad.nn.functional"
    assert graphgrad_name("torch.optim.lr_scheduler") == "graphgrad.optim.lr_scheduler"
    assert graphgrad_name("torch.backends.cudnn") == "graphgrad.torch_compat.backends.cudnn"
    assert graphgrad_name("torch.backends") == "graphgrad.backends"
    assert graphgrad_name("torch.cuda.amp") == "graphgrad.torch_compat.cuda.amp"
    assert graphgrad_name("torch._dynamo") == "graphgrad.dynamo"
    assert graphgrad_name("torch._dynamo.config") == "graphgrad.dynamo.config"
    with pytest.raises(ModuleNotFoundError, match=r"^torch.cuda.nope is not in graphgrad yet "
                       r"\(graphgrad.torch_compat.cuda has no 'nope' module\)$"):
        graphgrad_name("torch.cuda.nope")
    with pytest.raises(ModuleNotFoundError) as err:
        graphgrad_name("torch.distributions")
    assert str(err.value) == ("torch.distributions is not in graphgrad yet (graphgrad has no "
                              "'distributions' module)")
    assert err.value.name == "torch.distributions"
    assert TorchAliasFinder().find_spec("numpy") is None
    assert TorchAliasFinder().find_spec("torchvision") is None


def test_bfloat16_can_be_named_and_refuses_every_use():
    """nanoGPT's first lines build a table holding torch.bfloat16; graphgrad has no such
    tensors, so naming the dtype works and using it raises, naming it."""
    table = {"float32": gg.float32, "bfloat16": gg.bfloat16}
    assert repr(table["bfloat16"]) == "graphgrad.bfloat16"
    assert gg.bfloat16.is_floating_point and gg.bfloat16.itemsize == torch.bfloat16.itemsize
    for use in (lambda: gg.ones(2, dtype=gg.bfloat16), lambda: gg.ones(2).to(gg.bfloat16),
                lambda: gg.zeros(2).type(gg.bfloat16), lambda: gg.tensor([1.0], dtype="bfloat16"),
                lambda: gg.ones(2).bfloat16()):
        with pytest.raises(NotImplementedError, match="graphgrad has no bfloat16 tensors"):
            use()
