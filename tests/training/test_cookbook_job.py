"""The seed's llama-cookbook command, as docs/examples/llama-cookbook.yaml holds it, run as a
local job (``eks-fsdp jobs submit --local``: the c10d rendezvous, two torchrun
agents, gloo) on the tiny preset for 3 steps.

Only what a CPU laptop needs is overridden with ``--set`` (stack, device, workers, model, data
size, steps); the file's training flags (its ``args``: llama-cookbook's ``--low_cpu_fsdp``,
``--use_fast_kernels``, ``--pure_bf16``) reach ``training.finetune`` unchanged. If this fails,
the migration page's job file does not run, or those flags are refused or not said in the log.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterator
from pathlib import Path

import pytest

from jobs import cli
from jobs.local.backend import STATE_ENV

pytestmark = [pytest.mark.slow, pytest.mark.integration]

JOB = Path(__file__).resolve().parents[2] / "docs" / "examples" / "llama-cookbook.yaml"
LAPTOP = (
    "workers=2",
    "device=cpu",
    "model=tiny-llama-2l",
    "dataset=samsum_sample",
    "contextLength=128",
    "batchSize=2",
    "maxTrainStep=3",
    "args.max_train_samples=64",
    "args.run_validation=false",
    "args.save_model=false",
    "args.plot_metrics=false",
)


@pytest.fixture
def home(tmp_path: Path) -> Iterator[Path]:
    previous = os.environ.get(STATE_ENV)
    os.environ[STATE_ENV] = str(tmp_path)
    try:
        yield tmp_path
    finally:
        if previous is None:
            os.environ.pop(STATE_ENV, None)
        else:
            os.environ[STATE_ENV] = previous


def test_seed_command_job_runs_locally(home: Path, capsys: pytest.CaptureFixture[str]) -> None:
    argv = ["submit", "--local", str(JOB), "--stack", "dev", "--name", "cookbook-seed"]
    argv += [f"--set={s}" for s in LAPTOP]
    assert cli.main([*argv, "--follow"]) == 0, capsys.readouterr()
    metrics = list(home.rglob("metrics.jsonl"))
    assert len(metrics) == 1
    rows = [json.loads(line) for line in metrics[0].read_text().splitlines()]
    assert [r["step"] for r in rows] == [1, 2, 3]
    assert rows[-1]["world_size"] == 2
    logs = {p.name: p.read_text() for p in home.rglob("*worker-*.log")}
    assert len(logs) == 2
    worker0 = next(text for name, text in logs.items() if "worker-0" in name)
    for flag in ("--low_cpu_fsdp", "--use_fast_kernels"):
        assert worker0.count(f"{flag}: always on here") == 1
