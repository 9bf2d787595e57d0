"""Layer ``distributed`` (above backends, below nn): ``torch.distributed`` on MPI.

Process groups (``init_process_group``, ``new_group``...), collectives on tensors in place
(``all_reduce``, ``broadcast``, ``all_gather``..., sync or ``async_op=True`` -> ``Work``),
collectives on picklable objects, and the launcher (``python -m graphgrad.distributed.run``,
``graphgrad run --nproc N``). Runs on mpi4py and Open MPI: ``pip install
'graphgrad[distributed]'``. DistributedDataParallel lives in ``graphgrad.nn.parallel`` and
DistributedSampler in ``graphgrad.utils.data``, as in PyTorch.
"""

from .collectives import (ReduceOp, Work, all_gather, all_gather_into_tensor, all_reduce,
                          barrier, broadcast, gather, irecv, isend, recv, reduce,
                          reduce_scatter, reduce_scatter_tensor, scatter, send)
from .objects import all_gather_object, broadcast_object_list, gather_object
from .process_group import (GroupMember, ProcessGroup, default_pg_timeout,
                            destroy_process_group, get_backend, get_global_rank,
                            get_group_rank, get_process_group_ranks, get_rank,
                            get_world_size, group, init_process_group, is_available,
                            is_initialized, is_mpi_available, new_group)

__all__ = ["ReduceOp", "Work", "all_reduce", "broadcast", "reduce", "all_gather",
           "all_gather_into_tensor", "reduce_scatter", "reduce_scatter_tensor", "gather",
           "scatter", "barrier", "send", "recv", "isend", "irecv", "all_gather_object",
           "broadcast_object_list", "gather_object", "ProcessGroup", "GroupMember", "group",
           "init_process_group", "destroy_process_group", "new_group", "is_available",
           "is_mpi_available", "is_initialized", "get_rank", "get_world_size", "get_backend",
           "get_process_group_ranks", "get_global_rank", "get_group_rank",
           "default_pg_timeout"]


def is_gloo_available() -> bool:
    """False: graphgrad serves ``backend="gloo"`` with MPI, it has no gloo of its own."""
    return False


def is_nccl_available() -> bool:
    return False
