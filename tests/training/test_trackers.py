"""Experiment trackers on a real 2-process run: W&B (offline), MLflow and TensorBoard.

If these fail, a run started with `--use_wandb` / `--tracker mlflow|tensorboard` leaves no
tracker data, or data that differs from metrics.jsonl (the losses read back from W&B's run file,
MLflow's store and TensorBoard's event files are compared with it), or `--use_profiler` writes no
trace, or `--save_metrics` writes a file llama-cookbook's plotting cannot read, or a rank other
than 0 imports a tracker library (each worker reports its `sys.modules`), or a tracker that
cannot start hangs the other ranks instead of stopping the run with one line.

Nothing leaves the machine: W&B runs with WANDB_MODE=offline (its run folder is read back with
wandb's own reader, `wandb leet inspect --json`, wandb/cli/leet.py at 0.31.0), MLflow writes a
local file store (`MlflowClient.get_metric_history` reads it) with its telemetry off
(MLFLOW_DISABLE_TELEMETRY, mlflow/telemetry/utils.py at 3.18.0), TensorBoard writes event files
(read with tensorboard's EventAccumulator).

Run as a script (by torchrun), this file is the driver: it runs the jobs of JOBS.json in one
process group through `training.finetune.main`, then each rank writes which tracker modules it
has imported.
"""

from __future__ import annotations

import contextlib
import io
import json
import math
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

TRACKER_MODULES = ("wandb", "mlflow", "tensorboard", "torch.utils.tensorboard")
STEPS = 6  # the profiler's wait 1 + warm-up 2 + active 3
EVAL_BATCHES = 2

# The keys llama-cookbook's save_to_json writes (llama_cookbook/utils/train_utils.py at
# 0.0.5.post1), which its utils/plot_metrics.py reads.
COOKBOOK_KEYS = {
    "train_step_loss",
    "train_epoch_loss",
    "train_step_perplexity",
    "train_epoch_perplexity",
    "val_step_loss",
    "val_epoch_loss",
    "val_step_perplexity",
    "val_epoch_perplexity",
}


def _jobs(base: Path) -> list[dict[str, Any]]:
    from tests.training.helpers import TINY, merge, run_dirs

    common = merge(
        TINY,
        ["--enable_fsdp", "--batch_size_training=2", f"--max_train_step={STEPS}"],
    )
    # a file where the TensorBoard folder goes: the tracker cannot start
    blocked = base / "blocked" / "out" / "tensorboard"
    blocked.parent.mkdir(parents=True, exist_ok=True)
    blocked.write_text("not a folder\n", encoding="utf-8")

    def job(name: str, *extra: str) -> dict[str, Any]:
        return {"name": name, "argv": merge(common, run_dirs(base, name), list(extra))}

    return [
        job(
            "wandb",
            "--use_wandb",
            "--wandb_project=eks-fsdp-tests",
            "--wandb_tags=[tiny,ci]",
            "--wandb_job_type=fine-tune",
            "--use_profiler",
            "--save_metrics",
            "--run_validation",
            f"--max_eval_step={EVAL_BATCHES}",
        ),
        job("mlflow", "--tracker=mlflow", "--run_validation", f"--max_eval_step={EVAL_BATCHES}"),
        job("tensorboard", "--tracker=tensorboard"),
        job("blocked", "--tracker=tensorboard"),
    ]


def _launch(base: Path) -> dict[str, Any]:
    from tests.training.helpers import run, torchrun_cmd

    jobs_file = base / "jobs.json"
    jobs_file.write_text(json.dumps(_jobs(base)), encoding="utf-8")
    proc = run(
        torchrun_cmd(2, str(Path(__file__).resolve()), str(jobs_file)),
        timeout=600,
        WANDB_MODE="offline",
        WANDB_DIR="",  # the run folder goes to --output_dir
        WANDB_SILENT="true",
        WANDB_ERROR_REPORTING="false",
        MLFLOW_TRACKING_URI="",  # the default file store in --output_dir
        MLFLOW_DISABLE_TELEMETRY="true",
        DO_NOT_TRACK="true",
    )
    results = base / "results.json"
    if proc.returncode != 0 or not results.is_file():
        raise AssertionError(
            f"launch failed ({proc.returncode}):\n{proc.stdout[-3000:]}\n{proc.stderr[-5000:]}"
        )
    return {"base": str(base), **json.loads(results.read_text(encoding="utf-8"))}


@pytest.fixture(scope="module")
def runs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    from tests.shared import once

    return once(tmp_path_factory, "trackers", _launch)


def _losses(runs: dict[str, Any], name: str) -> dict[int, float]:
    from tests.training.helpers import metrics

    return {r["step"]: r["loss"] for r in metrics(Path(runs["base"]), name)}


def _out(runs: dict[str, Any], name: str) -> Path:
    return Path(runs["base"]) / name / "out"


@pytest.mark.slow
def test_runs_succeed_and_other_ranks_never_import_trackers(runs: dict[str, Any]) -> None:
    for name in ("wandb", "mlflow", "tensorboard"):
        assert runs[name]["rc"] == [0, 0], runs[name]["stderr"]
    rank0, rank1 = runs["modules"]
    assert rank1 == [], f"rank 1 imported {rank1}"
    # the check sees the libraries where they are imported: rank 0 used all three
    assert {"wandb", "mlflow", "tensorboard"} <= set(rank0)


@pytest.mark.slow
def test_wandb_offline_run_folder_holds_the_logged_losses(runs: dict[str, Any]) -> None:
    folders = list((_out(runs, "wandb") / "wandb").glob("offline-run-*"))
    assert len(folders) == 1, folders
    wandb_cli = Path(sys.executable).with_name("wandb")
    proc = subprocess.run(
        [str(wandb_cli), "leet", "inspect", "--json", str(folders[0])],
        capture_output=True,
        text=True,
        timeout=120,
        env={**os.environ, "WANDB_ERROR_REPORTING": "false"},
    )
    assert proc.returncode == 0, proc.stderr
    records = [json.loads(line) for line in proc.stdout.splitlines() if line.strip()]
    history = [r["history"] for r in records if r["type"] == "history"]
    logged = {h["step"]["num"]: h["item"] for h in history}
    losses = _losses(runs, "wandb")
    assert {s: logged[s]["train/loss"] for s in losses} == losses
    assert sorted(logged) == list(range(1, STEPS + 1))
    for key in ("train/lr", "train/grad_norm", "perf/tokens_per_s", "memory/peak_bytes"):
        assert all(key in item for item in logged.values()), key
    assert all(0 < item["goodput/ratio"] <= 1 for item in logged.values())
    # llama-cookbook's names: the optimizer step as train/step, the epoch counted from 1
    assert all(item["train/step"] == s and item["train/epoch"] >= 1 for s, item in logged.items())
    cookbook = json.loads(next(_out(runs, "wandb").glob("metrics_data_0-*.json")).read_text())
    assert logged[STEPS]["eval/loss"] == cookbook["val_epoch_loss"][0]
    assert logged[STEPS]["eval/perplexity"] == pytest.approx(
        math.exp(cookbook["val_epoch_loss"][0])
    )
    (run,) = [r["run"] for r in records if r["type"] == "run"]
    assert run["project"] == "eks-fsdp-tests"
    assert run["tags"] == ["tiny", "ci"]
    assert run["job_type"] == "fine-tune"
    assert run["config"]["update"]["lr"] == 1e-3  # the flags are the run's config
    assert run["config"]["update"]["world_size"] == 2


@pytest.mark.slow
def test_profiler_writes_one_trace_per_rank_of_the_recorded_steps(runs: dict[str, Any]) -> None:
    folder = _out(runs, "wandb") / "profiler"
    for rank in (0, 1):
        (trace,) = folder.glob(f"rank{rank}.*.pt.trace.json")
        events = json.loads(trace.read_text(encoding="utf-8"))["traceEvents"]
        steps = {e["name"] for e in events if e.get("name", "").startswith("ProfilerStep#")}
        # torch numbers the profiler's steps from 0: steps 4-6 of the run are #3-#5
        assert steps == {"ProfilerStep#3", "ProfilerStep#4", "ProfilerStep#5"}
        assert any(e.get("name") == "aten::mm" for e in events)  # operators are recorded


@pytest.mark.slow
def test_save_metrics_writes_llama_cookbooks_json(runs: dict[str, Any]) -> None:
    (path,) = _out(runs, "wandb").glob("metrics_data_0-*.json")
    data = json.loads(path.read_text(encoding="utf-8"))
    assert set(data) == COOKBOOK_KEYS
    losses = _losses(runs, "wandb")
    assert data["train_step_loss"] == [losses[s] for s in sorted(losses)]
    assert data["train_epoch_loss"] == [pytest.approx(sum(losses.values()) / len(losses))]
    assert data["train_step_perplexity"] == [
        pytest.approx(math.exp(x)) for x in data["train_step_loss"]
    ]
    assert len(data["val_step_loss"]) == EVAL_BATCHES  # rank 0's validation batches
    assert len(data["val_epoch_loss"]) == 1


@pytest.mark.slow
def test_mlflow_store_holds_the_logged_losses(
    runs: dict[str, Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    from mlflow.tracking import MlflowClient

    monkeypatch.setenv("MLFLOW_ALLOW_FILE_STORE", "true")  # as the tracker's default store
    monkeypatch.setenv("MLFLOW_DISABLE_TELEMETRY", "true")

    store = _out(runs, "mlflow") / "mlruns"
    client = MlflowClient(tracking_uri=store.resolve().as_uri())
    experiments = client.search_experiments()
    runs_found = client.search_runs([e.experiment_id for e in experiments])
    assert len(runs_found) == 1
    run = runs_found[0]
    history = client.get_metric_history(run.info.run_id, "train/loss")
    assert {m.step: m.value for m in history} == _losses(runs, "mlflow")
    assert run.data.params["lr"] == "0.001"
    assert run.data.params["tracker"] == "mlflow"
    assert run.info.status == "FINISHED"
    assert "eval/loss" in run.data.metrics
    assert run.data.metrics["summary/steps"] == STEPS


@pytest.mark.slow
def test_tensorboard_event_files_hold_the_logged_losses(runs: dict[str, Any]) -> None:
    import numpy as np
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    acc = EventAccumulator(str(_out(runs, "tensorboard") / "tensorboard"))
    acc.Reload()
    scalars = {e.step: e.value for e in acc.Scalars("train/loss")}
    # TensorBoard keeps scalars as float32
    assert scalars == {s: float(np.float32(v)) for s, v in _losses(runs, "tensorboard").items()}
    assert {e.step for e in acc.Scalars("perf/tokens_per_s")} == set(range(1, STEPS + 1))


@pytest.mark.slow
def test_a_tracker_that_cannot_start_stops_every_rank_with_one_line(runs: dict[str, Any]) -> None:
    job = runs["blocked"]
    assert job["rc"] == [2, 2]
    lines = job["stderr"][0].strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith(
        "eks-fsdp train: error: --tracker tensorboard: "
    ), lines
    assert job["stderr"][1] == ""


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--tracker=wb"], "--tracker: must be one of none, wandb, mlflow, tensorboard"),
        (["--use_wandb", "--tracker=mlflow"], "--use_wandb: logs to W&B; it cannot be combined"),
        (["--use_wandb", "--wandb_mode=ofline"], "--wandb_mode: must be one of online, offline"),
        (["--use_wandb", "--wandb_project= "], "--wandb_project: must not be empty"),
    ],
)
def test_tracker_flags_are_checked_before_any_work(argv: list[str], message: str) -> None:
    from training.config import ConfigError, parse_args

    with pytest.raises(ConfigError) as err:
        parse_args(argv)
    assert str(err.value).startswith(message), str(err.value)
    assert "\n" not in str(err.value)


def test_wandb_config_fields_reach_wandb_init_as_llama_cookbook_passes_them() -> None:
    """llama-cookbook's setup_wandb passes its wandb_config dataclass to wandb.init as keyword
    arguments (llama_cookbook/finetuning.py at 0.0.5.post1); tags there are a list."""
    from training.config import parse_args
    from training.tracking.trackers import parse_tags, tracker_kind

    assert parse_tags("a,b") == ["a", "b"]
    assert parse_tags("[a, b]") == ["a", "b"]
    assert parse_tags("['a','b']") == ["a", "b"]
    assert parse_tags(None) is None
    cfg = parse_args(["--use_wandb", "--wandb_group=g", "--wandb_mode=offline"])
    assert tracker_kind(cfg) == "wandb"
    assert tracker_kind(parse_args(["--tracker=mlflow"])) == "mlflow"


def test_tracked_names_keep_llama_cookbooks_and_drop_non_numbers() -> None:
    from training.tracking.trackers import tracked

    row = {"loss": 2.5, "epoch": 0, "lr": 1e-4, "time": 1.0, "layout": "x", "preempted": True}
    # llama-cookbook logs the epoch 1-based ('train/epoch': epoch + 1) and a train/step
    assert tracked(row) == {"train/loss": 2.5, "train/epoch": 1.0, "train/lr": 1e-4}
    assert tracked(row, 7) == {
        "train/loss": 2.5,
        "train/epoch": 1.0,
        "train/lr": 1e-4,
        "train/step": 7.0,
    }
    assert tracked({"eval_loss": 2.0, "epoch": 1}, 8) == {"eval/loss": 2.0, "train/epoch": 2.0}


# ---------------------------------------------------------------------------------------------
# the driver (runs inside torchrun)


def _driver(jobs_file: str) -> None:
    import torch.distributed as dist

    from training.dist import distributed
    from training.finetune import main

    jobs = json.loads(Path(jobs_file).read_text(encoding="utf-8"))
    results: dict[str, Any] = {}
    with distributed() as env:
        for job in jobs:
            err = io.StringIO()
            with contextlib.redirect_stderr(err):
                rc = main(job["argv"])
            per_rank: list[Any] = [None] * env.world_size
            dist.all_gather_object(per_rank, (rc, err.getvalue()))
            results[job["name"]] = {
                "rc": [r for r, _ in per_rank],
                "stderr": [e for _, e in per_rank],
            }
        seen = sorted(m for m in sys.modules if m in TRACKER_MODULES)
        modules: list[Any] = [None] * env.world_size
        dist.all_gather_object(modules, seen)
        results["modules"] = modules
        if env.is_main:
            out = Path(jobs_file).with_name("results.json")
            out.write_text(json.dumps(results, indent=1), encoding="utf-8")


if __name__ == "__main__":
    _driver(sys.argv[1])
