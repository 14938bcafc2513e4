"""Bad S3 inputs stop the run before any step with one line naming the flag.

If these fail, an `s3://` flag without a bucket, a bucket that does not exist, an endpoint
that cannot be reached, a model prefix that holds nothing, or a missing AWS region is found only when the first checkpoint or the
export fails (hours into a run), or is reported as a traceback instead of one line. The S3 API
is moto's server on loopback; only AWS itself is replaced.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.training.conftest import S3Server
from tests.training.helpers import TINY, free_port, merge, run_dirs
from training.finetune import main


def _run(argv: list[str], capsys: pytest.CaptureFixture[str]) -> tuple[int, list[str]]:
    rc = main(argv)
    err = capsys.readouterr().err
    return rc, [line for line in err.splitlines() if line.strip()]


@pytest.mark.parametrize(
    ("flag", "value", "expected"),
    [
        (
            "dist_checkpoint_root_folder",
            "s3://",
            "eks-fsdp train: error: --dist_checkpoint_root_folder: 's3://' names no bucket (s3://BUCKET/prefix)",
        ),
        (
            "output_dir",
            "s3:///runs/x",
            "eks-fsdp train: error: --output_dir: 's3:///runs/x' names no bucket (s3://BUCKET/prefix)",
        ),
        (
            "model_name",
            "s3://Models/llama",
            "eks-fsdp train: error: --model_name: 's3://Models/llama': bucket name 'Models' may hold only "
            "lowercase letters, digits, dots and hyphens, and must begin and end with a letter "
            "or digit",
        ),
    ],
)
def test_s3_uri_without_a_valid_bucket(
    flag: str, value: str, expected: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    rc, lines = _run(merge(TINY, run_dirs(tmp_path, "bad"), [f"--{flag}={value}"]), capsys)
    assert (rc, lines) == (2, [expected])


def test_bucket_that_does_not_exist(
    s3_env: S3Server, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    argv = merge(
        TINY, run_dirs(tmp_path, "x"), ["--dist_checkpoint_root_folder=s3://no-such-bkt/c"]
    )
    rc, lines = _run(argv, capsys)
    assert (rc, lines) == (
        2,
        [
            "eks-fsdp train: error: --dist_checkpoint_root_folder s3://no-such-bkt/c/run: the bucket does not "
            f"exist (NoSuchBucket, HTTP 404) via {s3_env.endpoint}"
        ],
    )
    assert not (tmp_path / "x" / "out" / "metrics.jsonl").exists()  # no step ran


def test_model_prefix_without_objects(
    s3_env: S3Server, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    bucket = s3_env.bucket("models")
    argv = merge(TINY, run_dirs(tmp_path, "x"), [f"--model_name=s3://{bucket}/models/typo"])
    rc, lines = _run(argv, capsys)
    assert (rc, lines) == (
        2,
        [
            f"eks-fsdp train: error: --model_name s3://{bucket}/models/typo: no objects under this prefix"
        ],
    )


def test_endpoint_that_cannot_be_reached(
    s3_env: S3Server,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    bucket = s3_env.bucket("reach")
    closed = f"http://127.0.0.1:{free_port()}"  # nothing listens there
    monkeypatch.setenv("AWS_ENDPOINT_URL_S3", closed)
    monkeypatch.setenv("AWS_MAX_ATTEMPTS", "1")
    argv = merge(TINY, run_dirs(tmp_path, "x"), [f"--output_dir=s3://{bucket}/out"])
    rc, lines = _run(argv, capsys)
    assert rc == 2 and len(lines) == 1, lines
    assert lines[0].startswith(
        f"eks-fsdp train: error: --output_dir s3://{bucket}/out: Could not connect to the "
    )
    assert lines[0].endswith(f"via {closed}")


def test_missing_region(
    s3_env: S3Server,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    bucket = s3_env.bucket("region")
    monkeypatch.delenv("AWS_REGION")
    argv = merge(TINY, run_dirs(tmp_path, "x"), [f"--model_name=s3://{bucket}/models/m"])
    rc, lines = _run(argv, capsys)
    assert (rc, lines) == (
        2,
        [
            f"eks-fsdp train: error: --model_name s3://{bucket}/models/m: no AWS region: set AWS_REGION "
            "(or AWS_DEFAULT_REGION, or region in the profile)"
        ],
    )


def test_write_check_leaves_nothing(
    s3_env: S3Server, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A reachable bucket passes the start check, which leaves no probe object behind."""
    from training.config import parse_args
    from training.s3.check import check_locations

    bucket = s3_env.bucket("probe")
    cfg = parse_args(
        merge(
            TINY,
            run_dirs(tmp_path, "x"),
            [f"--output_dir=s3://{bucket}/o", f"--dist_checkpoint_root_folder=s3://{bucket}/c"],
        )
    )
    check_locations(cfg)
    assert s3_env.client().list_objects_v2(Bucket=bucket)["KeyCount"] == 0
