"""`--output_dir s3://...`: the metrics reach the bucket with every checkpoint.

If this fails, a run killed without SIGTERM (a lost node, SIGKILL) leaves its metrics only in
the pod's staging folder, gone with the pod, although its checkpoints are in S3: the resumed
run's metrics.jsonl would then lack the steps before the kill. One process (no torchrun), a
tiny model, background checkpoints to moto's S3 server on loopback; only AWS is replaced.
"""

from __future__ import annotations

import json
import subprocess
import time
from pathlib import Path

from tests.training.conftest import S3Server
from tests.training.helpers import REPO, TINY, child_env, finetune_cmd, merge
from training.checkpoint import latest_complete
from training.s3.uri import S3Uri


def test_metrics_are_in_s3_with_each_checkpoint_before_any_end(
    s3_env: S3Server, tmp_path: Path
) -> None:
    bucket = s3_env.bucket("outputs")
    argv = merge(
        TINY,
        [
            "--batch_size_training=2",
            "--max_train_step=400",  # far more than it runs: killed after a checkpoint
            "--checkpoint_every=3",
            "--async_checkpoint=True",
            f"--output_dir=s3://{bucket}/out",
            f"--dist_checkpoint_root_folder=s3://{bucket}/ckpt",
            "--dist_checkpoint_folder=run",
        ],
    )
    root = S3Uri(bucket, "ckpt/run")
    log = tmp_path / "stderr.log"
    proc = subprocess.Popen(
        finetune_cmd(0, argv),
        cwd=REPO,
        env=child_env(),
        stdout=subprocess.DEVNULL,
        stderr=log.open("w"),
    )
    try:
        deadline = time.monotonic() + 240
        latest = None
        while time.monotonic() < deadline and proc.poll() is None:
            latest = latest_complete(root)
            if latest is not None and latest.name >= "step-000006":
                break
            time.sleep(0.1)
        assert proc.poll() is None, log.read_text()[-3000:]
    finally:
        proc.kill()  # SIGKILL: no SIGTERM handler, no final upload
        proc.wait(timeout=60)
    assert latest is not None
    saved = json.loads(
        s3_env.client().get_object(Bucket=bucket, Key=f"{latest.key}/meta.json")["Body"].read()
    )["step"]
    body = s3_env.client().get_object(Bucket=bucket, Key="out/metrics.jsonl")["Body"].read()
    steps = [json.loads(line)["step"] for line in body.decode().splitlines() if line.strip()]
    assert steps[:saved] == list(range(1, saved + 1)), (saved, steps)
