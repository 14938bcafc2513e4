"""Checkpoint and resume: a resumed run continues exactly where the saved one stopped.

If these fail, `--resume` no longer continues a run as if it had never stopped (model, optimizer,
scheduler, data position or step counter not restored), no longer works across world sizes
(1 -> 2 and 2 -> 1, DCP resharding), picks a checkpoint that was interrupted mid-write, leaves
stale temporaries behind, or a SIGTERM (preemption, an elastic membership change) no longer
stops a run with an emergency checkpoint and a NON-zero exit (a worker that exits 0 ends an
elastic PyTorchJob as Succeeded: docs/adr/0004-preemption-semantics.md).
"""

from __future__ import annotations

import json
import signal
import subprocess
import time
from pathlib import Path
from typing import Any

import pytest

from tests.training.conftest import RESUME_AT, STEPS
from tests.training.helpers import (
    REPO,
    TINY,
    child_env,
    ckpt_dir,
    finetune_cmd,
    launch,
    max_diff,
    merge,
    metrics,
    run_dirs,
)
from training.checkpoint import MARKER, latest_complete

pytestmark = pytest.mark.slow

TOL = 1e-4


def _ok(results: dict[str, Any], name: str) -> None:
    assert results[name]["rc"] == [0] * len(results[name]["rc"]), results[name]["stderr"]


def test_same_world_size_resume_is_exact(world1: tuple[Path, dict[str, Any]]) -> None:
    base, results = world1
    _ok(results, "resume_w1")
    ref, resumed = metrics(base, "ref"), metrics(base, "resume_w1")
    assert [r["step"] for r in resumed] == list(range(RESUME_AT + 1, STEPS + 1))
    assert max_diff(resumed, ref, "loss") == 0.0  # same layout: bit-identical
    assert max_diff(resumed, ref, "grad_norm") == 0.0


def test_partial_checkpoints_are_ignored(world1: tuple[Path, dict[str, Any]]) -> None:
    base, _ = world1
    root = ckpt_dir(base, "resume_w1")
    # The fixture planted step-000004.tmp (mid-write) and step-000005 (no marker); the resumed
    # run started from step 3 (checked above), pruned the stale temporary, and its own
    # checkpoint is the newest complete one.
    assert not (root / "step-000004.tmp").exists()
    assert not (root / "step-000005" / MARKER).exists()
    assert latest_complete(root) == root / f"step-{STEPS:06d}"


def test_resume_one_to_two_processes(
    world1: tuple[Path, dict[str, Any]], world2: tuple[Path, dict[str, Any]]
) -> None:
    base2, results = world2
    _ok(results, "resume_1to2")
    ref, resumed = metrics(world1[0], "ref"), metrics(base2, "resume_1to2")
    assert [r["step"] for r in resumed] == list(range(RESUME_AT + 1, STEPS + 1))
    assert max_diff(resumed, ref, "loss") < TOL
    assert max_diff(resumed, ref, "grad_norm") < TOL


def test_sigterm_checkpoints_then_resume_two_to_one(tmp_path: Path) -> None:
    """SIGTERM to torchrun: workers finish the step, checkpoint, exit 143 (torchrun then exits
    non-zero too); 1 process continues."""
    name = "preempted"
    argv = merge(
        TINY,
        ["--enable_fsdp", "--batch_size_training=2", "--max_train_step=400"],
        run_dirs(tmp_path, name),
    )
    jsonl = tmp_path / name / "out" / "metrics.jsonl"
    proc = subprocess.Popen(
        finetune_cmd(2, argv),
        cwd=REPO,
        env=child_env(),
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    try:
        deadline = time.monotonic() + 180
        while time.monotonic() < deadline and proc.poll() is None:
            if jsonl.is_file() and len(jsonl.read_text().splitlines()) >= 2:
                break
            time.sleep(0.1)
        assert proc.poll() is None, "run ended before it could be signalled"
        proc.send_signal(signal.SIGTERM)
        out, _ = proc.communicate(timeout=120)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode != 0, out[-3000:]
    latest = latest_complete(ckpt_dir(tmp_path, name))
    assert latest is not None, out[-3000:]
    stopped_at = json.loads((latest / "meta.json").read_text())["step"]
    assert (
        f"SIGTERM: stopped at step {stopped_at}; emergency checkpoint step {stopped_at} written"
    ) in out, out[-3000:]
    assert "exiting 143" in out
    done = metrics(tmp_path, name)
    assert [r["step"] for r in done] == list(range(1, stopped_at + 1))
    assert 2 <= stopped_at < 400

    # One process, global batch unchanged: continue two steps; compare with an uninterrupted run.
    end = stopped_at + 2
    one = ["--batch_size_training=4", f"--max_train_step={end}"]
    jobs = [
        {"kind": "train", "name": "straight", "argv": merge(TINY, one, run_dirs(tmp_path, "s"))},
        {
            "kind": "train",
            "name": "resumed",
            "argv": merge(TINY, one, run_dirs(tmp_path, name), ["--resume"]),
        },
    ]
    results = launch(1, jobs, tmp_path / "launch")
    _ok(results, "straight")
    _ok(results, "resumed")
    straight, resumed = metrics(tmp_path, "s"), metrics(tmp_path, name)
    assert [r["step"] for r in resumed] == list(range(1, end + 1))  # appended to the same file
    assert max_diff(resumed[stopped_at:], straight, "loss") < TOL
    assert max_diff(resumed[stopped_at:], straight, "grad_norm") < TOL
    assert max_diff(resumed[:stopped_at], straight, "loss") < TOL  # the 2-process part, too
    assert resumed[-1]["world_size"] == 1 and resumed[0]["world_size"] == 2


def test_resumed_metrics_drop_steps_past_the_checkpoint(tmp_path: Path) -> None:
    """A crash after step 7 with the last checkpoint at 5: the resumed run logs 6 and 7 again."""
    from training.metrics import JsonlSink, read_jsonl

    path = tmp_path / "metrics.jsonl"
    sink = JsonlSink(path)
    for step in range(1, 8):
        sink.log({"loss": 1.0 / step}, step)
    sink.close()
    sink = JsonlSink(path, resume_step=5)
    sink.log({"loss": 0.5}, 6)
    sink.close()
    assert [r["step"] for r in read_jsonl(path)] == [1, 2, 3, 4, 5, 6]
    JsonlSink(path).close()  # a fresh (not resumed) run starts an empty file
    assert read_jsonl(path) == []


def test_sigterm_during_a_step_stops_at_the_end_of_that_step(tmp_path: Path) -> None:
    """The last of 2 ranks gets SIGTERM in the middle of step 3 (after its backward pass): both
    ranks stop after step 3, not step 4 or 5. The preemption budget
    (workloads.specs.preemption.STEP_ALLOWANCE_S) allows the one step in flight when the signal
    comes; a vote started before the step and read a step later took two more. Runs with
    --checkpoint_every_s too (one vote carries both flags), and the emergency checkpoint is the
    stopped step."""
    argv = merge(
        TINY,
        ["--enable_fsdp", "--batch_size_training=2", "--max_train_step=8"],
        ["--checkpoint_every_s=3600"],
        run_dirs(tmp_path, "late"),
    )
    jobs = [{"kind": "sigterm_during", "name": "late", "argv": argv, "at": 3}]
    ranks = launch(2, jobs, tmp_path / "launch")["late"]["ranks"]
    assert ranks == [{"preempted": True, "stopped_at": 3}] * 2
    assert [r["step"] for r in metrics(tmp_path, "late")] == [1, 2, 3]
    latest = latest_complete(ckpt_dir(tmp_path, "late"))
    assert latest is not None and json.loads((latest / "meta.json").read_text())["step"] == 3
