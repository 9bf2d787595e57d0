"""Layer ``distributed``: telling the other ranks that this one failed, so that they raise
a Python error naming it instead of being killed outright by ``MPI_Abort``.

PyTorch's gloo ranks raise ``RuntimeError`` ("Connection reset by peer") in their next
collective once a peer process has exited. MPI gives no such notice: a rank that ends with
an error makes mpiexec stop the whole job. So ``init_process_group`` opens a side channel
(a duplicate of the world communicator) with a receive posted on it, and:

- a rank whose program fails sends its error to every other rank on the channel, then
  waits, at most the group's timeout, until each has answered (it reached its own failure
  report, it left normally, or it failed too), and only then aborts the job as before;
- a rank waiting in a collective polls the channel (``wait_all``) and raises
  ``RuntimeError`` naming the failed rank and its error. When that error ends its program,
  its report says so, it answers, and it waits for the failed rank's abort (at most the
  group's timeout, then it aborts itself);
- a rank that ends normally, or destroys its process group, answers every rank.

A rank killed by a signal (or ending without a word) cannot tell anyone. Open MPI 5 runs
with its fault tolerance on (the launcher passes ``--with-ft ulfm``): mpiexec then does not
stop the job at once, and the MPI calls of the survivors that involve the dead rank fail
with ``MPI_ERR_PROC_FAILED`` instead of waiting forever. ``wait_all`` turns that into
``RuntimeError`` naming the dead rank (``process_died``). A survivor whose program ends
with that error tells the other survivors which rank died (they raise naming it, if they
have not yet), waits for their answers as above (not for the dead rank's) and exits with
its error's code, skipping MPI_Finalize (which can wait for the dead rank forever) and
the abort (after which mpiexec exited 0): mpiexec then ends the job with a non-zero code.
"""

from __future__ import annotations

import time
from typing import Any

__all__ = ["Channel", "open_channel", "channel", "check", "report_failure", "say_goodbye",
           "failed_ranks", "process_died", "DIED"]

_TAG = 7401
_MAX_BYTES = 1 << 16  # a failure summary longer than this is cut
_FAILED, _SETTLED, _DEAD = "failed", "settled", "dead"
DIED = ("its process died without a word (killed by a signal, or it ended inside MPI): "
         "MPI_ERR_PROC_FAILED")
_state: dict[str, Any] = {"channel": None}


def _is_death(error: Any, in_status: bool = False) -> bool:
    """Whether an ``MPI.Exception`` is ULFM's report of a dead peer (with ``in_status``:
    or Testall's MPI_ERR_IN_STATUS, which may carry one)."""
    from mpi4py import MPI
    names = ("ERR_PROC_FAILED", "ERR_PROC_FAILED_PENDING", "ERR_REVOKED") + (
        ("ERR_IN_STATUS",) if in_status else ())
    code = error.Get_error_class()
    return any(getattr(MPI, name, None) == code for name in names)


def failed_ranks(comm: Any) -> set[int]:
    """The ranks of ``comm`` whose process has died, as far as MPI knows."""
    from mpi4py import MPI
    failed = comm.Get_failed()
    ranks = MPI.Group.Translate_ranks(failed, list(range(failed.Get_size())), comm.Get_group())
    failed.Free()
    return {r for r in ranks if r != MPI.UNDEFINED}


def process_died(error: Any, comm: Any, ranks: list[int], what: str) -> RuntimeError | None:
    """The RuntimeError for an MPI error that says a peer's process died (None for any
    other error): it names the dead rank (global, from ``ranks``) and records it on the
    side channel, so that this rank's failure report skips it."""
    from mpi4py import MPI
    if not _is_death(error, in_status=True):
        return None
    try:
        dead = sorted(ranks[r] for r in failed_ranks(comm))
    except MPI.Exception:  # an MPI without ULFM's MPIX_Comm_get_failed
        return None
    if not dead:
        return None
    ch = _state["channel"]
    if ch is not None:
        ch.died(set(dead))
    from .process_group import get_rank
    return RuntimeError(f"[Rank {get_rank()}] {what}: rank {', '.join(map(str, dead))} failed: "
                        f"{DIED}. The process group is unusable now.")


class Channel:
    """The side channel of one process group: who failed, who has answered."""

    def __init__(self, comm: Any, timeout_s: float) -> None:
        from mpi4py import MPI
        self._any_source = MPI.ANY_SOURCE
        self.comm = comm.Dup()  # its own context: never matches a collective's messages
        self.rank, self.size = comm.Get_rank(), comm.Get_size()
        self.timeout_s = timeout_s
        self.peer_failure: tuple[int, str] | None = None
        self.answered: set[int] = set()
        self.dead: set[int] = set()  # ranks whose process is gone (MPI_ERR_PROC_FAILED)
        self.closed = False
        self._request = self._post()

    def _post(self) -> Any:
        # MPI writes into this buffer whenever a message comes: it must outlive the receive
        self._buffer = bytearray(_MAX_BYTES + 1024)
        return self.comm.irecv(self._buffer, source=self._any_source, tag=_TAG)

    def close(self) -> None:
        """No receive may stay posted when MPI finalizes: it would write into memory that
        Python has freed by then (seen as a crash in MPI_Finalize)."""
        from mpi4py import MPI
        self.closed = True
        try:
            self._request.Cancel()
            self._request.Wait()
        except MPI.Exception:  # a dead rank's failure reported on the receive: it is over
            pass

    def died(self, ranks: set[int]) -> None:
        """Record dead processes (this channel's ranks = the world's)."""
        new = ranks - self.dead
        self.dead |= new
        if new and self.peer_failure is None:
            self.peer_failure = (min(new), DIED)

    def poll(self) -> None:
        """Read the messages that have arrived."""
        from mpi4py import MPI
        while True:
            try:
                arrived, message = self._request.test()
            except MPI.Exception as e:  # a receive from any rank learns of a dead one
                if not _is_death(e):
                    raise
                self.died(failed_ranks(self.comm))
                self.comm.Ack_failed()  # acknowledged: receives from any rank go on
                if e.Get_error_class() != MPI.ERR_PROC_FAILED_PENDING:
                    self._request = self._post()
                continue
            if not arrived:
                return
            self._request = self._post()
            kind, source, text = message
            self.answered.add(source)
            if kind == _DEAD:  # a survivor tells which ranks died (it stopped for that)
                self.died({int(r) for r in text.split(",")})
            elif kind == _FAILED and self.peer_failure is None:
                self.peer_failure = (source, text)

    def others(self) -> set[int]:
        """The other ranks still alive."""
        return set(range(self.size)) - {self.rank} - self.dead

    def tell_others(self, kind: str, text: str = "") -> None:
        requests = [self.comm.isend((kind, self.rank, text[:_MAX_BYTES]), dest=r, tag=_TAG)
                    for r in sorted(self.others())]
        for request in requests:  # small messages: sent eagerly, done at once
            request.wait()

    def wait_for(self, done: Any) -> None:
        """Poll until ``done()`` or the timeout, yielding the core to the other ranks."""
        deadline = time.monotonic() + self.timeout_s
        while not done() and time.monotonic() < deadline:
            self.poll()
            time.sleep(0.001)


def open_channel(comm: Any, timeout_s: float) -> None:
    """Called by ``init_process_group`` on every rank (the duplication is collective)."""
    _state["channel"] = Channel(comm, timeout_s) if comm.Get_size() > 1 else None


def channel() -> Channel | None:
    return _state["channel"]


def check(what: str) -> None:
    """Raise if another rank has reported a failure (called while waiting for ``what``)."""
    ch = _state["channel"]
    if ch is None or ch.closed:
        return
    ch.poll()
    if ch.peer_failure is not None:
        source, text = ch.peer_failure
        raise RuntimeError(f"[Rank {ch.rank}] {what}: rank {source} failed: {text}. The "
                           f"process group is unusable now.")


def report_failure(summary: str) -> bool:
    """On a rank whose program failed, before it aborts the job: let the other ranks raise
    (see the module docstring). True when this failure follows another rank's."""
    ch = _state["channel"]
    if ch is None or ch.closed:
        return False
    ch.poll()
    if ch.peer_failure is not None and ch.peer_failure[0] not in ch.dead:
        source = ch.peer_failure[0]
        ch.comm.isend((_SETTLED, ch.rank, ""), dest=source, tag=_TAG).wait()
        ch.closed = True
        ch.wait_for(lambda: False)  # the failed rank aborts the job once all have answered
        return True
    # this rank failed first, or stopped because a peer died (which the others then raise
    # for, not for this rank's report): the living answer before the abort
    if ch.dead:
        ch.tell_others(_DEAD, ",".join(map(str, sorted(ch.dead))))
    else:
        ch.tell_others(_FAILED, summary)
    ch.closed = True
    ch.wait_for(lambda: ch.answered >= ch.others())
    return bool(ch.dead)


def say_goodbye() -> None:
    """This rank is leaving normally (its process group destroyed or the program ended)."""
    ch = _state["channel"]
    if ch is not None and not ch.closed:
        ch.tell_others(_SETTLED)
        ch.close()
