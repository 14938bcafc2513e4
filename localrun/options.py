"""What a local run is asked to do: ``LocalOptions``, the fault to inject, the runner's defaults."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

FAULT_KINDS = (
    "none",
    "kill-worker",
    "kill-node",
    "kill-in-checkpoint",
    "restart-etcd",
    "lose-etcd",
    "preempt-node",
    "drain-node",
    "hang-worker",
)
FAULT_POD = 1
"""Index of the worker pod faults hit by default (worker 0 hosts the c10d store)."""
REPLACEMENT_DELAY_S = 10.0
"""preempt-node: seconds between the old pod's end and its replacement's start."""
ETCD_DOWN_S = 1.0
"""restart-etcd / lose-etcd: seconds between etcd's stop and its start."""


class LocalRunError(ValueError):
    """Bad runner input; the message is one line naming the option."""


@dataclass(frozen=True)
class Fault:
    """A fault to inject: ``kind`` at optimizer step ``step``."""

    kind: str = "none"
    step: int = 0

    @classmethod
    def parse(cls, text: str) -> Fault:
        """``none`` or ``KIND@STEP`` (e.g. ``kill-worker@8``)."""
        if text == "none":
            return cls()
        kind, sep, step = text.partition("@")
        if kind not in FAULT_KINDS or kind == "none" or not sep or not step.isdigit():
            raise LocalRunError(
                f"--fault: {text!r} is not none or KIND@STEP with KIND one of "
                f"{', '.join(FAULT_KINDS[1:])}"
            )
        if int(step) < 1:
            raise LocalRunError(f"--fault: step {step} must be >= 1")
        return cls(kind, int(step))

    def __str__(self) -> str:
        return self.kind if self.kind == "none" else f"{self.kind}@{self.step}"


@dataclass(frozen=True, kw_only=True)
class LocalOptions:
    """What ``eks-fsdp local`` was asked to do.

    ``stack``, ``workers``, ``min_workers``, ``backend``, ``train_overrides`` and
    ``generation`` choose the job (``localrun.job.local_job_settings``); the other fields say
    how it runs (``localrun.runner.Runner.run_job``)."""

    stack: str | None = "dev"
    """Stack whose job runs (``Pulumi.<stack>.yaml``); None: the job file's own."""
    out: Path = Path("runs/local")
    """Output folder (logs, shared volume, etcd data); wiped of earlier job state first."""
    workers: int | None = None
    """Worker pods (elastic max); None = the stack's."""
    min_workers: int | None = None
    """Elastic min; None = the stack's (lowered to workers-1 for kill-node)."""
    backend: str | None = None
    """Rendezvous backend; None = the stack's."""
    fault: Fault = field(default_factory=Fault)
    """Fault to inject."""
    train_overrides: tuple[str, ...] = ()
    """``--flag=value`` replacing the job's training flags of the same name."""
    generation: int | None = None
    """Job generation (the rendezvous id changes with it); None = the stack's."""
    etcd_endpoint: str | None = None
    """Use a running etcd (``host:port``) instead of starting one."""
    timeout_s: float = 900.0
    """Give up (and stop everything) after this long."""
    progress_every: int = 0
    """Print a progress line every N steps (0 = about 20 lines per run)."""
    keep_checkpoints: bool = False
    """Keep checkpoints from an earlier run in ``out`` (resume across runs)."""
    prometheus: bool = False
    """Start a local Prometheus scraping every pod's exporter (``localrun.prometheus``)."""
    fault_pod: int = FAULT_POD
    """Index of the pod the fault hits."""
    replacement_delay_s: float = REPLACEMENT_DELAY_S
    """preempt-node: seconds until the replacement pod starts after the old one is gone."""
    etcd_down_s: float = ETCD_DOWN_S
    """restart-etcd / lose-etcd: seconds etcd stays stopped (its start comes on top)."""
