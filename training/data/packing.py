"""Packing whole examples into rows: best-fit decreasing (`--packing_strategy bfd`).

`--batching_strategy packing` by default concatenates every example and cuts rows of exactly
`--context_length` tokens (llama-recipes' ConcatDataset; TRL's `packing_strategy="wrapped"`):
a conversation is split across rows and the incomplete tail is dropped. `bfd` keeps each
example whole, as TRL's default `packing_strategy="bfd"` does (`pack_dataset` / `_pack_bfd`
in trl/data_utils.py at v1.16.0): examples are taken longest first, each placed in the row
whose free space fits it most tightly, or in a new row. Rows are then at most
`--context_length` tokens and `collate` right-pads a micro-batch to its longest row. Every
token of every example is kept with its label (a conversation's assistant masks travel with
it); an example longer than a row is cut to it, as TRL's bfd truncates (chats never are:
`training.data` leaves those out and counts them first).

As with the wrapped rows, the examples of a row attend to the ones before them: the model runs
SDPA's causal kernel without a mask or per-example positions. TRL avoids that only with
padding-free batches on flash-attention kernels (position ids restarting per example), which
this trainer does not run.

A leaf (no torch): examples are `training.data.examples.Example` dicts.
"""

from __future__ import annotations

import bisect
from collections.abc import Sequence

from training.data.examples import Example

__all__ = ["fill_ratio", "pack_bfd"]

KEYS = ("input_ids", "labels", "attention_mask")


def pack_bfd(examples: Sequence[Example], row: int) -> list[Example]:
    """Whole examples in rows of at most `row` tokens, best fit decreasing.

    Deterministic: ties in length keep the examples' order, and among rows with the same free
    space the one opened first is filled first. Each row holds its examples longest first.
    """
    if row < 1:
        raise ValueError(f"row must be >= 1, got {row}")
    order = sorted(range(len(examples)), key=lambda i: -len(examples[i]["input_ids"]))
    bins: list[list[int]] = []
    free: list[tuple[int, int]] = []  # (free space, row index), sorted
    for i in order:
        n = min(len(examples[i]["input_ids"]), row)
        if n == 0:
            continue
        at = bisect.bisect_left(free, (n, -1))
        if at < len(free):
            space, b = free.pop(at)
        else:
            space, b = row, len(bins)
            bins.append([])
        bins[b].append(i)
        if space - n > 0:
            bisect.insort(free, (space - n, b))
    out = []
    for ids in bins:
        packed: Example = {k: [] for k in KEYS}
        for i in ids:
            for k in KEYS:
                packed[k].extend(examples[i][k][:row])
        out.append(packed)
    return out


def fill_ratio(rows: Sequence[Example], row: int) -> float:
    """Tokens in the rows over the rows' capacity (rows x `row`): 1.0 wastes no padding."""
    if not rows:
        return 0.0
    return sum(len(r["input_ids"]) for r in rows) / (len(rows) * row)
