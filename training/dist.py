"""Process group and device setup: torchrun's environment in, one `DistEnv` out.

Under torchrun (RANK/WORLD_SIZE/LOCAL_RANK set) the default process group is initialised from the
environment; run directly (`python -m training.finetune`) the process is a world of one with an
in-memory store, so the rest of the code never branches on "distributed or not". The backend is
gloo on CPU and NCCL on CUDA (with gloo kept for CPU tensors).

Failure detection: the group starts with a long timeout (`INIT_TIMEOUT_S`: model loading, the
first step and its allocations can take minutes on 7B-70B), and the trainer lowers it with
`set_collective_timeout` after the first step (`--collective_timeout_s`, as torchtitan does), so
a dead or hung peer fails every other rank's next collective within that time instead of half an
hour; the failing ranks exit non-zero and torchrun restarts the group. On CUDA, NCCL's watchdog
aborts a timed-out communicator and the process (`TORCH_NCCL_ASYNC_ERROR_HANDLING=1`, set here
unless the environment chose otherwise) rather than leave a kernel spinning. Checkpoint writes
get a group of their own (`checkpoint_group`): gloo, with the long timeout, so a background
write never shares a communicator with the training collectives and a slow file system is not
mistaken for a dead peer.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import timedelta
from typing import TypeVar

import torch
import torch.distributed as dist

T = TypeVar("T")


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


INIT_TIMEOUT_S = 1800.0
"""Collective timeout until the first step is done (torch's default for gloo)."""


@contextmanager
def distributed(timeout_s: float = INIT_TIMEOUT_S) -> Iterator[DistEnv]:
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
    os.environ.setdefault("TORCH_NCCL_ASYNC_ERROR_HANDLING", "1")
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


def all_reduce_max(values: list[float], device: torch.device) -> list[float]:
    """Element-wise maximum of a few floats over all ranks (a no-op in a world of one)."""
    if dist.get_world_size() == 1:
        return values
    t = torch.tensor(values, dtype=torch.float64, device=device)
    dist.all_reduce(t, op=dist.ReduceOp.MAX)
    return t.tolist()


def broadcast_object(obj: T) -> T:
    """Rank 0's `obj` on every rank (pickled; for small start-up data only)."""
    if not dist.is_initialized() or dist.get_world_size() == 1:
        return obj
    box = [obj]
    dist.broadcast_object_list(box, src=0)
    return box[0]  # type: ignore[return-value]


def set_collective_timeout(seconds: float) -> None:
    """Timeout of every later collective of the default group (gloo and NCCL alike)."""
    if dist.is_initialized() and dist.get_world_size() > 1:
        from torch.distributed.distributed_c10d import _set_pg_timeout

        _set_pg_timeout(timedelta(seconds=seconds))


def checkpoint_group(timeout_s: float = INIT_TIMEOUT_S) -> dist.ProcessGroup | None:
    """A gloo group of every rank for checkpoint writes (collective: every rank calls it).

    None in a world of one. DCP's background writer coordinates the ranks on it while the
    training loop keeps using the default group.
    """
    if not dist.is_initialized() or dist.get_world_size() == 1:
        return None
    return dist.new_group(backend="gloo", timeout=timedelta(seconds=timeout_s))


def all_reduce_sum_tensor(t: torch.Tensor) -> torch.Tensor:
    """Sum `t` over all ranks in place, on its device, without reading it on the host."""
    if dist.get_world_size() > 1:
        dist.all_reduce(t)
    return t


HOST_ONLY = "_host_only"
"""Attribute marking a CPU tensor that is read on the host by design (not a device sync)."""


def host_only(t: torch.Tensor) -> torch.Tensor:
    """Mark `t` (a CPU tensor, e.g. a gloo vote) as read on the host by design: reading it
    waits for no device, so `training.syncs` does not count it."""
    setattr(t, HOST_ONLY, True)
    return t


def barrier() -> None:
    if dist.is_initialized() and dist.get_world_size() > 1:
        dist.barrier()
