"""`--use_profiler`: the torch.profiler schedule, its trace files, and its flags.

If these fail, `--use_profiler` records other steps than llama-cookbook's schedule (wait 1,
warm-up 2, active 3: `profile` in llama_cookbook/utils/train_utils.py at 0.0.5.post1), writes no
Chrome trace (the file Perfetto and TensorBoard open), keeps profiling after the recorded steps,
loses the recorded steps when training stops early, or a too-short run or a misplaced
`--profiler_dir` reaches the training loop instead of stopping with one line. The 2-process run
with its per-rank traces is in test_trackers.py.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from training.config import PROFILER_STEPS, ConfigError, parse_args


def _work() -> None:
    import torch

    a = torch.ones(16, 16)
    (a @ a).sum()


def _steps(trace: Path) -> set[str]:
    events = json.loads(trace.read_text(encoding="utf-8"))["traceEvents"]
    return {e["name"] for e in events if e.get("name", "").startswith("ProfilerStep#")}


def test_records_steps_four_to_six_then_stops(tmp_path: Path) -> None:
    from training.profiling import StepProfiler

    prof = StepProfiler(tmp_path / "traces", rank=3)
    written = []
    for _ in range(PROFILER_STEPS + 2):
        prof.start()  # the hook calls it before every step: only the first one starts
        _work()
        written.append(prof.step())
    assert written == [False] * (PROFILER_STEPS - 1) + [True, False, False]
    assert prof.done and prof.steps == PROFILER_STEPS  # steps 7 and 8 ran unprofiled
    (trace,) = prof.traces()
    assert trace.name.startswith("rank3.") and trace.name.endswith(".pt.trace.json")
    assert _steps(trace) == {"ProfilerStep#3", "ProfilerStep#4", "ProfilerStep#5"}


def test_a_stop_inside_the_recorded_steps_keeps_them(tmp_path: Path) -> None:
    """torch writes the trace when a recording profiler stops (profiler.py's action map:
    RECORD -> None runs stop_trace and trace_ready)."""
    from training.profiling import StepProfiler

    prof = StepProfiler(tmp_path, rank=0)
    prof.start()
    for _ in range(4):  # wait, warm-up, warm-up, first recorded step
        _work()
        prof.step()
    _work()
    prof.close()
    (trace,) = prof.traces()
    assert _steps(trace) == {"ProfilerStep#3", "ProfilerStep#4"}
    prof.close()  # idempotent


def test_profiler_dir_defaults_to_the_output_folder() -> None:
    from training.profiling import profiler_dir

    assert profiler_dir("runs/x", "") == Path("runs/x/profiler")
    assert profiler_dir("runs/x", "/traces") == Path("/traces")


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--use_profiler", "--max_train_step=5"], "--use_profiler: needs at least 6 steps"),
        (["--use_profiler", "--flop_counter"], "--flop_counter: cannot be combined"),
    ],
)
def test_profiler_flags_are_checked_before_any_work(argv: list[str], message: str) -> None:
    with pytest.raises(ConfigError) as err:
        parse_args(argv)
    assert str(err.value).startswith(message), str(err.value)
    assert "\n" not in str(err.value)


def test_profiler_flags_parse() -> None:
    cfg = parse_args(["--use_profiler", "--profiler_dir=/traces", "--max_train_step=6"])
    assert (cfg.use_profiler, cfg.profiler_dir) == (True, "/traces")
