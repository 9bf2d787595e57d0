"""Run as 2 ranks (tests/test_distributed_launch.py): DistributedDataParallel against one
process on the whole batch, in float64 over 20 steps, for an MLP and a CNN with
BatchNorm; no_sync accumulation; unused parameters; bucket overlap; checkpointing.
Prints one ``ok <check>`` line per passed check (rank 0 only).

The oracle runs on every rank: a plain copy of the model, trained on the whole batch.
PyTorch's DDP without SyncBatchNorm normalizes each rank's half with its own statistics
and keeps rank 0's running statistics (buffers are broadcast from rank 0 every forward),
so the CNN's oracle runs each half through BatchNorm separately, averages the two losses
and keeps the running statistics of half 0."""

import os
import sys
import tempfile
from datetime import timedelta

import numpy as np

import graphgrad as gg
import graphgrad.distributed as dist
from graphgrad import nn
from graphgrad.nn.parallel import DistributedDataParallel as DDP  # noqa: N817 - the usual name
from graphgrad.nn.parallel import distributed as ddp_module

dist.init_process_group("mpi", timeout=timedelta(seconds=120))
R, W = dist.get_rank(), dist.get_world_size()
assert W == 2, "these checks split every batch in two halves"
gg.set_default_dtype(gg.float64)
TOL = 1e-6


def ok(name):
    if R == 0:
        print("ok", name, flush=True)


def close(a, b, what):
    np.testing.assert_allclose(np.asarray(a), np.asarray(b), rtol=TOL, atol=TOL, err_msg=what)


def same_params(ddp_model, ref, what):
    for (name, p), q in zip(ddp_model.module.named_parameters(), ref.parameters(), strict=True):
        close(p.detach().numpy(), q.detach().numpy(), f"{what}: {name}")


def mlp():
    return nn.Sequential(nn.Linear(5, 16), nn.Tanh(), nn.Linear(16, 16), nn.Tanh(),
                         nn.Linear(16, 3))


def cnn():
    return nn.Sequential(nn.Conv2d(1, 4, 3, padding=1), nn.BatchNorm2d(4), nn.ReLU(),
                         nn.MaxPool2d(2), nn.Flatten(), nn.Linear(4 * 3 * 3, 3))


def pair(make):
    """(the oracle with seed 0's weights, the DDP-wrapped model). Rank 1 starts from other
    weights: DDP's construction must broadcast rank 0's."""
    gg.manual_seed(0)
    ref = make()
    gg.manual_seed(100 * R)
    ddp = DDP(make(), bucket_cap_mb=0.001)  # several buckets even for these small models
    return ref, ddp


def batches(shape, n_steps, seed):
    rng = np.random.default_rng(seed)
    for _ in range(n_steps):
        yield gg.tensor(rng.standard_normal(shape)), gg.tensor(rng.integers(0, 3, shape[0]))


def half(t):
    n = t.shape[0] // W
    return t[R * n:(R + 1) * n]


loss_fn = nn.CrossEntropyLoss()


def mean_over_ranks(value):
    t = gg.tensor(float(value))
    dist.all_reduce(t)
    return float(t) / W


def step(opt, loss):
    opt.zero_grad()
    loss.backward()
    opt.step()


def accumulated_step(model, opt, *batches_):
    """One optimizer step on the gradients of several whole batches, accumulated."""
    opt.zero_grad()
    for x, y in batches_:
        loss_fn(model(x), y).backward()
    opt.step()


def step_both(ddp, ref, opt, opt_ref, loss_ref, x, y, what):
    """One step of the oracle (its loss given) and of DDP on this rank's half; the mean
    of the ranks' losses equals the oracle's, and so do the weights after the step."""
    step(opt_ref, loss_ref)
    loss = loss_fn(ddp(half(x)), half(y))
    step(opt, loss)
    close(mean_over_ranks(loss), float(loss_ref), f"{what} loss")
    same_params(ddp, ref, what)


# ---- MLP: 2 ranks on halves == 1 process on the whole batch --------------------------------
ref, ddp = pair(mlp)
same_params(ddp, ref, "after construction (broadcast from rank 0)")
opt_ref = gg.optim.SGD(ref.parameters(), lr=0.1, momentum=0.9)
opt = gg.optim.SGD(ddp.parameters(), lr=0.1, momentum=0.9)
for i, (x, y) in enumerate(batches((8, 5), 20, seed=1)):
    step_both(ddp, ref, opt, opt_ref, loss_fn(ref(x), y), x, y, f"MLP step {i}")
assert len(ddp._buckets) > 1
ok("DDP MLP 2 ranks on halves == 1 process on the whole batch, 20 steps, float64")

# ---- overlap: allreduces start while backward is still running --------------------------
ddp.comm_log.clear()
x, y = next(batches((8, 5), 1, seed=2))
loss_fn(ddp(half(x)), half(y)).backward()
launches = [e for e in ddp.comm_log if e[0] == "launch"]
waits = [e for e in ddp.comm_log if e[0] == "wait"]
n_grads = len(ddp._params)
assert len(launches) == len(ddp._buckets) > 1, ddp.comm_log
assert launches[0][2] < n_grads, f"first allreduce launched only after backward: {launches}"
assert ddp.comm_log.index(waits[0]) > ddp.comm_log.index(launches[-1])
assert [e[1] for e in launches] == list(range(len(ddp._buckets)))
# after the first backward the buckets follow the order gradients became ready:
# the last layer first
assert ddp._buckets[0].indices[0] == n_grads - 1 or ddp._buckets[0].indices[0] == n_grads - 2
ok(f"overlap: first of {len(launches)} bucket allreduces launched with {launches[0][2]} of "
   f"{n_grads} gradients ready")

# PyTorch 2.13's bucketing: one bucket in the first iteration, rebuilt after its backward
_, fresh = pair(mlp)
assert len(fresh._buckets) == 1 and sorted(fresh._buckets[0].indices) == list(range(n_grads))
x, y = next(batches((8, 5), 1, seed=2))
loss_fn(fresh(half(x)), half(y)).backward()
fresh(half(x))  # the rebuild takes effect at the next forward
assert len(fresh._buckets) > 1
assert sorted(sum((b.indices for b in fresh._buckets), [])) == list(range(n_grads))
ok("buckets: one in the first iteration, rebuilt by size in ready order after it")

# ---- CNN with BatchNorm -------------------------------------------------------------------
ref, ddp = pair(cnn)
opt_ref = gg.optim.SGD(ref.parameters(), lr=0.05, momentum=0.9)
opt = gg.optim.SGD(ddp.parameters(), lr=0.05, momentum=0.9)
for i, (x, y) in enumerate(batches((8, 1, 6, 6), 20, seed=3)):
    n = x.shape[0] // W
    losses = []
    kept = None
    for r in range(W):  # as the ranks do: BatchNorm statistics of each half
        losses.append(loss_fn(ref(x[r * n:(r + 1) * n]), y[r * n:(r + 1) * n]))
        if r == 0:
            kept = [b.detach().clone() for b in ref.buffers()]
    with gg.no_grad():  # running statistics: rank 0's (broadcast every forward)
        for b, k in zip(ref.buffers(), kept, strict=True):
            b.copy_(k)
    step_both(ddp, ref, opt, opt_ref, sum(losses) / W, x, y, f"CNN step {i}")
    if R == 0:
        for (name, b), c in zip(ddp.module.named_buffers(), ref.buffers(), strict=True):
            close(b.numpy(), c.numpy(), f"CNN buffer {name} at step {i}")
ok("DDP CNN+BatchNorm (per-rank batch statistics, rank 0's running statistics), 20 steps")

# ---- no_sync: gradient accumulation over 2 micro-batches ---------------------------------
ref, ddp = pair(mlp)
opt_ref = gg.optim.SGD(ref.parameters(), lr=0.1)
opt = gg.optim.SGD(ddp.parameters(), lr=0.1)
data = list(batches((8, 5), 10, seed=4))
for i in range(5):
    (xa, ya), (xb, yb) = data[2 * i], data[2 * i + 1]
    accumulated_step(ref, opt_ref, (xa, ya), (xb, yb))
    opt.zero_grad()
    with ddp.no_sync():
        ddp.comm_log.clear()
        loss_fn(ddp(half(xa)), half(ya)).backward()
        assert not ddp.comm_log, "no allreduce inside no_sync"
    loss_fn(ddp(half(xb)), half(yb)).backward()
    opt.step()
    same_params(ddp, ref, f"no_sync step {i}")
ok("no_sync accumulation")

# ---- gradient_as_bucket_view: .grad is a view of the bucket, values unchanged ------------
gg.manual_seed(0)
ref = mlp()
gg.manual_seed(0)
ddp = DDP(mlp(), bucket_cap_mb=0.001, gradient_as_bucket_view=True)
opt_ref = gg.optim.SGD(ref.parameters(), lr=0.1)
opt = gg.optim.SGD(ddp.parameters(), lr=0.1)
for i in range(4):
    (xa, ya), (xb, yb) = data[2 * i], data[2 * i + 1]
    accumulated_step(ref, opt_ref, (xa, ya), (xb, yb))
    opt.zero_grad(set_to_none=i % 2 == 0)
    with ddp.no_sync():
        loss_fn(ddp(half(xa)), half(ya)).backward()
    loss_fn(ddp(half(xb)), half(yb)).backward()
    for p in ddp.parameters():
        assert any(np.shares_memory(p.grad._array, b.buffer) for b in ddp._buckets)
    opt.step()
    same_params(ddp, ref, f"gradient_as_bucket_view step {i}")
ok("gradient_as_bucket_view: .grad views the buckets; equal to 1 process")


# ---- a bucket of one parameter reduces the engine's own gradient array in place ---------
class Scaled(nn.Module):
    """One parameter per bucket (bucket_cap_mb tiny); forward (w * c + x).sum()."""

    def __init__(self):
        super().__init__()
        self.w = nn.Parameter(gg.ones(6))

    def forward(self, x):
        return (self.w * (R + 1.0) + x).sum()


for view in (False, True):
    m = Scaled()
    pointers = []  # the engine's gradient array, by address: holds no reference to it
    m.w.register_hook(lambda g, seen=pointers: seen.append(g._array.ctypes.data))
    sddp = DDP(m, bucket_cap_mb=1e-6, gradient_as_bucket_view=view)
    x = gg.zeros(6, requires_grad=True)
    for i in range(3):
        sddp.module.w.grad = None
        sddp(x).backward()
        grad = sddp.module.w.grad._array
        close(grad, np.full(6, 1.5), f"adopted gradient, view={view}, step {i}")
        assert grad.ctypes.data == pointers[-1], "the engine's array is .grad: no copies"
        assert np.shares_memory(grad, sddp._buckets[0].buffer) == view
        assert not sddp._buckets[0].own.any(), "nothing was copied into the bucket's buffer"
        # x's gradient is the same cotangent as w's before w's Mul: it stays local
        close(x.grad.numpy(), np.full(6, 1.0 * (i + 1)), f"x.grad, view={view}, step {i}")
    # a hook after DDP's sees the gradient: it is not reduced in place then
    kept = []
    sddp.module.w.register_hook(lambda g, seen=kept: seen.append(g))
    sddp.module.w.grad = None
    sddp(x).backward()
    close(kept[0].numpy(), np.full(6, R + 1.0), "a later hook's gradient stays local")
    close(sddp.module.w.grad.numpy(), np.full(6, 1.5), f"averaged, view={view}")
    # accumulation onto an existing .grad (no set_to_none) goes through the bucket
    sddp(x).backward()
    close(sddp.module.w.grad.numpy(), np.full(6, 3.0), f"accumulated, view={view}")
ok("a bucket of one parameter: its gradient array is reduced in place and becomes .grad")


class BigAndSmall(nn.Module):
    """In one bucket: a 1 MiB gradient (reduced in its own memory) between small ones."""

    def __init__(self):
        super().__init__()
        self.a = nn.Parameter(gg.ones(3))
        self.big = nn.Parameter(gg.ones(ddp_module._ADOPT_BYTES // 8))
        self.c = nn.Parameter(gg.ones(5))

    def forward(self):
        k = R + 1.0
        return (self.a * k).sum() + (self.big * (2 * k)).sum() + (self.c * (3 * k)).sum()


m = BigAndSmall()
pointers = []
m.big.register_hook(lambda g, seen=pointers: seen.append(g._array.ctypes.data))
bddp = DDP(m)
for i in range(3):  # one bucket in the first iteration, then rebuilt ones
    bddp.zero_grad()
    bddp().backward()
    for name, value in (("a", 1.5), ("big", 3.0), ("c", 4.5)):
        close(getattr(bddp.module, name).grad.numpy(), np.full(getattr(m, name).shape, value),
              f"{name} at step {i}")
    assert bddp.module.big.grad._array.ctypes.data == pointers[-1]
    k, offset = bddp._where[1]
    assert not bddp._buckets[k].own[offset:offset + m.big.numel()].any()
# Linear's weight gradient (a matmul's cotangent) too, and the result equals 1 process
gg.manual_seed(0)
ref = nn.Sequential(nn.Linear(256, 512), nn.Tanh(), nn.Linear(512, 3))  # 1 MiB weight
gg.manual_seed(0)
lddp = DDP(nn.Sequential(nn.Linear(256, 512), nn.Tanh(), nn.Linear(512, 3)))
pointers = []
lddp.module[0].weight.register_hook(lambda g, seen=pointers: seen.append(g._array.ctypes.data))
lddp.module[0].weight._extras.hooks.reverse()  # the recording hook first, DDP's last
x, y = next(batches((8, 256), 1, seed=9))
for i in range(3):
    lddp.zero_grad()
    ref.zero_grad()
    loss_fn(lddp(half(x)), half(y)).backward()
    loss_fn(ref(x), y).backward()
    assert lddp.module[0].weight.grad._array.ctypes.data == pointers[-1]
    k, offset = lddp._where[0]  # the weight's slot in its bucket was never written
    assert not lddp._buckets[k].own[offset:offset + 256 * 512].any()
    for (name, p), q in zip(lddp.module.named_parameters(), ref.parameters(), strict=True):
        close(p.grad.numpy(), q.grad.numpy(), f"Linear {name} at step {i}")
ok("a large gradient in a bucket with others: reduced in its own memory, the rest copied")


# ---- unused parameters --------------------------------------------------------------------
class Branchy(nn.Module):
    def __init__(self):
        super().__init__()
        self.a = nn.Linear(5, 4)
        self.unused = nn.Linear(5, 4)   # parameter indices 2 and 3
        self.b = nn.Linear(4, 3)
        self.use_extra = False
        self.extra = nn.Linear(4, 3)    # used on rank 1 only, in one check

    def forward(self, x):
        h = self.a(x).tanh()
        out = self.b(h)
        return out + self.extra(h) if self.use_extra else out


gg.manual_seed(0)
ddp = DDP(Branchy())
x, y = next(batches((8, 5), 1, seed=5))
loss_fn(ddp(half(x)), half(y)).backward()  # iteration 0 ends
try:
    ddp(half(x))
except RuntimeError as e:
    msg = str(e)
    assert msg.startswith("Expected to have finished reduction in the prior iteration"), msg
    assert "find_unused_parameters=True" in msg
    assert f"Parameter indices which did not receive grad for rank {R}: 2 3 6 7" in msg, msg
else:
    raise AssertionError("unused parameters without find_unused_parameters should raise")
ok("unused parameters without find_unused_parameters: PyTorch's error at iteration 1")

gg.manual_seed(0)
ref = Branchy()
gg.manual_seed(0)
ddp = DDP(Branchy(), find_unused_parameters=True)
opt_ref = gg.optim.SGD(ref.parameters(), lr=0.1)
opt = gg.optim.SGD(ddp.parameters(), lr=0.1)
for i, (x, y) in enumerate(batches((8, 5), 5, seed=6)):
    step(opt_ref, loss_fn(ref(x), y))
    opt.zero_grad()
    loss_fn(ddp(half(x)), half(y)).backward()
    assert ddp.module.unused.weight.grad is None and ddp.module.extra.weight.grad is None
    opt.step()
    same_params(ddp, ref, f"find_unused_parameters step {i}")
# a parameter used on rank 1 only: both ranks get rank 1's gradient / 2
ddp.module.use_extra = R == 1
local = Branchy()
local.load_state_dict(ddp.module.state_dict())
local.use_extra = R == 1
loss_fn(local(half(x)), half(y)).backward()
expected = local.extra.weight.grad.clone() if R == 1 else gg.zeros(3, 4)
dist.broadcast(expected, src=1)
opt.zero_grad()
loss_fn(ddp(half(x)), half(y)).backward()
close(ddp.module.extra.weight.grad.numpy(), expected.numpy() / W, "grad used on rank 1 only")
assert ddp.module.unused.weight.grad is None
ok("find_unused_parameters: equal to 1 process; unused .grad stays None; used on one rank")

# ---- static_graph: unused parameters found once, buckets rebuilt after iteration 0 -------
walks = []
_toposort = ddp_module.toposort
ddp_module.toposort = lambda outputs: walks.append(1) or _toposort(outputs)
gg.manual_seed(0)
ref = Branchy()
gg.manual_seed(0)
sddp = DDP(Branchy(), static_graph=True, bucket_cap_mb=0.0001)
opt_ref = gg.optim.SGD(ref.parameters(), lr=0.1)
opt = gg.optim.SGD(sddp.parameters(), lr=0.1)
bucket_counts = []
for i, (x, y) in enumerate(batches((8, 5), 5, seed=7)):
    step(opt_ref, loss_fn(ref(x), y))
    opt.zero_grad()
    loss_fn(sddp(half(x)), half(y)).backward()
    bucket_counts.append(len(sddp._buckets))
    assert sddp.module.unused.weight.grad is None and sddp.module.extra.bias.grad is None
    opt.step()
    same_params(sddp, ref, f"static_graph step {i}")
ddp_module.toposort = _toposort
assert walks == [1], walks
assert bucket_counts[0] == 1 and min(bucket_counts[1:]) > 1, bucket_counts
ok("static_graph: unused parameters found in the first iteration only; buckets rebuilt")

# ---- state_dict keys and checkpointing ----------------------------------------------------
assert list(ddp.state_dict())[0] == "module.a.weight"
assert list(ddp.state_dict()) == ["module." + k for k in ddp.module.state_dict()]
path = [os.path.join(tempfile.mkdtemp(), "ckpt.pt") if R == 0 else None]
dist.broadcast_object_list(path, src=0)
if R == 0:
    gg.save(ddp.module.state_dict(), path[0])
dist.barrier()  # the others wait until rank 0 has written the file
gg.manual_seed(1000 + R)
fresh = Branchy()
fresh.load_state_dict(gg.load(path[0]))
for (name, p), q in zip(fresh.state_dict().items(), ddp.module.state_dict().values(),
                        strict=True):
    np.testing.assert_array_equal(p.numpy(), q.numpy(), err_msg=name)
mine = fresh.a.weight.detach().clone()
theirs = mine.clone()
dist.broadcast(theirs, src=0)
np.testing.assert_array_equal(mine.numpy(), theirs.numpy())
dist.barrier()
if R == 0:
    os.remove(path[0])
ok("checkpoint: rank 0 saves, the others wait at a barrier, every rank loads the same state")

try:
    DDP(mlp(), device_ids=[0])
except ValueError as e:
    assert "device_ids and output_device arguments only work" in str(e)
else:
    raise AssertionError("device_ids on a CPU module should raise")
dist.destroy_process_group()
sys.exit(0)
