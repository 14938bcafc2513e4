"""What the job CLI shows and what each backend answers: plain dataclasses, one error type.

Both backends (``jobs.cluster.backend``: a PyTorchJob through the Kubernetes API; ``jobs.local.backend``: the
same job run by ``localrun`` on this machine) implement ``Backend`` and fill the same
``JobInfo``, so the tables, ``--json`` and the exit statuses do not depend on where a job runs.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from typing import Any, Protocol

PHASES = ("Pending", "Running", "Restarting", "Succeeded", "Failed", "Cancelled", "Suspended")
"""A job's phase: the operator's last true condition, or a local run's state; ``Cancelled``
when ``cancel`` deleted it (its record and checkpoints are kept for ``resume``)."""
FINISHED = ("Succeeded", "Failed", "Cancelled")


class JobsError(Exception):
    """A request the CLI cannot carry out; the message is one line saying what and the fix."""

    def __init__(self, message: str, status: int = 1) -> None:
        super().__init__(message)
        self.status = status
        """Exit status: 2 for bad input, 1 otherwise."""


@dataclass
class Progress:
    """Where training stands, from the job's metrics (the last row of ``metrics.jsonl`` or the
    rank-0 exporter's ``eksfsdp_*`` gauges)."""

    step: int | None = None
    total: int | None = None
    loss: float | None = None
    tokens_per_s: float | None = None
    eta_s: float | None = None
    """Seconds to ``total`` at the recent step rate."""
    goodput: float | None = None
    """Productive step time / wall time since the job first started (0..1)."""
    world_size: int | None = None


@dataclass
class Condition:
    """One of the operator's conditions (a local run gets the same kinds)."""

    type: str
    status: str = "True"
    reason: str = ""
    message: str = ""
    time: str = ""


@dataclass
class Replica:
    """One worker pod."""

    name: str
    state: str
    """Pending | Running | Succeeded | Failed | Restarting | Gone."""
    restarts: int = 0
    exit_code: int | None = None
    reason: str = ""


@dataclass
class JobInfo:
    """A job as ``list`` (the first fields) and ``status`` (all of them) show it."""

    name: str
    backend: str
    """``cluster`` or ``local``."""
    phase: str
    ready: int = 0
    """Worker pods running."""
    wanted: int = 0
    """Worker pods the job asks for (elastic max)."""
    restarts: int = 0
    """Container restarts and replaced pods, summed over the workers."""
    age_s: float | None = None
    progress: Progress = field(default_factory=Progress)
    namespace: str = ""
    stack: str = ""
    generation: int = 1
    rdzv_id: str = ""
    conditions: list[Condition] = field(default_factory=list)
    replicas: list[Replica] = field(default_factory=list)
    last_failure: str = ""
    """The most recent failure's reason (a condition, an exit code, the runner's last line)."""
    next_step: str = ""
    """What the user would do next, as a command."""
    where: dict[str, str] = field(default_factory=dict)
    """Local paths (logs, checkpoints) or cluster references."""
    queue: str = ""
    """The queue the job names and its priority (``p5-block (production)``); '' = none."""
    admission: str = ""
    """What the queue says: queued | admitted | preempted | evicted | finished | inactive."""
    admission_reason: str = ""
    """Why (Kueue's message: ``waiting for 16 GPUs in p5-block, 8 free``)."""
    capacity_ends_at: str = ""
    """When the job's capacity block scales to zero (ISO 8601 UTC; ``jobs.cluster.capacity``); "" when
    the job's node group has no announced end."""

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


@dataclass
class Submitted:
    """What ``submit`` and ``resume`` created."""

    name: str
    backend: str
    rdzv_id: str
    generation: int
    namespace: str = ""
    follow: str = ""
    """The command that follows it."""

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


class Backend(Protocol):
    """Where jobs run: the cluster's API (``jobs.cluster.backend``) or this machine
    (``jobs.local.backend``). Every argument either takes is named here, so the CLI calls both
    alike; what one cannot do it refuses in one line (``JobsError``, status 2): ``image`` and
    ``from_uri`` of a v2 job on a cluster, ``image`` locally, ``fault`` on a cluster."""

    name: str
    namespace: str
    """The namespace of its jobs ("" locally: one machine's jobs are apart by name)."""

    def submit(
        self,
        job: Any,
        *,
        image: str | None = None,
        replace: bool = False,
        from_uri: str | None = None,
        fault: str | None = None,
    ) -> Submitted: ...

    def list(self) -> list[JobInfo]: ...

    def status(self, name: str) -> JobInfo: ...

    def logs(
        self,
        name: str,
        *,
        rank: int = 0,
        follow: bool = False,
        tail: int | None = None,
        write: Callable[[str], None],
        runner: bool = False,
        wait_timeout_s: float = ...,
    ) -> None: ...

    def follow(
        self, name: str, write: Callable[[str], None], *, wait_timeout_s: float = ...
    ) -> int:
        """Stream the job until it ends: 0 when it succeeded, 1 otherwise, 130 interrupted."""
        ...

    def cancel(self, name: str, *, purge: bool = False) -> str: ...

    def suspend(self, name: str, *, on: bool = True) -> str: ...

    def resume(
        self, name: str, *, from_uri: str | None = None, image: str | None = None
    ) -> Submitted: ...
