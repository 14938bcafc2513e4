"""Whether a job's ETA fits in what is left of its capacity block (a warning line if not).

A capacity-block group runs between the block's start and its scale-down (``capacityBlock``
in the stack file; ``infra.config.nodegroups.CapacityBlockWindow.scale_down_at``); a job on it
stops there with a checkpoint and exit 0 (``training.deadline``) and needs another block to
finish. The planner compares its ETA with the time the block still offers: from now, or from
the block's start when it has not begun, to the scale-down.
"""

from __future__ import annotations

import datetime as dt
from typing import Any


def _duration(seconds: float) -> str:
    if seconds < 5400:
        return f"{seconds / 60:.0f} min"
    if seconds < 2 * 86400:
        return f"{seconds / 3600:.1f} h"
    return f"{seconds / 86400:.1f} d"


def _iso(moment: dt.datetime) -> str:
    return moment.astimezone(dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def capacity_warning(eta_s: float | None, group: Any, now: dt.datetime | None = None) -> str | None:
    """One ``warning:`` line when a job of ``eta_s`` on GPU node group ``group`` would not
    finish before the group's capacity block scales to zero; None when it fits, when the
    ETA is unknown or when the group has no block window."""
    window = getattr(group, "capacity_block", None)
    if eta_s is None or window is None:
        return None
    now = now or dt.datetime.now(dt.UTC)
    end = window.scale_down_at
    begin = max(now, window.start)
    left = (end - begin).total_seconds()
    where = f"capacity block of {group.name} scales to zero at {_iso(end)}"
    if left <= 0:
        return (
            f"warning: the {where}, already past: the job would stop at its first step "
            "(update capacityBlock for the next block)"
        )
    if eta_s <= left:
        return None
    wait = f" (the block starts {_iso(window.start)})" if window.start > now else ""
    return (
        f"warning: ETA {_duration(eta_s)} passes the {where}, {_duration(left)} of block "
        f"left{wait}: the job stops there with a checkpoint (about {left / eta_s:.0%} done) "
        "and finishes on the next block with eks-fsdp jobs resume"
    )


def job_capacity_lines(
    job_file: Any, eta_s: float | None, now: dt.datetime | None = None
) -> list[str]:
    """``capacity_warning`` for a loaded ``jobs.schema.JobSpec`` (its node group on its stack)."""
    group = job_file.platform.node_group(job_file.node_group)
    line = capacity_warning(eta_s, group, now)
    return [line] if line else []
