"""The capacity planner's side of the comparison: ``eks-fsdp plan`` for the sweep's node
counts (its tokens/s, its step times, and its curve before and after calibration)."""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from eks_fsdp_cli.paths import REPO_ROOT


def planner_prediction(
    nodes: Sequence[int], *, stack: str | None = None, args: Sequence[str] = ()
) -> list[dict[str, Any]]:
    """The capacity planner's prediction (``eks-fsdp plan ... --json``). A plan that fits at
    none of the node counts still prints its rows (each ``"fits": false``) and exits 1: the
    prediction is what the comparison needs; a plan with no rows is a failure."""
    cmd = [sys.executable, "-m", "planner", "--nodes", ",".join(map(str, nodes)), "--json"]
    if stack:
        cmd += ["--stack", stack]
    cmd += list(args)
    out = subprocess.run(cmd, cwd=REPO_ROOT, capture_output=True, text=True, timeout=300)
    if out.returncode not in (0, 1) or not out.stdout.strip():
        raise RuntimeError(f"planner failed: {out.stderr.strip().splitlines()[-1:]}")
    rows: list[dict[str, Any]] = json.loads(out.stdout)
    return rows


def planner_before_after(
    nodes: Sequence[int],
    calibration: str | Path,
    *,
    stack: str | None = None,
    args: Sequence[str] = (),
    preflight: Sequence[str | Path] = (),
) -> list[dict[str, Any]]:
    """The planner's tokens/s per node count before and after ``eks-fsdp plan calibrate``.

    ``[{"nodes", "gpus", "before", "after"}]`` (``planner.calibrate.prediction_before_after``);
    ``preflight``: the measured nodes' preflight JSON, whose links replace the calibration's.
    """
    from planner.calibrate import prediction_before_after

    plan_args = ["--nodes", ",".join(map(str, nodes)), *(["--stack", stack] if stack else [])]
    return prediction_before_after(
        [*plan_args, *args], Path(calibration), [Path(p) for p in preflight]
    )


def planner_step_times(nodes: Sequence[int], stack_name: str) -> dict[int, float]:
    """{nodes: seconds per optimizer step}, the planner's prediction for the stack."""
    return {
        int(p["nodes"]): float(p["step_time_s"])
        for p in planner_prediction(nodes, stack=stack_name)
    }
