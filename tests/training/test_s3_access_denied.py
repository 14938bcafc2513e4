"""A checkpoint root the credentials may not write stops the run in one line, before any step.

moto's S3 server on loopback with its access control on (a process of its own: moto keeps the
switch process-wide, ``/moto-api/reset-auth``), an IAM user whose policy allows the bucket but
denies one prefix: what the jobs' Pod Identity role does to keys outside ``training/*``.
moto 5.2.5 evaluates the caller's IAM policies, not bucket policies
(``moto/iam/access_control.py`` ``check_action_permitted``), so the deny is the user's. Nothing
else is replaced.

If this fails, a job pointed at a prefix its role may not write would load the model, build
the optimizer and train until its first checkpoint before failing (or fail with a traceback
instead of one line naming the flag, the bucket and the key).
"""

from __future__ import annotations

import json
import socket
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.training.helpers import TINY, finetune_cmd, free_port, run

BUCKET = "guarded-data"


def _client(endpoint: str, key: str = "admin", secret: str = "admin") -> Any:
    import boto3

    return boto3.session.Session().client(
        "s3",
        endpoint_url=endpoint,
        region_name="us-east-1",
        aws_access_key_id=key,
        aws_secret_access_key=secret,
    )


@pytest.fixture
def guarded(tmp_path: Path) -> Iterator[dict[str, str]]:
    """A moto server whose user ``trainer`` may use the bucket but not ``denied/``; the
    environment of a process running as that user."""
    import boto3

    port = free_port()
    endpoint = f"http://127.0.0.1:{port}"
    log = (tmp_path / "moto.log").open("wb")
    proc = subprocess.Popen(
        [sys.executable, "-m", "moto.server", "-H", "127.0.0.1", "-p", str(port)],
        stdout=log,
        stderr=subprocess.STDOUT,
    )
    try:
        deadline = time.monotonic() + 60
        while True:
            try:
                socket.create_connection(("127.0.0.1", port), timeout=1).close()
                break
            except OSError:
                assert proc.poll() is None and time.monotonic() < deadline, "moto did not start"
                time.sleep(0.1)
        _client(endpoint).create_bucket(Bucket=BUCKET)
        iam = boto3.session.Session().client(
            "iam",
            endpoint_url=endpoint,
            region_name="us-east-1",
            aws_access_key_id="admin",
            aws_secret_access_key="admin",
        )
        iam.create_user(UserName="trainer")
        policy = {
            "Version": "2012-10-17",
            "Statement": [
                {
                    "Effect": "Allow",
                    "Action": "s3:*",
                    "Resource": [f"arn:aws:s3:::{BUCKET}", f"arn:aws:s3:::{BUCKET}/*"],
                },
                {"Effect": "Deny", "Action": "s3:*", "Resource": f"arn:aws:s3:::{BUCKET}/denied/*"},
            ],
        }
        iam.put_user_policy(
            UserName="trainer", PolicyName="data", PolicyDocument=json.dumps(policy)
        )
        key = iam.create_access_key(UserName="trainer")["AccessKey"]
        # from now on every request is authenticated and authorized
        reset = urllib.request.Request(  # a form content type would hide the body from moto
            f"{endpoint}/moto-api/reset-auth", data=b"0", headers={"Content-Type": "text/plain"}
        )
        urllib.request.urlopen(reset, timeout=10).read()
        yield {
            "AWS_ENDPOINT_URL_S3": endpoint,
            "AWS_ACCESS_KEY_ID": key["AccessKeyId"],
            "AWS_SECRET_ACCESS_KEY": key["SecretAccessKey"],
            "AWS_REGION": "us-east-1",
            "AWS_EC2_METADATA_DISABLED": "true",
            "AWS_CONFIG_FILE": "/nonexistent/aws-config",
            "AWS_SHARED_CREDENTIALS_FILE": "/nonexistent/aws-credentials",
            "HF_HOME": str(tmp_path / "hf_home"),
        }
    finally:
        proc.terminate()
        proc.wait(timeout=30)
        log.close()


def test_a_denied_checkpoint_prefix_is_one_line_before_any_step(
    guarded: dict[str, str], tmp_path: Path
) -> None:
    user = _client(
        guarded["AWS_ENDPOINT_URL_S3"],
        guarded["AWS_ACCESS_KEY_ID"],
        guarded["AWS_SECRET_ACCESS_KEY"],
    )
    user.put_object(Bucket=BUCKET, Key="training/x", Body=b"ok")  # the user may write there
    with pytest.raises(Exception, match="AccessDenied"):
        user.put_object(Bucket=BUCKET, Key="denied/x", Body=b"no")

    def finetune(root: str) -> subprocess.CompletedProcess[str]:
        argv = [
            *TINY,
            "--max_train_step=1",
            f"--output_dir={tmp_path / 'out'}",
            f"--dist_checkpoint_root_folder={root}",
            "--dist_checkpoint_folder=job",
        ]
        env = {k: v for k, v in guarded.items()}
        return run(finetune_cmd(0, argv), timeout=300, **env)

    proc = finetune(f"s3://{BUCKET}/denied")
    lines = [line for line in proc.stderr.splitlines() if line.strip()]
    expected = (
        f"--dist_checkpoint_root_folder s3://{BUCKET}/denied/job: access denied for these "
        f"credentials (AccessDenied, HTTP 403) via {guarded['AWS_ENDPOINT_URL_S3']}"
    )
    assert proc.returncode == 2 and len(lines) == 1, proc.stderr[-2000:]
    assert lines[0].endswith(expected), lines[0]
    assert not (tmp_path / "out" / "metrics.jsonl").exists()  # no step was trained
    keys = [o["Key"] for o in user.list_objects_v2(Bucket=BUCKET).get("Contents", [])]
    assert keys == ["training/x"]
