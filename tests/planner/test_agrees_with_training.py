"""The planner mirrors rules of the training package that it cannot import (no torch).

If this fails, ``eks-fsdp plan`` counts a different number of steps per epoch than the
training package runs (its epoch time and cost would be off by the last, filler-completed
batch), or sizes the chunked loss's temporaries with chunk rules the loss no longer uses.
Both sides are the real code: ``training.data.steps_per_epoch`` and ``training.loss``.
"""

from __future__ import annotations

import itertools

import pytest

from planner.assumptions import DEFAULT
from planner.epoch import steps_per_epoch as planner_steps
from planner.memory import loss_chunk_bytes


@pytest.mark.parametrize(
    ("samples", "world", "batch", "accum"),
    list(itertools.product([0, 1, 37, 683, 14732], [1, 2, 8, 128], [1, 3], [1, 4])),
)
def test_steps_per_epoch_is_the_training_package_rule(
    samples: int, world: int, batch: int, accum: int
) -> None:
    from training.data import steps_per_epoch

    steps, processed = planner_steps(samples, world, batch, accum, "fill")
    assert steps == steps_per_epoch(samples, batch * world * accum)
    assert processed >= samples  # every sample once, filler rows complete the last batch


@pytest.mark.parametrize(
    ("vocab", "tokens"), [(32000, 12288), (128256, 12288), (32000, 64), (1763, 4096)]
)
def test_loss_chunks_are_the_training_package_chunks(vocab: int, tokens: int) -> None:
    from training import loss

    assert DEFAULT.loss_chunk_bytes == loss.CHUNK_BYTES
    assert DEFAULT.loss_min_chunks == loss.MIN_CHUNKS
    rows = loss.chunk_rows_for(vocab, tokens)
    # bf16 logits: the fp32 copy of a chunk and its exponentials; fp32 logits: one chunk
    assert loss_chunk_bytes(vocab, tokens, 2, DEFAULT.loss_chunk_bytes) == 2 * rows * vocab * 4
    assert loss_chunk_bytes(vocab, tokens, 4, DEFAULT.loss_chunk_bytes) == rows * vocab * 4
    # never more than half of one fp32 logits buffer (the loss's own promise)
    assert (
        loss_chunk_bytes(vocab, tokens, 2, DEFAULT.loss_chunk_bytes)
        <= tokens * vocab * 4 / 2 + 8 * vocab
    )
