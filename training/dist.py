"""Process group and device setup: torchrun's environment in, one `DistEnv` out.

Under torchrun (RANK/WORLD_SIZE/LOCAL_RANK set) the default process group is initialised from the
environment; run directly (`python -m training.finetune`) the process is a world of one with an
in-memory store, so the rest of the code never branches on "distributed or not". The backend is
gloo on CPU and NCCL on CUDA (with gloo kept for CPU tensors).
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import timedelta

import torch
import torch.distributed as dist


@dataclass(frozen=True)
class DistEnv:
    """Where this process sits in the job."""

    rank: int
    """Global rank (0 writes files and prints)."""
    world_size: int
    """Number of processes in the job."""
    local_rank: int
    """Rank on this node (picks the CUDA device)."""
    local_world_size: int
    """Processes on this node."""
    device: torch.device
    """cuda:<local_rank> when CUDA is present, else cpu."""

    @property
    def is_main(self) -> bool:
        return self.rank == 0


def world_from_env() -> tuple[int, int, int, int]:
    """(rank, world_size, local_rank, local_world_size) from torchrun's variables (1 process if unset)."""
    world = int(os.environ.get("WORLD_SIZE", "1"))
    rank = int(os.environ.get("RANK", "0"))
    local_rank = int(os.environ.get("LOCAL_RANK", "0"))
    local_world = int(os.environ.get("LOCAL_WORLD_SIZE", str(world)))
    return rank, world, local_rank, local_world


def device_type() -> str:
    return "cuda" if torch.cuda.is_available() else "cpu"


@contextmanager
def distributed(timeout_s: float = 1800.0) -> Iterator[DistEnv]:
    """Initialise the default process group (unless one exists) and tear it down afterwards.

    Re-entrant: a caller that already holds a process group (a test running several
    configurations in one launch) keeps it.
    """
    rank, world, local_rank, local_world = world_from_env()
    if torch.cuda.is_available():
        device = torch.device("cuda", local_rank)
        torch.cuda.set_device(device)
        backend = "cpu:gloo,cuda:nccl"
    else:
        device = torch.device("cpu")
        backend = "gloo"
    owned = not dist.is_initialized()
    if owned:
        if "MASTER_ADDR" in os.environ:
            dist.init_process_group(
                backend, rank=rank, world_size=world, timeout=timedelta(seconds=timeout_s)
            )
        else:  # a plain `python -m training.finetune`: a world of one
            dist.init_process_group(backend, store=dist.HashStore(), rank=0, world_size=1)
    env = DistEnv(dist.get_rank(), dist.get_world_size(), local_rank, local_world, device)
    try:
        yield env
    finally:
        if owned and dist.is_initialized():
            dist.destroy_process_group()


def all_reduce_sum(values: list[float], device: torch.device) -> list[float]:
    """Sum a few floats over all ranks in one collective (a no-op in a world of one)."""
    if dist.get_world_size() == 1:
        return values
    t = torch.tensor(values, dtype=torch.float64, device=device)
    dist.all_reduce(t)
    return t.tolist()


def barrier() -> None:
    if dist.is_initialized() and dist.get_world_size() > 1:
        dist.barrier()
