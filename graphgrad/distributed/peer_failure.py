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

A rank killed by a signal cannot tell anyone: mpiexec stops the job, as before.
"""

from __future__ import annotations

import time
from typing import Any

__all__ = ["Channel", "open_channel", "channel", "check", "report_failure", "say_goodbye"]

_TAG = 7401
_MAX_BYTES = 1 << 16  # a failure summary longer than this is cut
_FAILED, _SETTLED = "failed", "settled"
_state: dict[str, Any] = {"channel": None}


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
        self.closed = False
        self._request = self._post()

    def _post(self) -> Any:
        # MPI writes into this buffer whenever a message comes: it must outlive the receive
        self._buffer = bytearray(_MAX_BYTES + 1024)
        return self.comm.irecv(self._buffer, source=self._any_source, tag=_TAG)

    def close(self) -> None:
        """No receive may stay posted when MPI finalizes: it would write into memory that
        Python has freed by then (seen as a crash in MPI_Finalize)."""
        self.closed = True
        self._request.Cancel()
        self._request.Wait()

    def poll(self) -> None:
        """Read the messages that have arrived."""
        while True:
            arrived, message = self._request.test()
            if not arrived:
                return
            self._request = self._post()
            kind, source, text = message
            self.answered.add(source)
            if kind == _FAILED and self.peer_failure is None:
                self.peer_failure = (source, text)

    def tell_others(self, kind: str, text: str = "") -> None:
        requests = [self.comm.isend((kind, self.rank, text[:_MAX_BYTES]), dest=r, tag=_TAG)
                    for r in range(self.size) if r != self.rank]
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
    if ch.peer_failure is not None:
        source = ch.peer_failure[0]
        ch.comm.isend((_SETTLED, ch.rank, ""), dest=source, tag=_TAG).wait()
        ch.closed = True
        ch.wait_for(lambda: False)  # the failed rank aborts the job once all have answered
        return True
    ch.tell_others(_FAILED, summary)
    ch.closed = True
    ch.wait_for(lambda: len(ch.answered) >= ch.size - 1)
    return False


def say_goodbye() -> None:
    """This rank is leaving normally (its process group destroyed or the program ended)."""
    ch = _state["channel"]
    if ch is not None and not ch.closed:
        ch.tell_others(_SETTLED)
        ch.close()
