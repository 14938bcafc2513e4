"""Experiment trackers behind the metrics sink interface: W&B, MLflow, TensorBoard.

Each tracker is a `training.metrics.Sink` (`log(metrics, step)`, `close()`) plus `summary(values)`
for the end-of-run figures, so the trainer's per-step rows reach it through the same fan-out as
metrics.jsonl and Prometheus. One tracker per run, chosen by `--tracker` (`--use_wandb` is
llama-cookbook's spelling of `--tracker wandb`); only rank 0 builds it (`open_tracker`), and the
tracker library is imported inside the tracker's constructor, so the other ranks never import
wandb, mlflow or tensorboard.

Names: the trainer's row keys map to tracker names in `TRACKED`. `train/loss`, `train/epoch`,
`eval/loss` and `eval/perplexity` are the names llama-cookbook 0.0.5 logs to W&B
(`llama_cookbook/utils/train_utils.py`: `train`, `evaluation`), so dashboards built on its runs
keep working; the rest (throughput, MFU, memory, goodput) are ours.

Where the data goes (docs/tracking.md):
- W&B: `wandb.init` with llama-cookbook's `wandb_config` fields (`--wandb_project` ...), the run
  folder under `$WANDB_DIR` or else `<output_dir>/wandb`; `WANDB_MODE=offline` writes it locally
  only (`wandb sync` uploads it later).
- MLflow: MLflow's own environment (`MLFLOW_TRACKING_URI`, `MLFLOW_EXPERIMENT_NAME`,
  `MLFLOW_RUN_ID`, read by `mlflow.start_run`); without a tracking URI a file store in
  `<output_dir>/mlruns`, which mlflow 3.x refuses unless `MLFLOW_ALLOW_FILE_STORE=true`
  (set here for that default only; mlflow-skinny has no SQLAlchemy for its sqlite default).
- TensorBoard: event files in `<output_dir>/tensorboard` (`torch.utils.tensorboard`).
"""

from __future__ import annotations

import dataclasses
import json
import math
import os
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

from training.preference import METRICS as PREFERENCE_METRICS

if TYPE_CHECKING:
    from training.config import TrainConfig

TRACKED: dict[str, str] = {
    "loss": "train/loss",
    "epoch": "train/epoch",
    "lr": "train/lr",
    "grad_norm": "train/grad_norm",
    "tokens": "train/tokens",
    "tokens_per_s": "perf/tokens_per_s",
    "step_time_s": "perf/step_time_s",
    "mfu": "perf/mfu",
    "peak_mem_bytes": "memory/peak_bytes",
    "goodput": "goodput/ratio",
    "restarts": "goodput/restarts",
    "steps_redone": "goodput/steps_redone",
    "ckpt_stall_s": "checkpoint/stall_s",
    "eval_loss": "eval/loss",
    "eval_perplexity": "eval/perplexity",
    "flops_measured": "flops/measured_per_step",
    "flops_formula": "flops/formula_per_step",
    **{k: f"train/{k}" for k in PREFERENCE_METRICS},  # --method dpo: TRL's names
    **{f"eval_{k}": f"eval/{k}" for k in PREFERENCE_METRICS},
}
"""Row key -> tracker metric name. Keys not listed here are not sent to trackers."""

MLFLOW_DIR = "mlruns"
TENSORBOARD_DIR = "tensorboard"


class Tracker(Protocol):
    """A metrics sink that also takes the run's end-of-run summary."""

    def log(self, metrics: Mapping[str, Any], step: int) -> None: ...

    def summary(self, values: Mapping[str, Any]) -> None: ...

    def close(self) -> None: ...


def tracker_kind(cfg: TrainConfig) -> str:
    """The tracker the flags ask for: wandb when --use_wandb, else --tracker."""
    return "wandb" if cfg.use_wandb else cfg.tracker


def tracked(metrics: Mapping[str, Any], step: int | None = None) -> dict[str, float]:
    """The numeric values of `metrics` under their tracker names (`TRACKED`).

    As llama-cookbook logs them (`train` in llama_cookbook/utils/train_utils.py at
    0.0.5.post1: `'train/epoch': epoch + 1`, `'train/step'` with each loss): the epoch 1-based
    (the rows' is 0-based), and a training row's `step` as `train/step`. That step is the
    optimizer step (1-based); llama-cookbook's is the 0-based index of the batch, which is
    the same count only without gradient accumulation (docs/tracking.md).
    """
    out: dict[str, float] = {}
    for key, value in metrics.items():
        name = TRACKED.get(key)
        if name is None or isinstance(value, bool) or not isinstance(value, int | float):
            continue
        out[name] = float(value) + (1.0 if key == "epoch" else 0.0)
    if step is not None and "train/loss" in out:
        out["train/step"] = float(step)
    return out


def _numbers(values: Mapping[str, Any]) -> dict[str, float]:
    """The finite numbers of a summary (booleans, strings and lists left out)."""
    return {
        k: float(v)
        for k, v in values.items()
        if isinstance(v, int | float) and not isinstance(v, bool) and math.isfinite(v)
    }


def run_config(cfg: TrainConfig, **extra: Any) -> dict[str, Any]:
    """The run's flags (every TrainConfig field) plus `extra` (world size, layout ...)."""
    return {**dataclasses.asdict(cfg), **extra}


def parse_tags(raw: str | None) -> list[str] | None:
    """--wandb_tags: `a,b` or fire's list form `[a,b]` / `['a', 'b']` -> ["a", "b"]."""
    if raw is None:
        return None
    inner = raw.strip().removeprefix("[").removesuffix("]")
    tags = [t.strip().strip("'\"").strip() for t in inner.split(",")]
    return [t for t in tags if t]


class WandbTracker:
    """A W&B run, as llama-cookbook's `setup_wandb` starts it (finetuning.py at 0.0.5): the
    `wandb_config` fields as `wandb.init` arguments and the flags as the run's config; each row
    is one `run.log(..., step=step)`; the summary goes to `run.summary` as its results do."""

    def __init__(self, cfg: TrainConfig, config: Mapping[str, Any], out_dir: Path) -> None:
        import wandb

        # wandb.init(dir=...) places the run folder; WANDB_DIR, when set, is the user's choice.
        folder = None if os.environ.get("WANDB_DIR") else out_dir
        if folder is not None:
            folder.mkdir(parents=True, exist_ok=True)
        self.run = wandb.init(
            project=cfg.wandb_project,
            entity=cfg.wandb_entity,
            job_type=cfg.wandb_job_type,
            tags=parse_tags(cfg.wandb_tags),
            group=cfg.wandb_group,
            notes=cfg.wandb_notes,
            mode=cfg.wandb_mode,  # type: ignore[arg-type]  # checked by training.config
            dir=folder,
            config=dict(config),
        )
        self.folder = Path(self.run.dir).parent
        """The run folder (`.../wandb/<offline-run-...>`), holding `run-<id>.wandb`."""

    def log(self, metrics: Mapping[str, Any], step: int) -> None:
        values = tracked(metrics, step)
        if values:
            self.run.log(values, step=step)

    def summary(self, values: Mapping[str, Any]) -> None:
        self.run.summary.update(_numbers(values))

    def close(self) -> None:
        self.run.finish()


class MlflowTracker:
    """An MLflow run (`mlflow.start_run`, so MLflow's environment variables apply): the flags
    as params, each row as one asynchronous `log_metrics(..., step=step)` (one batch; `end_run`
    waits for the queue, mlflow/tracking/_tracking_service/client.py `set_terminated`), the
    summary as metrics at the last step logged."""

    def __init__(self, cfg: TrainConfig, config: Mapping[str, Any], out_dir: Path) -> None:
        import mlflow

        if not os.environ.get("MLFLOW_TRACKING_URI"):
            # left to FileStore to create: it adds the Default experiment to a new folder only
            store = out_dir.resolve() / MLFLOW_DIR
            # mlflow 3.x refuses a file store unless this is set (mlflow/store/tracking/
            # file_store.py, FileStore.__init__); the sqlite default needs SQLAlchemy.
            os.environ.setdefault("MLFLOW_ALLOW_FILE_STORE", "true")
            mlflow.set_tracking_uri(store.as_uri())
        self._mlflow = mlflow
        self.run = mlflow.start_run()
        self.run_id: str = self.run.info.run_id
        self.tracking_uri: str = mlflow.get_tracking_uri()
        mlflow.log_params({k: _param(v) for k, v in config.items()})
        self._last_step = 0

    def log(self, metrics: Mapping[str, Any], step: int) -> None:
        values = tracked(metrics, step)
        if values:  # queued: a slow store or server never holds up rank 0 (and so the step)
            self._mlflow.log_metrics(values, step=step, synchronous=False)
        self._last_step = max(self._last_step, step)

    def summary(self, values: Mapping[str, Any]) -> None:
        numbers = {f"summary/{k}": v for k, v in _numbers(values).items()}
        if numbers:
            self._mlflow.log_metrics(numbers, step=self._last_step)

    def close(self) -> None:
        self._mlflow.end_run()


def _param(value: Any) -> str:
    """An MLflow param value (a string; MLflow keeps at most 6000 characters)."""
    return (value if isinstance(value, str) else json.dumps(value))[:6000]


class TensorBoardTracker:
    """Event files in `<output_dir>/tensorboard` (`torch.utils.tensorboard.SummaryWriter`):
    one scalar per metric and step (TensorBoard stores float32), the flags as a text entry."""

    def __init__(self, cfg: TrainConfig, config: Mapping[str, Any], out_dir: Path) -> None:
        from torch.utils.tensorboard import SummaryWriter

        self.folder = out_dir / TENSORBOARD_DIR
        self.writer = SummaryWriter(log_dir=str(self.folder))
        self.writer.add_text("config", json.dumps(dict(config), indent=1, default=str))
        self._last_step = 0

    def log(self, metrics: Mapping[str, Any], step: int) -> None:
        for name, value in tracked(metrics, step).items():
            self.writer.add_scalar(name, value, global_step=step)
        self._last_step = max(self._last_step, step)

    def summary(self, values: Mapping[str, Any]) -> None:
        for name, value in _numbers(values).items():
            self.writer.add_scalar(f"summary/{name}", value, global_step=self._last_step)

    def close(self) -> None:
        self.writer.close()


TRACKER_CLASSES: dict[str, Any] = {
    "wandb": WandbTracker,
    "mlflow": MlflowTracker,
    "tensorboard": TensorBoardTracker,
}


def open_tracker(
    cfg: TrainConfig, rank: int, config: Mapping[str, Any], out_dir: Path | None = None
) -> Tracker | None:
    """The run's tracker on rank 0 (its library imported now), None on other ranks or with
    `--tracker none`. Its files go under `out_dir` (the run's local output folder, which an
    `s3://` --output_dir stages; --output_dir itself by default). Raises whatever the library
    raises when it cannot start a run."""
    kind = tracker_kind(cfg)
    if rank != 0 or kind == "none":
        return None
    folder = Path(cfg.output_dir) if out_dir is None else out_dir
    tracker: Tracker = TRACKER_CLASSES[kind](cfg, config, folder)
    return tracker
