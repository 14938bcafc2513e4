"""The planner warns when a job's ETA passes the end of its capacity block.

If these fail, ``eks-fsdp plan --job`` / ``eks-fsdp jobs submit`` would let a job start on
a capacity block it cannot finish in without saying so (it then stops at the block's
scale-down with a checkpoint and needs the next block), warn about a job that fits, count the
time before a future block's start as usable, or stay silent on a block already past. The
node groups are parsed from a real stack file with ``capacityBlock`` (``infra.config``).
"""

from __future__ import annotations

import datetime as dt
from pathlib import Path

import yaml

from infra.config.sources import load_stack_file
from planner.capacity import capacity_warning, job_capacity_lines

REPO = Path(__file__).resolve().parents[2]
START = dt.datetime(2026, 12, 10, 11, 30, tzinfo=dt.UTC)
END = dt.datetime(2026, 12, 17, 11, 30, tzinfo=dt.UTC)


def _group(tmp_path: Path):  # type: ignore[no-untyped-def]
    """The p5-16 stack's GPU group with a 7-day block (scale-down 60 min before its end)."""
    raw = yaml.safe_load((REPO / "Pulumi.p5-16.yaml").read_text())
    groups = raw["config"]["eks-fsdp:gpuNodeGroups"]
    groups[0]["capacityBlock"] = {
        "start": START.strftime("%Y-%m-%dT%H:%M:%SZ"),
        "end": END.strftime("%Y-%m-%dT%H:%M:%SZ"),
    }
    (tmp_path / "Pulumi.yaml").write_text((REPO / "Pulumi.yaml").read_text())
    (tmp_path / "Pulumi.p5-16.yaml").write_text(yaml.safe_dump(raw))
    return load_stack_file("p5-16", tmp_path).gpu_node_groups[0]


def test_eta_inside_the_block_is_quiet_past_it_warns(tmp_path: Path) -> None:
    group = _group(tmp_path)
    now = START + dt.timedelta(days=6, hours=9)  # 14 h before the scale-down at 10:30
    left_s = (END - dt.timedelta(minutes=60) - now).total_seconds()
    assert left_s == 14 * 3600
    assert capacity_warning(13 * 3600, group, now) is None
    line = capacity_warning(20 * 3600, group, now)
    assert line == (
        "warning: ETA 20.0 h passes the capacity block of p5-block scales to zero at "
        "2026-12-17T10:30:00Z, 14.0 h of block left: the job stops there with a checkpoint "
        "(about 70% done) and finishes on the next block with eks-fsdp jobs resume"
    ).replace("p5-block", group.name)


def test_a_future_block_counts_from_its_start(tmp_path: Path) -> None:
    group = _group(tmp_path)
    now = START - dt.timedelta(days=3)
    block_s = (END - dt.timedelta(minutes=60) - START).total_seconds()
    assert capacity_warning(block_s - 1, group, now) is None  # the 3 days before do not count
    line = capacity_warning(block_s + 3600, group, now)
    assert (
        line is not None and "7.0 d of block left (the block starts 2026-12-10T11:30:00Z)" in line
    )


def test_a_past_block_and_unknowns(tmp_path: Path) -> None:
    group = _group(tmp_path)
    line = capacity_warning(60.0, group, END)
    assert line is not None and "already past" in line
    assert capacity_warning(None, group, START) is None  # the planner knows no ETA
    plain = load_stack_file("p4de-odcr", REPO).gpu_node_groups[0]
    assert capacity_warning(1e9, plain, START) is None  # no block: no end


def test_job_file_lines(tmp_path: Path) -> None:
    """The p5-16 example job file, read with its stack (with the block) as ``jobs`` reads it."""
    from jobs.schema import load

    _group(tmp_path)
    job = load(REPO / "jobs" / "examples" / "p5-16.yaml", root=tmp_path)
    now = START + dt.timedelta(days=6, hours=9)
    assert job_capacity_lines(job, 13 * 3600, now) == []
    (line,) = job_capacity_lines(job, 15 * 3600, now)
    assert line.startswith("warning: ETA 15.0 h passes the capacity block of ")


def test_the_job_estimate_prints_the_warning(tmp_path: Path) -> None:
    """``planner.estimate.lines`` (what ``eks-fsdp jobs submit`` and ``planner --job`` print)
    ends with the warning when the block scales down a minute from now."""
    from jobs.schema import load
    from planner.estimate import lines

    now = dt.datetime.now(dt.UTC).replace(microsecond=0)
    raw = yaml.safe_load((REPO / "Pulumi.p5-16.yaml").read_text())
    raw["config"]["eks-fsdp:gpuNodeGroups"][0]["capacityBlock"] = {
        "start": (now - dt.timedelta(days=1)).strftime("%Y-%m-%dT%H:%M:%SZ"),
        "end": (now + dt.timedelta(minutes=61)).strftime("%Y-%m-%dT%H:%M:%SZ"),
    }
    (tmp_path / "Pulumi.yaml").write_text((REPO / "Pulumi.yaml").read_text())
    (tmp_path / "Pulumi.p5-16.yaml").write_text(yaml.safe_dump(raw))
    out = lines(load(REPO / "jobs" / "examples" / "p5-16.yaml", root=tmp_path))
    assert out[0].startswith("plan: ")
    assert out[-1].startswith("warning: ETA ") and "passes the capacity block of" in out[-1]
