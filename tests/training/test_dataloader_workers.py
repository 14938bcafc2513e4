"""`--num_workers_dataloader`: batches collated by DataLoader worker processes (training.data.batches).

If these fail, worker processes change what the model trains on: the batches (token ids,
labels, masks) come in another order or differ from those collated in the training process,
the data position saved in a checkpoint no longer matches the batches handed out (a resumed
run would skip or repeat samples), or a 2-process run's losses change with the worker count.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pytest
import torch

from tests.training.helpers import TINY, ckpt_dir, launch, max_diff, merge, metrics, run_dirs
from training.data import DistributedBatches

STEPS = 6
RESUME_AT = 3


def _dataset(n: int) -> list[dict[str, list[int]]]:
    """n examples of different lengths (so padding differs per micro-batch), ids unique per row."""
    out = []
    for i in range(n):
        ids = [1000 + 10 * i + j for j in range(3 + i % 5)]
        labels = [-100] * (i % 3) + ids[i % 3 :]
        out.append({"input_ids": ids, "labels": labels, "attention_mask": [1] * len(ids)})
    return out


class _Traced(DistributedBatches):
    """Records the process that collated each micro-batch (in the batch, under "pid")."""

    def collate_ids(self, ids: list[int]) -> dict[str, torch.Tensor]:
        return {**super().collate_ids(ids), "pid": torch.tensor(os.getpid())}


def _batches(ds: list[dict[str, list[int]]], workers: int, **kw: int) -> DistributedBatches:
    args: dict[str, Any] = {"micro_batch_size": 2, "grad_accum": 2, "rank": 0, "world_size": 1}
    args.update(kw)
    return _Traced(ds, seed=3, shuffle=True, pad_id=7, num_workers=workers, **args)


def _walk(b: DistributedBatches, epochs: int = 2) -> list[tuple[str, list[list[int]]]]:
    """Every micro-batch of `epochs` epochs as (key, rows) for each tensor, with the position."""
    seen: list[tuple[str, list[list[int]]]] = []
    for epoch in range(epochs):
        b.set_epoch(epoch)
        for micro_batches in b:
            for mb in micro_batches:
                pid = int(mb.pop("pid"))
                assert (pid == os.getpid()) == (b.num_workers == 0), "collated in the wrong process"
                assert all(t.dtype == torch.long for t in mb.values())
                seen.extend((k, mb[k].tolist()) for k in ("input_ids", "labels", "attention_mask"))
            seen.append(("position", [[b.epoch, b.consumed_samples, *b.step_token_counts()]]))
    return seen


@pytest.mark.parametrize(("world", "rank"), [(1, 0), (2, 1)])
def test_two_workers_give_the_batches_of_none(world: int, rank: int) -> None:
    """The token ids, labels and masks of every micro-batch, two epochs, a last step completed
    with filler rows (23 samples, global batch 4·world): identical with 0 and 2 workers, and so
    are the position and token counts after each step."""
    ds = _dataset(23)
    ref = _walk(_batches(ds, 0, world_size=world, rank=rank))
    got = _walk(_batches(ds, 2, world_size=world, rank=rank))
    assert len(ref) > 40
    assert got == ref


def test_resumed_position_gives_the_same_batches_with_workers() -> None:
    """A loop that leaves after 2 steps (its workers stopped mid-epoch), then a fresh iterator
    loaded from its state_dict with 2 workers: the rest of the epoch is what an uninterrupted
    in-process iterator hands out."""
    ds = _dataset(30)
    ref = [[mb["input_ids"].tolist() for mb in step] for step in _batches(ds, 0)]
    first = _batches(ds, 2)
    head = []
    for step in first:
        head.append([mb["input_ids"].tolist() for mb in step])
        if len(head) == 2:
            break
    resumed = _batches(ds, 2)
    resumed.load_state_dict(first.state_dict())
    tail = [[mb["input_ids"].tolist() for mb in step] for step in resumed]
    assert head + tail == ref
    assert len(tail) == len(ref) - 2


def test_negative_workers_are_refused() -> None:
    with pytest.raises(ValueError, match="num_workers must be >= 0"):
        _batches(_dataset(8), -1)


def _job(base: Path, name: str, workers: int, *extra: str) -> dict[str, Any]:
    argv = merge(
        TINY,
        [
            "--enable_fsdp",
            "--batch_size_training=2",
            f"--max_train_step={STEPS}",
            f"--num_workers_dataloader={workers}",
        ],
        run_dirs(base, name),
        list(extra),
    )
    return {"kind": "train", "name": name, "argv": argv}


def test_two_process_losses_equal_with_and_without_workers(tmp_path: Path) -> None:
    """Two processes, fp32: the losses with --num_workers_dataloader 2 equal those with 0 step
    for step; a run with workers that resumes from the checkpoint of step 3 (what a run killed
    after it leaves on disk, copied as such) continues with the same losses."""
    jobs = [
        _job(tmp_path, "w0", 0),
        _job(tmp_path, "w2", 2, f"--checkpoint_every={RESUME_AT}", "--async_checkpoint=False"),
        {
            "kind": "copy_checkpoint",
            "src": str(ckpt_dir(tmp_path, "w2")),
            "dst": str(ckpt_dir(tmp_path, "w2_resumed")),
            "step": RESUME_AT,
        },
        _job(tmp_path, "w2_resumed", 2, "--resume"),
    ]
    results = launch(2, jobs, tmp_path)
    for name in ("w0", "w2", "w2_resumed"):
        assert results[name]["rc"] == [0, 0], results[name]["stderr"]
    w0, w2 = metrics(tmp_path, "w0"), metrics(tmp_path, "w2")
    resumed = metrics(tmp_path, "w2_resumed")
    assert [r["step"] for r in w2] == [r["step"] for r in w0] == list(range(1, STEPS + 1))
    assert max_diff(w2, w0, "loss") == 0.0
    assert [r["step"] for r in resumed if r["step"] > RESUME_AT] == [4, 5, 6]
    assert max_diff(resumed, w0, "loss") == 0.0
