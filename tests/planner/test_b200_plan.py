"""``eks-fsdp plan`` plans the p6-b200 instance type.

If this fails, the catalog's p6-b200.48xlarge (B200 GPUs) has no planner generation row again
and ``eks-fsdp plan --instance p6-b200.48xlarge`` stops with "no planner assumptions for
GPU model 'B200-180GB'", or a B200 step is predicted no faster than an H100's on the same
job although its HBM and dense bf16 peak are more than twice the H100's.
"""

from __future__ import annotations

import json

import pytest

from planner.assumptions import generation
from planner.cli import main


def _plan(capsys: pytest.CaptureFixture[str], instance: str) -> dict[str, object]:
    argv = ["--model", "llama2-7b", "--instance", instance, "--nodes", "2", "--json"]
    assert main(argv) == 0
    (row,) = json.loads(capsys.readouterr().out)
    return row


def test_b200_row_and_plan(capsys: pytest.CaptureFixture[str]) -> None:
    b200 = generation("B200-180GB")
    assert b200.name == "B200" and b200.hbm_gbytes_per_s == 8000.0
    b = _plan(capsys, "p6-b200.48xlarge")
    h = _plan(capsys, "p5.48xlarge")
    assert b["tokens_per_s_per_gpu"] > 1.5 * h["tokens_per_s_per_gpu"]
    assert b["step_time_s"] < h["step_time_s"]
