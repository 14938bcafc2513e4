"""Checkpoints in S3 survive the job: SIGKILL, then --resume from the bucket continues exactly.

If this fails, a 2-process FSDP run with `--dist_checkpoint_root_folder s3://...` (background
DCP saves to moto's S3 server on loopback) no longer resumes with the losses of an
uninterrupted run on local disk, a save cut off mid-upload (shards and DCP's .metadata in the
bucket but no COMPLETE marker) could be taken by --resume, or it is left in the bucket after
the next start. Only AWS itself is replaced (by moto's server).
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import time
from pathlib import Path

import pytest

from tests.training.conftest import S3Server
from tests.training.helpers import (
    REPO,
    TINY,
    child_env,
    finetune_cmd,
    launch,
    max_diff,
    merge,
    metrics,
    run,
)
from training.checkpoint import latest_complete
from training.s3.uri import S3Uri

pytestmark = pytest.mark.slow

STEPS = 16
EVERY = 2


def _kill_tree(pid: int) -> None:
    """SIGKILL `pid` and every descendant (torchrun starts its workers in sessions of their
    own, so killing its process group would leave them training)."""
    children: dict[int, list[int]] = {}
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                ppid = int((entry / "stat").read_text().rsplit(")", 1)[1].split()[1])
            except (OSError, IndexError, ValueError):
                continue
            children.setdefault(ppid, []).append(int(entry.name))
    tree, todo = [], [pid]
    while todo:
        p = todo.pop()
        tree.append(p)
        todo += children.get(p, [])
    for p in tree:
        with contextlib.suppress(ProcessLookupError):
            os.kill(p, signal.SIGKILL)


def _argv(base: Path, name: str, ckpt_root: str) -> list[str]:
    return merge(
        TINY,
        [
            "--enable_fsdp",
            "--batch_size_training=2",
            f"--max_train_step={STEPS}",
            f"--checkpoint_every={EVERY}",
            "--async_checkpoint=True",
            f"--output_dir={base / name / 'out'}",
            f"--dist_checkpoint_root_folder={ckpt_root}",
            "--dist_checkpoint_folder=run",
        ],
    )


def test_sigkill_then_resume_from_s3_equals_uninterrupted_local_run(
    s3_env: S3Server, tmp_path: Path
) -> None:
    bucket = s3_env.bucket("resume")
    ref_argv = _argv(tmp_path, "ref", str(tmp_path / "ref" / "ckpt"))
    results = launch(2, [{"kind": "train", "name": "ref", "argv": ref_argv}], tmp_path / "ref_l")
    assert results["ref"]["rc"] == [0, 0], results["ref"]["stderr"]

    argv = _argv(tmp_path, "s3", f"s3://{bucket}/ckpt")
    root = S3Uri(bucket, "ckpt/run")
    proc = subprocess.Popen(
        finetune_cmd(2, argv),
        cwd=REPO,
        env=child_env(),
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,
    )
    try:
        deadline = time.monotonic() + 240
        while time.monotonic() < deadline and proc.poll() is None:
            if latest_complete(root) is not None:
                break
            time.sleep(0.05)
        assert proc.poll() is None, "run ended before it could be killed"
        _kill_tree(proc.pid)  # torchrun and both workers at once, mid-run: a lost node
        proc.wait(timeout=30)
    finally:
        if proc.poll() is None:
            _kill_tree(proc.pid)
    latest = latest_complete(root)
    assert isinstance(latest, S3Uri)
    meta = json.loads(
        s3_env.client().get_object(Bucket=bucket, Key=f"{latest.key}/meta.json")["Body"].read()
    )
    saved_at = meta["step"]
    assert EVERY <= saved_at < STEPS - 1 and meta["world_size"] == 2

    # a later save cut off mid-upload: every shard and DCP's .metadata, but no COMPLETE marker
    s3 = s3_env.client()
    torn = f"ckpt/run/step-{STEPS - 1:06d}/"  # a step the resumed run does not save
    for key in ("__0_0.distcp", "__1_0.distcp", ".metadata", "meta.json"):
        s3.put_object(Bucket=bucket, Key=torn + key, Body=b"\0" * 64)

    resumed = run(finetune_cmd(2, [*argv, "--resume"]), timeout=600)
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    assert f"resumed from {latest} at step {saved_at}" in resumed.stdout, resumed.stdout[-2000:]
    ref, after = metrics(tmp_path, "ref"), metrics(tmp_path, "s3")
    assert [r["step"] for r in after] == list(range(1, STEPS + 1))
    redone = [r for r in after if r["step"] > saved_at]
    assert max_diff(redone, ref, "loss") == 0.0  # same layout: bit-identical
    assert max_diff(redone, ref, "grad_norm") == 0.0
    left = s3.list_objects_v2(Bucket=bucket, Prefix=torn).get("KeyCount", 0)
    assert left == 0  # pruned at the start of the resumed run
    assert latest_complete(root) == root / f"step-{STEPS:06d}"
