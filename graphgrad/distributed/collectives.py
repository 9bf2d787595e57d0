"""Layer ``distributed``: collectives on tensors, in place, as ``torch.distributed``'s.

Each call maps onto one non-blocking MPI call on the tensor's own NumPy array
(``all_reduce`` -> ``Iallreduce``, ``broadcast`` -> ``Ibcast``...). With ``async_op=True``
it returns a ``Work`` at once; otherwise it waits (with the group's timeout) and returns
None. Like PyTorch's c10d collectives they are invisible to autograd: the result is
written into the tensor's storage whether or not it requires grad, nothing is recorded
in the graph, and gradients flow as if the call were not there (the differentiable
``torch.distributed._functional_collectives`` are not in graphgrad). On a rank outside
``group`` every call does nothing and returns None.
"""

from __future__ import annotations

import enum
from collections.abc import Callable
from typing import Any

import numpy as np

from graphgrad.tensor import Tensor

from .process_group import ProcessGroup, mpi, resolve, test_all, wait_all

__all__ = ["ReduceOp", "Work", "Future", "all_reduce", "broadcast", "reduce", "all_gather",
           "all_gather_into_tensor", "reduce_scatter", "reduce_scatter_tensor", "gather",
           "scatter", "barrier", "send", "recv", "isend", "irecv"]


class ReduceOp:
    """PyTorch's reduction ops. MPI has no AVG: it is SUM, then a division by the group
    size (floating dtypes only, as PyTorch's "can't be cast" error for integers)."""

    class RedOpType(enum.Enum):
        SUM = 0
        AVG = 1
        PRODUCT = 2
        MIN = 3
        MAX = 4
        BAND = 5
        BOR = 6
        BXOR = 7
        PREMUL_SUM = 8
        UNUSED = 9

    SUM = RedOpType.SUM
    AVG = RedOpType.AVG
    PRODUCT = RedOpType.PRODUCT
    MIN = RedOpType.MIN
    MAX = RedOpType.MAX
    BAND = RedOpType.BAND
    BOR = RedOpType.BOR
    BXOR = RedOpType.BXOR
    PREMUL_SUM = RedOpType.PREMUL_SUM


_MPI_OPS = {"SUM": "SUM", "AVG": "SUM", "PRODUCT": "PROD", "MIN": "MIN", "MAX": "MAX",
            "BAND": "BAND", "BOR": "BOR", "BXOR": "BXOR"}


def _mpi_op(op: Any, arrays: list[np.ndarray]) -> Any:
    name = getattr(op, "name", None)
    if name not in _MPI_OPS:
        raise ValueError(f"Cannot use ReduceOp.{name or op} with MPI")
    if name == "AVG":
        for a in arrays:
            if a.dtype.kind not in "fc":
                raise RuntimeError(f"result type Float can't be cast to the desired output "
                                   f"type {_torch_dtype(a)}")
    return getattr(mpi(), _MPI_OPS[name])


def _torch_dtype(a: np.ndarray) -> str:
    return {"int64": "Long", "int32": "Int", "int16": "Short", "int8": "Char", "uint8": "Byte",
            "bool": "Bool"}.get(a.dtype.name, a.dtype.name)


class Future:
    """``Work.get_future()``'s result, with ``torch.futures.Future``'s methods. MPI moves
    data only while it is called, so nothing runs in the background: callbacks run in the
    thread that finds the work finished (``wait``, ``value``, or ``done`` returning True)."""

    def __init__(self, resolve: Callable[[], Any], poll: Callable[[], bool]) -> None:
        self._resolve = resolve
        self._poll = poll
        self._resolved = False
        self._value: Any = None
        self._callbacks: list[Callable[[Future], Any]] = []

    def _settle(self) -> None:
        self._value = self._resolve()
        self._resolved = True
        for callback in self._callbacks:
            callback(self)
        self._callbacks.clear()

    def done(self) -> bool:
        if not self._resolved and self._poll():
            self._settle()
        return self._resolved

    def wait(self) -> Any:
        if not self._resolved:
            self._settle()
        return self._value

    def value(self) -> Any:
        return self.wait()

    def then(self, callback: Callable[[Future], Any]) -> Future:
        """A future of ``callback(self)``, run once this one is done."""
        def resolve() -> Any:
            self.wait()
            return callback(self)
        return Future(resolve, self.done)

    def add_done_callback(self, callback: Callable[[Future], Any]) -> None:
        if self._resolved:
            callback(self)
        else:
            self._callbacks.append(callback)


class Work:
    """A collective in flight (PyTorch's ``Work``): ``wait()`` blocks until it is done and
    its result is in the tensors; ``is_completed()`` asks without blocking;
    ``get_future()`` gives a ``Future`` whose value is the list of tensors written."""

    def __init__(self, requests: list, pg: ProcessGroup, what: str,
                 finish: Callable[[], None] | None = None, tensors: list | None = None,
                 status: Any = None) -> None:
        self._requests = requests
        self._pg = pg
        self._what = what
        self._finish = finish
        self._tensors = tensors or []
        self._status = status
        self._statuses = [status] if status is not None else None
        self._done = False

    def _complete(self) -> None:
        if not self._done:
            self._done = True
            if self._finish is not None:
                self._finish()

    def wait(self, timeout: Any = None) -> bool:
        if self._done:  # waiting again would reset the finished requests' statuses
            return True
        wait_all(self._requests, self._pg, self._what, timeout, self._statuses)
        self._complete()
        return True

    def is_completed(self) -> bool:
        if not self._done and test_all(self._requests, self._pg, self._what, self._statuses):
            self._complete()
        return self._done

    def is_success(self) -> bool:
        return self.is_completed()

    def exception(self) -> None:
        return None

    def result(self) -> list[Tensor]:
        """The tensors the collective wrote (PyTorch's ``Work.result()``)."""
        self.wait()
        return list(self._tensors)

    def get_future(self) -> Future:
        return Future(self.result, self.is_completed)

    def source_rank(self) -> int:
        """For ``irecv`` from any source: the rank the message came from."""
        self.wait()
        if self._status is None:
            raise RuntimeError("source_rank() is only for recv works")
        return self._pg.ranks[self._status.Get_source()]


def _buffer(t: Tensor) -> tuple[np.ndarray, Callable[[], None] | None]:
    """The array MPI reads and writes for ``t``: its own storage when that is contiguous
    and writable, else a contiguous copy written back when the call finishes."""
    if not isinstance(t, Tensor):
        raise TypeError(f"expected a Tensor, got {type(t).__name__}")
    a = t._array
    if a.flags.c_contiguous and a.flags.writeable:
        return a, None
    tmp = np.ascontiguousarray(a)

    def write_back() -> None:
        t._array[...] = tmp
    return tmp, write_back


def _finish(steps: list) -> Callable[[], None] | None:
    steps = [s for s in steps if s is not None]
    if not steps:
        return None

    def run() -> None:
        for step in steps:
            step()
    return run


def _issue(pg: ProcessGroup, requests: list, what: str, async_op: bool, steps: list,
           tensors: list, status: Any = None) -> Work | None:
    work = Work(requests, pg, what, _finish(steps), tensors, status)
    if async_op:
        return work
    work.wait()
    return None


def _root(pg: ProcessGroup, global_rank: int | None, group_rank: int | None) -> int:
    """The root's rank in ``pg``: ``group_rank`` if given, else global rank (default 0)."""
    if group_rank is not None:
        return group_rank
    return _group_rank(pg, 0 if global_rank is None else global_rank)


def _group_rank(pg: ProcessGroup, global_rank: int) -> int:
    if global_rank not in pg.ranks:
        raise ValueError(f"The global rank {global_rank} is not part of the group {pg}")
    return pg.ranks.index(global_rank)


def _average(arrays: list[np.ndarray], op: Any, n: int) -> Callable[[], None] | None:
    if getattr(op, "name", None) != "AVG":
        return None

    def divide() -> None:
        for a in arrays:
            a /= n
    return divide


def all_reduce(tensor: Tensor, op: Any = ReduceOp.SUM, group: Any = None,
               async_op: bool = False) -> Work | None:
    """``tensor`` becomes the reduction of every rank's ``tensor`` (MPI ``Iallreduce``)."""
    pg = resolve(group)
    if pg is None:
        return None
    buf, back = _buffer(tensor)
    mop = _mpi_op(op, [buf])
    req = pg.comm.Iallreduce(mpi().IN_PLACE, buf, op=mop)
    return _issue(pg, [req], "allreduce", async_op, [_average([buf], op, pg.size()), back],
                  [tensor])


def broadcast(tensor: Tensor, src: int | None = None, group: Any = None,
              async_op: bool = False, group_src: int | None = None) -> Work | None:
    """Every rank's ``tensor`` becomes global rank ``src``'s (MPI ``Ibcast``)."""
    pg = resolve(group)
    if pg is None:
        return None
    root = _root(pg, src, group_src)
    buf, back = _buffer(tensor)
    req = pg.comm.Ibcast(buf, root=root)
    return _issue(pg, [req], "broadcast", async_op, [back], [tensor])


def reduce(tensor: Tensor, dst: int | None = None, op: Any = ReduceOp.SUM, group: Any = None,
           async_op: bool = False, group_dst: int | None = None) -> Work | None:
    """Rank ``dst``'s ``tensor`` becomes the reduction; the others' stay as they were."""
    pg = resolve(group)
    if pg is None:
        return None
    root = _root(pg, dst, group_dst)
    buf, back = _buffer(tensor)
    mop = _mpi_op(op, [buf])
    MPI = mpi()
    if pg.rank() == root:
        req = pg.comm.Ireduce(MPI.IN_PLACE, buf, op=mop, root=root)
        steps = [_average([buf], op, pg.size()), back]
    else:
        req = pg.comm.Ireduce(buf, None, op=mop, root=root)
        steps = []
    return _issue(pg, [req], "reduce", async_op, steps, [tensor])


def _check_list(tensors: list, n: int, what: str) -> None:
    if len(tensors) != n:
        raise ValueError(f"{what}: the tensor list has {len(tensors)} tensors, expected the "
                         f"group size {n}")


def _stacked(tensors: list[Tensor], like: np.ndarray) -> np.ndarray:
    for t in tensors:
        if t._array.shape != like.shape or t._array.dtype != like.dtype:
            raise ValueError(f"tensors must all have shape {tuple(like.shape)} and dtype "
                             f"{like.dtype}; got {tuple(t._array.shape)} {t._array.dtype}")
    return np.stack([t._array for t in tensors]) if tensors else np.empty((0, *like.shape))


def _scatter_into(tensors: list[Tensor], rows: np.ndarray) -> Callable[[], None]:
    def write() -> None:
        for t, row in zip(tensors, rows, strict=True):
            t._array[...] = row
    return write


def all_gather(tensor_list: list[Tensor], tensor: Tensor, group: Any = None,
               async_op: bool = False) -> Work | None:
    """``tensor_list[r]`` becomes rank r's ``tensor`` on every rank (MPI ``Iallgather``)."""
    pg = resolve(group)
    if pg is None:
        return None
    _check_list(tensor_list, pg.size(), "all_gather")
    send = np.ascontiguousarray(tensor._array)
    out = np.empty((pg.size(), *send.shape), send.dtype)
    req = pg.comm.Iallgather(send, out)
    return _issue(pg, [req], "allgather", async_op, [_scatter_into(tensor_list, out)],
                  tensor_list)


def _check_sizes(big: Tensor, small: Tensor, n: int, what: str) -> None:
    if big._array.size != n * small._array.size:
        raise ValueError(f"{what}: output tensor size must be equal to world_size times input "
                         f"tensor size (got {tuple(big.shape)} and {tuple(small.shape)} for "
                         f"world size {n})")
    if big._array.dtype != small._array.dtype:
        raise TypeError(f"{what}: input and output tensors must have the same dtype, got "
                        f"{small._array.dtype} and {big._array.dtype}")


def all_gather_into_tensor(output_tensor: Tensor, input_tensor: Tensor, group: Any = None,
                           async_op: bool = False) -> Work | None:
    """``output_tensor`` (shape ``(W*n, ...)`` or ``(W, n, ...)``) becomes every rank's
    ``input_tensor`` in rank order."""
    pg = resolve(group)
    if pg is None:
        return None
    _check_sizes(output_tensor, input_tensor, pg.size(), "all_gather_into_tensor")
    buf, back = _buffer(output_tensor)
    req = pg.comm.Iallgather(np.ascontiguousarray(input_tensor._array), buf)
    return _issue(pg, [req], "allgather", async_op, [back], [output_tensor])


def reduce_scatter_tensor(output: Tensor, input: Tensor, op: Any = ReduceOp.SUM,
                          group: Any = None, async_op: bool = False) -> Work | None:
    """Rank r's ``output`` becomes chunk r (along dim 0) of the reduction of every rank's
    ``input`` (MPI ``Ireduce_scatter_block``)."""
    pg = resolve(group)
    if pg is None:
        return None
    _check_sizes(input, output, pg.size(), "reduce_scatter_tensor")
    buf, back = _buffer(output)
    send = np.ascontiguousarray(input._array)
    mop = _mpi_op(op, [buf])
    req = pg.comm.Ireduce_scatter_block(send, buf, op=mop)
    return _issue(pg, [req], "reduce_scatter", async_op,
                  [_average([buf], op, pg.size()), back], [output])


def reduce_scatter(output: Tensor, input_list: list[Tensor], op: Any = ReduceOp.SUM,
                   group: Any = None, async_op: bool = False) -> Work | None:
    """Rank r's ``output`` becomes the reduction of every rank's ``input_list[r]``."""
    pg = resolve(group)
    if pg is None:
        return None
    _check_list(input_list, pg.size(), "reduce_scatter")
    send = _stacked(input_list, output._array)
    buf, back = _buffer(output)
    mop = _mpi_op(op, [buf])
    req = pg.comm.Ireduce_scatter_block(send, buf, op=mop)
    return _issue(pg, [req], "reduce_scatter", async_op,
                  [_average([buf], op, pg.size()), back], [output])


def _is_root(pg: ProcessGroup, root: int, tensors: list | None, name: str, role: str
             ) -> bool:
    """Whether this rank is ``root``; the list argument must be given there and only there,
    with one tensor per rank."""
    if pg.rank() == root:
        if tensors is None:
            raise ValueError(f"Argument ``{name}`` must be specified on {role} rank.")
        _check_list(tensors, pg.size(), name)
        return True
    if tensors:
        raise ValueError(f"Argument ``{name}`` must NOT be specified on non-{role} ranks.")
    return False


def gather(tensor: Tensor, gather_list: list[Tensor] | None = None, dst: int | None = None,
           group: Any = None, async_op: bool = False,
           group_dst: int | None = None) -> Work | None:
    """On rank ``dst`` (default 0), ``gather_list[r]`` becomes rank r's ``tensor``."""
    pg = resolve(group)
    if pg is None:
        return None
    root = _root(pg, dst, group_dst)
    send = np.ascontiguousarray(tensor._array)
    if _is_root(pg, root, gather_list, "gather_list", "destination"):
        out = np.empty((pg.size(), *send.shape), send.dtype)
        req = pg.comm.Igather(send, out, root=root)
        return _issue(pg, [req], "gather", async_op, [_scatter_into(gather_list, out)],
                      gather_list)
    req = pg.comm.Igather(send, None, root=root)
    return _issue(pg, [req], "gather", async_op, [], [])


def scatter(tensor: Tensor, scatter_list: list[Tensor] | None = None, src: int | None = None,
            group: Any = None, async_op: bool = False,
            group_src: int | None = None) -> Work | None:
    """Rank r's ``tensor`` becomes ``scatter_list[r]`` of rank ``src`` (default 0)."""
    pg = resolve(group)
    if pg is None:
        return None
    root = _root(pg, src, group_src)
    buf, back = _buffer(tensor)
    if _is_root(pg, root, scatter_list, "scatter_list", "source"):
        req = pg.comm.Iscatter(_stacked(scatter_list, buf), buf, root=root)
    else:
        req = pg.comm.Iscatter(None, buf, root=root)
    return _issue(pg, [req], "scatter", async_op, [back], [tensor])


def barrier(group: Any = None, async_op: bool = False, device_ids: Any = None
            ) -> Work | None:
    """Return once every rank of ``group`` has called it (MPI ``Ibarrier``)."""
    pg = resolve(group)
    if pg is None:
        return None
    return _issue(pg, [pg.comm.Ibarrier()], "barrier", async_op, [], [])


def isend(tensor: Tensor, dst: int | None = None, group: Any = None, tag: int = 0,
          group_dst: int | None = None) -> Work | None:
    """Send ``tensor`` to global rank ``dst`` without waiting (MPI ``Isend``)."""
    pg = resolve(group)
    if pg is None:
        return None
    peer = group_dst if group_dst is not None else _group_rank(pg, dst)
    data = np.ascontiguousarray(tensor._array)
    req = pg.comm.Isend(data, dest=peer, tag=tag)
    return Work([req], pg, "send", None, [tensor])


def irecv(tensor: Tensor, src: int | None = None, group: Any = None, tag: int = 0,
          group_src: int | None = None) -> Work | None:
    """Receive into ``tensor`` from global rank ``src`` (any rank when None)."""
    pg = resolve(group)
    if pg is None:
        return None
    MPI = mpi()
    peer = group_src if group_src is not None else (
        MPI.ANY_SOURCE if src is None else _group_rank(pg, src))
    buf, back = _buffer(tensor)
    status = MPI.Status()
    req = pg.comm.Irecv(buf, source=peer, tag=tag)
    return Work([req], pg, "recv", _finish([back]), [tensor], status)


def send(tensor: Tensor, dst: int | None = None, group: Any = None, tag: int = 0,
         group_dst: int | None = None) -> None:
    work = isend(tensor, dst, group, tag, group_dst)
    if work is not None:
        work.wait()


def recv(tensor: Tensor, src: int | None = None, group: Any = None, tag: int = 0,
         group_src: int | None = None) -> int:
    """Receive into ``tensor``; returns the sender's global rank (-1 outside ``group``)."""
    work = irecv(tensor, src, group, tag, group_src)
    if work is None:
        return -1
    return work.source_rank()
