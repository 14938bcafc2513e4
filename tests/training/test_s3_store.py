"""DCP checkpoints in S3, in one process against moto's S3 server on loopback.

If these fail, `--dist_checkpoint_root_folder s3://...` no longer round-trips the model and
optimizer state exactly (synchronous and background saves), a save without its COMPLETE marker
(cut off mid-upload) could be taken by --resume, a re-save of a step could leave a moment with
no complete newest checkpoint, pruning leaves old or torn checkpoints in the bucket, or
`s3://` locations are parsed wrongly. Only AWS itself is replaced (by moto's server).
"""

from __future__ import annotations

import json
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
import torch
from torch import nn

from tests.training.conftest import S3Server
from training import checkpoint
from training.s3 import checkpoints as s3_checkpoints
from training.s3.uri import S3Uri, S3UriError, check_flag


def test_uri_parsing() -> None:
    uri = S3Uri.parse("s3://my-bucket/a/b/")
    assert (uri.bucket, uri.key, uri.prefix, uri.name) == ("my-bucket", "a/b", "a/b/", "b")
    assert str(uri / "step-000003") == "s3://my-bucket/a/b/step-000003"
    assert str(S3Uri.parse("S3://my-bucket")) == "s3://my-bucket"
    assert S3Uri.parse("s3://my-bucket").prefix == ""
    for bad, why in [
        ("s3://", "names no bucket"),
        ("s3:///prefix", "names no bucket"),
        ("s3://ab/x", "3 to 63 characters"),
        ("s3://My_Bucket/x", "lowercase letters"),
        ("s3://192.168.0.1/x", "IP address"),
        ("s3://my..bucket", "adjacent dots"),
        ("s3://my-bucket/a//b", "path segments"),
    ]:
        with pytest.raises(S3UriError, match=why):
            S3Uri.parse(bad)
    assert check_flag("output_dir", "runs/out") == ""
    assert (
        check_flag("output_dir", "s3://")
        == "--output_dir: 's3://' names no bucket (s3://BUCKET/prefix)"
    )


class _Counter:
    """A Stateful beside the model: what the trainer's counters are."""

    def __init__(self) -> None:
        self.step = 0

    def state_dict(self) -> dict[str, Any]:
        return {"step": self.step}

    def load_state_dict(self, sd: dict[str, Any]) -> None:
        self.step = int(sd["step"])


def _state(seed: int) -> tuple[nn.Module, torch.optim.Optimizer, dict[str, Any]]:
    torch.manual_seed(seed)
    model = nn.Sequential(nn.Linear(64, 96), nn.Linear(96, 8))
    opt = torch.optim.AdamW(model.parameters(), lr=1e-2)
    model(torch.randn(4, 64)).square().sum().backward()
    opt.step()  # AdamW state exists
    return model, opt, {"app": checkpoint.ModelOptimizerState(model, opt), "c": _Counter()}


def _objects(s3: S3Server, bucket: str) -> dict[str, int]:
    out: dict[str, int] = {}
    for page in s3.client().get_paginator("list_objects_v2").paginate(Bucket=bucket):
        out.update({o["Key"]: o["Size"] for o in page.get("Contents", [])})
    return out


def test_save_resave_load_and_prune(s3_env: S3Server, tmp_path: Path) -> None:
    bucket = s3_env.bucket("ckpt")
    cfg = SimpleNamespace(
        dist_checkpoint_root_folder=f"s3://{bucket}/runs", dist_checkpoint_folder="job"
    )
    root = checkpoint.root_of(cfg)
    assert root == S3Uri(bucket, "runs/job")
    model, opt, state = _state(0)
    saver = checkpoint.Checkpointer(root, state, use_async=False)
    state["c"].step = 2
    saver.save(2, {"step": 2})
    assert checkpoint.latest_complete(root) == root / "step-000002"

    # a background save, then a re-save of the same step: a new generation, the old one pruned
    async_saver = checkpoint.Checkpointer(root, state, use_async=True)
    state["c"].step = 4
    async_saver.save(4, {"step": 4})
    async_saver.wait()
    assert checkpoint.latest_complete(root) == root / "step-000004"
    state["c"].step = 40
    async_saver.save(4, {"step": 4, "epoch": 1})
    async_saver.wait()
    assert checkpoint.latest_complete(root) == root / "step-000004.1"
    keys = _objects(s3_env, bucket)
    folders = {k.split("/")[2] for k in keys}
    assert folders == {"step-000002", "step-000004.1"}  # KEEP_LAST steps, newest generation

    # a save cut off mid-upload: shards and even DCP's .metadata, but no COMPLETE marker
    torn = "runs/job/step-000009/"
    s3_env.client().put_object(Bucket=bucket, Key=torn + "__0_0.distcp", Body=b"\0" * 100)
    s3_env.client().put_object(Bucket=bucket, Key=torn + ".metadata", Body=b"truncated")
    s3_env.client().create_multipart_upload(Bucket=bucket, Key=torn + "__1_0.distcp")
    assert checkpoint.latest_complete(root) == root / "step-000004.1"

    # load into a different model: every tensor and the counter come back exactly
    model2, opt2, state2 = _state(1)
    latest = checkpoint.latest_complete(root)
    assert latest is not None
    meta = checkpoint.load(latest, state2)
    assert meta["epoch"] == 1 and state2["c"].step == 40
    for a, b in zip(model.state_dict().values(), model2.state_dict().values(), strict=True):
        assert torch.equal(a, b)
    sa, sb = opt.state_dict()["state"], opt2.state_dict()["state"]
    assert sa.keys() == sb.keys()
    for k in sa:
        for name in ("exp_avg", "exp_avg_sq", "step"):
            assert torch.equal(sa[k][name], sb[k][name])

    # bytes: the checkpoint holds the fp32 parameters and both AdamW moments, plus framing
    tensors = sum(t.numel() * 4 for t in model.parameters()) * 3
    ckpt_bytes = sum(v for k, v in keys.items() if "/step-000004.1/" in k and k.endswith(".distcp"))
    assert tensors <= ckpt_bytes < tensors + 64 * 1024

    removed = checkpoint.prune(root, keep=1)
    assert {r.name for r in removed} == {"step-000002", "step-000009"}
    assert {k.split("/")[2] for k in _objects(s3_env, bucket)} == {"step-000004.1"}


def test_next_target_and_generations(s3_env: S3Server) -> None:
    bucket = s3_env.bucket("gens")
    root = S3Uri(bucket, "r")
    s3 = s3_env.client()
    assert s3_checkpoints.next_target(root, 7) == root / "step-000007"
    for name in ("step-000007", "step-000007.1"):  # complete: a manifest its files match
        manifest = {s3_checkpoints.MANIFEST: {".metadata": 1}}
        s3.put_object(Bucket=bucket, Key=f"r/{name}/.metadata", Body=b"x")
        s3.put_object(Bucket=bucket, Key=f"r/{name}/meta.json", Body=json.dumps(manifest))
        s3.put_object(Bucket=bucket, Key=f"r/{name}/{s3_checkpoints.MARKER}", Body=b"x")
    s3.put_object(Bucket=bucket, Key="r/step-000007.2/.metadata", Body=b"x")  # torn
    assert s3_checkpoints.next_target(root, 7) == root / "step-000007.2"
    assert s3_checkpoints.latest_complete(root) == root / "step-000007.1"
    assert [r.name for r in s3_checkpoints.prune(root, keep=2)] == ["step-000007", "step-000007.2"]
