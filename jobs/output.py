"""How the job CLI prints: aligned tables and a status page for people, JSON for scripts."""

from __future__ import annotations

import datetime as dt
import json
import time
from collections.abc import Sequence
from typing import Any

from jobs.types import JobInfo, Progress, Submitted


def duration(seconds: float | None) -> str:
    """``42s``, ``7m3s``, ``2h5m``, ``3d4h`` (kubectl's AGE style); ``-`` when unknown."""
    if seconds is None:
        return "-"
    s = int(seconds)
    if s < 60:
        return f"{s}s"
    if s < 3600:
        return f"{s // 60}m{s % 60}s" if s < 600 else f"{s // 60}m"
    if s < 86400:
        return f"{s // 3600}h{(s % 3600) // 60}m"
    return f"{s // 86400}d{(s % 86400) // 3600}h"


def capacity_text(iso: str, now: float | None = None) -> str:
    """``ends in 2d3h (2026-12-17T10:30:00Z) ...`` or ``ended 5m ago (...)`` for a capacity end
    (``jobs.cluster.capacity``); the text as is when it is not a time."""
    try:
        end = dt.datetime.fromisoformat(iso.replace("Z", "+00:00")).timestamp()
    except ValueError:
        return iso
    left = end - (time.time() if now is None else now)
    if left >= 0:
        return f"ends in {duration(left)} ({iso}): the job checkpoints and exits 0 before"
    return f"ended {duration(-left)} ago ({iso}): resume the job on the next block's nodes"


def table(headers: Sequence[str], rows: Sequence[Sequence[Any]]) -> str:
    """Columns padded to their widest cell, two spaces apart (no colour)."""
    cells = [[str(h) for h in headers]] + [[str(c) for c in row] for row in rows]
    widths = [max(len(r[i]) for r in cells) for i in range(len(headers))]
    return "\n".join(
        "  ".join(c.ljust(w) for c, w in zip(r, widths, strict=True)).rstrip() for r in cells
    )


def step_text(p: Progress) -> str:
    if p.step is None:
        return f"-/{p.total}" if p.total else "-"
    return f"{p.step}/{p.total}" if p.total else str(p.step)


def queue_text(j: JobInfo) -> str:
    """``queued: waiting for 16 GPUs in p5-block, 8 free``, ``admitted``, ... ('-': none)."""
    if not j.admission:
        return "-" if not j.queue else "not seen by Kueue yet"
    return f"{j.admission}: {j.admission_reason}" if j.admission_reason else j.admission


def list_table(jobs: Sequence[JobInfo]) -> str:
    """The jobs; a QUEUE column (Kueue's state and reason) when any job names a queue."""
    if not jobs:
        return "no jobs"
    queued = any(j.queue for j in jobs)
    return table(
        ("NAME", "PHASE", "WORKERS", "RESTARTS", "STEP", "AGE") + (("QUEUE",) if queued else ()),
        [
            (
                j.name,
                j.phase,
                f"{j.ready}/{j.wanted}",
                j.restarts,
                step_text(j.progress),
                duration(j.age_s),
            )
            + ((queue_text(j),) if queued else ())
            for j in jobs
        ],
    )


def progress_text(p: Progress) -> str:
    parts = [f"step {step_text(p)}"]
    if p.loss is not None:
        parts.append(f"loss {p.loss:.4f}")
    if p.tokens_per_s is not None:
        parts.append(f"{p.tokens_per_s:,.0f} tokens/s")
    if p.world_size is not None:
        parts.append(f"world {p.world_size}")
    if p.eta_s is not None:
        parts.append(f"ETA {duration(p.eta_s)}")
    if p.goodput is not None:
        parts.append(f"goodput {p.goodput:.2f}")
    return ", ".join(parts)


def status_page(j: JobInfo) -> str:
    where = f"namespace {j.namespace}" if j.namespace else f"stack {j.stack}"
    lines = [
        f"job {j.name} ({j.backend}, {where}, generation {j.generation}, rdzvId {j.rdzv_id})",
        f"phase:     {j.phase}: {j.ready}/{j.wanted} workers running, {j.restarts} restarts, "
        f"age {duration(j.age_s)}",
        f"progress:  {progress_text(j.progress)}",
    ]
    if j.queue:
        lines.append(f"queue:     {j.queue}: {queue_text(j)}")
    if j.capacity_ends_at:
        lines.append(f"capacity:  {capacity_text(j.capacity_ends_at)}")
    if j.conditions:
        lines.append("conditions:")
        cond = table(
            ("TYPE", "STATUS", "REASON", "SINCE", "MESSAGE"),
            [(c.type, c.status, c.reason, c.time, c.message) for c in j.conditions],
        )
        lines += [f"  {line}" for line in cond.splitlines()]
    if j.replicas:
        lines.append("replicas:")
        reps = table(
            ("POD", "STATE", "RESTARTS", "EXIT", "REASON"),
            [
                (r.name, r.state, r.restarts, "-" if r.exit_code is None else r.exit_code, r.reason)
                for r in j.replicas
            ],
        )
        lines += [f"  {line}" for line in reps.splitlines()]
    lines.append(f"last failure: {j.last_failure or '-'}")
    for key, value in j.where.items():
        lines.append(f"{key}: {value}")
    if j.next_step:
        lines.append(f"next: {j.next_step}")
    return "\n".join(lines)


def submitted_text(s: Submitted, verb: str = "submitted") -> str:
    where = f" in namespace {s.namespace}" if s.namespace else ""
    return (
        f"{verb} {s.name} ({s.backend}{where}, generation {s.generation}, rdzvId {s.rdzv_id})\n"
        f"follow: {s.follow}"
    )


def as_json(data: Any) -> str:
    return json.dumps(data, indent=2, sort_keys=False)
