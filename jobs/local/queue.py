"""A local stand-in for Kueue: one queue per node group with a quota in workers, so that
local jobs can be made to wait for each other the way a cluster's jobs wait in Kueue.

Not a reimplementation of Kueue: no cohorts, flavors, priorities or preemption. Jobs are
admitted in submission order, except that a job that fits passes an earlier one that does not
(as Kueue's ``BestEffortFIFO`` queueing strategy does). It is off unless ``submit --local`` runs with
``EKS_FSDP_LOCAL_QUEUE_WORKERS=N``: the job's record then names the queue (its node group,
the name of the LocalQueue it would name on a cluster; ``jobs.queue``) and the quota, and its
runner (``jobs.local.worker``) waits, before it starts any pod, until the workers of the jobs of
the same queue that are running (their runner alive and admitted) plus its own fit the quota.
A suspended or finished job's runner has exited, so its workers count no more. The state a
person reads (``list``, ``status``) is in ``admission.json``: ``queued`` with ``waiting for W
workers in Q, F free``, then ``admitted``, then ``finished`` or ``suspended``.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

QUOTA_ENV = "EKS_FSDP_LOCAL_QUEUE_WORKERS"
ADMISSION = "admission.json"
LOCK = ".queue.lock"
POLL_S = 0.5


def quota_from_env() -> int | None:
    """The quota ``EKS_FSDP_LOCAL_QUEUE_WORKERS`` asks for (None: no local queue)."""
    raw = os.environ.get(QUOTA_ENV, "").strip()
    if not raw:
        return None
    try:
        value = int(raw)
    except ValueError:
        value = 0
    if value < 1:
        from jobs.types import JobsError

        raise JobsError(f"{QUOTA_ENV}={raw!r}: expected a number of workers >= 1", status=2)
    return value


def check_fits(workers: int) -> None:
    """A job of ``workers`` workers can ever be admitted under the quota the environment asks
    for (none: nothing to check); ``JobsError`` (status 2) in one line otherwise, before the
    job is created: it would wait in the queue for ever."""
    quota = quota_from_env()
    if quota is not None and workers > quota:
        from jobs.types import JobsError

        raise JobsError(
            f"workers: {workers} is more than the local queue's quota ({QUOTA_ENV}={quota}): "
            f"the job would wait for ever; lower workers or raise {QUOTA_ENV}",
            status=2,
        )


def read(folder: Path) -> dict[str, Any]:
    try:
        data = json.loads((folder / ADMISSION).read_text(encoding="utf-8"))
    except (OSError, json.JSONDecodeError):
        return {}
    return data if isinstance(data, dict) else {}


def write(folder: Path, state: str, reason: str = "") -> None:
    tmp = folder / (ADMISSION + ".tmp")
    tmp.write_text(json.dumps({"state": state, "reason": reason, "at": time.time()}) + "\n")
    tmp.replace(folder / ADMISSION)


@contextlib.contextmanager
def _locked(root: Path) -> Iterator[None]:
    with (root / LOCK).open("a") as f:
        fcntl.flock(f, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(f, fcntl.LOCK_UN)


def _record(folder: Path) -> dict[str, Any]:
    try:
        data = json.loads((folder / "record.json").read_text(encoding="utf-8"))
    except (OSError, json.JSONDecodeError):
        return {}
    return data if isinstance(data, dict) else {}


def _runs(root: Path, queue: str, alive: Callable[[str], bool], but: str) -> list[Any]:
    """(record, admission state) of the other jobs of ``queue`` whose runner is alive."""
    out = []
    for folder in root.iterdir():
        if folder.name == but or not folder.is_dir():
            continue
        record = _record(folder)
        if (record.get("queue") or {}).get("name") == queue and alive(folder.name):
            out.append((record, read(folder).get("state", "")))
    return out


def _ahead(record: dict[str, Any], others: list[Any], free: int) -> bool:
    """Whether a job submitted earlier, still waiting, fits ``free`` workers: it goes first
    (first in, first out; a head that does not fit lets the next one pass)."""
    mine = float(record.get("submitted_at", 0.0))
    return any(
        state in ("", "queued")
        and float(r.get("submitted_at", 0.0)) < mine
        and int(r.get("workers", 0)) <= free
        for r, state in others
    )


def admit(
    folder: Path,
    *,
    alive: Callable[[str], bool],
    poll_s: float = POLL_S,
    note: Callable[[str], None] = lambda line: None,
) -> None:
    """Block until job ``folder`` is admitted to its record's queue (at once without one)."""
    record = _record(folder)
    queue = record.get("queue") or {}
    if not queue.get("quota"):
        return
    name, quota, workers = str(queue["name"]), int(queue["quota"]), int(record["workers"])
    last = ""
    while True:
        with _locked(folder.parent):
            others = _runs(folder.parent, name, alive, folder.name)
            busy = sum(int(r.get("workers", 0)) for r, state in others if state == "admitted")
            if busy + workers <= quota and not _ahead(record, others, quota - busy):
                write(folder, "admitted")
                note(f"admitted to local queue {name} ({busy + workers}/{quota} workers)")
                return
            plural = "worker" if workers == 1 else "workers"
            reason = f"waiting for {workers} {plural} in {name}, {max(0, quota - busy)} free"
            if reason != last:
                write(folder, "queued", reason)
                note(f"queued: {reason}")
                last = reason
        time.sleep(poll_s)
