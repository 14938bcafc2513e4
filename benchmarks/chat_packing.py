"""Chat data batched three ways: one conversation per row, wrapped rows, whole-conversation rows.

For the bundled chat sample (`--dataset chat_sample`, the tiny presets' tokenizer) at several
context lengths: `padding` (one conversation per row, right-padded in each micro-batch),
`packing` with `--packing_strategy wrapped` (rows of exactly the context, conversations cut,
the tail dropped) and with `--packing_strategy bfd` (whole conversations, best fit
decreasing: training.data.packing). Rows are taken in the trainer's shuffled order
(`DistributedBatches`: torch.randperm seeded with --seed) in micro-batches of --batch rows,
each padded to its longest row as `collate` pads. Printed per context, exactly: rows, optimizer
steps per epoch, tokens lost, and the padded tokens an epoch computes (the work: a step's cost
grows with its padded width), each as a ratio to padding's. Then, measured on this machine,
the tiny preset's seconds per step (one process, fp32 CPU, forward + backward + AdamW, the
trainer's loss; the best of --repeats over --steps steps) and the epoch time ratio (steps x
step time). The measured figures are as noisy as the machine is shared; the exact ones are not.

    python benchmarks/chat_packing.py [--contexts 256,512,1024] [--batch 4] [--repeats 3]
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from dataclasses import replace
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))
os.environ.setdefault("OMP_NUM_THREADS", "1")


def rows_for(context: int) -> dict[str, list[dict[str, list[int]]]]:
    """The training split of chat_sample under each strategy."""
    from training.config import TrainConfig
    from training.data import build_dataset, load_tokenizer

    tok = load_tokenizer("tiny-llama")
    base = TrainConfig(dataset="chat_sample", context_length=context)
    return {
        "padding": build_dataset(replace(base, batching_strategy="padding"), tok, "train"),
        "wrapped": build_dataset(base, tok, "train"),
        "bfd": build_dataset(replace(base, packing_strategy="bfd"), tok, "train"),
    }


def shuffled(rows: list[dict[str, list[int]]], seed: int) -> list[dict[str, list[int]]]:
    """The rows in the trainer's epoch-0 order (`DistributedBatches.permutation`)."""
    import torch

    perm = torch.randperm(len(rows), generator=torch.Generator().manual_seed(seed))
    return [rows[i] for i in perm.tolist()]


def padded_tokens(rows: list[dict[str, list[int]]], batch: int) -> int:
    """Tokens an epoch computes: each micro-batch is `batch` rows of its longest row's width."""
    return sum(
        batch * max(len(r["input_ids"]) for r in rows[i : i + batch])
        for i in range(0, len(rows), batch)
    )


def step_seconds(rows: list[dict[str, list[int]]], batch: int, steps: int, repeats: int) -> float:
    """Best-of-repeats mean seconds of an optimizer step over the first `steps` micro-batches."""
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM

    from training.data import collate, load_tokenizer
    from training.finetune import token_loss_sum
    from training.model import PRESETS

    torch.set_num_threads(1)
    tok = load_tokenizer("tiny-llama")
    torch.manual_seed(0)
    model = LlamaForCausalLM(LlamaConfig(vocab_size=len(tok), **PRESETS["tiny-llama"]))
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4)
    batches = [collate(rows[i : i + batch], tok.pad_token_id) for i in range(0, len(rows), batch)]
    batches = batches[:steps]
    best = float("inf")
    for r in range(repeats + 1):  # the first pass warms up
        start = time.perf_counter()
        for b in batches:
            token_loss_sum(model, b).backward()
            opt.step()
            opt.zero_grad(set_to_none=True)
        if r:
            best = min(best, (time.perf_counter() - start) / len(batches))
    return best


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--contexts", default="256,512,1024")
    p.add_argument("--batch", type=int, default=4, help="rows per step (the global batch)")
    p.add_argument("--steps", type=int, default=6, help="steps timed per strategy and context")
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--seed", type=int, default=42, help="the trainer's --seed (epoch 0)")
    a = p.parse_args()
    for context in (int(c) for c in a.contexts.split(",")):
        sets = {k: shuffled(v, a.seed) for k, v in rows_for(context).items()}
        tokens = sum(len(r["input_ids"]) for r in sets["padding"])
        steps = {k: -(-len(v) // a.batch) for k, v in sets.items()}
        work = {k: padded_tokens(v, a.batch) for k, v in sets.items()}
        secs = {k: step_seconds(v, a.batch, a.steps, a.repeats) for k, v in sets.items()}
        epoch = {k: steps[k] * secs[k] for k in sets}
        print(f"context {context}: {len(sets['padding'])} conversations, {tokens} tokens")
        for name, rows in sets.items():
            kept = sum(len(r["input_ids"]) for r in rows)
            print(
                f"  {name:8} rows {len(rows):5}  steps/epoch {steps[name]:4} "
                f"({steps[name] / steps['padding']:.2f})  tokens lost {tokens - kept:5}  "
                f"padded tokens {work[name]:7} ({work[name] / work['padding']:.2f}, "
                f"{kept / work[name]:.0%} real)  measured: step {secs[name] * 1e3:6.0f} ms, "
                f"epoch {epoch[name]:6.0f} s ({epoch[name] / epoch['padding']:.2f})"
            )


if __name__ == "__main__":
    main()
