"""Checkpoint stall per save: asynchronous (DCP async_save) against synchronous writes.

Runs `torchrun --nproc_per_node N -m training.finetune` twice on the same job, checkpointing
every --every steps, once with --async_checkpoint True and once False, and prints for each the
seconds the training loop was blocked per save (`checkpoint_stall_s` in summary.json: waiting for
the previous write, staging, and for a synchronous save the write itself) and the last write's
full duration (`checkpoint_write_s`). On a GPU the staging copy is device-to-host; here it is a
host copy, so the gap between the two rows is the write the async path moves off the loop.

    python benchmarks/checkpoint_stall.py [--model tiny-llama] [--steps 12] [--every 3] [--nproc 2]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent


def run(args: argparse.Namespace, use_async: bool, work: Path) -> dict:
    out = work / f"async-{use_async}"
    cmd = [
        sys.executable,
        "-m",
        "torch.distributed.run",
        "--standalone",
        f"--nproc_per_node={args.nproc}",
        "-m",
        "training.finetune",
        f"--model_name={args.model}",
        "--dataset=samsum_sample",
        f"--context_length={args.context}",
        "--batch_size_training=2",
        "--mixed_precision=False",
        "--run_validation=False",
        "--save_model=False",
        "--progress=False",
        f"--max_train_step={args.steps}",
        f"--checkpoint_every={args.every}",
        f"--async_checkpoint={use_async}",
        f"--output_dir={out / 'out'}",
        f"--dist_checkpoint_root_folder={out / 'ckpt'}",
        *(["--enable_fsdp"] if args.nproc > 1 else []),
    ]
    env = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONPATH": str(REPO)}
    subprocess.run(cmd, cwd=REPO, env=env, check=True, capture_output=True, text=True)
    return json.loads((out / "out" / "summary.json").read_text(encoding="utf-8"))


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--model", default="tiny-llama")
    p.add_argument("--context", type=int, default=128)
    p.add_argument("--steps", type=int, default=12)
    p.add_argument("--every", type=int, default=3)
    p.add_argument("--nproc", type=int, default=2)
    args = p.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        for use_async in (False, True):
            s = run(args, use_async, Path(tmp))
            stalls = s["checkpoint_stall_s"]
            print(
                f"{'async' if use_async else 'sync '}  saves {len(stalls)}  stall per save "
                f"median {statistics.median(stalls):.3f} s, max {max(stalls):.3f} s  "
                f"(each: {', '.join(f'{x:.3f}' for x in stalls)})  "
                f"last write {s['checkpoint_write_s']:.3f} s"
            )


if __name__ == "__main__":
    main()
