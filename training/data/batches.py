"""Tokenized examples into batches: `collate`, `to_device`, and the distributed batch order.

`DistributedBatches` fixes the global sample order from (seed, epoch) alone, so runs with
different world sizes, micro-batch sizes and accumulation steps see the same global batch per
optimizer step, and a resumed run continues with the very batches an uninterrupted run would have
seen. Every sample is trained exactly once per epoch: the last global batch is completed with
fully masked filler rows (`steps_per_epoch` is the one rule for how many steps that makes).
`EvalBatches` gives every rank the same number of validation batches, each example once.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from typing import Any

import torch

from training.data.examples import IGNORE_INDEX, DataError, Example

__all__ = [
    "FILLER",
    "DistributedBatches",
    "EvalBatches",
    "collate",
    "eval_batches",
    "steps_per_epoch",
    "to_device",
]


def collate(examples: Sequence[Example], pad_id: int) -> dict[str, torch.Tensor]:
    """Right-pad to the longest example: input_ids with pad_id, labels IGNORE_INDEX, mask 0.

    Returns int64 tensors of shape [len(examples), longest].
    """
    if not examples:
        raise ValueError("collate: no examples")
    width = max(len(ex["input_ids"]) for ex in examples)
    fill = {"input_ids": pad_id, "labels": IGNORE_INDEX, "attention_mask": 0}
    return {
        k: torch.tensor([ex[k] + [v] * (width - len(ex[k])) for ex in examples], dtype=torch.long)
        for k, v in fill.items()
    }


def to_device(t: torch.Tensor, device: torch.device) -> torch.Tensor:
    """Copy a host batch tensor to `device` without making the host wait for the device.

    On CUDA a host tensor is copied from pinned memory: an async copy from pageable memory is
    staged by the driver, which "may synchronize with the stream" first (CUDA driver API,
    "API synchronization behavior"), i.e. wait for the previous step's queued kernels. The
    pinned copy returns at once; torch's caching host allocator records the copy's stream
    event and reuses the block only after it (aten/src/ATen/native/cuda/Copy.cu). The extra
    host copy of a batch (kilobytes of token ids) is cheap. Anything else moves as it is.
    """
    if device.type == "cuda" and t.device.type == "cpu":
        t = t.pin_memory()
    return t.to(device, non_blocking=True)


def masked(example: Example) -> Example:
    """A copy of `example` whose every label is IGNORE_INDEX (a filler row)."""
    return {**example, "labels": [IGNORE_INDEX] * len(example["labels"])}


FILLER = -1
"""Sample id of a filler row (a fully masked copy of sample 0) in `DistributedBatches.rank_ids`."""


def steps_per_epoch(num_samples: int, global_batch: int) -> int:
    """Optimizer steps of one epoch: ceil(num_samples / global_batch).

    The one rule (the planner mirrors it): every sample is trained exactly once per epoch, so
    the last global batch holds the `num_samples % global_batch` remaining samples and is
    completed with fully masked filler rows. Those carry no label token; with the loss
    normalised by the global label-token count they change neither the loss nor the gradient,
    whatever the world size. `global_batch` is B x W x A (micro-batch, world size,
    accumulation); 0 samples make 0 steps.
    """
    if global_batch < 1:
        raise ValueError(f"global_batch must be >= 1, got {global_batch}")
    if num_samples < 0:
        raise ValueError(f"num_samples must be >= 0, got {num_samples}")
    return -(-num_samples // global_batch)


class DistributedBatches:
    """This rank's micro-batches, step by step, in an order independent of the world size.

    Global layout: perm = a permutation of range(len(dataset)) from a torch.Generator seeded with
    seed + epoch (the identity without shuffle). With B = micro_batch_size, W = world_size,
    A = grad_accum and G = B*W*A, optimizer step s of an epoch uses perm[s*G:(s+1)*G]; its
    micro-step a uses perm[s*G + a*B*W : s*G + (a+1)*B*W], of which rank r takes [r*B:(r+1)*B].
    So W=1, B=4; W=2, B=2; and W=1, B=2, A=2 all see the same global batch per step. The last
    step of an epoch takes the len(dataset) % G remaining samples and fills the rest of its G
    positions with fully masked copies of sample 0 (`FILLER`): every sample is trained exactly
    once per epoch at any world size, in `steps_per_epoch(len(dataset), G)` steps.

    The position is the number of samples of the current epoch already consumed. It advances
    when a step's micro-batches are handed out (before the yield), so a state_dict() taken after
    the optimizer step for them resumes at the next step. `state_dict()` is rank independent.
    At the end of an epoch the position stays (epoch, everything consumed) and iterating yields
    nothing until set_epoch(epoch + 1); a loop that checkpoints after its end-of-epoch work
    (validation, scheduler step) should call set_epoch(epoch + 1) before saving, so that a resume
    starts the next epoch instead of redoing that work.

    Resuming with a different G (another world size, batch or accumulation): the position is
    carried over in samples (`consumed_samples`). If it is a multiple of the new G, the run
    continues on the new layout's step boundaries as if it had run with the new G from the start
    of the epoch. If not, the rest of that epoch continues from exactly that sample in batches of
    the new G (no sample skipped or repeated; the epoch's final partial batch is dropped), and
    later epochs use the standard layout.
    """

    def __init__(
        self,
        dataset: Sequence[Example],
        *,
        micro_batch_size: int,
        grad_accum: int,
        rank: int,
        world_size: int,
        seed: int,
        shuffle: bool,
        pad_id: int,
        num_workers: int = 0,
    ) -> None:
        if num_workers < 0:
            raise ValueError(f"num_workers must be >= 0, got {num_workers}")
        if micro_batch_size < 1:
            raise ValueError(f"micro_batch_size must be >= 1, got {micro_batch_size}")
        if grad_accum < 1:
            raise ValueError(f"grad_accum must be >= 1, got {grad_accum}")
        if world_size < 1 or not 0 <= rank < world_size:
            raise ValueError(f"need 0 <= rank < world_size, got rank {rank}, world {world_size}")
        self.dataset = dataset
        self.micro_batch_size = micro_batch_size
        self.grad_accum = grad_accum
        self.rank = rank
        self.world_size = world_size
        self.seed = seed
        self.shuffle = shuffle
        self.pad_id = pad_id
        self.num_workers = num_workers
        self.global_batch_size = micro_batch_size * world_size * grad_accum
        if len(dataset) < self.global_batch_size:
            raise DataError(
                f"the training split has {len(dataset)} examples, fewer than one global batch of "
                f"{self.global_batch_size} (--batch_size_training {micro_batch_size} x world size "
                f"{world_size} x --gradient_accumulation_steps {grad_accum}); use a smaller batch "
                "or --context_length, or more data"
            )
        self.epoch = 0
        self.consumed_samples = 0
        self._step_counts = (0, 0)
        self._perm: tuple[int, torch.Tensor] | None = None
        self._filler: Example = self._filler_of(dataset[0])

    def _filler_of(self, first: Example) -> Example:
        """A filler row: a copy of the first sample that carries no label token."""
        return masked(first)

    # -- positions ------------------------------------------------------------------------------
    def steps_per_epoch(self) -> int:
        """Optimizer steps in a full epoch: `steps_per_epoch(len(dataset), B*W*A)` (ceil)."""
        return steps_per_epoch(len(self.dataset), self.global_batch_size)

    @property
    def step_in_epoch(self) -> int:
        """Optimizer steps of the current epoch already handed out (in units of this G)."""
        return -(-self.consumed_samples // self.global_batch_size)

    def remaining_steps(self) -> int:
        """Optimizer steps left in the current epoch."""
        return steps_per_epoch(len(self.dataset) - self.consumed_samples, self.global_batch_size)

    def set_epoch(self, epoch: int) -> None:
        """Move to the start of `epoch`; a no-op if already in it (so a resumed position holds)."""
        if epoch < 0:
            raise ValueError(f"epoch must be >= 0, got {epoch}")
        if epoch != self.epoch:
            self.epoch = epoch
            self.consumed_samples = 0

    def permutation(self, epoch: int | None = None) -> torch.Tensor:
        """The global sample order of `epoch` (default: the current one)."""
        epoch = self.epoch if epoch is None else epoch
        if self._perm is not None and self._perm[0] == epoch:
            return self._perm[1]
        n = len(self.dataset)
        if self.shuffle:
            g = torch.Generator().manual_seed(self.seed + epoch)
            perm = torch.randperm(n, generator=g)
        else:
            perm = torch.arange(n)
        self._perm = (epoch, perm)
        return perm

    def global_indices(self, start: int) -> list[int]:
        """Sample ids of the global batch starting at epoch position `start` (all ranks), G of
        them: past the end of the epoch, `FILLER`."""
        from training.dist import host_only  # the order lives on the host: reading it syncs nothing

        ids = host_only(self.permutation()[start : start + self.global_batch_size]).tolist()
        return ids + [FILLER] * (self.global_batch_size - len(ids))

    def rank_ids(self, start: int) -> list[list[int]]:
        """This rank's sample ids per micro-batch of the step starting at position `start`."""
        B, W = self.micro_batch_size, self.world_size
        batch = self.global_indices(start)
        return [
            batch[a * B * W + self.rank * B : a * B * W + (self.rank + 1) * B]
            for a in range(self.grad_accum)
        ]

    # -- iteration ------------------------------------------------------------------------------
    def _step_starts(self) -> list[int]:
        """Epoch positions of the remaining steps of the current epoch."""
        n, g = len(self.dataset), self.global_batch_size
        return list(range(self.consumed_samples, n, g))

    def __iter__(self) -> Iterator[list[dict[str, torch.Tensor]]]:
        """For each remaining step of the current epoch, this rank's grad_accum micro-batches.

        With num_workers > 0 the micro-batches are collated in that many DataLoader worker
        processes (`worker_batches`), ahead of the training step; the sample ids and the
        position are decided here, so the batches and the Stateful position are the same as with
        num_workers 0 (collation in this process, when the step is handed out).
        """
        starts = self._step_starts()
        ids = [ids for start in starts for ids in self.rank_ids(start)]
        if self.num_workers:
            micro_batches = worker_batches(self, ids, self.num_workers)
        else:
            micro_batches = (self.collate_ids(i) for i in ids)
        for start in starts:
            micro = [next(micro_batches) for _ in range(self.grad_accum)]
            self._step_counts = self._token_counts(self.global_indices(start))
            self.consumed_samples = min(
                self.consumed_samples + self.global_batch_size, len(self.dataset)
            )
            yield micro

    def collate_ids(self, ids: list[int]) -> dict[str, torch.Tensor]:
        """The micro-batch of sample ids `ids` (`FILLER` for a filler row), collated."""
        return collate([self._filler if i == FILLER else self.dataset[i] for i in ids], self.pad_id)

    def step_token_counts(self) -> tuple[int, int]:
        """(label tokens, input tokens) of the global batch last handed out, over ALL ranks.

        What an all-reduce of every rank's counts would give, computed (when the step's
        micro-batches are built) from the dataset order that every rank holds: label tokens are
        the scored ones (`labels[1:] != IGNORE_INDEX` per row, as the loss shifts them), input
        tokens the attention-mask ones (filler rows count their inputs, not their labels). No
        collective and no tensor read in the training step.
        """
        return self._step_counts

    def _token_counts(self, ids: list[int]) -> tuple[int, int]:
        labels = inputs = 0
        for i in ids:
            ex = self._filler if i == FILLER else self.dataset[i]
            row = ex["labels"]
            labels += len(row) - 1 - row[1:].count(IGNORE_INDEX) if row else 0
            inputs += sum(ex["attention_mask"])
        return labels, inputs

    # -- Stateful -------------------------------------------------------------------------------
    def state_dict(self) -> dict[str, int]:
        """{"epoch", "step_in_epoch", "consumed_samples" (in this epoch), "global_batch_size",
        "num_samples"}: the same on every rank."""
        return {
            "epoch": self.epoch,
            "step_in_epoch": self.step_in_epoch,
            "consumed_samples": self.consumed_samples,
            "global_batch_size": self.global_batch_size,
            "num_samples": len(self.dataset),
        }

    def load_state_dict(self, sd: dict[str, Any]) -> None:
        """Continue where `sd` stopped, also with another world size / batch / accumulation.

        Needs "epoch" and either "consumed_samples" or "step_in_epoch" (then in units of
        sd["global_batch_size"], default this G). A different dataset length is an error: the
        sample order would not be the same.
        """
        n = len(self.dataset)
        if "num_samples" in sd and int(sd["num_samples"]) != n:
            raise DataError(
                f"cannot resume: the checkpoint's training split had {int(sd['num_samples'])} "
                f"examples, this one has {n} (dataset, tokenizer or --context_length changed)"
            )
        epoch = int(sd["epoch"])
        if "consumed_samples" in sd:
            consumed = int(sd["consumed_samples"])
        else:
            consumed = int(sd["step_in_epoch"]) * int(
                sd.get("global_batch_size", self.global_batch_size)
            )
        if epoch < 0 or not 0 <= consumed <= n:
            raise DataError(f"cannot resume: bad data position epoch={epoch} consumed={consumed}")
        self.epoch = epoch
        self.consumed_samples = consumed


def _as_is(batch: Any) -> Any:
    """The DataLoader's collate_fn: the dataset item is the collated micro-batch already."""
    return batch


def worker_batches(
    batches: DistributedBatches, ids: list[list[int]], num_workers: int
) -> Iterator[dict[str, torch.Tensor]]:
    """The micro-batches of `ids` (one sample-id list each), in that order, collated by a torch
    DataLoader with `num_workers` worker processes (llama-cookbook's --num_workers_dataloader:
    llama_cookbook/finetuning.py at 0.0.5.post1 gives `num_workers=train_config.
    num_workers_dataloader` to its training and validation DataLoaders).

    The DataLoader's map-style dataset is `batches.collate_ids` and its sampler the id lists
    themselves (batch_size=None: each index goes to the dataset as it is, and collate_fn sees
    the one collated micro-batch; torch/utils/data/dataloader.py `_MapDatasetFetcher`). Workers
    hand their results back in sampler order (`in_order=True`, the default), so the sequence is
    that of collating in this process. Workers are forked with the training split in memory
    (copy on write, Linux's default start method), prefetch `prefetch_factor` (2) micro-batches
    each, and stop with the iterator (at the end of the epoch, or when the loop leaves early).
    """
    from torch.utils.data import DataLoader

    loader = DataLoader(
        _IdsDataset(batches),
        batch_size=None,
        sampler=ids,
        num_workers=num_workers,
        collate_fn=_as_is,
    )
    return iter(loader)


class _IdsDataset(torch.utils.data.Dataset[dict[str, torch.Tensor]]):
    """A map-style dataset indexed by a list of sample ids: the collated micro-batch."""

    def __init__(self, batches: DistributedBatches) -> None:
        self.batches = batches

    def __getitem__(self, ids: list[int]) -> dict[str, torch.Tensor]:  # type: ignore[override]
        return self.batches.collate_ids(ids)


class EvalBatches:
    """This rank's validation batches, in dataset order, sharded like the training layout.

    Iterable any number of times; ``len()`` is the number of batches.

    Batch k covers dataset[k*B*W : (k+1)*B*W]; rank r takes its B-slice [r*B:(r+1)*B]. Every
    rank gets the same number of batches, ceil(len(dataset) / (B*W)), capped at max_steps (0 =
    no cap). The last batch is filled up with fully masked examples, which carry no label
    token, so a token-weighted loss covers every example exactly once, whatever the world size
    (a 128-GPU job can evaluate a split of 40 packed examples). An empty split raises DataError.
    """

    def __init__(
        self,
        dataset: Sequence[Example],
        *,
        batch_size: int,
        rank: int,
        world_size: int,
        pad_id: int,
        max_steps: int = 0,
    ) -> None:
        if batch_size < 1:
            raise ValueError(f"batch_size must be >= 1, got {batch_size}")
        if world_size < 1 or not 0 <= rank < world_size:
            raise ValueError(f"need 0 <= rank < world_size, got rank {rank}, world {world_size}")
        if max_steps < 0:
            raise ValueError(f"max_steps must be >= 0, got {max_steps}")
        if not dataset:
            raise DataError("the validation split is empty; use --run_validation False")
        per_step = batch_size * world_size
        self.dataset = dataset
        self.batch_size = batch_size
        self.rank = rank
        self.world_size = world_size
        self.pad_id = pad_id
        steps = -(-len(dataset) // per_step)  # ceil: every example is evaluated once
        self.steps = min(steps, max_steps) if max_steps else steps
        # Positions past the end of the split hold a copy of example 0 with every label masked:
        # every rank runs the same number of forward passes (FSDP collectives need it) and the
        # token-weighted eval loss is exactly that of the split.
        self._filler: Example = self._filler_of(dataset[0])

    def _filler_of(self, first: Example) -> Example:
        """A filler position: a copy of the first example that carries no label token."""
        return masked(first)

    def __len__(self) -> int:
        return self.steps

    def __iter__(self) -> Iterator[dict[str, torch.Tensor]]:
        B, W = self.batch_size, self.world_size
        n = len(self.dataset)
        for k in range(self.steps):
            start = k * B * W + self.rank * B
            examples = [self.dataset[i] if i < n else self._filler for i in range(start, start + B)]
            yield collate(examples, self.pad_id)


eval_batches = EvalBatches
"""What callers use: ``eval_batches(dataset, batch_size=B, rank=r, world_size=W, ...)``."""
