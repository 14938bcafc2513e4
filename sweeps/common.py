"""What every part of the sweep shares: the repository root, the errors, the measurement and its
JSON file."""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from pathlib import Path

PROJECT = "eks-fsdp"
STEPS_BY_MODE = {"local": (30, 5), "cloud": (200, 20)}
"""Default (steps, warm-up steps) per notebook mode: on the cluster 180 measured steps of ~1.5 s
(the planner's p5 step time) span 270 s, 18 scrapes at 15 s; 30 steps could not reach 8."""


class SweepError(RuntimeError):
    """The sweep stopped: a failed job, an image pull error, a dead port-forward, a timeout."""


class PrerequisiteError(SweepError):
    """Something the sweep needs is missing; nothing was started."""


@dataclass(frozen=True)
class Measurement:
    """Steady-state throughput of one run, from Prometheus' counters."""

    nodes: int
    """Worker pods (= nodes on the cluster)."""
    tokens_per_s: float
    """Job-wide tokens/s: ``rate(eksfsdp_tokens_total)`` of global rank 0 over the window."""
    source: str
    """Where the number came from (always ``prometheus``)."""
    job: str
    """Training job name (the ``training_job`` label)."""
    steps: int
    """Last optimizer step Prometheus saw."""
    wall_s: float
    """Wall time of the run (local) or of ``up`` + training (cloud)."""
    window_s: float = 0.0
    """Length of the measured window (first scrape after the warm-up to the last scrape)."""
    first_step: int = 0
    """Step count at the start of the window (the warm-up steps before it are not measured)."""
    end_step: int = 0
    """Step count at the end of the window (the last scrape before the final count)."""
    steps_measured: int = 0
    """Optimizer steps inside the window (``end_step - first_step``)."""
    tokens_measured: float = 0.0
    """Tokens trained inside the window (``increase`` of the counter)."""
    scrapes: int = 0
    """Scrapes inside the window."""


def to_json(measured: Sequence[Measurement]) -> str:
    """Measurements as JSON (for saving next to the PNG)."""
    return json.dumps([asdict(m) for m in measured], indent=2)


def save_results(measured: Sequence[Measurement], path: Path) -> None:
    """Write ``measured`` to ``path`` atomically (a crash never leaves half a file)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.tmp")
    tmp.write_text(to_json(measured))
    tmp.replace(path)
