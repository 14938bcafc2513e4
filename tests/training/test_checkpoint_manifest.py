"""A checkpoint with its COMPLETE marker but a shard missing or cut short is never resumed.

If these fail, a resume could load a torn checkpoint: one whose files reached the storage the
new cluster reads out of order (an FSx for Lustre data repository association exports files to
S3 asynchronously and unordered, so `COMPLETE` may arrive before a shard), or whose objects a
lifecycle rule expired one by one. The manifest in meta.json (every file and its size) must
make resume take the step before, and the losses after resuming from it must equal an
uninterrupted run's exactly. Real DCP, on a temporary folder and on moto's S3 server on
loopback (only AWS is replaced); a one-layer model trained in this process.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import torch
from torch import nn
from torch.distributed.checkpoint.stateful import Stateful

from tests.training.conftest import S3Server
from training import checkpoint
from training.s3 import checkpoints as s3_checkpoints
from training.s3.uri import S3Uri

pytestmark = pytest.mark.filterwarnings("ignore:torch.distributed is disabled")

STEPS = 6
TORN = 4  # the newest checkpoint, made torn after the run


class _Counter(Stateful):
    def __init__(self) -> None:
        self.step = 0

    def state_dict(self) -> dict[str, Any]:
        return {"step": self.step}

    def load_state_dict(self, sd: dict[str, Any]) -> None:
        self.step = int(sd["step"])


class _Run:
    """A linear model trained with AdamW on batches drawn from (seed, step)."""

    def __init__(self) -> None:
        torch.manual_seed(0)
        self.model = nn.Linear(16, 4)
        self.opt = torch.optim.AdamW(self.model.parameters(), lr=0.05)
        self.counter = _Counter()
        self.state = {
            "app": checkpoint.ModelOptimizerState(self.model, self.opt),
            "c": self.counter,
        }

    def step(self) -> float:
        g = torch.Generator().manual_seed(1000 + self.counter.step)
        x, y = torch.randn(8, 16, generator=g), torch.randn(8, 4, generator=g)
        loss = nn.functional.mse_loss(self.model(x), y)
        self.opt.zero_grad()
        loss.backward()
        self.opt.step()
        self.counter.step += 1
        return loss.item()


def _train(root: Any, until: int, save: bool) -> dict[int, float]:
    run = _Run()
    saver = checkpoint.Checkpointer(root, run.state, use_async=False) if save else None
    losses = {}
    while run.counter.step < until:
        done = run.counter.step + 1
        losses[done] = run.step()
        if saver is not None:
            saver.save(run.counter.step, {"step": run.counter.step})
    return losses


def _resume_and_finish(root: Any) -> tuple[Any, dict[int, float]]:
    run = _Run()
    latest = checkpoint.resume_point(root, required=True)
    checkpoint.load(latest, run.state)
    losses = {}
    while run.counter.step < STEPS:
        done = run.counter.step + 1
        losses[done] = run.step()
    return latest, losses


def _shard(files: dict[str, int]) -> str:
    return next(n for n in sorted(files) if n.endswith(".distcp"))


@pytest.mark.parametrize("damage", ["missing", "truncated", "no-meta"])
def test_local_torn_checkpoint_resumes_from_the_one_before(tmp_path: Path, damage: str) -> None:
    reference = _train(tmp_path / "ref", STEPS, save=False)
    root = tmp_path / "ckpt" / "job"
    _train(root, TORN, save=True)
    torn = checkpoint.step_dir(root, TORN)
    meta = json.loads((torn / "meta.json").read_text())
    files = meta[s3_checkpoints.MANIFEST]
    assert ".metadata" in files and sum(files.values()) > 4 * 16 * 4  # the weights at least
    assert files == {
        p.name: p.stat().st_size for p in torn.iterdir() if p.name not in ("meta.json", "COMPLETE")
    }
    shard = torn / _shard(files)
    if damage == "missing":
        shard.unlink()
    elif damage == "no-meta":  # the marker and every shard, but meta.json never arrived
        (torn / "meta.json").unlink()
    else:
        shard.write_bytes(shard.read_bytes()[: files[shard.name] // 2])
    assert (torn / checkpoint.MARKER).is_file()

    latest, resumed = _resume_and_finish(root)
    assert latest == checkpoint.step_dir(root, TORN - 1)
    assert list(resumed) == list(range(TORN, STEPS + 1))
    assert resumed == {s: reference[s] for s in resumed}  # bit-identical continuation
    assert torn in checkpoint.prune(root)  # the torn one is not kept either


@pytest.mark.parametrize("damage", ["missing", "truncated", "no-meta"])
def test_s3_torn_checkpoint_resumes_from_the_one_before(
    s3_env: S3Server, tmp_path: Path, damage: str
) -> None:
    reference = _train(tmp_path / "ref", STEPS, save=False)
    bucket = s3_env.bucket("manifest")
    root = S3Uri(bucket, "ckpt/job")
    _train(root, TORN, save=True)
    torn = root / f"step-{TORN:06d}"
    meta = s3_checkpoints.read_meta(torn)
    files = meta[s3_checkpoints.MANIFEST]
    s3 = s3_env.client()
    listed = s3.list_objects_v2(Bucket=bucket, Prefix=torn.prefix)["Contents"]
    on_s3 = {o["Key"][len(torn.prefix) :]: o["Size"] for o in listed}
    assert files == {n: s for n, s in on_s3.items() if n not in ("meta.json", "COMPLETE")}
    key = torn.prefix + _shard(files)
    if damage == "missing":
        s3.delete_object(Bucket=bucket, Key=key)
    elif damage == "no-meta":  # the marker and every shard, but meta.json expired or unsent
        s3.delete_object(Bucket=bucket, Key=torn.prefix + "meta.json")
    else:
        body = s3.get_object(Bucket=bucket, Key=key)["Body"].read()
        s3.put_object(Bucket=bucket, Key=key, Body=body[: len(body) // 2])

    latest, resumed = _resume_and_finish(root)
    assert latest == root / f"step-{TORN - 1:06d}"
    assert resumed == {s: reference[s] for s in range(TORN, STEPS + 1)}
    assert [r.name for r in checkpoint.prune(root)] == [torn.name]


def test_a_checkpoint_without_a_manifest_is_taken_as_before(tmp_path: Path) -> None:
    """Checkpoints saved before manifests existed (no `files` in meta.json) still resume."""
    root = tmp_path / "job"
    _train(root, 2, save=True)
    newest = checkpoint.step_dir(root, 2)
    meta = json.loads((newest / "meta.json").read_text())
    del meta[s3_checkpoints.MANIFEST]
    (newest / "meta.json").write_text(json.dumps(meta))
    assert checkpoint.latest_complete(root) == newest
    assert checkpoint.prune(root) == []
    # ... but only with DCP's last file, `.metadata`, which torch writes after every shard
    (newest / ".metadata").unlink()
    assert checkpoint.latest_complete(root) == checkpoint.step_dir(root, 1)


def test_a_marker_alone_is_not_a_checkpoint(tmp_path: Path) -> None:
    """`COMPLETE` with nothing else (the first file of an unordered export to arrive)."""
    root = tmp_path / "job"
    _train(root, 1, save=True)
    lone = checkpoint.step_dir(root, 5)
    lone.mkdir()
    (lone / checkpoint.MARKER).write_text("")
    assert checkpoint.latest_complete(root) == checkpoint.step_dir(root, 1)
