"""Shared helpers of the training tests: free ports, a torchrun launcher, and a job driver.

A torchrun start plus the torch/transformers imports cost several seconds, so the tests run many
configurations in ONE launch: `launch(nproc, jobs, workdir)` starts
`torchrun --nproc_per_node N tests/training/helpers.py JOBS.json`, and the driver below (this file
run as a script) executes the jobs in order inside one process group, recording per job the exit
status and stderr of `training.finetune.main(argv)` plus any measurement the job asks for.
Every child process gets OMP_NUM_THREADS=1 (two threads on two cores made a step 60x slower).

Job kinds (dicts): {"kind": "train", "name", "argv"} (with "stdout": true, each rank's stdout is
kept in the result too); {"kind": "copy_checkpoint", "src", "dst",
"step"} (copy one complete checkpoint folder); {"kind": "state_bytes", "name", "argv"} (one
step, then per-rank local bytes of parameters, gradients and optimizer state); {"kind":
"export_logits", "name", "argv", "out"} (train + export, then the trained model's logits on a
fixed batch saved to `out`); {"kind": "host_syncs", "name", "argv"} (train, counting host syncs
per step with training.syncs); {"kind": "sigterm_during", "name", "argv", "at"} (the last rank
sends itself SIGTERM in the middle of step `at`; where every rank stopped).
"""

from __future__ import annotations

import contextlib
import gc
import io
import json
import os
import shutil
import socket
import subprocess
import sys
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[2]
PYTHON = sys.executable

# Small, fast, fp32: the parity baseline every multi-process test compares against.
TINY = [
    "--model_name=tiny-llama-2l",
    "--dataset=samsum_sample",
    "--max_train_samples=256",  # 294 packed rows, 6x what any job trains on: 0.2 s less a job
    "--context_length=64",
    "--lr=1e-3",
    "--mixed_precision=False",
    "--run_validation=False",
    "--save_model=False",
    "--progress=False",
    "--plot_metrics=False",  # ~1 s of matplotlib per run; the full CLI run draws it
]
GLOBAL_BATCH = 4


def merge(*argvs: list[str] | tuple[str, ...]) -> list[str]:
    """Concatenate `--name=value` flag lists; a later flag replaces an earlier one of that name."""
    out: dict[str, str] = {}
    for argv in argvs:
        for flag in argv:
            out[flag.split("=", 1)[0].replace("-", "_")] = flag
    return list(out.values())


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def child_env(**extra: str) -> dict[str, str]:
    env = dict(os.environ)
    env.update(
        OMP_NUM_THREADS="1",
        MKL_NUM_THREADS="1",
        TOKENIZERS_PARALLELISM="false",
        PYTHONPATH=str(REPO),
        PYTHONUNBUFFERED="1",
        HF_HUB_OFFLINE="1",
        TRANSFORMERS_VERBOSITY="error",
        HF_HUB_DISABLE_PROGRESS_BARS="1",
    )
    env.update(extra)
    return env


def torchrun_cmd(nproc: int, *args: str) -> list[str]:
    """torchrun on a free port; the script and its options follow."""
    return [
        PYTHON,
        "-m",
        "torch.distributed.run",
        f"--nproc_per_node={nproc}",
        "--nnodes=1",
        "--master_addr=127.0.0.1",
        f"--master_port={free_port()}",
        *args,
    ]


def finetune_cmd(nproc: int, argv: list[str]) -> list[str]:
    """The user's command: torchrun ... -m training.finetune ARGV (or plain python for 0)."""
    if nproc == 0:
        return [PYTHON, "-m", "training.finetune", *argv]
    return torchrun_cmd(nproc, "-m", "training.finetune", *argv)


def run(cmd: list[str], timeout: float = 600, **env: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        cmd, cwd=REPO, env=child_env(**env), capture_output=True, text=True, timeout=timeout
    )


def launch(nproc: int, jobs: list[dict[str, Any]], workdir: Path, timeout: float = 600) -> dict:
    """Run `jobs` in one torchrun launch of `nproc` processes; returns {job name: result}."""
    workdir.mkdir(parents=True, exist_ok=True)
    jobs_file = workdir / "jobs.json"
    jobs_file.write_text(json.dumps(jobs), encoding="utf-8")
    proc = run(torchrun_cmd(nproc, str(Path(__file__).resolve()), str(jobs_file)), timeout)
    results_file = workdir / "results.json"
    if proc.returncode != 0 or not results_file.is_file():
        raise AssertionError(
            f"launch of {nproc} processes failed (exit {proc.returncode}):\n"
            f"{proc.stdout[-4000:]}\n{proc.stderr[-6000:]}"
        )
    return json.loads(results_file.read_text(encoding="utf-8"))


def run_dirs(base: Path, name: str) -> list[str]:
    """--output_dir / checkpoint flags of a job called `name` under `base`."""
    return [
        f"--output_dir={base / name / 'out'}",
        f"--dist_checkpoint_root_folder={base / name / 'ckpt'}",
        "--dist_checkpoint_folder=run",
    ]


def ckpt_dir(base: Path, name: str) -> Path:
    return base / name / "ckpt" / "run"


def metrics(base: Path, name: str) -> list[dict[str, Any]]:
    path = base / name / "out" / "metrics.jsonl"
    with path.open(encoding="utf-8") as f:
        return [json.loads(line) for line in f if line.strip()]


def max_diff(a: list[dict[str, Any]], b: list[dict[str, Any]], key: str) -> float:
    """Largest |a - b| of `key` over the steps both runs have (matched by step number)."""
    bs = {r["step"]: r[key] for r in b}
    common = [(r[key], bs[r["step"]]) for r in a if r["step"] in bs]
    assert common, "no common steps"
    return max(abs(x - y) for x, y in common)


# ---------------------------------------------------------------------------------------------
# the driver (runs inside torchrun)


def _local_bytes(tensors: list[Any]) -> int:
    total = 0
    for t in tensors:
        local = t.to_local() if hasattr(t, "to_local") else t
        total += local.numel() * local.element_size()
    return total


def _state_bytes(argv: list[str]) -> dict[str, Any]:
    """One forward/backward/step of the configured model; bytes held by this rank."""
    import torch

    from training.config import parse_args
    from training.dist import distributed
    from training.finetune import Trainer
    from training.step import token_loss_sum

    cfg = parse_args(argv)
    with distributed() as env:
        trainer = Trainer(cfg, env)
        model, opt = trainer.model, trainer.optimizer
        micro = next(iter(trainer.batches))[0]
        token_loss_sum(model, micro).backward()
        params = list(model.parameters())
        grads = [p.grad for p in params if p.grad is not None]
        grad_bytes = _local_bytes(grads)  # measured before step (zero_grad frees them)
        opt.step()
        optim = [v for s in opt.state.values() for v in s.values() if torch.is_tensor(v)]
        full = sum(p.numel() * p.element_size() for p in params)  # global shapes
        return {
            "param_bytes": _local_bytes(params),
            "grad_bytes": grad_bytes,
            "optim_bytes": _local_bytes(optim),
            "full_param_bytes": full,
            "trainable_bytes": sum(p.numel() * p.element_size() for p in params if p.requires_grad),
            "n_grads": len(grads),
            "n_params": len(params),
            "n_trainable": sum(p.requires_grad for p in params),
        }


def _export_logits(argv: list[str], out: str) -> None:
    """Train and export as finetune.main does, then save the trained model's logits."""
    import torch

    from training.config import parse_args
    from training.dist import distributed
    from training.finetune import Trainer

    cfg = parse_args(argv)
    with distributed() as env:
        trainer = Trainer(cfg, env)
        trainer.finish(trainer.fit())
        g = torch.Generator().manual_seed(0)
        ids = torch.randint(0, len(trainer.tokenizer), (2, 24), generator=g)
        trainer.model.eval()
        with torch.no_grad():
            logits = trainer.model(input_ids=ids).logits.float()
        if env.is_main:
            torch.save({"input_ids": ids, "logits": logits}, out)


def _host_syncs(argv: list[str]) -> dict[str, Any]:
    """Train as finetune.main does while counting host syncs (training.syncs), per step.

    A step's share is everything between the end of the previous step's `_log` and the end of
    its own: `train_step`, the loop's bookkeeping and its metric row (with the fetch of the
    held figures on a logging step).
    """
    from training.config import parse_args
    from training.dist import distributed
    from training.finetune import Trainer
    from training.syncs import count_host_syncs

    cfg = parse_args(argv)
    with distributed() as env:
        trainer = Trainer(cfg, env)
        per_step: dict[int, list[str]] = {}
        collections: list[int] = []  # generations Python's GC collected during this step
        gc_per_step: dict[int, list[int]] = {}
        log = trainer._log

        def marked(out: dict[str, Any]) -> None:
            log(out)
            per_step[trainer.state.step] = list(seen.calls)
            seen.calls.clear()
            gc_per_step[trainer.state.step] = list(collections)
            collections.clear()

        def on_gc(phase: str, info: dict[str, int]) -> None:
            if phase == "start":
                collections.append(info["generation"])

        trainer._log = marked  # type: ignore[method-assign]
        gc.callbacks.append(on_gc)
        try:
            with count_host_syncs() as seen:
                trainer.fit()
        finally:
            gc.callbacks.remove(on_gc)
        trainer.finish(False)
        return {"per_step": per_step, "log_every": cfg.log_every, "gc_per_step": gc_per_step}


def _sigterm_during(argv: list[str], at: int) -> dict[str, Any]:
    """Train as finetune.main does; the last rank sends itself a real SIGTERM in the middle of
    step `at` (after its backward pass). Returns the step every rank stopped at."""
    import os
    import signal

    from training.config import parse_args
    from training.dist import distributed
    from training.finetune import Trainer

    cfg = parse_args(argv)
    with distributed() as env:
        trainer = Trainer(cfg, env)
        clip = trainer._clip_grads

        def signalled() -> Any:
            if trainer.state.step + 1 == at and env.rank == env.world_size - 1:
                os.kill(os.getpid(), signal.SIGTERM)  # the handler fit() installed records it
            return clip()

        trainer._clip_grads = signalled  # type: ignore[method-assign]
        preempted = trainer.fit()
        trainer.finish(preempted)
        return {"preempted": preempted, "stopped_at": trainer.state.step}


def _dynamo_graphs() -> tuple[int, int]:
    """(graphs compiled, graph breaks) of torch.compile in this process so far (dynamo's own
    counters)."""
    if "torch._dynamo" not in sys.modules:  # nothing compiled yet
        return 0, 0
    from torch._dynamo.utils import counters

    return int(counters["stats"]["unique_graphs"]), sum(counters["graph_break"].values())


def _driver(jobs_file: str) -> None:
    import torch.distributed as dist

    from training.dist import distributed
    from training.finetune import main
    from training.gc_policy import freeze_libraries

    # Dozens of jobs in one process, each ending with a full collection (with the process group
    # alive, as ``finetune.main`` does): frozen, torch's and transformers' ~350k objects are
    # scanned by none of them. Done once, before any job exists, as the program does.
    freeze_libraries()
    jobs = json.loads(Path(jobs_file).read_text(encoding="utf-8"))
    results: dict[str, Any] = {}
    with distributed() as env:
        for i, job in enumerate(jobs):
            kind, name = job["kind"], job.get("name", f"job{i}")
            print(f"[driver rank {env.rank}] job {name} ({kind})", flush=True)
            if kind == "copy_checkpoint":
                if env.is_main:
                    src = Path(job["src"]) / f"step-{job['step']:06d}"
                    dst = Path(job["dst"]) / src.name
                    shutil.rmtree(dst, ignore_errors=True)
                    shutil.copytree(src, dst)
                dist.barrier()
                continue
            if kind == "state_bytes":
                per_rank: list[Any] = [None] * env.world_size
                dist.all_gather_object(per_rank, _state_bytes(job["argv"]))
                results[name] = {"ranks": per_rank}
                continue
            if kind == "host_syncs":
                mine = _host_syncs(job["argv"])
                per_rank_gc: list[Any] = [None] * env.world_size
                dist.all_gather_object(per_rank_gc, mine.pop("gc_per_step"))
                results[name] = {**mine, "gc_per_step": per_rank_gc}
                continue
            if kind == "sigterm_during":
                per_rank = [None] * env.world_size
                dist.all_gather_object(per_rank, _sigterm_during(job["argv"], job["at"]))
                results[name] = {"ranks": per_rank}
                continue
            if kind == "export_logits":
                _export_logits(job["argv"], job["out"])
                results[name] = {"rc": 0}
                continue
            gc.collect()  # the previous job's model and meshes go while the group is alive
            err = io.StringIO()
            graphs = _dynamo_graphs()
            out = io.StringIO()  # kept only for jobs that ask ("stdout": true)
            keep_out = job.get("stdout", False)
            with contextlib.redirect_stderr(err), contextlib.ExitStack() as stack:
                if keep_out:
                    stack.enter_context(contextlib.redirect_stdout(out))
                rc = main(job["argv"])
            rcs: list[Any] = [None] * env.world_size
            after = _dynamo_graphs()
            compiled = (after[0] - graphs[0], after[1] - graphs[1])
            dist.all_gather_object(rcs, (rc, err.getvalue(), compiled, out.getvalue()))
            results[name] = {
                "rc": [r for r, _, _, _ in rcs],
                "stderr": [e for _, e, _, _ in rcs],
                # per rank: (graphs torch.compile made, graph breaks) during the job
                "dynamo": [g for _, _, g, _ in rcs],
            }
            if keep_out:
                results[name]["stdout"] = [o for _, _, _, o in rcs]
        gc.collect()
        if env.is_main:
            out = Path(jobs_file).with_name("results.json")
            out.write_text(json.dumps(results, indent=1), encoding="utf-8")


if __name__ == "__main__":
    _driver(sys.argv[1])
