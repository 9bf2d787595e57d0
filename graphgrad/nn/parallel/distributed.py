"""Layer ``nn``: ``DistributedDataParallel``, PyTorch's data-parallel wrapper on
graphgrad's MPI process groups.

Construction checks that every rank has the same parameter shapes and broadcasts rank 0's
parameters and buffers. Parameters are put into buckets, each a flat buffer, grouped by
dtype: as in PyTorch 2.13, the first iteration has one bucket, and after its backward the
buckets are rebuilt in the order the gradients became ready, the first holding up to
1 MiB and the others ``bucket_cap_mb`` (with ``find_unused_parameters=True``: sized
buckets in reverse registration order from the start, never rebuilt).

Unused parameters: with ``find_unused_parameters=True`` every forward walks the graph
from the outputs, marks the parameters it does not reach ready (their ``.grad`` stays
None) and allreduces the per-parameter use counts, so a parameter used on another rank
still gets the average. ``static_graph=True`` promises the same parameters are used in
every iteration, as PyTorch's does: the walk and the count allreduce happen in the first
iteration only and their result serves every later one (no ``find_unused_parameters``
needed), and the buckets are rebuilt after the first iteration as without unused
parameters. A graph that does change under ``static_graph`` is not detected.

A hook on every parameter fires during backward as soon as that parameter's gradient is
complete; it copies the gradient, divided by the world size in the same pass (as
PyTorch's DDP divides before the allreduce), into its bucket, and when a bucket is full
its non-blocking allreduce (``Iallreduce`` via ``graphgrad.distributed.all_reduce``)
starts at once, in bucket order, while backward goes on with the earlier layers: the sum
that comes back is the average. The hook that completes the last bucket waits for all of
them. Each hook returns the gradient it was given, which the engine makes ``.grad``
(taking its array uncopied when nothing else holds it); a post-accumulate-grad hook then
writes the averaged slot into that array, so no gradient-sized buffer is allocated (with
``gradient_as_bucket_view`` it makes ``.grad`` a view of the slot instead: no copy out).
A gradient that nothing but the engine holds, alone in its bucket or of at least 1 MiB
(without bucket views), skips the bucket: its own array is reduced in place by an
allreduce of its own and scaled once after the wait, and becomes ``.grad`` uncopied (no
copy in, none out; measured at 100 MB, those two passes were most of DDP's cost over a
raw allreduce). So ``.grad`` is the average over ranks of each rank's accumulated
gradient, as in PyTorch.

BatchNorm without SyncBatchNorm, as in PyTorch: each rank normalizes with its own batch's
statistics; with ``broadcast_buffers=True`` every forward starts from rank 0's buffers, so
the running statistics that survive are rank 0's.

``comm_log`` records ``(event, bucket, grads_ready, n_grads)`` per bucket launch and wait:
a launch with ``grads_ready < n_grads`` started while backward was still running.
"""

from __future__ import annotations

import sys
from collections import deque
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

import numpy as np

from graphgrad import distributed as dist
from graphgrad.autograd import enable_grad, is_grad_enabled
from graphgrad.tensor import Tensor, leaf_of
from graphgrad.tensor.toposort import toposort

from ..modules.module import Module

__all__ = ["DistributedDataParallel"]

_MIB = 1024 * 1024
_DEFAULT_FIRST_BUCKET_BYTES = _MIB  # dist._DEFAULT_FIRST_BUCKET_BYTES
# a gradient this large in a bucket with others gets an allreduce of its own, in place:
# that costs one collective's latency (tens of microseconds) and saves copying it into the
# bucket and out again (two passes over it)
_ADOPT_BYTES = _MIB


class _Bucket:
    """Parameters whose gradients travel together, and their flat buffer.

    ``adopted`` maps a parameter to the engine's gradient array itself when that is
    reduced in place, in its own allreduce, and scaled after the wait (see ``_mark_ready``);
    the other slots of the bucket go as the runs of the buffer between them. ``buffer`` is
    ``own``, or, with ``gradient_as_bucket_view``, the adopted ``.grad`` of a bucket of one
    parameter."""

    def __init__(self, indices: list[int], params: list, dtype: np.dtype) -> None:
        self.indices = indices
        self.offsets: dict[int, int] = {}
        size = 0
        for i in indices:
            self.offsets[i] = size
            size += params[i]._array.size
        self.own = np.zeros(size, dtype)
        self.buffer = self.own
        self.adopted: dict[int, np.ndarray] = {}
        self.pending = len(indices)
        self.works: list[dist.Work] = []

    def parts(self) -> list[np.ndarray]:
        """What this iteration's allreduces cover: the adopted gradients, and the runs of
        the buffer between their slots (the whole buffer when nothing is adopted)."""
        if not self.adopted:
            return [self.buffer]
        runs, start = [], None
        for i in self.indices:
            if i in self.adopted:
                if start is not None:
                    runs.append(self.buffer[start:self.offsets[i]])
                start = None
            elif start is None:
                start = self.offsets[i]
        if start is not None:
            runs.append(self.buffer[start:])
        return runs + list(self.adopted.values())


def _holders(grad: Tensor, frame: Any) -> tuple[int, int]:
    """References to a hook's gradient and to its array other than the local variables of
    ``frame`` (the engine's, which called the hook: which of its locals still point at
    this gradient depends on the order it went through the graph). Compared with
    ``_sole_holders()``, measured the same way, they say whether anyone else holds it."""
    local = frame.f_locals  # refreshed now: one more reference per local that holds it
    array = grad._array
    in_tensor = sum(v is grad for v in local.values())
    in_array = sum(v is array for v in local.values())
    return (sys.getrefcount(grad) - 2 * in_tensor, sys.getrefcount(array) - 2 * in_array)


_SOLE: list[tuple[int, int]] = []


def _sole_holders() -> tuple[int, int]:
    """``_holders`` in a tensor hook whose gradient nothing but the engine holds (Mul's
    fresh cotangent), measured once through the engine itself."""
    if not _SOLE:
        seen = []

        def probe(grad: Tensor) -> None:
            seen.append(_holders(grad, sys._getframe(1)))
        leaf = Tensor._make(np.ones(2))
        leaf.requires_grad_(True)
        leaf.register_hook(probe)
        with enable_grad():
            (leaf * 2.0).backward(Tensor._make(np.ones(2)))
        _SOLE.append(seen[0])
    return _SOLE[0]


def _assign_buckets(order: list[int], params: list, caps: list[int]) -> list[_Bucket]:
    """Buckets over the parameters in ``order``: one open bucket per dtype, closed once it
    reaches its cap (the first bucket's cap is ``caps[0]``, the rest ``caps[1]``)."""
    done: list[tuple[list[int], np.dtype]] = []
    open_: dict[np.dtype, tuple[list[int], int]] = {}
    for i in order:
        a = params[i]._array
        indices, size = open_.get(a.dtype, ([], 0))
        indices.append(i)
        size += a.nbytes
        if size >= caps[min(len(done), 1)]:
            done.append((indices, a.dtype))
            open_.pop(a.dtype, None)
        else:
            open_[a.dtype] = (indices, size)
    done += [(indices, dtype) for dtype, (indices, _) in open_.items()]
    return [_Bucket(indices, params, dtype) for indices, dtype in done]


def _tensors_in(value: Any) -> Iterator[Tensor]:
    if isinstance(value, Tensor):
        yield value
    elif isinstance(value, (list, tuple)):
        for v in value:
            yield from _tensors_in(v)
    elif isinstance(value, dict):
        for v in value.values():
            yield from _tensors_in(v)


class DistributedDataParallel(Module):
    """Data parallelism: wrap the model on every rank; gradients are averaged across ranks
    during backward. With ``gradient_as_bucket_view`` each ``.grad`` is a view of its
    bucket slot (no copy); with ``static_graph`` the unused parameters are found once, in
    the first iteration."""

    def __init__(self, module: Module, device_ids: list | None = None,
                 output_device: Any = None, dim: int = 0, broadcast_buffers: bool = True,
                 init_sync: bool = True, process_group: Any = None,
                 bucket_cap_mb: float | None = None, find_unused_parameters: bool = False,
                 check_reduction: bool = False, gradient_as_bucket_view: bool = False,
                 static_graph: bool = False, **kwargs: Any) -> None:
        super().__init__()
        if device_ids is not None or output_device is not None:
            raise ValueError(
                "DistributedDataParallel device_ids and output_device arguments only work "
                "with single-device/multiple-device GPU modules or CPU modules, but got "
                f"device_ids {device_ids}, output_device {output_device}, and module "
                "parameters {device(type='cpu')}.")
        self.module = module
        self.process_group = dist.process_group.resolve(process_group)
        self.device_ids = None
        self.dim = dim
        self.broadcast_buffers = broadcast_buffers
        self.find_unused_parameters = find_unused_parameters
        self.gradient_as_bucket_view = gradient_as_bucket_view
        self.static_graph = static_graph
        self.require_backward_grad_sync = True
        self.bucket_bytes_cap = int((25 if bucket_cap_mb is None else bucket_cap_mb) * _MIB)
        self._caps = [min(_DEFAULT_FIRST_BUCKET_BYTES, self.bucket_bytes_cap),
                      self.bucket_bytes_cap]
        params, seen = [], set()
        for p in module.parameters():
            if p.requires_grad and id(p) not in seen:
                seen.add(id(p))
                params.append(p)
        if not params:
            raise RuntimeError("DistributedDataParallel is not needed when a module doesn't "
                               "have any parameter that requires a gradient.")
        self._params = params
        self._world = self.process_group.size()
        self._scale = 1.0 / self._world
        if init_sync:
            self._verify_shapes()
            self._broadcast([*params, *module.buffers()])
        # PyTorch 2.13: without unused-parameter detection the first iteration has one
        # bucket (per dtype), rebuilt by size in the order gradients became ready
        sized = find_unused_parameters and not static_graph
        first = self._caps if sized else [sys.maxsize, sys.maxsize]
        self._buckets = _assign_buckets(list(range(len(params)))[::-1], params, first)
        self._rebuilt = sized
        self._detects_unused = find_unused_parameters or static_graph
        self._static_used: tuple[np.ndarray, np.ndarray] | None = None  # (mine, counts)
        self._where = self._locate()
        self._handles = [p.register_hook(self._make_hook(i)) for i, p in enumerate(params)]
        self._handles += [p.register_post_accumulate_grad_hook(self._make_post_hook(i))
                          for i, p in enumerate(params)]
        # what each post-accumulate hook delivers: a bucket slot, or an adopted bucket
        self._averaged: list[np.ndarray | _Bucket | None] = [None] * len(params)
        self._sole = _sole_holders()
        self.comm_log: deque[tuple] = deque(maxlen=4096)  # the recent events only
        self._syncing = False       # this iteration's backward averages gradients
        self._finished = True       # the last synchronized backward reduced every bucket
        self._ready: list[bool] = []
        self._ready_order: list[int] = []
        self._next = 0              # the next bucket to launch
        self._started = False       # a hook of this iteration has fired
        self._local_used = np.zeros(0, bool)
        self._used = np.zeros(0, np.int32)
        self._used_work: dist.Work | None = None
        self._rebuild_order: list[int] | None = None

    # ---- construction ---------------------------------------------------------------------

    def _verify_shapes(self) -> None:
        shapes = [tuple(p.shape) for p in self._params]
        every: list = [None] * self._world
        dist.all_gather_object(every, shapes, group=self.process_group)
        for r, theirs in enumerate(every):
            if len(theirs) != len(shapes):
                raise RuntimeError(f"DDP expects same model across all ranks, but Rank "
                                   f"{self.process_group.rank()} has {len(shapes)} params, "
                                   f"while rank {r} has inconsistent {len(theirs)} params.")
            for i, (a, b) in enumerate(zip(shapes, theirs, strict=True)):
                if a != b:
                    raise RuntimeError(f"DDP expects same model across all ranks, but "
                                       f"parameter {i} has shape {a} on rank "
                                       f"{self.process_group.rank()} and {b} on rank {r}.")

    def _broadcast(self, tensors: list[Tensor]) -> None:
        """Rank 0's values of ``tensors`` on every rank: one broadcast per dtype."""
        by_dtype: dict[np.dtype, list[Tensor]] = {}
        for t in tensors:
            by_dtype.setdefault(t._array.dtype, []).append(t)
        for group in by_dtype.values():
            flat = np.concatenate([t._array.reshape(-1) for t in group])
            dist.broadcast(Tensor._make(flat), src=self.process_group.ranks[0],
                           group=self.process_group)
            start = 0
            for t in group:
                n = t._array.size
                values = flat[start:start + n].reshape(t._array.shape)
                if t._array.flags.writeable:
                    t._array[...] = values
                else:
                    t._array = values.copy()
                start += n

    def _locate(self) -> list[tuple[int, int]]:
        """(bucket, offset in its buffer) of every parameter."""
        where: list = [None] * len(self._params)
        for k, b in enumerate(self._buckets):
            for i in b.indices:
                where[i] = (k, b.offsets[i])
        return where

    # ---- forward -------------------------------------------------------------------------

    @contextmanager
    def no_sync(self) -> Iterator[None]:
        """Inside, backward passes only accumulate local gradients; the first synchronized
        backward after it averages the accumulated ones."""
        old = self.require_backward_grad_sync
        self.require_backward_grad_sync = False
        try:
            yield
        finally:
            self.require_backward_grad_sync = old

    def forward(self, *inputs: Any, **kwargs: Any) -> Any:
        if self._started and not self._finished:
            self._raise_unfinished()
        if self.broadcast_buffers and self._world > 1:
            buffers = list(self.module.buffers())
            if buffers:
                self._broadcast(buffers)
        output = self.module(*inputs, **kwargs)
        self._syncing = is_grad_enabled() and self.require_backward_grad_sync
        if self._syncing:
            self._prepare(output)
        return output

    def _prepare(self, output: Any) -> None:
        """Arm the hooks for this iteration's backward."""
        if self._used_work is not None:  # a forward whose backward never ran
            self._used_work.wait()
        if self._rebuild_order is not None:  # between passes: no slot view is in use
            self._buckets = _assign_buckets(self._rebuild_order, self._params, self._caps)
            self._where = self._locate()
            self._rebuild_order = None
        self._started = self._finished = False
        self._ready = [False] * len(self._params)
        self._averaged = [None] * len(self._params)
        self._ready_order = []
        self._next = 0
        for b in self._buckets:
            b.pending = len(b.indices)
            b.works = []
            b.adopted = {}
            if b.buffer is not b.own:  # a bucket view on an adopted .grad: once the user
                grad = self._params[b.indices[0]]._grad  # has dropped that .grad, free it
                if grad is None or not np.may_share_memory(grad._array, b.buffer):
                    b.buffer = b.own  # (own's pages, never written, take no memory)
        if self._detects_unused:
            if self._static_used is not None:  # static graph: found in the first iteration
                self._local_used, self._used = self._static_used
            else:
                reached = {id(v) for v in toposort(list(_tensors_in(output)))}
                self._local_used = np.array([id(p) in reached for p in self._params])
                self._used = self._local_used.astype(np.int32)
                self._used_work = dist.all_reduce(Tensor._make(self._used),
                                                  group=self.process_group, async_op=True)
            for i in np.flatnonzero(~self._local_used):
                self._mark_ready(int(i), None)

    # ---- backward --------------------------------------------------------------------------

    def _make_hook(self, index: int) -> Callable[[Tensor], Tensor | None]:
        def hook(grad: Tensor) -> Tensor | None:
            if not self._syncing or self._finished:
                return None
            # A gradient alone in its bucket or large enough to be worth an allreduce of its
            # own (not with bucket views: .grad must alias the bucket) may be reduced in its
            # own memory, when nothing else holds it and no hook after this one will see it
            # while the allreduce writes into it
            bucket = self._buckets[self._where[index][0]]
            sole = ((len(bucket.indices) == 1 or (grad._array.nbytes >= _ADOPT_BYTES
                                                  and not self.gradient_as_bucket_view))
                    and self._params[index]._extras.hooks[-1] is hook
                    and _holders(grad, sys._getframe(1)) == self._sole)
            return self._mark_ready(index, grad, sole)
        return hook

    def _mark_ready(self, i: int, grad: Tensor | None, sole: bool = False) -> Tensor | np.ndarray:
        """Put parameter i's gradient (plus what ``.grad`` holds already, as PyTorch
        reduces the accumulated gradient) into its bucket slot; launch full buckets."""
        if self._ready[i]:
            raise RuntimeError(
                f"Expected to mark a variable ready only once. This error is caused by one of "
                f"the following reasons: 1) Use of a module parameter outside the `forward` "
                f"function. 2) Reused parameters in multiple reentrant backward passes. "
                f"Parameter at index {i} has been marked as ready twice.")
        self._ready[i] = True
        self._ready_order.append(i)
        self._started = self._started or grad is not None
        p = self._params[i]
        k, offset = self._where[i]
        bucket = self._buckets[k]
        old = p._grad
        a = grad._array if grad is not None else None
        if (sole and old is None and not grad._requires_grad and a.base is None
                and a.flags.c_contiguous and a.flags.writeable):
            # the gradient's own array is reduced in place and scaled once after the wait,
            # and the engine then makes it .grad uncopied: no copy into the bucket, none out
            bucket.adopted[i] = a
            self._averaged[i] = bucket
            bucket.pending -= 1
            self._launch_ready()
            self._progress()
            return grad
        slot = bucket.buffer[offset:offset + p._array.size].reshape(p._array.shape)
        # divided by the world size in the one pass that copies into the bucket (PyTorch's
        # DDP divides before the allreduce too): the sum that comes back is the average
        if old is None and a is not None:
            np.multiply(a, self._scale, out=slot)
        elif a is not None:
            np.add(a, old._array, out=slot)
            slot *= self._scale
        elif old is not None:
            np.multiply(old._array, self._scale, out=slot)
        else:
            slot[...] = 0
        bucket.pending -= 1
        self._launch_ready()
        self._progress()
        if grad is None:
            return slot
        # The engine makes the incoming gradient .grad (taking its array, uncopied, when
        # nothing else holds it); the post-accumulate hook then puts the average there.
        p._grad = None
        self._averaged[i] = slot
        return grad

    def _progress(self) -> None:
        """MPI moves data only while it is called: each hook lets launched buckets
        progress."""
        for b in self._buckets[:self._next]:
            for work in b.works:
                work.is_completed()

    def _make_post_hook(self, index: int) -> Callable[[Tensor], None]:
        def post_hook(param: Tensor) -> None:
            slot = self._averaged[index]
            # an unfinished reduction leaves the local gradient, as PyTorch's Reducer does
            if slot is None or not self._finished:
                return
            self._averaged[index] = None
            grad = param._grad
            if isinstance(slot, _Bucket):  # .grad is the adopted gradient, averaged
                if self.gradient_as_bucket_view:  # a bucket of one: .grad is the bucket
                    slot.buffer = grad._array.reshape(-1)
            elif self.gradient_as_bucket_view:
                param._grad = Tensor._make(slot)
            elif grad._requires_grad or not grad._array.flags.writeable:
                param._grad = leaf_of(slot.copy())  # create_graph: .grad may be shared
            else:  # .grad's array is the engine's own (taken or copied): no new allocation
                np.copyto(grad._array, slot)
        return post_hook

    def _launch_ready(self) -> None:
        n_ready = len(self._ready_order)
        while self._next < len(self._buckets) and self._buckets[self._next].pending == 0:
            b = self._buckets[self._next]
            b.works = [dist.all_reduce(Tensor._make(part), group=self.process_group,
                                       async_op=True) for part in b.parts()]
            self.comm_log.append(("launch", self._next, n_ready, len(self._params)))
            self._next += 1
        if self._next == len(self._buckets) and not self._finished:
            self._finish()

    def _finish(self) -> None:
        """Wait for every bucket and average; gradients of parameters unused here but used
        on another rank are written now (no hook of theirs fires on this rank)."""
        for k, b in enumerate(self._buckets):
            self._wait(b)
            self.comm_log.append(("wait", k, len(self._ready_order), len(self._params)))
        self._finished = True
        if self._used_work is not None:
            self._used_work.wait()  # self._used now counts the ranks using each parameter
            self._used_work = None
            if self.static_graph:
                self._static_used = (self._local_used, self._used)
        if self._detects_unused:
            for i in np.flatnonzero(~self._local_used & (self._used > 0)):
                p = self._params[i]
                k, offset = self._where[i]
                slot = self._buckets[k].buffer[offset:offset + p._array.size]
                slot = slot.reshape(p._array.shape)
                p._grad = leaf_of(slot if self.gradient_as_bucket_view else slot.copy())
        if not self._rebuilt:  # PyTorch's Reducer: buckets follow the observed ready order
            self._rebuilt = True
            self._rebuild_order = self._ready_order + [
                i for i in range(len(self._params)) if not self._ready[i]]

    def _wait(self, b: _Bucket) -> None:
        if b.works:  # launched (a bucket never launched keeps its local gradients)
            for work in b.works:
                work.wait()
            for a in b.adopted.values():  # the sum of the ranks' gradients, in the
                np.multiply(a, self._scale, out=a)  # gradient itself: scaled in one pass
        # the works and this hold the arrays: an adopted gradient must be held by no one
        # but the engine when it makes it .grad (else it copies it)
        b.works, b.adopted = [], {}

    def _raise_unfinished(self) -> None:
        missing = [i for i, r in enumerate(self._ready) if not r]
        for b in self._buckets:  # let launched allreduces end before the ranks give up
            self._wait(b)  # .grad of an adopted gradient: the average, as a bucket view's
        self._finished = True
        raise RuntimeError(
            "Expected to have finished reduction in the prior iteration before starting a "
            "new one. This error indicates that your module has parameters that were not "
            "used in producing loss. You can enable unused parameter detection by passing "
            "the keyword argument `find_unused_parameters=True` to "
            "`torch.nn.parallel.DistributedDataParallel`, and by making sure all `forward` "
            "function outputs participate in calculating loss. If you already have done the "
            "above, then the distributed data parallel module wasn't able to locate the "
            "output tensors in the return value of your module's `forward` function. Please "
            "include the loss function and the structure of the return value of `forward` "
            "of your module when reporting this issue (e.g. list, dict, iterable).\n"
            f"Parameter indices which did not receive grad for rank "
            f"{self.process_group.rank()}: {' '.join(map(str, missing))}\n"
            " In addition, you can set the environment variable TORCH_DISTRIBUTED_DEBUG to "
            "either INFO or DETAIL to print out information about which particular "
            "parameters did not receive gradient on this rank as part of this error")
