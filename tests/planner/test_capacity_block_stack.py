"""``new-stack --capacity-type capacity-block`` writes the block's window and price, and the
plan labels where its price comes from.

If this fails, the path the README teaches (``new-stack ... --capacity-type capacity-block``)
gives a group that never scales down before the block ends and jobs that never checkpoint
before it (no ``capacityBlock``, no flag to write one, no warning), or ``new-stack`` and
``plan`` show a capacity block's cost as if it were billed at the on-demand list price (a
block is priced when bought: EC2 user guide, "Capacity Blocks for ML").

Nothing is mocked: the command, the stack loader and the planner run as they are.
"""

from __future__ import annotations

import datetime as dt
from pathlib import Path

import pytest

from infra.config import load_stack_file
from infra.config.nodegroups import capacity_block_warnings
from jobs.schema import load
from planner.cli import main
from planner.estimate import describe, estimate
from planner.predict import BLOCK_PRICE_UNKNOWN, ON_DEMAND, price_basis

ROOT = Path(__file__).resolve().parents[2]
START, END = "2026-12-10T11:30:00Z", "2026-12-17T11:30:00Z"


def _new_stack(tmp_path: Path, *extra: str) -> int:
    (tmp_path / "Pulumi.yaml").write_text((ROOT / "Pulumi.yaml").read_text())
    return main(
        [
            "new-stack",
            "p5-try",
            "--instance",
            "p5.48xlarge",
            "--nodes",
            "16",
            "--reservation",
            "cr-0123456789abcdef0",
            "--capacity-type",
            "capacity-block",
            "--region",
            "us-east-2",
            "--dir",
            str(tmp_path),
            *extra,
        ]
    )


def test_the_window_and_price_flags_reach_the_stack(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """``--block-start/--block-end`` become ``capacityBlock`` (so the program schedules the
    scale-down and publishes the end); ``--price`` becomes ``pricePerHour`` and the cost is
    figured and labelled at it; no warning."""
    code = _new_stack(
        tmp_path,
        "--block-start",
        START,
        "--block-end",
        "2026-12-17T11:30:00+00:00",
        "--price",
        "31.5",
    )
    out, err = capsys.readouterr()
    assert code == 0, err
    (group,) = load_stack_file("p5-try", tmp_path).gpu_node_groups
    window = group.capacity_block
    assert window is not None
    assert (window.start, window.end) == (
        dt.datetime(2026, 12, 10, 11, 30, tzinfo=dt.UTC),
        dt.datetime(2026, 12, 17, 11, 30, tzinfo=dt.UTC),
    )
    assert group.price_per_hour == 31.5 and capacity_block_warnings([group]) == []
    assert "Cost: $504.00/h for the 16 nodes (--price)" in out
    assert "warning" not in err
    stack = (tmp_path / "Pulumi.p5-try.yaml").read_text()
    assert f"--block-start {START} --block-end {END} --price 31.5" in stack
    job = load(tmp_path / "jobs" / "p5-try.yaml", root=tmp_path)
    (plan_line,) = [ln for ln in describe(estimate(job)) if "ETA" in ln]
    assert plan_line.endswith("at $504.00/h, " + plan_line.split("/h, ", 1)[1])
    assert plan_line.endswith("(pricePerHour of p5-try-gpu)"), plan_line


def test_without_a_window_or_price_it_says_so(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """The README's line as it stands: the stack loads, carries a comment where the window
    goes, the command warns on stderr, and the cost says the block's price is unknown."""
    assert _new_stack(tmp_path) == 0
    out, err = capsys.readouterr()
    (group,) = load_stack_file("p5-try", tmp_path).gpu_node_groups
    assert group.capacity_block is None and len(capacity_block_warnings([group])) == 1
    assert err.startswith("warning: No capacityBlock window"), err
    assert "--block-start/--block-end" in err and len(err.strip().splitlines()) == 1
    assert (
        "(the capacity block's price is unknown: on-demand list price shown; pass --price)" in out
    )
    assert "on-demand list price)" not in out.replace("shown; pass --price)", "")
    stack = (tmp_path / "Pulumi.p5-try.yaml").read_text()
    assert "# capacityBlock: {start: <UTC>, end: <UTC>}" in stack
    group_comments = [ln for ln in stack.splitlines() if ln.startswith("      #")]
    assert group_comments and max(map(len, group_comments)) <= 100, group_comments


@pytest.mark.parametrize(
    ("extra", "message"),
    [
        (["--block-start", START], "--block-start: needs --block-end too"),
        (["--block-end", END], "--block-end: needs --block-start too"),
        (
            ["--block-start", "2026-12-10T11:30:00", "--block-end", END],
            "not in UTC (end it with Z)",
        ),
        (["--block-start", "next monday", "--block-end", END], "not a time like"),
        (["--block-start", END, "--block-end", START], "not after --block-start"),
        (["--price", "0"], "--price 0: must be > 0"),
    ],
)
def test_bad_window_or_price_is_one_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], extra: list[str], message: str
) -> None:
    assert _new_stack(tmp_path, *extra) == 2
    err = capsys.readouterr().err
    assert err.startswith("eks-fsdp new-stack: error: ") and message in err, err
    assert len(err.strip().splitlines()) == 1
    assert not list(tmp_path.glob("Pulumi.*.yaml"))


def test_a_window_is_for_capacity_blocks_only(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    argv = ["--capacity-type", "on-demand", "--block-start", START, "--block-end", END]
    assert _new_stack(tmp_path, *argv) == 2
    assert "--block-start: only with --capacity-type capacity-block" in capsys.readouterr().err


def test_plan_labels_the_price_it_uses(capsys: pytest.CaptureFixture[str]) -> None:
    """p5-16 (a capacity block without pricePerHour): the block's price is unknown; p4de-odcr
    (an ODCR, billed at the on-demand rate): the on-demand list price; ``--price``: itself."""
    p5, p4de = load_stack_file("p5-16"), load_stack_file("p4de-odcr")
    assert price_basis(p5.gpu_node_groups[0]) == BLOCK_PRICE_UNKNOWN
    assert price_basis(p4de.gpu_node_groups[0]) == ON_DEMAND
    assert main(["--job", str(ROOT / "jobs" / "examples" / "p5-16.yaml")]) == 0
    out = capsys.readouterr().out
    assert f"per node-hour ({BLOCK_PRICE_UNKNOWN})" in out
    assert next(ln for ln in out.splitlines() if "ETA" in ln).endswith(f"({BLOCK_PRICE_UNKNOWN})")
    assert main(["--stack", "p5-16", "--price", "30"]) == 0
    assert "$/epoch at $30.00 per node-hour (--price)" in capsys.readouterr().out
    assert main(["--stack", "p4de-odcr"]) == 0
    assert f"per node-hour ({ON_DEMAND})" in capsys.readouterr().out
