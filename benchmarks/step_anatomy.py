"""Anatomy of one training step on CPU (any machine): host syncs, loss memory, time split.

Prints three figures:

1. **Host syncs per non-logging step**: `Trainer.train_step` of a 2-process FSDP2 run (gloo,
   `tiny-llama-2l`) under `training.syncs.count_host_syncs` (every tensor -> Python conversion
   and `torch.cuda.synchronize`); each one would stall a GPU. Goal: 0.
2. **Time split** of the 2-process step: forward, backward, optimizer (clip + AdamW), and how
   long gloo's collectives ran (FSDP's all-gathers / reduce-scatters, the step's all-reduces),
   from the self time of `torch.profiler`'s collective events in every thread: their own
   duration, overlapped with compute or not, an upper bound on the step's waiting.
3. **Peak extra memory of the loss** for a tiny head with a 128k vocabulary (Llama 3's
   128,256), measured with `torch.profiler` memory events on CPU: the highest point of the
   allocations made by the loss's forward and backward, above what existed before (hidden
   states, head, logits), for the plain `F.cross_entropy(logits[:, :-1].float())` and for
   `training.loss`, with fp32 and bf16 logits. Goal: <= one fp32 logits-sized buffer.

    python benchmarks/step_anatomy.py [--tokens 1024] [--steps 6]

Figures only; tests check correctness, never time.
"""

from __future__ import annotations

import argparse
import json
import os
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

LLAMA3_VOCAB = 128_256


# ---------------------------------------------------------------------------------------------
# 3. loss memory (in this process)


def profiled_peak(fn: Any) -> int:
    """Highest running sum of the CPU allocations minus frees made while `fn` runs.

    Read from torch.profiler's raw allocation records (`profile_memory=True`; the tree of
    `kineto_results`), so a buffer allocated and freed inside one op still counts. The records
    are exact byte counts, but a window also records frees of blocks allocated before it
    (e.g. freed by the garbage collector): only blocks allocated inside the window count,
    matched by address, and the collector is run before and kept off during the window.
    """
    import gc

    from torch._C._profiler import _EventType
    from torch.profiler import ProfilerActivity, profile

    gc.collect()
    was_enabled = gc.isenabled()
    gc.disable()
    try:
        with profile(activities=[ProfilerActivity.CPU], profile_memory=True) as prof:
            fn()
    finally:
        if was_enabled:
            gc.enable()
    records: list[tuple[int, int, int]] = []
    stack = list(prof.profiler.kineto_results.experimental_event_tree())  # type: ignore[union-attr]
    while stack:
        node = stack.pop()
        if node.tag == _EventType.Allocation:
            f = node.extra_fields
            records.append((node.start_time_ns, f.ptr, f.alloc_size))
        stack.extend(node.children)
    mine: dict[int, int] = {}
    live = peak = 0
    for _, ptr, delta in sorted(records):
        if delta > 0:
            mine[ptr] = delta
        elif mine.pop(ptr, None) is None:
            continue  # a block allocated before the window
        live += delta
        peak = max(peak, live)
    return peak


def loss_memory(tokens: int, vocab: int, hidden: int = 64) -> list[dict[str, Any]]:
    import torch
    import torch.nn.functional as F

    from training.loss import chunk_rows_for, token_loss_sum

    def plain(logits: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
        return F.cross_entropy(
            logits[:, :-1].flatten(0, 1).float(),
            labels[:, 1:].flatten(),
            ignore_index=-100,
            reduction="sum",
        )

    def chunked(logits: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
        return token_loss_sum(logits, labels, overwrite_logits=True)

    rows = []
    batch = 2
    seq = tokens // batch
    for dtype in (torch.float32, torch.bfloat16):
        for name, fn in (("F.cross_entropy on shifted logits", plain), ("training.loss", chunked)):
            g = torch.Generator().manual_seed(0)
            h = (torch.randn(batch, seq, hidden, generator=g) * 0.1).to(dtype)
            w = (torch.randn(vocab, hidden, generator=g) * 0.1).to(dtype).requires_grad_()
            labels = torch.randint(0, vocab, (batch, seq), generator=g)
            logits = h @ w.t()  # the head's output exists before the loss runs

            def run(fn: Any = fn, logits: torch.Tensor = logits, labels: Any = labels) -> None:
                loss = fn(logits, labels)
                # backward down to the logits only (the head's own backward is not the loss's)
                (grad,) = torch.autograd.grad(loss, [logits])
                del grad

            peak = profiled_peak(run)
            fp32_logits = tokens * vocab * 4
            rows.append(
                {
                    "loss": name,
                    "logits_dtype": str(dtype).removeprefix("torch."),
                    "tokens": tokens,
                    "vocab": vocab,
                    "chunk_rows": chunk_rows_for(vocab, tokens),
                    "peak_extra_bytes": peak,
                    "fp32_logits_bytes": fp32_logits,
                    "ratio": peak / fp32_logits,
                }
            )
            del logits, w, h
    return rows


# ---------------------------------------------------------------------------------------------
# 1 and 2. the 2-process step (runs under torchrun)

_COLLECTIVE_WORDS = ("allgather", "all_gather", "reduce_scatter", "allreduce", "all_reduce")


def worker(a: argparse.Namespace) -> None:
    import torch
    from torch.profiler import ProfilerActivity, profile

    from training.config import parse_args
    from training.dist import distributed
    from training.finetune import Trainer, token_loss_sum
    from training.syncs import count_host_syncs

    out = Path(a.out)
    argv = [
        "--enable_fsdp",
        "--model_name=tiny-llama-2l",
        "--dataset=samsum_sample",
        f"--context_length={a.context}",
        "--batch_size_training=2",
        "--mixed_precision=False",
        "--run_validation=False",
        "--save_model=False",
        "--progress=False",
        f"--log_every={10 * a.steps}",
        "--checkpoint_every_s=3600",  # as every cluster job sets it: its vote must not sync
        f"--max_train_step={2 * a.steps + 2}",
        f"--output_dir={out / 'out'}",
        f"--dist_checkpoint_root_folder={out / 'ckpt'}",
    ]
    with distributed() as env:
        trainer = Trainer(parse_args(argv), env)
        with trainer.gc.paused():  # as in Trainer.fit: no automatic GC in the steps
            batches = iter(trainer.batches)
            trainer.train_step(next(batches))  # warm-up (first all-gathers, allocator)

            # 1. host syncs of steps that do not log
            per_step, sites = [], set()
            for _ in range(a.steps):
                mb = next(batches)
                with count_host_syncs() as seen:
                    figures = trainer.train_step(mb)
                    trainer._checkpoint_due(figures["checkpoint_due"])  # the loop's decision, too
                per_step.append(seen.n)
                sites.update(seen.calls)

            # 2. time split, phases timed the way train_step runs them
            phases = {"forward": 0.0, "backward": 0.0, "optimizer": 0.0}
            model, opt = trainer.model, trainer.optimizer
            with profile(activities=[ProfilerActivity.CPU]) as prof:
                for _ in range(a.steps):
                    (one,) = next(batches)
                    t0 = time.perf_counter()
                    loss = token_loss_sum(model, one)
                    t1 = time.perf_counter()
                    (loss / 1000.0).backward()
                    t2 = time.perf_counter()
                    trainer._clip_grads()
                    opt.step()
                    opt.zero_grad(set_to_none=True)
                    t3 = time.perf_counter()
                    phases["forward"] += t1 - t0
                    phases["backward"] += t2 - t1
                    phases["optimizer"] += t3 - t2
        comm_us = sum(
            e.self_cpu_time_total
            for e in prof.key_averages()
            if any(w in e.key.lower().replace("::", "_") for w in _COLLECTIVE_WORDS)
        )
        if env.is_main:
            result = {
                "syncs_per_step": per_step,
                "sync_sites": sorted(sites),
                "phases_s": {k: v / a.steps for k, v in phases.items()},
                "comm_s": comm_us / 1e6 / a.steps,
                "world_size": env.world_size,
                "torch": torch.__version__,
            }
            (out / "anatomy.json").write_text(json.dumps(result, indent=1))
        del trainer


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def cpu_name() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return "unknown CPU"


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--tokens", type=int, default=1024, help="tokens of the loss measurement")
    ap.add_argument("--vocab", type=int, default=LLAMA3_VOCAB)
    ap.add_argument("--steps", type=int, default=6, help="measured steps per part")
    ap.add_argument("--context", type=int, default=128, help="context of the 2-process run")
    ap.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    ap.add_argument("--out", default="", help=argparse.SUPPRESS)
    a = ap.parse_args()
    if a.worker:
        worker(a)
        return 0

    import torch

    from training.model import native_low_precision

    bf16 = "native" if native_low_precision(torch.device("cpu"), torch.bfloat16) else "emulated"
    print(
        f"{cpu_name()}, {os.cpu_count()} CPUs, torch {torch.__version__}, capability "
        f"{torch.backends.cpu.get_cpu_capability()} (bf16 {bf16}), OMP_NUM_THREADS="
        f"{os.environ.get('OMP_NUM_THREADS', 'unset')}"
    )
    with tempfile.TemporaryDirectory() as tmp:
        env = dict(os.environ, OMP_NUM_THREADS="1", PYTHONPATH=str(REPO), HF_HUB_OFFLINE="1")
        env.update(TRANSFORMERS_VERBOSITY="error", TOKENIZERS_PARALLELISM="false")
        cmd = [
            sys.executable,
            "-m",
            "torch.distributed.run",
            "--nproc_per_node=2",
            "--master_addr=127.0.0.1",
            f"--master_port={free_port()}",
            str(Path(__file__).resolve()),
            "--worker",
            f"--out={tmp}",
            f"--steps={a.steps}",
            f"--context={a.context}",
        ]
        proc = subprocess.run(cmd, cwd=REPO, env=env, capture_output=True, text=True)
        if proc.returncode != 0:
            sys.exit(f"2-process run failed:\n{proc.stdout[-2000:]}\n{proc.stderr[-4000:]}")
        r = json.loads((Path(tmp) / "anatomy.json").read_text())

    print(f"\n1. host syncs per non-logging step (2 x FSDP2, gloo): {r['syncs_per_step']}")
    for site in r["sync_sites"]:
        print(f"     {site}")
    ph = r["phases_s"]
    total = sum(ph.values())
    print(
        f"\n2. time split per step (2 x FSDP2 tiny-llama-2l, context {a.context}, batch 2 per "
        f"rank, fp32, gloo): {1000 * total:.1f} ms"
    )
    for k, v in ph.items():
        print(f"     {k:<10} {1000 * v:7.1f} ms  {100 * v / total:5.1f}%")
    print(
        f"     gloo collectives' own duration (profiler, every thread, overlapped with compute "
        f"or not) {1000 * r['comm_s']:.1f} ms ({100 * r['comm_s'] / total:.1f}% of the step)"
    )

    rows = loss_memory(a.tokens, a.vocab)
    print(
        f"\n3. peak extra memory of the loss, {a.tokens} tokens x vocab {a.vocab:,} "
        f"(one fp32 logits buffer = {rows[0]['fp32_logits_bytes'] / 2**20:,.0f} MiB; "
        f"training.loss chunks of {rows[0]['chunk_rows']} tokens)"
    )
    for row in rows:
        print(
            f"     {row['loss']:<36} {row['logits_dtype']:<9} logits: "
            f"{row['peak_extra_bytes'] / 2**20:8,.0f} MiB = {row['ratio']:.2f} x fp32 logits"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
