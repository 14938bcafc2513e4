"""`RunHooks`: what the tracking and profiling flags add to a run, as a few trainer calls.

The trainer calls, in order: `RunHooks.build(trainer)` at the end of its setup (every rank; a
tracker that cannot start stops the run there, on every rank, with one line), `with
hooks.step():` around each optimizer step (profiler steps, the FLOP-counted step),
`hooks.eval_batch(...)` per batch and `hooks.evaluated(...)` in validation, `hooks.close()` when `fit`
ends (every rank) and `hooks.finish(summary)` on rank 0 once summary.json is written.

- `--tracker` / `--use_wandb` (`training.tracking.trackers`): rank 0 builds the tracker and adds
  it to the trainer's metrics fan-out, so it gets every row metrics.jsonl gets; validation
  losses and the FLOP report are added to it too; the end-of-run summary goes to its summary.
- `--use_profiler` (`training.profiling`): every rank records steps 4-6 of this process.
- `--flop_counter` (`training.flops`): every rank counts step `first + --flop_counter_start`;
  rank 0 prints the global count beside the formula and writes `flops.json`.
- `--save_metrics` (`training.metrics.CookbookMetricsSink`): rank 0 writes llama-cookbook's JSON.
"""

from __future__ import annotations

import math
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any

from training.config import PROFILER_STEPS, ConfigError

if TYPE_CHECKING:
    import torch

    from training.flops import StepFlopCounter
    from training.metrics import CookbookMetricsSink
    from training.profiling import StepProfiler
    from training.tracking.trackers import Tracker


class _TrackerSink:
    """The tracker as a metrics sink: rows pass through with any extra figures of their step
    (the FLOP report) merged in, so a tracker sees each step once and in order. Closing is
    left to `RunHooks.finish`, after the summary."""

    def __init__(self, tracker: Tracker) -> None:
        self.tracker = tracker
        self.extra: dict[int, dict[str, Any]] = {}

    def log(self, metrics: Mapping[str, Any], step: int) -> None:
        self.tracker.log({**metrics, **self.extra.pop(step, {})}, step)

    def close(self) -> None:
        pass


class RunHooks:
    """The tracker, profiler, FLOP counter and llama-cookbook metrics file of one run."""

    def __init__(self, *, is_main: bool, first_step: int, device: torch.device) -> None:
        self.is_main = is_main
        self.device = device
        self.next_step = first_step
        """The number of the optimizer step the next `step()` wraps."""
        self.tracker: Tracker | None = None
        self.sink: _TrackerSink | None = None
        self.profiler: StepProfiler | None = None
        self.flops: StepFlopCounter | None = None
        self.cookbook: CookbookMetricsSink | None = None
        self.out_dir: Any = None
        self._step_tokens: Any = None
        self._val_batches: list[tuple[torch.Tensor, int]] = []

    @classmethod
    def build(cls, trainer: Any) -> RunHooks:
        """Hooks for the flags of `trainer` (a `training.finetune.Trainer`, set up up to its
        metrics); adds rank 0's sinks to `trainer.metrics`. Raises
        ConfigError (on every rank) when the run is too short for the profiler or the FLOP
        counter, or when the tracker cannot start."""
        from pathlib import Path

        from training.dist import broadcast_object
        from training.tracking.trackers import open_tracker, run_config, tracker_kind

        cfg, env = trainer.cfg, trainer.env
        first = trainer.state.step + 1
        left = trainer.total_steps - trainer.state.step
        if cfg.use_profiler and left < PROFILER_STEPS:
            raise ConfigError(
                f"--use_profiler: needs {PROFILER_STEPS} steps after the start, this run has {left}"
            )
        if cfg.flop_counter and left <= cfg.flop_counter_start:
            raise ConfigError(
                f"--flop_counter: counts step {first + cfg.flop_counter_start}, "
                f"this run ends at step {trainer.total_steps}"
            )
        hooks = cls(is_main=env.is_main, first_step=first, device=env.device)
        hooks.out_dir = Path(trainer.out_dir)  # local (an s3:// --output_dir is staged there)
        kind = tracker_kind(cfg)
        if kind != "none":
            error = None
            if env.is_main:
                config = run_config(
                    cfg,
                    world_size=env.world_size,
                    layout=trainer.dims.describe(),
                    params=trainer.n_params,
                    trainable_params=trainer.n_trainable,
                )
                try:
                    hooks.tracker = open_tracker(cfg, env.rank, config, hooks.out_dir)
                except Exception as e:  # the library's own error, whatever its type
                    error = f"--tracker {kind}: {type(e).__name__}: {_first_line(e)}"
            error = broadcast_object(error)
            if error is not None:
                raise ConfigError(error)
            if hooks.tracker is not None:
                hooks.sink = _TrackerSink(hooks.tracker)
                trainer.metrics.add(hooks.sink)
        if cfg.save_metrics and env.is_main:
            from training.metrics import CookbookMetricsSink

            hooks.cookbook = CookbookMetricsSink(hooks.out_dir, env.rank)
            trainer.metrics.add(hooks.cookbook)
        if cfg.use_profiler:
            from training.profiling import StepProfiler, profiler_dir

            folder = profiler_dir(hooks.out_dir, cfg.profiler_dir)
            hooks.profiler = StepProfiler(folder, env.rank)
        if cfg.flop_counter:
            from training.flops import StepFlopCounter

            hooks.flops = StepFlopCounter(
                first + cfg.flop_counter_start, trainer.flops_per_token, env.device
            )
            hooks._step_tokens = trainer.batches.step_token_counts
        return hooks

    @contextmanager
    def step(self) -> Iterator[None]:
        """Around one optimizer step: profiler and FLOP counter, when asked for."""
        n = self.next_step
        self.next_step += 1
        if self.profiler is not None:
            self.profiler.start()  # at the first step; a no-op afterwards
        counting = self.flops is not None and n == self.flops.step
        if counting:
            assert self.flops is not None
            self.flops.start()
        yield
        if counting:
            assert self.flops is not None
            self._flop_report(self.flops.stop(tokens=int(self._step_tokens()[1])))
        if self.profiler is not None and self.profiler.step() and self.is_main:
            from training.profiling import ACTIVE

            print(
                f"profiler: steps {n - ACTIVE + 1}-{n} traced in {self.profiler.folder} "
                "(one .pt.trace.json per rank; open in Perfetto or TensorBoard)",
                flush=True,
            )

    def _flop_report(self, report: Any) -> None:
        if not self.is_main:
            return
        from training.flops import write_report

        print(report.line(), flush=True)
        write_report(report, self.out_dir)
        if self.sink is not None:  # merged into that step's row when it is logged
            self.sink.extra[report.step] = {
                "flops_measured": report.measured,
                "flops_formula": report.formula,
            }

    def eval_batch(self, loss_sum: torch.Tensor, batch: Mapping[str, Any]) -> torch.Tensor:
        """One validation batch of this rank: its summed token loss (a device tensor, read
        once in `evaluated`) and its host batch (the label count). Kept only for
        --save_metrics; returns `loss_sum`."""
        if self.cookbook is not None:
            from training.data import IGNORE_INDEX
            from training.dist import host_only

            n = int(host_only((batch["labels"][:, 1:] != IGNORE_INDEX).sum()))
            if n > 0:
                self._val_batches.append((loss_sum, n))
        return loss_sum

    def evaluated(self, loss: float, step: int) -> None:
        """A validation finished after `step` with mean token loss `loss` (all ranks)."""
        if self.cookbook is not None:
            import torch

            sums = (
                torch.stack([s.double() for s, _ in self._val_batches]).tolist()
                if self._val_batches
                else []
            )
            per_batch = [s / n for s, (_, n) in zip(sums, self._val_batches, strict=True)]
            self._val_batches = []
            self.cookbook.evaluated(loss, per_batch)
        if self.tracker is not None:
            ppl = math.exp(min(loss, 700.0))
            self.tracker.log({"eval_loss": loss, "eval_perplexity": ppl}, step)

    def close(self) -> None:
        """The end of `fit` on every rank: a profiler still running stops (and writes)."""
        if self.profiler is not None:
            self.profiler.close()

    def finish(self, summary: Mapping[str, Any]) -> None:
        """Rank 0 at the very end: the summary to the tracker, then the tracker closed."""
        if self.tracker is not None:
            self.tracker.summary(summary)
            self.tracker.close()
            self.tracker = None


def _first_line(e: BaseException) -> str:
    text = str(e).strip()
    return text.splitlines()[0] if text else "(no message)"
