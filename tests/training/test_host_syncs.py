"""A training step that does not log makes no host sync; a logging step makes one.

If this fails, something in the step or the loop around it reads a tensor on the host again
(`.item()`, `.tolist()`, `float()`, `int()`, `bool()`, `torch.cuda.synchronize`, or an op that
waits for the data: a scalar read in C++, `nonzero`, a boolean mask, a device -> cpu copy), which on a
GPU stalls the CPU until the device has caught up: a global label count all-reduced and read
back, the loss or grad norm converted every step, a blocking stop-flag or --checkpoint_every_s
vote (every cluster job sets it), or Hugging Face's
mask inspection (`find_packed_sequence_indices` / `_ignore_causal_mask_sdpa`) back in the
forward. Counted on CPU with gloo, 2 processes, gradient accumulation 2, --log_every 3: the
conversions are the same calls as on CUDA (training.syncs). Logging steps fetch the held
figures in one copy. The token counts computed locally must equal what an all-reduce of each
rank's micro-batches gives (filler rows included). The rows of a log interval carry the
interval's throughput (tokens over the steps' time plus the fetch's wait), not each quiet
step's launch time. Python's garbage collector runs only every --gc_freq steps (as torchtitan),
never at a rank's own moment. Validation reads the device once, not once per eval batch, and
its loss is still the mean next-token cross-entropy over the scored tokens.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import torch

from tests.training.conftest import STEPS
from tests.training.helpers import metrics

pytestmark = pytest.mark.slow


def test_no_sync_on_steps_that_do_not_log(world2: tuple[Path, dict[str, Any]]) -> None:
    base, results = world2
    r = results["syncs"]
    per_step = {int(k): v for k, v in r["per_step"].items()}
    assert sorted(per_step) == list(range(1, STEPS + 1))
    quiet = [s for s in per_step if s % r["log_every"]]
    assert quiet == [1, 2, 4, 5]
    for step in quiet:
        assert per_step[step] == [], f"step {step}: {per_step[step]}"
    for step in (3, 6):  # logging steps: the one fetch of the held loss / grad-norm figures
        assert len(per_step[step]) == 1 and per_step[step][0].startswith("tolist"), per_step[step]
    rows = metrics(base, "syncs")
    assert [row["step"] for row in rows] == list(range(1, STEPS + 1))  # every step is logged
    assert all(isinstance(row["loss"], float) and row["loss"] > 0 for row in rows)
    # Throughput over the log interval: a quiet step's own wall time on a GPU is only its
    # launches, so each held row gets the interval's step time and tokens/s.
    for interval in (rows[0:3], rows[3:6]):
        assert len({(r["step_time_s"], r["tokens_per_s"]) for r in interval}) == 1, interval
        tokens = sum(r["tokens"] for r in interval)
        r = interval[0]
        assert r["tokens_per_s"] * r["step_time_s"] * len(interval) == pytest.approx(tokens)


def test_python_gc_runs_only_every_gc_freq_steps(world2: tuple[Path, dict[str, Any]]) -> None:
    """--gc_freq=2: automatic collection is off while training, so on every rank Python's
    collector runs at steps 2, 4 and 6 only, once, on the young generations (torchtitan's
    GarbageCollection): no rank stops mid-step for a full collection its peers then wait for.
    Recorded per step by ``gc.callbacks`` (it also sees any collection torch would make)."""
    _, results = world2
    per_rank = results["syncs"]["gc_per_step"]
    assert len(per_rank) == 2
    for rank, steps in enumerate(per_rank):
        per_step = {int(k): v for k, v in steps.items()}
        assert per_step == {1: [], 2: [1], 3: [], 4: [1], 5: [], 6: [1]}, (rank, per_step)


def test_local_token_counts_equal_the_all_reduce() -> None:
    """Both ranks of W=2, A=2, B=1 over 7 samples (the last step has a filler row)."""
    from training.data import IGNORE_INDEX, DistributedBatches

    g = torch.Generator().manual_seed(0)
    dataset = []
    for n in (5, 9, 3, 12, 7, 4, 8):
        labels = torch.randint(0, 50, (n,), generator=g).tolist()
        labels[: n // 3] = [IGNORE_INDEX] * (n // 3)
        dataset.append({"input_ids": list(range(n)), "labels": labels, "attention_mask": [1] * n})
    ranks = [
        DistributedBatches(
            dataset,
            micro_batch_size=1,
            grad_accum=2,
            rank=r,
            world_size=2,
            seed=3,
            shuffle=True,
            pad_id=0,
        )
        for r in range(2)
    ]
    steps = 0
    for per_rank in zip(*ranks, strict=True):
        label_tokens = sum(
            int((mb["labels"][:, 1:] != IGNORE_INDEX).sum()) for mbs in per_rank for mb in mbs
        )
        input_tokens = sum(int(mb["attention_mask"].sum()) for mbs in per_rank for mb in mbs)
        counts = (label_tokens, input_tokens)
        assert ranks[0].step_token_counts() == ranks[1].step_token_counts() == counts
        steps += 1
    assert steps == 2


def test_counter_sees_every_kind_of_sync() -> None:
    """training.syncs counts what torch.cuda.set_sync_debug_mode would flag on a GPU, not only
    Python conversions: scalar reads from C++ (aten::_local_scalar_dense), ops whose output size
    depends on the data, device -> cpu copies (a meta tensor stands in for a device: the copy
    is counted before it fails), stream and event synchronize. Conversions count once, a
    repeat_interleave with output_size and a host_only vote not at all."""
    from training.dist import host_only
    from training.syncs import count_host_syncs

    x = torch.tensor([1.0, -2.0, 3.0])
    with count_host_syncs() as seen:
        x.sum().item()
        x[x > 0]
        torch.nonzero(x)
        torch.masked_select(x, x > 0)
        torch.unique(x)
        torch.repeat_interleave(torch.tensor([1, 2]))
        torch.repeat_interleave(torch.tensor([1, 2]), output_size=3)
        host_only(torch.tensor([1.0, 0.0])).tolist()
        torch.ops.aten._local_scalar_dense(x[0])
        with pytest.raises((NotImplementedError, RuntimeError)):
            torch.empty(2, device="meta").to("cpu")
        with pytest.raises((NotImplementedError, RuntimeError)):
            torch.empty(2).copy_(torch.empty(2, device="meta"))
        for cls in (torch.cuda.Stream, torch.cuda.Event):
            with pytest.raises((AttributeError, RuntimeError, TypeError)):
                # no CUDA here: counted, then the real call fails (on purpose not a Stream/Event)
                cls.synchronize(object())  # type: ignore[arg-type]
        x + 1
    kinds = [c.split(" at ")[0] for c in seen.calls]
    assert kinds == [
        "item",
        "aten::index (boolean mask)",
        "aten::nonzero",
        "aten::masked_select",
        "aten::_unique2",
        "aten::repeat_interleave",
        "aten::_local_scalar_dense",
        "aten::_to_copy (device -> cpu)",
        "aten::copy_ (device -> cpu)",
        "torch.cuda.Stream.synchronize",
        "torch.cuda.Event.synchronize",
    ], seen.calls


def test_validation_reads_the_device_once(tmp_path: Path) -> None:
    """`Trainer.validate` in one process (a world of one, in this process): one host read for
    the whole eval split (it used to be one per batch, plus a label count per batch), and the
    loss equals a plain `F.cross_entropy` over every eval batch's shifted labels, summed and
    divided by the scored tokens."""
    import torch.nn.functional as F

    from tests.training.helpers import TINY, merge
    from training.config import parse_args
    from training.data import IGNORE_INDEX
    from training.dist import distributed
    from training.finetune import Trainer
    from training.syncs import count_host_syncs

    argv = merge(
        TINY,
        [
            "--run_validation=True",
            "--max_eval_step=3",
            f"--output_dir={tmp_path / 'out'}",
            f"--dist_checkpoint_root_folder={tmp_path / 'ckpt'}",
        ],
    )
    with distributed() as env:
        trainer = Trainer(parse_args(argv), env)
        assert trainer.eval_data is not None
        with count_host_syncs() as seen:
            loss = trainer.validate()
        total, count = 0.0, 0
        with torch.no_grad():
            for mb in trainer.eval_data:
                logits = trainer.model(input_ids=mb["input_ids"]).logits.double()
                labels = mb["labels"][:, 1:]
                total += F.cross_entropy(
                    logits[:, :-1].flatten(0, 1),
                    labels.flatten(),
                    ignore_index=IGNORE_INDEX,
                    reduction="sum",
                ).item()
                count += int((labels != IGNORE_INDEX).sum())
    assert seen.n == 1, seen.calls
    assert count > 0 and abs(loss - total / count) < 1e-5, (loss, total / count)
