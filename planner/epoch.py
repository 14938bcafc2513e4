"""The epoch: how many steps a dataset makes, and what else the wall clock pays for.

An epoch on a small dataset at many GPUs is a handful of steps, so its time is not
steps x step time: the train loop pays a fixed entry and first-step cost, the epoch pays an
evaluation pass and a checkpoint, the job pays process start, rendezvous and model load.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass

SAMPLERS = ("fill", "pad")


def steps_per_epoch(
    samples: int, world: int, batch: int, grad_accum: int = 1, sampler: str = "fill"
) -> tuple[int, int]:
    """(optimizer steps, samples processed, filler rows included) of one epoch.

    ``fill`` (this project's training package, ``training.data.steps_per_epoch``): every sample
    is trained once; the last global batch is completed with fully masked filler rows, so
    ceil(len / (B x W x A)) steps. Mirrored here because the planner imports no torch;
    tests/planner/test_timing_epoch.py checks both agree.
    ``pad`` (llama-recipes: DistributedSampler pads to a multiple of W, the DataLoader drops the
    last incomplete per-rank batch): floor(ceil(len / W) / B) / A steps.
    """
    if sampler == "fill":
        global_batch = batch * world * grad_accum
        steps = -(-samples // global_batch) if samples > 0 else 0
    elif sampler == "pad":
        steps = (math.ceil(samples / world) // batch) // grad_accum
    else:
        raise ValueError(f"sampler {sampler!r}: one of {', '.join(SAMPLERS)}")
    return steps, steps * batch * world * grad_accum


def eval_steps(samples: int, world: int, batch: int = 1) -> int:
    """Forward steps of one evaluation pass: ceil(len / (B x W)) with either sampler.

    This project's ``eval_batches`` fills the last batch with fully masked examples and
    llama-recipes' DistributedSampler pads to a multiple of W: every example is evaluated,
    so even a split smaller than one batch of B x W costs one step.
    """
    return math.ceil(samples / (batch * world)) if samples > 0 else 0


@dataclass(frozen=True, kw_only=True)
class EpochTime:
    """Seconds and sizes of one epoch (and of the job's one-off start)."""

    samples: int
    """Packed samples in the training split."""
    steps: int
    """Optimizer steps in one epoch."""
    tokens: int
    """Tokens the train loop processes in one epoch (padding samples included)."""
    loop_s: float
    """Train loop: entry + first-step extra + steps x step time (llama-recipes' epoch timer)."""
    eval_s: float
    """Validation pass after the epoch."""
    checkpoint_s: float
    """Sharded checkpoint save after the epoch."""
    startup_s: float
    """Once per job: process start, rendezvous, model load and broadcast."""
    epochs: int
    """Epochs the job runs (start-up is shared among them)."""

    @property
    def wall_s(self) -> float:
        """Wall-clock share of one epoch in a job: loop + eval + checkpoint + start-up / epochs."""
        return self.loop_s + self.eval_s + self.checkpoint_s + self.startup_s / self.epochs

    def as_dict(self) -> dict[str, float | int]:
        return {**asdict(self), "wall_s": self.wall_s}
