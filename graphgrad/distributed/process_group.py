"""Layer ``distributed``: process groups on MPI (mpi4py), with ``torch.distributed``'s names:
``init_process_group``, ``new_group``, ``get_rank``, ``get_world_size``, ``barrier``...

MPI is the engine: ``mpiexec`` starts the ranks and tells each its rank and the world size
(``graphgrad run --nproc N`` runs mpiexec for you). A group is an MPI communicator. MPI has
no timeouts, so every wait here polls its MPI request against the group's ``timeout`` and
raises ``RuntimeError`` ("Timed out waiting ...") when a peer never joins. mpi4py is
imported only when a group is made: the core needs NumPy only.
"""

from __future__ import annotations

import atexit
import os
import sys
import time
import traceback
from datetime import timedelta
from typing import Any

from . import peer_failure

__all__ = ["ProcessGroup", "group", "GroupMember", "init_process_group", "is_available",
           "is_mpi_available", "is_initialized", "get_rank", "get_world_size", "get_backend",
           "destroy_process_group", "new_group", "get_process_group_ranks",
           "get_global_rank", "get_group_rank", "default_pg_timeout", "mpi", "wait_all",
           "test_all"]

default_pg_timeout = timedelta(minutes=30)  # PyTorch's default_pg_timeout

_INSTALL = "pip install 'graphgrad[distributed]' (mpi4py and Open MPI)"


# Open MPI's default non-blocking allreduce (libnbc's choice) took about twice as long as
# the blocking one for 100 MB on 2 ranks; Rabenseifner's algorithm (3) was as fast or
# faster (measured here, bench/distributed.py). Read at MPI_Init; a user's setting wins.
_MPI_DEFAULTS = {"OMPI_MCA_coll_libnbc_iallreduce_algorithm": "3"}


def mpi() -> Any:
    """The ``mpi4py.MPI`` module, or a RuntimeError saying how to install it."""
    if "mpi4py.MPI" not in sys.modules:
        for name, value in _MPI_DEFAULTS.items():
            os.environ.setdefault(name, value)
    try:
        from mpi4py import MPI
    except ImportError as e:
        raise RuntimeError("Distributed package doesn't have MPI built in: graphgrad's "
                           f"process groups run on MPI through mpi4py; {_INSTALL}") from e
    return MPI


def is_available() -> bool:
    """Whether process groups can be made here (mpi4py is installed); imports nothing."""
    import importlib.util
    return importlib.util.find_spec("mpi4py") is not None


is_mpi_available = is_available


class ProcessGroup:
    """A set of ranks and the MPI communicator that joins them. ``rank()`` / ``size()`` are
    this process's rank in the group and the group's size, as on PyTorch's ProcessGroup."""

    def __init__(self, comm: Any, ranks: list[int], timeout: timedelta) -> None:
        self.comm = comm
        self.ranks = ranks          # global ranks, in group-rank order
        self.timeout = timeout
        self._rank = comm.Get_rank()

    def rank(self) -> int:
        return self._rank

    def size(self) -> int:
        return len(self.ranks)

    def name(self) -> str:
        return "mpi"

    def __repr__(self) -> str:
        return f"ProcessGroup(backend='mpi', ranks={self.ranks})"


class _NonMember:
    """What ``new_group`` returns on a rank outside the group (PyTorch's
    ``GroupMember.NON_GROUP_MEMBER``): collectives on it do nothing on that rank."""

    def __repr__(self) -> str:
        return "GroupMember.NON_GROUP_MEMBER"


class GroupMember:
    WORLD: ProcessGroup | None = None
    NON_GROUP_MEMBER = _NonMember()


class group:  # noqa: N801 - PyTorch's name: dist.group.WORLD
    WORLD: ProcessGroup | None = None


_state: dict[str, Any] = {"backend": None, "groups": [], "excepthook": None}


def _not_initialized() -> ValueError:
    return ValueError("Default process group has not been initialized, please make sure to "
                      "call init_process_group.")


def world() -> ProcessGroup:
    if GroupMember.WORLD is None:
        raise _not_initialized()
    return GroupMember.WORLD


def resolve(g: Any) -> ProcessGroup | None:
    """The group a call works on (None: the default one); None for a non-member rank."""
    if g is None:
        return world()
    if g is GroupMember.NON_GROUP_MEMBER:
        return None
    world()  # a group outlives nothing: after destroy_process_group every call fails
    return g


def is_initialized() -> bool:
    return GroupMember.WORLD is not None


def get_rank(group: Any = None) -> int:
    """This process's rank in ``group`` (default: the world); -1 outside the group."""
    pg = resolve(group)
    return -1 if pg is None else pg.rank()


def get_world_size(group: Any = None) -> int:
    """The number of ranks in ``group``; -1 on a rank outside it."""
    pg = resolve(group)
    return -1 if pg is None else pg.size()


def get_backend(group: Any = None) -> str:
    resolve(group)
    return _state["backend"]


def get_process_group_ranks(group: Any) -> list[int]:
    pg = resolve(group)
    if pg is None:
        raise ValueError("Group GroupMember.NON_GROUP_MEMBER is not registered")
    return list(pg.ranks)


def get_global_rank(group: Any, group_rank: int) -> int:
    return get_process_group_ranks(group)[group_rank]


def get_group_rank(group: Any, global_rank: int) -> int:
    ranks = get_process_group_ranks(group)
    if global_rank not in ranks:
        raise ValueError(f"Global rank {global_rank} is not part of group {group}")
    return ranks.index(global_rank)


def _env_int(name: str) -> int | None:
    value = os.environ.get(name)
    return int(value) if value not in (None, "") else None


def _abort_on_uncaught() -> None:
    """An uncaught exception on one rank aborts the whole MPI job: the other ranks stop
    instead of waiting for it until the timeout, and the launcher names the failed rank."""
    from .launch import rank_failed
    previous = sys.excepthook
    _state["excepthook"] = previous

    def hook(kind, value, tb):
        sys.stderr.write(f"[rank {get_rank()}] ")
        traceback.print_exception(kind, value, tb)
        rank_failed(f"{kind.__name__}: {value}")
        previous(kind, value, tb)  # only reached when no other rank runs

    sys.excepthook = hook


def init_process_group(backend: str | None = None, init_method: str | None = None,
                       timeout: timedelta | None = None, world_size: int = -1,
                       rank: int = -1, store: Any = None, group_name: str = "",
                       pg_options: Any = None, device_id: Any = None) -> None:
    """Join the ranks ``mpiexec`` started into the default group. The rank and world size
    come from MPI; where torchrun's ``RANK``/``WORLD_SIZE`` or explicit ``rank`` /
    ``world_size`` are given they must agree with MPI's. ``backend`` is "mpi" (or None);
    "gloo" is served by MPI too, so CPU PyTorch programs run unchanged. ``init_method``
    and ``store`` are not needed (mpiexec did the rendezvous) and are ignored."""
    if GroupMember.WORLD is not None:
        raise ValueError("trying to initialize the default process group twice!")
    name = (backend or "mpi").lower()
    if name == "nccl":
        raise RuntimeError("Distributed package doesn't have NCCL built in (graphgrad is "
                           "CPU-only; use backend='mpi')")
    if name not in ("mpi", "gloo", "cpu:gloo", "cpu:mpi"):
        raise ValueError(f"Invalid backend: '{backend}'")
    MPI = mpi()
    comm = MPI.COMM_WORLD
    mpi_rank, mpi_size = comm.Get_rank(), comm.Get_size()
    for label, given, actual in (("rank", rank, mpi_rank),
                                 ("world_size", world_size, mpi_size),
                                 ("RANK", _env_int("RANK"), mpi_rank),
                                 ("WORLD_SIZE", _env_int("WORLD_SIZE"), mpi_size)):
        if given is not None and given != -1 and given != actual:
            started = ("" if mpi_size > 1 else "; this process was not started by mpiexec: "
                       "start the ranks with `graphgrad run --nproc N script.py` or mpiexec")
            raise ValueError(f"init_process_group: {label}={given} but MPI says {label.lower()}"
                             f" {actual} (rank {mpi_rank} of {mpi_size}){started}")
    pg = ProcessGroup(comm, list(range(mpi_size)), timeout or default_pg_timeout)
    GroupMember.WORLD = group.WORLD = pg
    _state["backend"] = "mpi"
    _state["groups"] = [pg]
    if mpi_size > 1:
        _abort_on_uncaught()
        peer_failure.open_channel(comm, pg.timeout.total_seconds())
        if not _state.get("goodbye"):
            _state["goodbye"] = True
            atexit.register(peer_failure.say_goodbye)  # runs before mpi4py finalizes MPI


def destroy_process_group(group: Any = None) -> None:
    """Free ``group``'s communicator; with no group, every group and the default one."""
    if group is None or group is GroupMember.WORLD:
        world()
        peer_failure.say_goodbye()
        for pg in _state["groups"][1:]:
            pg.comm.Free()
        GroupMember.WORLD = globals()["group"].WORLD = None
        _state.update(backend=None, groups=[])
        if _state["excepthook"] is not None:
            sys.excepthook, _state["excepthook"] = _state["excepthook"], None
    elif group is not GroupMember.NON_GROUP_MEMBER:
        group.comm.Free()
        _state["groups"].remove(group)


def new_group(ranks: list[int] | None = None, timeout: timedelta | None = None,
              backend: str | None = None, pg_options: Any = None,
              use_local_synchronization: bool = False, group_desc: str | None = None,
              device_id: Any = None) -> ProcessGroup | _NonMember:
    """A group of the global ``ranks`` (default: all). Every rank of the world calls it,
    as in PyTorch; ranks outside get ``GroupMember.NON_GROUP_MEMBER``."""
    pg = world()
    ranks = sorted(range(pg.size()) if ranks is None else ranks)
    bad = [r for r in ranks if not 0 <= r < pg.size()]
    if bad or len(set(ranks)) != len(ranks):
        raise ValueError(f"Invalid rank list {ranks} for a world of size {pg.size()}")
    MPI = mpi()
    sub = pg.comm.Get_group().Incl(ranks)
    comm = pg.comm.Create(sub)  # collective over the whole world, as new_group is
    sub.Free()
    if comm == MPI.COMM_NULL:
        return GroupMember.NON_GROUP_MEMBER
    new = ProcessGroup(comm, ranks, timeout or pg.timeout)
    _state["groups"].append(new)
    return new


# ---- waiting with a timeout ---------------------------------------------------------------

_SPIN_SECONDS = 1.0  # spin on Test() this long (what a blocking MPI call does), then nap


def wait_all(requests: list, pg: ProcessGroup, what: str, timeout: timedelta | None = None,
             statuses: list | None = None) -> None:
    """Wait for MPI ``requests``; RuntimeError after ``timeout`` (the group's by default),
    or when MPI says a peer's process died (``peer_failure.process_died``).
    Polling drives MPI's progress as a blocking call would, yielding the core now and then
    (on a machine with more runnable processes than cores, a peer rank may be waiting for
    this core: measured, the digits MLP's DDP step went from 8.6 to 3.1 ms under load);
    after a second of waiting it naps between polls, leaving the cores to a slow peer."""
    MPI = mpi()
    try:
        _poll(MPI.Request.Testall, requests, pg, what, timeout, statuses)
    except MPI.Exception as e:
        died = peer_failure.process_died(e, pg.comm, pg.ranks, what)
        if died is None:
            raise
        raise died from e


def test_all(requests: list, pg: ProcessGroup, what: str, statuses: list | None = None) -> bool:
    """Whether ``requests`` are done, without waiting; the dead-peer error as ``wait_all``."""
    MPI = mpi()
    try:
        return MPI.Request.Testall(requests, statuses)
    except MPI.Exception as e:
        died = peer_failure.process_died(e, pg.comm, pg.ranks, what)
        if died is None:
            raise
        raise died from e


def _poll(testall: Any, requests: list, pg: ProcessGroup, what: str,
          timeout: timedelta | None, statuses: list | None) -> None:
    if testall(requests, statuses):
        return
    limit = (timeout or pg.timeout).total_seconds()
    start = time.monotonic()
    polls = 0
    while not testall(requests, statuses):
        polls += 1
        if polls % 256:
            continue
        peer_failure.check(what)  # another rank failed: raise naming it
        waited = time.monotonic() - start
        if waited > limit:
            raise RuntimeError(
                f"[Rank {get_rank()}] {what}: Timed out waiting {int(limit * 1000)}ms for "
                f"{what} operation to complete (group ranks {pg.ranks}): a peer rank failed, "
                f"exited or does not call {what}. The process group is unusable now.")
        if waited > _SPIN_SECONDS:
            time.sleep(0.001)
        else:  # let a peer rank sharing this core run (an oversubscribed machine)
            os.sched_yield()
