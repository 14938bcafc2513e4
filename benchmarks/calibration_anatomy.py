"""Where a 2-worker local CPU step's time goes, term by term, next to what the planner predicts.

    .venv/bin/python benchmarks/calibration_anatomy.py [--steps 8]

The job of the calibration check (`tests/planner/test_calibration.py`): tiny-llama, batch 4 x
128 tokens per rank, fp32, full AC, FSDP2 over gloo, OMP_NUM_THREADS=1; one process, then two.
Each rank runs the preflight (`training.preflight.measure`), two warm-up steps, `--steps`
timed steps, then `--steps` steps under `torch.profiler`, whose FSDP2 record functions split
the fastest profiled step:

- `all-gather`: `FSDP::all_gather` (copy-in and the collective: under gloo FSDP2's
  `async_op=False` all-gather blocks the calling thread) + `FSDP::all_gather_copy_out`;
- `reduce-scatter`: `FSDP::post_backward_reduce` (gradient chunk-cat, pre-divide, the
  collective) + `FSDP::root_post_backward_callback`;
- `scalar all-reduces`: `c10d::allreduce_` and `_c10d_functional::wait_tensor` (grad norm, loss,
  vote);
- `compute`: the step minus those.

The planner side: calibrated on the 1-process run's profiled steps (`--step-stat min`, the same
basis as the split) and its preflight, then predicting 2 processes with their own preflight;
the per-op terms come from `planner.timing` (`fsdp_units`, `collective_time`, `scalar_all_reduce_time`). Figures only;
tests check correctness, never time.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from collections import defaultdict
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

TERMS = ("all-gather", "reduce-scatter", "scalar all-reduces")


def _term(name: str) -> str | None:
    if name.startswith(("FSDP::all_gather (", "FSDP::all_gather_copy_out")):
        return "all-gather"
    if name.startswith("FSDP::post_backward_reduce") or name == "FSDP::root_post_backward_callback":
        return "reduce-scatter"
    if name.startswith(("c10d::allreduce_", "_c10d_functional::wait_tensor")):
        return "scalar all-reduces"
    return None


def _union_s(spans: list[tuple[int, int]]) -> float:
    """Seconds covered by profiler intervals (microseconds), nested ones counted once."""
    total, end = 0, None
    for t0, t1 in sorted(spans):
        if end is None or t0 >= end:
            total += t1 - t0
            end = t1
        elif t1 > end:
            total += t1 - end
            end = t1
    return total / 1e6


def worker(a: argparse.Namespace) -> None:
    import torch
    from torch.profiler import ProfilerActivity, profile, record_function

    from training import preflight
    from training.config import parse_args
    from training.dist import distributed
    from training.finetune import Trainer

    out = Path(a.out)
    argv = [
        "--enable_fsdp",
        "--model_name=tiny-llama",
        "--dataset=samsum_sample",
        "--context_length=128",
        "--batch_size_training=4",
        "--mixed_precision=False",
        "--run_validation=False",
        "--save_model=False",
        "--progress=False",
        f"--max_train_step={2 * a.steps + 4}",
        f"--output_dir={out / 'out'}",
        f"--dist_checkpoint_root_folder={out / 'ckpt'}",
    ]
    with distributed() as env:
        report = preflight.measure(
            preflight.Options(sizes=preflight.default_sizes(False)), torch.device("cpu")
        )
        trainer = Trainer(parse_args(argv), env)
        with trainer.gc.paused():  # as in Trainer.fit: no automatic GC in the steps
            batches = iter(trainer.batches)
            for _ in range(2):
                trainer.train_step(next(batches))
            steps = []
            for _ in range(a.steps):
                mb = next(batches)
                t0 = time.perf_counter()
                trainer.train_step(mb)
                steps.append(time.perf_counter() - t0)
            with profile(activities=[ProfilerActivity.CPU]) as prof:
                for _ in range(a.steps):
                    mb = next(batches)
                    with record_function("anatomy::step"):
                        trainer.train_step(mb)
        # per profiled step: seconds in each term (the profiler's clock, microseconds)
        events = prof.events()
        marks = sorted(
            (e.time_range.start, e.time_range.end) for e in events if e.name == "anatomy::step"
        )
        spans: list[dict[str, list[tuple[int, int]]]] = [defaultdict(list) for _ in marks]
        for e in events:
            term = _term(e.name)
            if term is None:
                continue
            for i, (t0, t1) in enumerate(marks):
                if t0 <= e.time_range.start < t1:
                    spans[i][term].append((e.time_range.start, e.time_range.end))
                    break
        per_step = [{t: _union_s(v) for t, v in d.items()} for d in spans]
        if env.is_main:
            result = {
                "world_size": env.world_size,
                "step_s": steps,
                "terms": [dict(d) for d in per_step],
                "profiled_step_s": [(t1 - t0) / 1e6 for t0, t1 in marks],
                "preflight": report,
            }
            (out / "anatomy.json").write_text(json.dumps(result))
        del trainer


def _launch(world: int, tmp: Path, steps: int) -> dict[str, Any]:
    from tests.training.helpers import free_port

    out = tmp / f"w{world}"
    out.mkdir()
    env = dict(os.environ, OMP_NUM_THREADS="1", PYTHONPATH=str(REPO), HF_HUB_OFFLINE="1")
    env.update(TRANSFORMERS_VERBOSITY="error", TOKENIZERS_PARALLELISM="false")
    cmd = [
        sys.executable,
        "-m",
        "torch.distributed.run",
        f"--nproc_per_node={world}",
        "--master_addr=127.0.0.1",
        f"--master_port={free_port()}",
        str(Path(__file__).resolve()),
        "--worker",
        f"--out={out}",
        f"--steps={steps}",
    ]
    proc = subprocess.run(cmd, cwd=REPO, env=env, capture_output=True, text=True)
    if proc.returncode != 0:
        sys.exit(f"{world}-process run failed:\n{proc.stderr[-4000:]}")
    return dict(json.loads((out / "anatomy.json").read_text()))


def _measured(r: dict[str, Any]) -> dict[str, float]:
    """The fastest profiled step, split: its terms, and compute = the rest of that step."""
    i = min(range(len(r["profiled_step_s"])), key=lambda k: r["profiled_step_s"][k])
    step, terms = r["profiled_step_s"][i], r["terms"][i]
    out = {t: terms.get(t, 0.0) for t in TERMS}
    return {"step": step, "compute": step - sum(out.values()), **out}


def _predicted(r1: dict[str, Any], r2: dict[str, Any], tmp: Path) -> list[dict[str, float]]:
    from planner.args import parser, resolve_args
    from planner.calibrate import apply, calibrate, with_preflight
    from planner.predict import predict
    from planner.timing import collective_time, fsdp_units, ring_link, scalar_all_reduce_time

    flags = ["--model", "tiny-llama", "--instance", "local-cpu", "--batch", "4", "--seq", "128"]
    flags += ["--precision", "fp32", "--dataset", "none", "--nodes", "1"]
    inp = resolve_args(parser().parse_args(flags)).inp
    run = tmp / "w1-run"
    run.mkdir()
    steps = r1["profiled_step_s"]  # the basis of the measured split
    rows = [{"step": i, "tokens": 512, "step_time_s": s} for i, s in enumerate([0, *steps])]
    rows[0]["step_time_s"] = max(steps)  # a first step, left out by the fit
    (run / "metrics.jsonl").write_text("".join(json.dumps(x) + "\n" for x in rows))
    cal = calibrate(inp, [r1["preflight"]], run, "min")
    cal = with_preflight(cal, inp, [r2["preflight"]])
    out = []
    for world in (1, 2):
        fitted = apply(inp, cal)
        pr = predict(fitted, world)
        a, it, p = fitted.assumptions, fitted.instance, fitted.precision
        link = ring_link(world, 1, it, a)
        units = fsdp_units(fitted.shape, True)
        ag = sum(
            u.gathers * collective_time("all_gather", u.params * p.compute, world, link)
            for u in units
        )
        rs = sum(collective_time("reduce_scatter", u.params * p.reduce, world, link) for u in units)
        scalars = a.step_all_reduces * scalar_all_reduce_time(world, link)
        out.append(
            {
                "step": pr.step_time_s,
                "compute": pr.compute.total_s,
                "all-gather": ag,
                "reduce-scatter": rs,
                "scalar all-reduces": scalars,
            }
        )
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--steps", type=int, default=8, help="timed and profiled steps per run")
    ap.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    ap.add_argument("--out", default="", help=argparse.SUPPRESS)
    a = ap.parse_args()
    if a.worker:
        worker(a)
        return 0
    with tempfile.TemporaryDirectory() as t:
        tmp = Path(t)
        r1, r2 = _launch(1, tmp, a.steps), _launch(2, tmp, a.steps)
        m1, m2 = _measured(r1), _measured(r2)
        p1, p2 = _predicted(r1, r2, tmp)
    load = os.getloadavg()[0]
    print(
        f"tiny-llama, batch 4 x 128 per rank, fp32, gloo; fastest of {a.steps} steps; "
        f"load average {load:.1f} on {os.cpu_count()} CPUs"
    )
    print(
        f"{'ms per step':<22}{'1 proc':>9}{'2 procs':>9}{'2 - 1':>9}   {'planner':>9}{'2 - 1':>9}"
    )
    for key in ("compute", *TERMS, "step"):
        print(
            f"{key:<22}{1000 * m1[key]:9.1f}{1000 * m2[key]:9.1f}{1000 * (m2[key] - m1[key]):9.1f}"
            f"   {1000 * p2[key]:9.1f}{1000 * (p2[key] - p1[key]):9.1f}"
        )
    err = m2["step"] / p2["step"] - 1
    print(
        f"2-process tokens/s: measured {1024 / m2['step']:.0f}, planner {1024 / p2['step']:.0f} "
        f"({err:+.0%}); without the profiler the fastest steps were {1000 * min(r1['step_s']):.0f} "
        f"and {1000 * min(r2['step_s']):.0f} ms"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
