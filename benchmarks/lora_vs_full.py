"""LoRA against full fine-tuning on the same run: tokens/s and peak memory, as ratios.

Runs `torchrun --nproc_per_node 2 -m training.finetune --enable_fsdp` (FULL_SHARD, activation
checkpointing on, fp32: the CPU default here) on the same model, data and global batch three
times: a full fine-tune, LoRA on q_proj and v_proj (llama-recipes' default, r 8) and LoRA on
every linear layer (r 16). Throughput is global tokens/s by the wall clock between
metrics.jsonl lines after WARMUP steps. Peak memory, the largest rank's: on a GPU the CUDA
allocator's peak (summary.json); on a CPU the RSS high-water mark less the RSS once torch,
transformers, peft and the training package are imported (each rank runs
`training.finetune.main` inside this script, which reads /proc/self/status around it), so the
~0.8 GB of libraries does not hide the difference. Next to it the planner's prediction of the
tensor bytes per rank (`planner.memory.memory`, `planner.lora.lora_memory`: sharded state,
activations, gathered units, no CUDA context) for the same configuration. The variants run
interleaved --repeats times; the best tokens/s and the lowest peak of each count (the machine
is shared).

    python benchmarks/lora_vs_full.py [--steps 30] [--repeats 2] [--model tiny-llama] [--context 256]
"""

from __future__ import annotations

import argparse
import json
import os
import socket
import subprocess
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))
WARMUP = 5
VARIANTS: dict[str, list[str]] = {
    "full fine-tune": [],
    "LoRA q,v r8": ["--use_peft", "--lora_dropout=0"],
    "LoRA all-linear r16": [
        "--use_peft",
        "--lora_dropout=0",
        "--lora_r=16",
        "--lora_target_modules=all-linear",
    ],
}


def env() -> dict[str, str]:
    e = dict(os.environ)
    e.update(OMP_NUM_THREADS="1", PYTHONPATH=str(REPO), TOKENIZERS_PARALLELISM="false")
    e.update(TRANSFORMERS_VERBOSITY="error", HF_HUB_OFFLINE="1")
    return e


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _status_kib(key: str) -> int:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith(key + ":"):
            return int(line.split()[1])
    return 0


def worker(report: str, argv: list[str]) -> int:
    """One rank: the program's main, with the RSS it added on a CPU (the CUDA peak on a GPU)."""
    import peft  # noqa: F401  (imported before the baseline is read, as training imports it)
    import torch

    from training import export, finetune, lora, parallelize  # noqa: F401

    rss0 = _status_kib("VmRSS") * 1024
    rc = finetune.main(argv)
    cuda = torch.cuda.is_available()
    peak = torch.cuda.max_memory_allocated() if cuda else _status_kib("VmHWM") * 1024 - rss0
    rank = os.environ.get("RANK", "0")
    Path(f"{report}.{rank}").write_text(json.dumps({"peak": peak}), encoding="utf-8")
    return rc


def measure(a: argparse.Namespace, out: Path, extra: list[str]) -> tuple[float, int]:
    """(global tokens/s after the warm-up, peak memory bytes (max over ranks)) of one run."""
    report = out / "peak"
    cmd = [
        sys.executable,
        "-m",
        "torch.distributed.run",
        "--nproc_per_node=2",
        "--master_addr=127.0.0.1",
        f"--master_port={free_port()}",
        __file__,
        f"--worker={report}",
        "--enable_fsdp",
        f"--model_name={a.model}",
        "--dataset=samsum_sample",
        f"--context_length={a.context}",
        f"--batch_size_training={a.batch // 2}",
        f"--max_train_step={a.steps}",
        "--mixed_precision=False",
        "--run_validation=False",
        "--save_model=False",
        "--progress=False",
        "--plot_metrics=False",
        f"--log_every={a.steps}",
        f"--output_dir={out / 'out'}",
        f"--dist_checkpoint_root_folder={out / 'ckpt'}",
        *extra,
    ]
    proc = subprocess.run(cmd, cwd=REPO, env=env(), capture_output=True, text=True)
    if proc.returncode != 0:
        sys.exit(f"failed: {' '.join(cmd)}\n{proc.stdout[-2000:]}\n{proc.stderr[-3000:]}")
    rows = [json.loads(x) for x in (out / "out" / "metrics.jsonl").read_text().splitlines() if x]
    timed = rows[WARMUP:]
    tps = sum(r["tokens"] for r in timed) / (timed[-1]["time"] - rows[WARMUP - 1]["time"])
    peaks = [json.loads(Path(f"{report}.{r}").read_text())["peak"] for r in range(2)]
    return tps, max(peaks)


def predicted(a: argparse.Namespace) -> dict[str, int]:
    """The planner's tensor bytes per rank (total less the CUDA context and NCCL buffers)."""
    from planner.assumptions import DEFAULT
    from planner.lora import LINEAR, LoraSpec, lora_memory
    from planner.memory import PRECISIONS, layout, memory
    from planner.shapes import resolve

    shape, lay, p = resolve(a.model), layout("FULL_SHARD", 2, 2), PRECISIONS["fp32"]
    kw = {"batch": a.batch // 2, "seq": a.context, "ac": 1.0, "a": DEFAULT}
    fixed = DEFAULT.cuda_context_bytes + DEFAULT.nccl_buffer_bytes
    specs = {
        "LoRA q,v r8": LoraSpec(dropout=False),
        "LoRA all-linear r16": LoraSpec(r=16, targets=LINEAR, dropout=False),
    }
    out = {"full fine-tune": memory(shape, lay, p, **kw).total - fixed}  # type: ignore[arg-type]
    for name, spec in specs.items():
        out[name] = lora_memory(shape, lay, p, spec, on_cpu=True, **kw).total - fixed  # type: ignore[arg-type]
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", default="tiny-llama")
    ap.add_argument("--context", type=int, default=256)
    ap.add_argument("--batch", type=int, default=8, help="global batch (sequences per step)")
    ap.add_argument("--steps", type=int, default=30)
    ap.add_argument("--repeats", type=int, default=2, help="interleaved repeats (best counts)")
    ap.add_argument("--worker", help=argparse.SUPPRESS)
    a, rest = ap.parse_known_args()
    if a.worker:
        return worker(a.worker, rest)
    if rest:
        ap.error(f"unrecognized arguments: {' '.join(rest)}")
    tps = dict.fromkeys(VARIANTS, 0.0)
    peak = dict.fromkeys(VARIANTS, 1 << 62)
    with tempfile.TemporaryDirectory() as tmp:
        for i in range(a.repeats):
            for j, (name, extra) in enumerate(VARIANTS.items()):
                t, m = measure(a, Path(tmp) / f"r{i}v{j}", extra)
                tps[name], peak[name] = max(tps[name], t), min(peak[name], m)
    plan = predicted(a)
    base = "full fine-tune"
    print(
        f"model {a.model}, context {a.context}, global batch {a.batch}, 2 x FSDP2 FULL_SHARD, "
        f"AC on, fp32, {a.steps} steps ({WARMUP} warm-up), {os.cpu_count()} CPUs, "
        f"best of {a.repeats}"
    )
    print(
        f"{'':22}{'tokens/s':>10}{'ratio':>7}{'peak MiB':>10}{'ratio':>7}{'planner MiB':>13}{'ratio':>7}"
    )
    for name in VARIANTS:
        print(
            f"{name:22}{tps[name]:10,.0f}{tps[name] / tps[base]:7.2f}"
            f"{peak[name] / 2**20:10,.0f}{peak[name] / peak[base]:7.2f}"
            f"{plan[name] / 2**20:13,.1f}{plan[name] / plan[base]:7.2f}"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
