"""`--use_profiler`: torch.profiler traces of a few steps after warm-up, on every rank.

llama-cookbook's schedule (`profile` in `llama_cookbook/utils/train_utils.py` at 0.0.5.post1):
`torch.profiler.schedule(wait=1, warmup=2, active=3, repeat=1)` with CPU and CUDA activities,
`profile_memory`, `record_shapes` and `with_flops`, written by `tensorboard_trace_handler`. Here
a step is an optimizer step (llama-cookbook steps the profiler per micro-batch), counted from
this process's first step: steps 4-6 of a fresh run are recorded, which the trace labels
`ProfilerStep#3` to `#5` (torch counts from 0). Each rank writes
`<profiler_dir>/rank<R>.<ns>.pt.trace.json`, a Chrome trace that Perfetto (ui.perfetto.dev) and
TensorBoard's profiler plugin open; the profiler stops once the trace is written, so later
steps run without it.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from training.config import PROFILER_STEPS

WAIT, WARMUP, ACTIVE = 1, 2, 3
assert WAIT + WARMUP + ACTIVE == PROFILER_STEPS
TRACE_SUFFIX = ".pt.trace.json"


def profiler_dir(output_dir: str | Path, profiler_dir: str) -> Path:
    """--profiler_dir, or `<output_dir>/profiler` when it is empty (the run's local output
    folder: with an s3:// --output_dir, its staging folder, uploaded at the end)."""
    return Path(profiler_dir) if profiler_dir else Path(output_dir) / "profiler"


class StepProfiler:
    """torch.profiler over PROFILER_STEPS optimizer steps; `step()` after each of them."""

    def __init__(self, folder: Path, rank: int) -> None:
        self.folder = folder
        self.rank = rank
        self.steps = 0
        self.done = False
        self._prof: Any = None

    def start(self) -> None:
        """Start profiling (a no-op once started or done)."""
        if self._prof is not None or self.done:
            return
        import torch
        from torch.profiler import (
            ProfilerActivity,
            profile,
            schedule,
            tensorboard_trace_handler,
        )

        activities = [ProfilerActivity.CPU]
        if torch.cuda.is_available():
            activities.append(ProfilerActivity.CUDA)
        self._prof = profile(
            activities=activities,
            schedule=schedule(wait=WAIT, warmup=WARMUP, active=ACTIVE, repeat=1),
            on_trace_ready=tensorboard_trace_handler(
                str(self.folder), worker_name=f"rank{self.rank}"
            ),
            profile_memory=True,
            record_shapes=True,
            with_flops=True,
            with_stack=False,
        )
        self._prof.start()

    def step(self) -> bool:
        """Mark the end of an optimizer step; True when this step wrote the trace."""
        if self.done or self._prof is None:
            return False
        self._prof.step()
        self.steps += 1
        if self.steps < PROFILER_STEPS:
            return False
        self.close()  # the schedule is over: the trace handler has run
        return True

    def close(self) -> None:
        """Stop profiling (idempotent); a stop inside the recorded steps writes what it has."""
        if self._prof is not None and not self.done:
            self._prof.stop()
        self.done = True
        self._prof = None

    def traces(self) -> list[Path]:
        return sorted(self.folder.glob(f"rank{self.rank}.*{TRACE_SUFFIX}"))
