"""A data-parallel run in which rank 1 fails (tests/test_distributed_launch.py):
``raise``: rank 1 raises at step 3; ``kill``: rank 1 kills itself with SIGKILL at step 3;
``timeout``: rank 1 never joins rank 0's allreduce (the group's timeout is 3 s)."""

import os
import signal
import sys
from datetime import timedelta

import graphgrad as gg
import graphgrad.distributed as dist
from graphgrad import nn
from graphgrad.nn.parallel import DistributedDataParallel

mode = sys.argv[1]
dist.init_process_group("mpi", timeout=timedelta(seconds=3 if mode == "timeout" else 120))
rank = dist.get_rank()
if mode == "timeout":
    if rank == 0:
        dist.all_reduce(gg.ones(3))
        print("rank 0 should not get here", flush=True)
    sys.exit(0)  # rank 1 leaves without joining
gg.manual_seed(0)
model = DistributedDataParallel(nn.Linear(4, 2))
for step in range(10):
    if rank == 1 and step == 3:
        if mode == "raise":
            raise ValueError("rank 1 fails on purpose at step 3")
        os.kill(os.getpid(), signal.SIGKILL)
    model(gg.randn(8, 4)).sum().backward()
print(f"rank {rank} should not finish", flush=True)
