"""A job's progress from its metrics: the rows of ``metrics.jsonl`` (written by global rank 0,
``training.metrics``) or the ``eksfsdp_*`` gauges its Prometheus exporter serves
(``training.prometheus``): step, loss, tokens/s, goodput, and an ETA from the step rate."""

from __future__ import annotations

import json
import re
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from jobs.types import Progress

RECENT = 20
"""Rows the step rate (for the ETA) is averaged over."""
_STEPS_LINE = re.compile(r", (\d+) steps\b")
"""training.finetune's start-up line: "... global batch B (...), N steps"."""


def read_rows(path: Path) -> list[dict[str, Any]]:
    """The complete rows of a metrics.jsonl (a partly written last line is skipped)."""
    try:
        text = path.read_text(encoding="utf-8")
    except OSError:
        return []
    rows = []
    for line in text.splitlines():
        if line.endswith("}"):
            try:
                rows.append(json.loads(line))
            except json.JSONDecodeError:
                continue
    return rows


def planned_steps(train_args: Sequence[str], log_text: str = "") -> int | None:
    """The job's total optimizer steps: ``--max_train_step``, else what rank 0 printed."""
    for arg in train_args:
        if arg.startswith("--max_train_step="):
            value = int(arg.split("=", 1)[1])
            if value > 0:
                return value
    found = _STEPS_LINE.findall(log_text)
    return int(found[-1]) if found else None


def from_rows(rows: Sequence[dict[str, Any]], total: int | None) -> Progress:
    """Progress from metrics rows (the last one; the ETA from the recent step times)."""
    if not rows:
        return Progress(total=total)
    last = rows[-1]
    step = int(last.get("step", 0))
    times = [float(r.get("step_time_s", 0.0)) for r in rows[-RECENT:]]
    step_s = sum(times) / len(times) if times else 0.0
    eta = (total - step) * step_s if total is not None and step_s > 0 else None
    return Progress(
        step=step,
        total=total,
        loss=_float(last.get("loss")),
        tokens_per_s=_float(last.get("tokens_per_s")),
        eta_s=max(0.0, eta) if eta is not None else None,
        goodput=_float(last.get("goodput")),
        world_size=int(last["world_size"]) if "world_size" in last else None,
    )


GAUGES = (
    "eksfsdp_step",
    "eksfsdp_loss",
    "eksfsdp_tokens_per_second",
    "eksfsdp_step_time_seconds",
    "eksfsdp_goodput_ratio",
    "eksfsdp_world_size",
)
"""The exporter's gauges progress is read from (``training.prometheus``)."""


def exporter_values(text: str) -> dict[str, float]:
    """The first series of each ``eksfsdp_*`` gauge in an exporter's text exposition, whatever
    its labels: a pod's exporter labels its series with the global rank of its local rank 0
    (``training.prometheus``), and the values are the job's (logged by global rank 0), so the
    rank of the pod that serves them does not matter."""
    values: dict[str, float] = {}
    for line in text.splitlines():
        if not line.startswith("eksfsdp_"):
            continue
        name, _, rest = line.partition("{") if "{" in line else line.partition(" ")
        _, _, value = rest.rpartition("} ") if "}" in rest else ("", "", rest)
        try:
            values.setdefault(name.strip(), float(value.split()[0]))
        except (ValueError, IndexError):
            continue
    return values


def from_gauges(values: dict[str, float], total: int | None) -> Progress:
    """Progress from the gauges' values by name (an exporter's, or the cluster Prometheus')."""
    if "eksfsdp_step" not in values:
        return Progress(total=total)
    step = int(values["eksfsdp_step"])
    step_s = values.get("eksfsdp_step_time_seconds", 0.0)
    eta = (total - step) * step_s if total is not None and step_s > 0 else None
    world = values.get("eksfsdp_world_size")
    return Progress(
        step=step,
        total=total,
        loss=values.get("eksfsdp_loss"),
        tokens_per_s=values.get("eksfsdp_tokens_per_second"),
        eta_s=max(0.0, eta) if eta is not None else None,
        goodput=values.get("eksfsdp_goodput_ratio"),
        world_size=int(world) if world is not None else None,
    )


def _float(value: Any) -> float | None:
    try:
        return float(value)
    except (TypeError, ValueError):
        return None
