"""What a local run did: ``RunResult`` (per pod: ``PodResult``), and the files it reads back.

``read_metrics`` parses the job's metrics.jsonl; ``complete_checkpoint_steps`` lists the
checkpoints a resume can load, by folder names alone (no torch import).
"""

from __future__ import annotations

import contextlib
import json
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from localrun.options import Fault

_PUBLISHED = re.compile(r"step-(\d{6,})(?:\.old)?")
"""A published checkpoint folder, as ``training.checkpoint`` names them (``step-N.old`` is a
re-saved step's previous copy, still loadable); a write in flight is ``step-N.tmp`` and holds
its ``COMPLETE`` marker just before the rename publishes it."""


def complete_checkpoint_steps(root: Path) -> list[int]:
    """Steps of the published checkpoints under ``root`` whose ``COMPLETE`` marker exists."""
    return sorted(
        {
            int(m.group(1))
            for marker in root.glob("step-*/COMPLETE")
            if (m := _PUBLISHED.fullmatch(marker.parent.name))
        }
    )


def read_metrics(path: Path) -> list[dict[str, Any]]:
    """Parsed lines of a metrics.jsonl (a partial last line is skipped)."""
    if not path.is_file():
        return []
    out = []
    for line in path.read_text(encoding="utf-8").splitlines():
        with contextlib.suppress(json.JSONDecodeError):
            out.append(json.loads(line))
    return out


@dataclass
class PodResult:
    """How one worker pod ended."""

    name: str
    log: Path
    exit_code: int | None = None
    lost: bool = False
    """Killed by a kill-node fault (not expected to finish)."""
    restarts: int = 0
    """Times the pod was restarted after a failure (restartPolicy OnFailure, like the kubelet)."""
    replaced: int = 0
    """Times the pod was deleted (preempted, drained) and the operator created it again."""
    restart_count: int = 0
    """The live pod's containerStatuses restartCount (0 again after a replacement)."""


@dataclass
class RunResult:
    """What a local run did, for the summary and for tests."""

    job: dict[str, Any]
    """The PyTorchJob object the run was built from (local endpoint/paths)."""
    rdzv_id: str
    metrics_path: Path
    checkpoint_root: Path
    pods: list[PodResult]
    wall_s: float
    fault: Fault
    fault_time_s: float | None = None
    """Seconds after start when the fault fired (None if it never did)."""
    fault_note: str = ""
    fault_checkpoint_complete: bool | None = None
    """kill-in-checkpoint: whether checkpoint K was complete when the worker was frozen."""
    checkpoints_at_fault: list[int] = field(default_factory=list)
    """Steps whose checkpoint was complete (its ``COMPLETE`` marker written) when the fault
    fired: a resume must start from the newest of them or a later one that was finishing."""
    recovery_s: float | None = None
    """Seconds from the fault to the next optimizer step logged after it."""
    new_step_s: float | None = None
    """Seconds from the fault to the next NEW step: past every step logged before, and logged
    by a restarted group when the fault restarted it (the time the fault cost)."""
    steps_redone: int = 0
    """Rows logged after the fault for steps already logged before (work done twice)."""
    resumed_from_steps: list[int] = field(default_factory=list)
    """Steps the workers resumed from (one entry per resume, from the pod logs)."""
    rendezvous_closed: bool = False
    """Some pod failed with RendezvousClosedError."""
    training_summary: str = ""
    """The training package's own summary block (from the pod that printed it last)."""
    timed_out: bool = False
    interrupted: bool = False
    observed: list[dict[str, Any]] = field(default_factory=list)
    """Every metrics row the runner saw, in order, including rows a resume later dropped."""

    @property
    def metrics(self) -> list[dict[str, Any]]:
        """The rows of metrics.jsonl now (a resume drops the rows past its checkpoint)."""
        return read_metrics(self.metrics_path)

    @property
    def losses(self) -> dict[int, float]:
        """Loss per step, the last value written for each step."""
        return {m["step"]: float(m["loss"]) for m in self.metrics}

    @property
    def succeeded(self) -> bool:
        """Every pod not lost to a fault exited 0, and at least one step ran."""
        alive = [p for p in self.pods if not p.lost]
        return (
            bool(alive)
            and all(p.exit_code == 0 for p in alive)
            and bool(self.metrics)
            and not self.timed_out
            and not self.interrupted
        )
