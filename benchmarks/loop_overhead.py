"""Overhead of our training loop over a bare PyTorch loop (CPU, gloo).

Measures, in one run, global tokens/s of
  (a) a bare loop: the same model (preset, seed), data order, AdamW and loss, no FSDP, no
      metrics, no checkpoints, one process;
  (b) `python -m training.finetune` with one process (no FSDP);
  (c) `torchrun --nproc_per_node 2 -m training.finetune --enable_fsdp` (FULL_SHARD), same global
      batch;
and prints (b)/(a) and (c)/(a). Targets on a 2-core CPU: (b)/(a) >= 0.95, (c)/(a) >= 0.90.
Each variant runs in its own process with OMP_NUM_THREADS=1, fp32, no activation checkpointing
(the bare loop has none); the first WARMUP steps are excluded, and (b)/(c) are timed by the
wall clock between metrics.jsonl lines, so logging and data loading count. The three variants
run interleaved --repeats times and the best figure of each counts (the machine is shared).

    python benchmarks/loop_overhead.py [--steps 40] [--repeats 2] [--model tiny-llama] [--context 256]
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

REPO = Path(__file__).resolve().parent.parent
WARMUP = 5


def env() -> dict[str, str]:
    e = dict(os.environ)
    e.update(OMP_NUM_THREADS="1", PYTHONPATH=str(REPO), TOKENIZERS_PARALLELISM="false")
    e.update(TRANSFORMERS_VERBOSITY="error", HF_HUB_OFFLINE="1")
    return e


def flags(a: argparse.Namespace, out: Path, per_rank: int) -> list[str]:
    return [
        f"--model_name={a.model}",
        "--dataset=samsum_sample",
        f"--context_length={a.context}",
        f"--batch_size_training={per_rank}",
        f"--max_train_step={a.steps}",
        "--mixed_precision=False",
        "--fsdp_activation_checkpointing=False",
        "--run_validation=False",
        "--save_model=False",
        "--progress=False",
        f"--log_every={a.steps}",
        f"--output_dir={out / 'out'}",
        f"--dist_checkpoint_root_folder={out / 'ckpt'}",
    ]


def tokens_per_s_from_metrics(path: Path) -> float:
    rows = [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
    timed = rows[WARMUP:]
    elapsed = timed[-1]["time"] - rows[WARMUP - 1]["time"]
    return sum(r["tokens"] for r in timed) / elapsed


def bare(a: argparse.Namespace) -> None:
    """(a): the reference loop, printing tokens/s as its last line."""
    import torch

    from training.config import TrainConfig
    from training.data import DistributedBatches, build_dataset, load_tokenizer
    from training.finetune import token_loss_sum
    from training.model import full_state_dict, model_spec

    cfg = TrainConfig(model_name=a.model, dataset="samsum_sample", context_length=a.context)
    tok = load_tokenizer(a.model)
    spec = model_spec(a.model, len(tok), a.context)
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_config(spec.config)
    model.load_state_dict(full_state_dict(spec, cfg.seed))
    model.train()
    opt = torch.optim.AdamW(model.parameters(), lr=cfg.lr, weight_decay=cfg.weight_decay)
    batches = DistributedBatches(
        build_dataset(cfg, tok, "train"),
        micro_batch_size=a.batch,
        grad_accum=1,
        rank=0,
        world_size=1,
        seed=cfg.seed,
        shuffle=True,
        pad_id=tok.pad_token_id,
    )
    tokens, t0 = 0, 0.0
    for step, (batch,) in enumerate(batches, start=1):
        n = int((batch["labels"][:, 1:] != -100).sum())
        loss = token_loss_sum(model, batch) / n
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), float("inf"))
        opt.step()
        opt.zero_grad(set_to_none=True)
        float(loss)
        if step == WARMUP:
            t0 = time.perf_counter()
        elif step > WARMUP:
            tokens += int(batch["attention_mask"].sum())
        if step == a.steps:
            break
    print(tokens / (time.perf_counter() - t0))


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def run(cmd: list[str]) -> str:
    proc = subprocess.run(cmd, cwd=REPO, env=env(), capture_output=True, text=True)
    if proc.returncode != 0:
        sys.exit(f"failed: {' '.join(cmd)}\n{proc.stdout[-2000:]}\n{proc.stderr[-3000:]}")
    return proc.stdout


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", default="tiny-llama")
    ap.add_argument("--context", type=int, default=256)
    ap.add_argument("--batch", type=int, default=8, help="global batch (sequences per step)")
    ap.add_argument("--steps", type=int, default=40)
    ap.add_argument("--repeats", type=int, default=2, help="interleaved repeats (best counts)")
    ap.add_argument("--bare", action="store_true", help=argparse.SUPPRESS)
    a = ap.parse_args()
    if a.bare:
        bare(a)
        return 0
    py = sys.executable
    common = [
        f"--model={a.model}",
        f"--context={a.context}",
        f"--batch={a.batch}",
        f"--steps={a.steps}",
    ]
    best = {"a": 0.0, "b": 0.0, "c": 0.0}
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        for _ in range(a.repeats):  # interleaved, best of N: transient load on a shared machine
            tps = float(run([py, __file__, "--bare", *common]).strip().splitlines()[-1])
            best["a"] = max(best["a"], tps)
            run([py, "-m", "training.finetune", *flags(a, work / "w1", a.batch)])
            tps = tokens_per_s_from_metrics(work / "w1" / "out" / "metrics.jsonl")
            best["b"] = max(best["b"], tps)
            torchrun = [
                py,
                "-m",
                "torch.distributed.run",
                "--nproc_per_node=2",
                "--master_addr=127.0.0.1",
                f"--master_port={free_port()}",
            ]
            fsdp = [*flags(a, work / "w2", a.batch // 2), "--enable_fsdp"]
            run([*torchrun, "-m", "training.finetune", *fsdp])
            tps = tokens_per_s_from_metrics(work / "w2" / "out" / "metrics.jsonl")
            best["c"] = max(best["c"], tps)
    a_tps, b_tps, c_tps = best["a"], best["b"], best["c"]
    print(
        f"model {a.model}, context {a.context}, global batch {a.batch}, "
        f"{a.steps} steps ({WARMUP} warm-up), fp32, OMP_NUM_THREADS=1, {os.cpu_count()} CPUs, "
        f"best of {a.repeats}"
    )
    print(f"(a) bare PyTorch loop, 1 process      {a_tps:10,.0f} tokens/s")
    print(
        f"(b) training.finetune, 1 process      {b_tps:10,.0f} tokens/s   (b)/(a) = {b_tps / a_tps:.3f}"
    )
    print(
        f"(c) training.finetune, 2 x FSDP2      {c_tps:10,.0f} tokens/s   (c)/(a) = {c_tps / a_tps:.3f}"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
