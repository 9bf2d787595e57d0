"""An unmodified PyTorch data-parallel program (gloo backend, torchrun's environment
variables, DistributedSampler, DDP) for ``graphgrad run --nproc 2``: prints
``ok torch program`` on rank 0 when every rank ends with the same weights."""

import os

import torch
import torch.distributed as dist
import torch.nn as nn
from torch.nn.parallel import DistributedDataParallel as DDP  # noqa: N817
from torch.utils.data import DataLoader, DistributedSampler, TensorDataset

dist.init_process_group(backend="gloo")
rank, world = dist.get_rank(), dist.get_world_size()
assert int(os.environ["RANK"]) == rank and int(os.environ["WORLD_SIZE"]) == world
assert int(os.environ["LOCAL_RANK"]) == rank  # one machine
torch.manual_seed(rank)  # different weights per rank: DDP broadcasts rank 0's
model = DDP(nn.Sequential(nn.Linear(4, 8), nn.ReLU(), nn.Linear(8, 2)))
data = TensorDataset(torch.randn(40, 4, generator=torch.Generator().manual_seed(0)),
                     torch.randint(0, 2, (40,), generator=torch.Generator().manual_seed(1)))
sampler = DistributedSampler(data)
loader = DataLoader(data, batch_size=5, sampler=sampler)
opt = torch.optim.SGD(model.parameters(), lr=0.1)
seen = []
for epoch in range(2):
    sampler.set_epoch(epoch)
    for x, y in loader:
        opt.zero_grad()
        nn.functional.cross_entropy(model(x), y).backward()
        opt.step()
    seen.append(list(sampler))
flat = torch.cat([p.detach().reshape(-1) for p in model.parameters()])
everyone = [torch.zeros_like(flat) for _ in range(world)]
dist.all_gather(everyone, flat)
assert all(torch.equal(everyone[0], w) for w in everyone)
shards = [None] * world
dist.all_gather_object(shards, seen[0])
assert sorted(i for s in shards for i in s) == list(range(40))  # disjoint, complete
assert seen[0] != seen[1]  # set_epoch reshuffles
if rank == 0:
    print("ok torch program", flush=True)
dist.destroy_process_group()
