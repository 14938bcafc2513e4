"""Metrics: one small interface (`log(metrics, step)`, `close()`) fanned out to sinks.

Sinks on rank 0: `JsonlSink` (`<output_dir>/metrics.jsonl`, one line per optimizer step) and
`ProgressSink` (a tqdm bar on a terminal, a plain line every --log_every steps otherwise). Any
object with the same two methods (the `Sink` protocol) can join, e.g. a Prometheus exporter,
an experiment tracker (`training.tracking`) or llama-cookbook's `--save_metrics` JSON
(`CookbookMetricsSink`).
At the end `write_summary` writes llama-recipes' summary keys to `summary.json` and
`plot_metrics` draws loss and throughput per step into `metrics.png`.

Goodput (`Goodput`, kept in `<output_dir>/goodput.json` across restarts of the job): the time of
the optimizer steps in the final history divided by the wall time since the job first started.
Start-up, rendezvous, checkpoint stalls, evaluation and steps that a restart redid all count
as lost; `restarts` and `steps_redone` say why.
"""

from __future__ import annotations

import json
import math
import resource
import sys
import time
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import IO, Any, Protocol

import torch

# Dense bf16 peak FLOP/s by device-name fragment (first match wins). Unknown devices: no MFU.
# The H100 variants as torchtitan's get_peak_flops (torchtitan/tools/utils.py), from NVIDIA's
# H100 datasheet: NVL and PCIe before the SXM figure that every other H100 name gets
# (torch.cuda.get_device_name: "NVIDIA H100 80GB HBM3" for SXM, "NVIDIA H100 PCIe", "NVIDIA H100 NVL").
PEAK_FLOPS: tuple[tuple[str, float], ...] = (
    ("H200", 989e12),
    ("H100 NVL", 835e12),
    ("H100 PCIe", 756e12),
    ("H100", 989e12),
    ("A100", 312e12),
    ("A10G", 125e12),
    ("L40S", 362e12),
    ("L4", 121e12),
)


class Sink(Protocol):
    """Where per-step metrics go."""

    def log(self, metrics: Mapping[str, Any], step: int) -> None: ...

    def close(self) -> None: ...


class Metrics:
    """Fans `log` out to every sink; a rank with no sinks logs nothing."""

    def __init__(self, sinks: Sequence[Sink] = ()) -> None:
        self.sinks = list(sinks)

    def add(self, sink: Sink) -> None:
        self.sinks.append(sink)

    def log(self, metrics: Mapping[str, Any], step: int) -> None:
        for sink in self.sinks:
            sink.log(metrics, step)

    def close(self) -> None:
        for sink in self.sinks:
            sink.close()
        self.sinks = []


class JsonlSink:
    """Appends one JSON object per optimizer step; a resumed run continues the same file.

    `resume_step`: rows after it (steps a crashed run logged past its last checkpoint, which the
    resumed run repeats) are dropped first, so every step appears once.
    """

    def __init__(self, path: Path, resume_step: int | None = None) -> None:
        path.parent.mkdir(parents=True, exist_ok=True)
        self.path = path
        self.kept: list[dict[str, Any]] = []
        """Rows of an earlier run kept on resume (steps up to the checkpoint)."""
        self.dropped = 0
        """Rows an earlier run logged past the checkpoint: the steps this run does again."""
        if resume_step is not None and path.is_file():
            rows = _read_rows(path)
            self.kept = [r for r in rows if r.get("step", 0) <= resume_step]
            self.dropped = len({r.get("step") for r in rows if r.get("step", 0) > resume_step})
            path.write_text("".join(json.dumps(r) + "\n" for r in self.kept), encoding="utf-8")
        elif resume_step is None and path.is_file():
            path.unlink()  # a fresh run starts a fresh file
        self._f: IO[str] = path.open("a", encoding="utf-8")

    def log(self, metrics: Mapping[str, Any], step: int) -> None:
        self._f.write(json.dumps({"step": step, **metrics}, sort_keys=False) + "\n")
        self._f.flush()

    def close(self) -> None:
        self._f.close()


class ProgressSink:
    """A tqdm bar when stderr is a terminal; otherwise one readable line every `every` steps."""

    def __init__(self, total: int, every: int = 1, initial: int = 0, bar: bool = True) -> None:
        self.every = max(every, 1)
        self.total = total
        self._bar = None
        if bar and sys.stderr.isatty():
            from tqdm import tqdm

            self._bar = tqdm(total=total, initial=initial, desc="train", unit="step", leave=True)

    def log(self, metrics: Mapping[str, Any], step: int) -> None:
        if self._bar is not None:
            self._bar.update(step - self._bar.n)
            self._bar.set_postfix_str(_short(metrics), refresh=False)
            return
        if step % self.every == 0 or step == self.total:
            print(f"step {step}/{self.total} | {_short(metrics)}", flush=True)

    def close(self) -> None:
        if self._bar is not None:
            self._bar.close()


class CookbookMetricsSink:
    """llama-cookbook's `--save_metrics` file: `metrics_data_<rank>-<YYYY-MM-DD_HH-MM-SS>.json`
    in the output folder, with the eight lists its `save_to_json` writes
    (`llama_cookbook/utils/train_utils.py` at 0.0.5.post1), so its `plot_metrics.py` reads it.

    Differences, by design: a train step is an optimizer step and its loss the global batch's
    mean token loss (llama-cookbook appends each micro-batch's loss divided by the
    accumulation steps, on each rank); `val_step_loss` holds rank 0's validation batches as
    there. Rewritten at most every `every_s` seconds, after each validation and at the end
    (llama-cookbook rewrites it every step). Each start of a job writes its own file.
    """

    KEYS = (
        "train_step_loss",
        "train_epoch_loss",
        "train_step_perplexity",
        "train_epoch_perplexity",
        "val_step_loss",
        "val_epoch_loss",
        "val_step_perplexity",
        "val_epoch_perplexity",
    )

    def __init__(self, out_dir: Path, rank: int = 0, every_s: float = 10.0) -> None:
        from datetime import datetime

        stamp = datetime.now().strftime("%Y-%m-%d_%H-%M-%S")
        self.path = out_dir / f"metrics_data_{rank}-{stamp}.json"
        self.every_s = every_s
        self._steps: list[tuple[int, float]] = []  # (epoch, loss) per optimizer step
        self.val_step_loss: list[float] = []
        self.val_epoch_loss: list[float] = []
        self._written = 0.0

    def log(self, metrics: Mapping[str, Any], step: int) -> None:
        self._steps.append((int(metrics.get("epoch", 0)), float(metrics["loss"])))
        if time.monotonic() - self._written >= self.every_s:
            self.write()

    def evaluated(self, loss: float, batch_losses: Sequence[float]) -> None:
        """One validation: its mean loss and its batches' losses."""
        self.val_step_loss.extend(batch_losses)
        self.val_epoch_loss.append(loss)
        self.write()

    def data(self) -> dict[str, list[float]]:
        """The file's content: step lists, and per epoch the mean of its step losses."""
        epochs: dict[int, list[float]] = {}
        for epoch, loss in self._steps:
            epochs.setdefault(epoch, []).append(loss)
        epoch_loss = [sum(v) / len(v) for v in epochs.values()]
        step_loss = [loss for _, loss in self._steps]

        def ppl(xs: Sequence[float]) -> list[float]:
            return [math.exp(min(x, 700.0)) for x in xs]

        return {
            "train_step_loss": step_loss,
            "train_epoch_loss": epoch_loss,
            "train_step_perplexity": ppl(step_loss),
            "train_epoch_perplexity": ppl(epoch_loss),
            "val_step_loss": list(self.val_step_loss),
            "val_epoch_loss": list(self.val_epoch_loss),
            "val_step_perplexity": ppl(self.val_step_loss),
            "val_epoch_perplexity": ppl(self.val_epoch_loss),
        }

    def write(self) -> None:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        tmp = self.path.with_name(self.path.name + ".tmp")
        tmp.write_text(json.dumps(self.data()), encoding="utf-8")
        tmp.replace(self.path)
        self._written = time.monotonic()

    def close(self) -> None:
        self.write()


def _short(m: Mapping[str, Any]) -> str:
    parts = [f"epoch {m.get('epoch', 0)}", f"loss {m['loss']:.4f}"]
    if "grad_norm" in m:
        parts.append(f"grad_norm {m['grad_norm']:.3f}")
    parts.append(f"lr {m.get('lr', 0.0):.2e}")
    if "tokens_per_s" in m:
        parts.append(f"{m['tokens_per_s']:,.0f} tok/s")
    if m.get("mfu") is not None:
        parts.append(f"mfu {100 * m['mfu']:.1f}%")
    return " | ".join(parts)


def peak_memory_bytes(device: torch.device) -> int:
    """Peak memory of this process: CUDA allocator peak, or the RSS high-water mark on CPU."""
    if device.type == "cuda":
        return int(torch.cuda.max_memory_allocated(device))
    rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return int(rss if sys.platform == "darwin" else rss * 1024)


def peak_flops(device: torch.device) -> float | None:
    """Dense bf16 peak FLOP/s of one device, when known (None on CPU and unknown GPUs)."""
    if device.type != "cuda":
        return None
    return peak_flops_of(torch.cuda.get_device_name(device))


def peak_flops_of(device_name: str) -> float | None:
    """Dense bf16 peak FLOP/s for a CUDA device name (`PEAK_FLOPS`), None when unknown."""
    for fragment, flops in PEAK_FLOPS:
        if fragment in device_name:
            return flops
    return None


def write_summary(path: Path, summary: Mapping[str, Any]) -> None:
    """Write summary.json (llama-recipes' keys plus throughput and memory)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    clean = {
        k: (None if isinstance(v, float) and not math.isfinite(v) else v)
        for k, v in summary.items()
    }
    path.write_text(json.dumps(clean, indent=2) + "\n", encoding="utf-8")


def _read_rows(path: Path) -> list[dict[str, Any]]:
    """Rows of a metrics.jsonl; a torn last line (a killed writer) is skipped."""
    out = []
    for line in path.read_text(encoding="utf-8").splitlines():
        try:
            out.append(json.loads(line))
        except json.JSONDecodeError:
            continue
    return out


GOODPUT_FILE = "goodput.json"


@dataclass
class Goodput:
    """The job's productive time against its wall time, across restarts (rank 0 keeps it)."""

    started_at: float
    """Unix time the job first started (its first process)."""
    restarts: int = 0
    """Times the job's processes started again after the first start (resumed runs)."""
    steps_redone: int = 0
    """Steps trained again because a restart went back to an older checkpoint."""
    productive_s: float = 0.0
    """Seconds spent in the optimizer steps of the final history."""

    def ratio(self, now: float | None = None) -> float:
        """productive_s / wall seconds since `started_at` (0..1)."""
        wall = (time.time() if now is None else now) - self.started_at
        return min(1.0, self.productive_s / wall) if wall > 0 else 0.0

    def as_dict(self, now: float | None = None) -> dict[str, Any]:
        now = time.time() if now is None else now
        return {
            "goodput": self.ratio(now),
            "productive_s": self.productive_s,
            "wall_s": now - self.started_at,
            "restarts": self.restarts,
            "steps_redone": self.steps_redone,
        }

    def save(self, path: Path) -> None:
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_name(path.name + ".tmp")
        tmp.write_text(json.dumps(asdict(self), indent=2) + "\n", encoding="utf-8")
        tmp.replace(path)

    @classmethod
    def resume(cls, path: Path, jsonl: JsonlSink) -> Goodput | None:
        """The ledger of an earlier start of this job, counted one restart further, with the
        steps `jsonl` dropped as redone and the kept rows' step times as productive; None when
        there was no earlier start."""
        if not path.is_file():
            return None
        try:
            raw = json.loads(path.read_text(encoding="utf-8"))
            ledger = cls(
                started_at=float(raw["started_at"]),
                restarts=int(raw.get("restarts", 0)) + 1,
                steps_redone=int(raw.get("steps_redone", 0)) + jsonl.dropped,
            )
        except (ValueError, KeyError, TypeError):
            return None
        ledger.productive_s = sum(float(r.get("step_time_s", 0.0)) for r in jsonl.kept)
        return ledger


def read_jsonl(path: Path) -> list[dict[str, Any]]:
    with path.open(encoding="utf-8") as f:
        return [json.loads(line) for line in f if line.strip()]


def plot_metrics(jsonl: Path, png: Path) -> None:
    """Loss and tokens/s per step, one figure with two panels (matplotlib, Agg backend)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    rows = read_jsonl(jsonl)
    if not rows:
        return
    steps = [r["step"] for r in rows]
    fig, (ax1, ax2) = plt.subplots(2, 1, figsize=(8, 6), sharex=True)
    ax1.plot(steps, [r["loss"] for r in rows], lw=1)
    ax1.set_ylabel("train loss")
    ax1.grid(alpha=0.3)
    ax2.plot(steps, [r.get("tokens_per_s", 0.0) for r in rows], lw=1, color="tab:orange")
    ax2.set_ylabel("tokens/s (global)")
    ax2.set_xlabel("optimizer step")
    ax2.grid(alpha=0.3)
    fig.tight_layout()
    png.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(png, dpi=100)
    plt.close(fig)


def format_summary(
    s: Mapping[str, Any],
    exported: Sequence[tuple[str, object]],
    ckpt_root: object,
    preempted_exit: int,
) -> str:
    """The summary block rank 0 prints at the end: `s` is summary.json's content, `exported`
    the (what, folder) pairs the export wrote."""

    def num(v: Any, fmt: str) -> str:
        return "-" if v is None or (isinstance(v, float) and math.isnan(v)) else format(v, fmt)

    lines = [
        "",
        "=== training summary ===",
        f"steps                {s['steps']} ({s['layout']}, world size {s['world_size']})",
        f"train loss (avg)     {num(s['avg_train_loss'], '.4f')}   perplexity {num(s['avg_train_prep'], '.2f')}",
        f"eval loss (avg)      {num(s['avg_eval_loss'], '.4f')}   perplexity {num(s['avg_eval_prep'], '.2f')}",
        f"throughput           {s['tokens_per_s']:,.0f} tokens/s (global)",
        f"peak memory          {s['peak_mem_bytes'] / 2**20:,.0f} MiB (max over ranks)",
        f"epoch / checkpoint   {num(s['avg_epoch_time'], '.1f')} s / {num(s['avg_checkpoint_time'], '.2f')} s (avg stall)",
        f"goodput              {100 * s['goodput']:.1f}% ({s['productive_s']:.1f} s of steps in "
        f"{s['wall_s']:.1f} s; {s['restarts']} restarts, {s['steps_redone']} steps redone)",
        f"checkpoints          {ckpt_root}",
    ]
    lines += [f"{what:<20} {path}" for what, path in exported]
    if s["preempted"]:
        lines.append(
            f"stopped by SIGTERM at step {s['steps']}: exit {preempted_exit}; the job resumes "
            "from its newest complete checkpoint (--resume)"
        )
    return "\n".join([*lines, ""])  # a blank line closes the block (the local runner quotes it)
