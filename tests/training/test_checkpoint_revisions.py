"""A checkpoint records the Hub revisions its run loaded, and a resume from another commit stops.

If this fails, a LoRA resume can put its adapters on other base weights than they were trained
on (the frozen base is not in the checkpoint, DCP loads it non-strictly), a full resume can
continue on other rows, the refusal stops being one line naming the commit to set
(``modelRevision``) or comes after a step ran, or checkpoints made before the revisions were
recorded (no ``revisions`` in meta.json) stop loading.

Real runs: ``python -m training.finetune`` with the tiny preset on the CPU, one process; the
preset loads no Hub files, so the revision flags only travel into meta.json and back, as a Hub
commit pinned by ``jobs submit`` does.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import pytest

from tests.training.helpers import TINY, ckpt_dir, finetune_cmd, merge, metrics, run, run_dirs
from training.checkpoint import REVISIONS, CheckpointError, check_revisions

A = hashlib.sha1(b"model-a").hexdigest()
B = hashlib.sha1(b"model-b").hexdigest()


def _train(base: Path, *flags: str) -> tuple[int, str]:
    argv = merge(TINY, run_dirs(base, "run"), ["--checkpoint_every=2"], list(flags))
    proc = run(finetune_cmd(0, argv), timeout=300)
    return proc.returncode, proc.stderr


def test_resume_from_another_model_commit_stops_before_a_step(tmp_path: Path) -> None:
    """Saved at step 2 with revision A: a resume naming B exits 2 with one line and trains no
    step; a resume naming A (or none: the default branch says nothing) continues to step 4."""
    rc, err = _train(tmp_path, "--max_train_step=2", f"--model_revision={A}")
    assert rc == 0, err[-3000:]
    meta = json.loads((ckpt_dir(tmp_path, "run") / "step-000002" / "meta.json").read_text())
    assert meta[REVISIONS] == {"model": A, "dataset": ""}

    rc, err = _train(tmp_path, "--max_train_step=4", "--resume", f"--model_revision={B}")
    lines = [ln for ln in err.splitlines() if ln.strip()]
    assert rc == 2 and lines == [
        f"eks-fsdp train: error: --resume: checkpoint step-000002 was made with --model_revision "
        f"{A}, this run has {B}; set modelRevision: {A}"
    ], err[-3000:]
    assert [r["step"] for r in metrics(tmp_path, "run")] == [1, 2]

    rc, err = _train(tmp_path, "--max_train_step=4", "--resume", f"--model_revision={A}")
    assert rc == 0, err[-3000:]
    assert [r["step"] for r in metrics(tmp_path, "run")] == [1, 2, 3, 4]
    assert (ckpt_dir(tmp_path, "run") / "step-000004").is_dir()


def test_only_two_named_commits_that_differ_are_refused(tmp_path: Path) -> None:
    """A checkpoint without the key (made before it was recorded) and the default branch on
    either side load; a dataset commit that differs is refused naming datasetRevision."""
    path = tmp_path / "step-000010"
    check_revisions(path, {}, {"model": B, "dataset": ""})
    check_revisions(path, {REVISIONS: {"model": A, "dataset": ""}}, {"model": "", "dataset": A})
    check_revisions(path, {REVISIONS: {"model": "", "dataset": ""}}, {"model": B, "dataset": B})
    with pytest.raises(CheckpointError) as err:
        check_revisions(path, {REVISIONS: {"model": A, "dataset": A}}, {"model": A, "dataset": B})
    assert str(err.value) == (
        f"--resume: checkpoint step-000010 was made with --dataset_revision {A}, this run has "
        f"{B}; set datasetRevision: {A}"
    )
