"""``jobs submit FILE --from s3://...`` reads the revisions the newest complete checkpoint there
records, with the reader a resuming job uses (``training.s3``).

If this fails, a job resubmitted from a bucket on a new cluster resolves its branch again and
may load other base weights than the checkpoint's adapters were trained on (training then
refuses it, ``training.checkpoint.check_revisions``, after the pods started), or an
incomplete newer checkpoint is read instead of the newest complete one.

S3 is moto's server on 127.0.0.1 (``s3_env``, tests/training/conftest.py); the checkpoints are
published with ``training.s3.checkpoints.publish``, as training publishes them.
"""

from __future__ import annotations

import hashlib

from jobs.revisions import recorded
from tests.training.conftest import S3Server
from training.s3.checkpoints import publish
from training.s3.uri import S3Uri


def _sha(text: str) -> str:
    return hashlib.sha1(text.encode()).hexdigest()


def test_the_newest_complete_s3_checkpoint_names_the_commits(s3_env: S3Server) -> None:
    bucket = s3_env.bucket("revisions")
    s3 = s3_env.client()
    root = f"s3://{bucket}/ckpt"
    for step, model in ((2, "older"), (4, "newest")):
        where = S3Uri.parse(root) / "team-a" / "job-1" / f"step-{step:06d}"
        s3.put_object(Bucket=bucket, Key=f"{where.prefix}__0_0.distcp", Body=b"x" * 64)
        publish(where, {"step": step, "revisions": {"model": _sha(model), "dataset": ""}})
    unfinished = S3Uri.parse(root) / "team-a" / "job-1" / "step-000006"  # no marker
    s3.put_object(Bucket=bucket, Key=f"{unfinished.prefix}__0_0.distcp", Body=b"x")

    found, warning = recorded(root, "team-a/job-1")
    assert warning is None and found is not None
    assert dict(found.revisions) == {"model": _sha("newest")}  # "" (default branch) left out
    assert found.where.endswith("team-a/job-1/step-000004")
    assert recorded(root, "team-a/nobody") == (None, None)
