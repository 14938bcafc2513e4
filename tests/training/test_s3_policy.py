"""Every S3 request training makes is one the jobs' own Pod Identity policy allows.

If these fail, checkpoint saves, resumes or the start-up check would be refused on EKS with
the project's least-privilege role (`infra.pod_identity.bucket_policy_document`): for example a
HeadObject of DCP's `.metadata` before it exists answers 403, not 404, to a caller without
ListBucket for that request (S3 API Reference, HeadObject, "Permissions"), and the role may list
only with an `s3:prefix` under its prefix, a condition key a HEAD request does not carry (IAM
User Guide, "IAM JSON policy elements: Condition operators": a condition on a key absent from
the request does not match). moto's S3 server on loopback does not enforce IAM, so two things
stand in for AWS here, and only those: a client wrapper that answers 403 where S3 would for a
missing key, and a small evaluator of the policy's Action / Resource / `StringLike s3:prefix`
that stands in for IAM's. Everything else (DCP, boto3, the S3 HTTP API) is real.
"""

from __future__ import annotations

import json
from fnmatch import fnmatchcase
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
import torch
from botocore.exceptions import ClientError
from torch.distributed.checkpoint.stateful import Stateful

from infra.pod_identity import bucket_policy_document
from tests.training.conftest import S3Server
from training import checkpoint
from training.s3 import client as s3_client
from training.s3 import dcp
from training.s3.check import check_locations

pytestmark = pytest.mark.filterwarnings("ignore:torch.distributed is disabled")

PREFIX = "jobs"  # the Pod Identity prefix of the stack; checkpoints go below it


class _Box(Stateful):
    def __init__(self, value: float) -> None:
        self.t = torch.full((3000,), value)

    def state_dict(self) -> dict[str, torch.Tensor]:
        return {"t": self.t}

    def load_state_dict(self, sd: dict[str, torch.Tensor]) -> None:
        self.t.copy_(sd["t"])


class _NoListForHead:
    """The real boto3 client, except that HeadObject and GetObject of a key that does not
    exist raise what S3 sends a caller whose ListBucket does not cover the request: 403
    AccessDenied (S3 API Reference, HeadObject / GetObject, "Permissions")."""

    def __init__(self, real: Any) -> None:
        self.real = real
        self.refused: list[str] = []

    def __getattr__(self, name: str) -> Any:
        return getattr(self.real, name)

    def _missing(self, bucket: str, key: str) -> bool:
        found = self.real.list_objects_v2(Bucket=bucket, Prefix=key, MaxKeys=1)
        return not any(o["Key"] == key for o in found.get("Contents", []))

    def _guard(self, op: str, kw: dict[str, Any]) -> None:
        if self._missing(kw["Bucket"], kw["Key"]):
            self.refused.append(f"{op} {kw['Key']}")
            raise ClientError(
                {
                    "Error": {"Code": "403", "Message": "Forbidden"},
                    "ResponseMetadata": {"HTTPStatusCode": 403},
                },
                op,
            )

    def head_object(self, **kw: Any) -> Any:
        self._guard("HeadObject", kw)
        return self.real.head_object(**kw)

    def get_object(self, **kw: Any) -> Any:
        self._guard("GetObject", kw)
        return self.real.get_object(**kw)


def test_exists_is_false_for_a_missing_key_when_head_would_be_refused(
    s3_env: S3Server,
) -> None:
    bucket = s3_env.bucket("exists")
    fs = dcp.S3FileSystem()
    fs.s3 = _NoListForHead(s3_env.client())
    assert fs.exists(f"s3://{bucket}/{PREFIX}/ckpt/step-000001/.metadata") is False
    s3_env.client().put_object(Bucket=bucket, Key=f"{PREFIX}/ckpt/a.metadata", Body=b"x")
    assert fs.exists(f"s3://{bucket}/{PREFIX}/ckpt/a.metadata") is True
    assert fs.exists(f"s3://{bucket}/{PREFIX}/ckpt/a") is False  # a prefix, not the key
    assert fs.s3.refused == []


def test_save_and_resume_with_head_of_missing_keys_refused(
    s3_env: S3Server, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A sync and a background save, latest_complete, load and prune, all through a client
    that refuses HEAD/GET of missing keys as S3 does for the jobs' role: every step works."""
    bucket = s3_env.bucket("refused")
    wrapper = _NoListForHead(s3_env.client())
    monkeypatch.setattr(s3_client, "_client", lambda *a: wrapper)
    root = checkpoint.root_of(
        SimpleNamespace(
            dist_checkpoint_root_folder=f"s3://{bucket}/{PREFIX}/ckpt",
            dist_checkpoint_folder="job",
        )
    )
    box = _Box(1.0)
    for step, use_async in ((1, False), (2, True), (3, True)):
        box.t.fill_(float(step))
        saver = checkpoint.Checkpointer(root, {"b": box}, use_async=use_async)
        saver.save(step, {"step": step})
        saver.wait()
    latest = checkpoint.resume_point(root, required=True)
    assert latest == root / "step-000003"
    other = _Box(0.0)
    assert checkpoint.load(latest, {"b": other})["step"] == 3
    assert torch.equal(other.t, torch.full((3000,), 3.0))
    assert wrapper.refused == []


# --- the jobs' policy, evaluated -------------------------------------------------------------

_OBJECT_ACTION = {
    "HeadObject": "s3:GetObject",
    "GetObject": "s3:GetObject",
    "PutObject": "s3:PutObject",
    "CreateMultipartUpload": "s3:PutObject",  # S3 API Reference, CreateMultipartUpload
    "UploadPart": "s3:PutObject",
    "CompleteMultipartUpload": "s3:PutObject",
    "AbortMultipartUpload": "s3:AbortMultipartUpload",
    "DeleteObject": "s3:DeleteObject",
}


def _requests(op: str, params: dict[str, Any]) -> list[tuple[str, str, dict[str, str]]]:
    """(action, resource ARN, condition keys) IAM authorises for one S3 operation (Service
    Authorization Reference, "Actions, resources, and condition keys for Amazon S3")."""
    bucket = params["Bucket"]
    arn = f"arn:aws:s3:::{bucket}"
    if op in ("ListObjectsV2", "ListObjects"):
        ctx = {"s3:prefix": params["Prefix"]} if "Prefix" in params else {}
        return [("s3:ListBucket", arn, ctx)]
    if op == "HeadBucket":
        return [("s3:ListBucket", arn, {})]
    if op == "DeleteObjects":  # s3:DeleteObject for every key named
        return [("s3:DeleteObject", f"{arn}/{o['Key']}", {}) for o in params["Delete"]["Objects"]]
    if op == "CopyObject":
        src = params["CopySource"]  # {"Bucket", "Key"}, or "bucket/key" once serialised
        source = f"{src['Bucket']}/{src['Key']}" if isinstance(src, dict) else src.lstrip("/")
        return [
            ("s3:GetObject", f"arn:aws:s3:::{source}", {}),
            ("s3:PutObject", f"{arn}/{params['Key']}", {}),
        ]
    if op in ("HeadObject", "GetObject") and params.get("_missing"):
        # a 404 instead of a 403 needs ListBucket, asked with no s3:prefix in the request
        return [("s3:GetObject", f"{arn}/{params['Key']}", {}), ("s3:ListBucket", arn, {})]
    if op in _OBJECT_ACTION:
        return [(_OBJECT_ACTION[op], f"{arn}/{params['Key']}", {})]
    raise AssertionError(f"{op}: not an operation this evaluator knows; add it")


def _listed(value: Any) -> list[str]:
    return value if isinstance(value, list) else [value]


def _allowed(policy: dict[str, Any], action: str, resource: str, ctx: dict[str, str]) -> bool:
    """Stands in for IAM: an explicit Deny wins, else some Allow whose Action and Resource
    match (wildcards) and whose every StringLike key is in the request and matches one of its
    patterns; other condition operators are not supported (none is used)."""

    def matches(st: dict[str, Any]) -> bool:
        if not any(fnmatchcase(action, a) for a in _listed(st["Action"])):
            return False
        if not any(fnmatchcase(resource, r) for r in _listed(st["Resource"])):
            return False
        for operator, keys in st.get("Condition", {}).items():
            assert operator == "StringLike", operator
            for key, patterns in keys.items():
                if key not in ctx or not any(fnmatchcase(ctx[key], p) for p in _listed(patterns)):
                    return False
        return True

    hits = [st for st in policy["Statement"] if matches(st)]
    return not any(st["Effect"] == "Deny" for st in hits) and any(
        st["Effect"] == "Allow" for st in hits
    )


def test_the_evaluator_refuses_what_iam_would() -> None:
    """The evaluator is not vacuous: HEAD-style listing without a prefix, keys and listings
    outside the prefix, and actions the role lacks are refused."""
    policy = json.loads(bucket_policy_document("arn:aws:s3:::b", PREFIX, None))
    assert _allowed(policy, "s3:ListBucket", "arn:aws:s3:::b", {"s3:prefix": f"{PREFIX}/x/"})
    assert not _allowed(policy, "s3:ListBucket", "arn:aws:s3:::b", {})
    assert not _allowed(policy, "s3:ListBucket", "arn:aws:s3:::b", {"s3:prefix": "other/"})
    assert not _allowed(policy, "s3:ListBucket", "arn:aws:s3:::b", {"s3:prefix": "jobsX/"})
    assert _allowed(policy, "s3:PutObject", f"arn:aws:s3:::b/{PREFIX}/k", {})
    assert not _allowed(policy, "s3:PutObject", "arn:aws:s3:::b/other/k", {})
    assert not _allowed(policy, "s3:PutBucketPolicy", "arn:aws:s3:::b", {})
    assert [r[0] for r in _requests("HeadBucket", {"Bucket": "b"})] == ["s3:ListBucket"]
    head_missing = _requests("HeadObject", {"Bucket": "b", "Key": f"{PREFIX}/k", "_missing": True})
    assert not all(_allowed(policy, *r) for r in head_missing)


def test_every_request_of_check_save_load_resume_and_prune_is_allowed(
    s3_env: S3Server, tmp_path: Path
) -> None:
    bucket = s3_env.bucket("policy")
    policy = json.loads(bucket_policy_document(f"arn:aws:s3:::{bucket}", PREFIX, None))
    seen: list[tuple[str, dict[str, Any]]] = []

    probe = s3_env.client()  # not watched: asks whether a read's key exists

    def record(params: dict[str, Any], model: Any, **_: Any) -> None:
        params = dict(params)
        if model.name in ("HeadObject", "GetObject"):
            key = params["Key"]
            found = probe.list_objects_v2(Bucket=params["Bucket"], Prefix=key, MaxKeys=1)
            params["_missing"] = not any(o["Key"] == key for o in found.get("Contents", []))
        seen.append((model.name, params))

    real = s3_client.client()  # the one client every training module uses in this process
    real.meta.events.register("before-parameter-build.s3", record)
    try:
        cfg = SimpleNamespace(
            dist_checkpoint_root_folder=f"s3://{bucket}/{PREFIX}/ckpt",
            dist_checkpoint_folder="job",
            output_dir=f"s3://{bucket}/{PREFIX}/out",
            model_name="tiny",
        )
        check_locations(cfg)
        root = checkpoint.root_of(cfg)
        box = _Box(1.0)
        saver = checkpoint.Checkpointer(root, {"b": box}, use_async=True)
        for step in (1, 2, 2, 3):  # a re-save of step 2: a new generation, then pruning
            box.t.fill_(float(step))
            saver.save(step, {"step": step})
            saver.wait()
        checkpoint.prune(root)
        latest = checkpoint.resume_point(root, required=True)
        assert latest is not None
        checkpoint.load(latest, {"b": _Box(0.0)})
    finally:
        real.meta.events.unregister("before-parameter-build.s3", record)
    ops = {op for op, _ in seen}
    assert {"ListObjectsV2", "PutObject", "GetObject", "DeleteObjects"} <= ops, ops
    refused = [
        f"{op} {action} {resource} {ctx}"
        for op, params in seen
        for action, resource, ctx in _requests(op, params)
        if not _allowed(policy, action, resource, ctx)
    ]
    assert refused == []
