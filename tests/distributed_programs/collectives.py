"""Run as 2+ ranks (tests/test_distributed_launch.py): every collective and ReduceOp
against NumPy on known data, sync and async, float32/float64/int64 and 0-d tensors, and
new_group subsets. Prints one ``ok <check>`` line per passed check (rank 0 only)."""

# ruff: noqa: B023 - every lambda here is called at once, inside its loop iteration

import sys
from datetime import timedelta

import numpy as np

import graphgrad as gg
import graphgrad.distributed as dist

dist.init_process_group("mpi", timeout=timedelta(seconds=60))
R, W = dist.get_rank(), dist.get_world_size()
DTYPES = {"float32": gg.float32, "float64": gg.float64, "int64": gg.int64}
SHAPES = [(), (3,), (2, 3)]


def data(rank, shape, dtype, salt=0):
    """Rank ``rank``'s known input: small integers, exact in every dtype."""
    n = int(np.prod(shape))
    return (np.arange(n).reshape(shape) % 5 + 2 * rank + salt + 1).astype(dtype)


def ok(name):
    if R == 0:
        print("ok", name, flush=True)


def run(call, async_op):
    work = call(async_op)
    if async_op:
        assert work is not None
        work.wait()
        assert work.is_completed()
    else:
        assert work is None


NP_OPS = {"SUM": lambda xs: np.sum(xs, 0), "PRODUCT": lambda xs: np.prod(xs, 0),
          "MIN": lambda xs: np.min(xs, 0), "MAX": lambda xs: np.max(xs, 0),
          "AVG": lambda xs: np.mean(xs, 0)}

for dname, dt in DTYPES.items():
    for shape in SHAPES:
        for async_op in (False, True):
            tag = f"{dname} {shape} async={async_op}"
            every = [data(r, shape, dname) for r in range(W)]
            for opname, ref in NP_OPS.items():
                op = getattr(dist.ReduceOp, opname)
                t = gg.tensor(every[R])
                if opname == "AVG" and dname == "int64":
                    try:
                        dist.all_reduce(t, op=op, async_op=async_op)
                    except RuntimeError as e:
                        assert "can't be cast to the desired output type Long" in str(e)
                    else:
                        raise AssertionError("integer AVG should raise as in PyTorch")
                    continue
                run(lambda a, t=t, op=op: dist.all_reduce(t, op=op, async_op=a), async_op)
                np.testing.assert_allclose(t.numpy(), ref(every).astype(dname), rtol=1e-6)
                assert t.dtype == dt
                t = gg.tensor(every[R])
                run(lambda a, t=t, op=op: dist.reduce(t, dst=W - 1, op=op, async_op=a),
                    async_op)
                want = ref(every).astype(dname) if R == W - 1 else every[R]
                np.testing.assert_allclose(t.numpy(), want, rtol=1e-6)
            ok(f"all_reduce reduce {tag}")

            t = gg.tensor(every[R])
            run(lambda a, t=t: dist.broadcast(t, src=1, async_op=a), async_op)
            np.testing.assert_array_equal(t.numpy(), every[1])
            outs = [gg.zeros(shape, dtype=dt) for _ in range(W)]
            run(lambda a: dist.all_gather(outs, gg.tensor(every[R]), async_op=a), async_op)
            for r in range(W):
                np.testing.assert_array_equal(outs[r].numpy(), every[r])
            big = gg.zeros((W * int(np.prod(shape)),), dtype=dt)
            run(lambda a: dist.all_gather_into_tensor(big, gg.tensor(every[R]), async_op=a),
                async_op)
            np.testing.assert_array_equal(big.numpy(), np.concatenate(
                [e.reshape(-1) for e in every]))
            stacked = gg.zeros((W, *shape), dtype=dt)
            run(lambda a: dist.all_gather_into_tensor(stacked, gg.tensor(every[R]),
                                                      async_op=a), async_op)
            np.testing.assert_array_equal(stacked.numpy(), np.stack(every))
            gathered = [gg.zeros(shape, dtype=dt) for _ in range(W)] if R == 0 else None
            run(lambda a: dist.gather(gg.tensor(every[R]), gathered, dst=0, async_op=a),
                async_op)
            if R == 0:
                for r in range(W):
                    np.testing.assert_array_equal(gathered[r].numpy(), every[r])
            pieces = [gg.tensor(data(0, shape, dname, salt=10 * r)) for r in range(W)]
            t = gg.zeros(shape, dtype=dt)
            run(lambda a, t=t: dist.scatter(t, pieces if R == 1 else None, src=1,
                                            async_op=a), async_op)
            np.testing.assert_array_equal(t.numpy(), data(0, shape, dname, salt=10 * R))
            ok(f"broadcast all_gather all_gather_into_tensor gather scatter {tag}")

            if shape != ():  # reduce_scatter splits dim 0
                for opname in ("SUM", "MAX", "AVG") if dname != "int64" else ("SUM", "MAX"):
                    op = getattr(dist.ReduceOp, opname)
                    inputs = [data(r, (W * shape[0], *shape[1:]), dname) for r in range(W)]
                    want = NP_OPS[opname](inputs).astype(dname)
                    chunk = want.reshape(W, *shape)[R]
                    out = gg.zeros(shape, dtype=dt)
                    run(lambda a, out=out, op=op, inputs=inputs: dist.reduce_scatter_tensor(
                        out, gg.tensor(inputs[R]), op=op, async_op=a), async_op)
                    np.testing.assert_allclose(out.numpy(), chunk, rtol=1e-6)
                    out = gg.zeros(shape, dtype=dt)
                    lists = [gg.tensor(x) for x in inputs[R].reshape(W, *shape)]
                    run(lambda a, out=out, op=op, lists=lists: dist.reduce_scatter(
                        out, lists, op=op, async_op=a), async_op)
                    np.testing.assert_allclose(out.numpy(), chunk, rtol=1e-6)
                ok(f"reduce_scatter reduce_scatter_tensor {tag}")

            # point to point: a ring, rank r sends to r+1
            t = gg.zeros(shape, dtype=dt)
            if async_op:
                works = [dist.isend(gg.tensor(every[R]), dst=(R + 1) % W),
                         dist.irecv(t, src=(R - 1) % W)]
                for w in works:
                    w.wait()
                assert works[1].source_rank() == (R - 1) % W
            elif R % 2 == 0:
                dist.send(gg.tensor(every[R]), dst=(R + 1) % W)
                assert dist.recv(t) == (R - 1) % W  # any source
            else:
                assert dist.recv(t, src=(R - 1) % W) == (R - 1) % W
                dist.send(gg.tensor(every[R]), dst=(R + 1) % W)
            np.testing.assert_array_equal(t.numpy(), every[(R - 1) % W])
            ok(f"send recv isend irecv {tag}")

# bitwise ops on integers
for opname, ref in (("BAND", np.bitwise_and.reduce), ("BOR", np.bitwise_or.reduce),
                    ("BXOR", np.bitwise_xor.reduce)):
    every = [np.array([3, 5, 12], np.int64) + r for r in range(W)]
    t = gg.tensor(every[R])
    dist.all_reduce(t, op=getattr(dist.ReduceOp, opname))
    np.testing.assert_array_equal(t.numpy(), ref(np.stack(every), axis=0))
try:
    dist.all_reduce(gg.ones(2), op=dist.ReduceOp.PREMUL_SUM)
except ValueError as e:
    assert "Cannot use ReduceOp.PREMUL_SUM with MPI" in str(e)
else:
    raise AssertionError("PREMUL_SUM should raise")
ok("BAND BOR BXOR PREMUL_SUM")

# is_completed before wait: a receive whose message is sent only after a barrier
if R == 0:
    t = gg.zeros(2)
    work = dist.irecv(t, src=1)
    assert not work.is_completed()  # rank 1 sends only after this barrier
    dist.barrier()
    work.wait()
    assert work.is_completed() and t.tolist() == [7.0, 7.0]
elif R == 1:
    dist.barrier()
    dist.send(gg.full((2,), 7.0), dst=0)
else:
    dist.barrier()
ok("Work.is_completed before and after wait")

# Work.get_future: a Future of the tensors written; then() chains on it, callbacks run once
t = gg.full((2,), float(R + 1))
fut = dist.all_reduce(t, async_op=True).get_future()
seen = []
fut.add_done_callback(lambda f: seen.append(f.value()[0].tolist()))
doubled = fut.then(lambda f: f.value()[0] * 2)
total = float(sum(range(1, W + 1)))
assert doubled.wait().tolist() == [2 * total] * 2
assert fut.done() and fut.value()[0] is t and seen == [[total] * 2]
ok("Work.get_future: value, then, add_done_callback")

# tensors that require grad: written in place, no autograd through the collective
leaf = gg.ones(3, requires_grad=True)
dist.all_reduce(leaf)
assert leaf.tolist() == [W] * 3 and leaf.requires_grad and leaf.grad_fn is None
x = gg.ones(3, requires_grad=True)
y = x * 2
dist.all_reduce(y)
assert y.tolist() == [2.0 * W] * 3
y.sum().backward()
assert x.grad.tolist() == [2.0] * 3  # as if the all_reduce were not there (PyTorch: same)
ok("requires_grad tensors: in place, invisible to autograd")

# a non-contiguous tensor is written back through its view
base = gg.zeros(4, 2)
view = base[:, 0]
view.add_(R + 1)
dist.all_reduce(view)
assert base[:, 0].tolist() == [W * (W + 1) / 2] * 4 and base[:, 1].tolist() == [0.0] * 4
ok("non-contiguous tensor")

# groups: ranks {1, ..., W-1}; rank 0 is outside and every call on the group does nothing
sub = dist.new_group(list(range(1, W)))
t = gg.tensor([float(R)])
dist.all_reduce(t, group=sub)
if R == 0:
    assert sub is dist.GroupMember.NON_GROUP_MEMBER and t.tolist() == [0.0]
    assert dist.get_rank(sub) == -1 and dist.get_world_size(sub) == -1
else:
    assert t.tolist() == [float(sum(range(1, W)))]
    assert dist.get_rank(sub) == R - 1 and dist.get_world_size(sub) == W - 1
    assert dist.get_process_group_ranks(sub) == list(range(1, W))
    b = gg.tensor([float(R)])
    dist.broadcast(b, src=W - 1, group=sub)  # src is a global rank, as in PyTorch
    assert b.tolist() == [float(W - 1)]
    try:
        dist.broadcast(b, src=0, group=sub)
    except ValueError as e:
        assert "not part of the group" in str(e)
    else:
        raise AssertionError("broadcast from outside the group should raise")
pair = dist.new_group([0, 1])
t = gg.tensor([R + 1], dtype=gg.int64)
dist.all_reduce(t, op=dist.ReduceOp.PRODUCT, group=pair)
assert t.tolist() == ([2] if R < 2 else [R + 1])
ok("new_group subsets")

objs = [None] * W
dist.all_gather_object(objs, {"rank": R, "name": f"r{R}"})
assert objs == [{"rank": r, "name": f"r{r}"} for r in range(W)]
payload = [{"a": 1}, "text", 3.5] if R == 1 else [None, None, None]
dist.broadcast_object_list(payload, src=1)
assert payload == [{"a": 1}, "text", 3.5]
ok("all_gather_object broadcast_object_list")

assert dist.is_initialized() and dist.get_backend() == "mpi"
try:
    dist.init_process_group("mpi")
except ValueError as e:
    assert "twice" in str(e)
dist.barrier()
dist.destroy_process_group()
assert not dist.is_initialized()
try:
    dist.get_rank()
except ValueError as e:
    assert "has not been initialized" in str(e)
ok("destroy_process_group")
sys.exit(0)
