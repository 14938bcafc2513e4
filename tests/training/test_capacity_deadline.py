"""A run told when its capacity ends stops before then, checkpointed, with exit 0, and resumes.

If these fail, a job on a capacity block no longer reacts to ``EKS_FSDP_CAPACITY_ENDS_AT``
(the block's ``scaleDownAt``, docs/capacity.md): it trains on until the scale-down drains its
node and loses the steps since its last checkpoint, or it exits 143 and crash-loops on nodes
that are going away; or a SIGTERM during the last minutes no longer wins over the capacity
end (exit 143, docs/adr/0004); or a bad time in the variable no longer stops the run with one
line. The run is real: ``python -m training.finetune`` on the CPU with the tiny model.
"""

from __future__ import annotations

import datetime as dt
import json
import time
from pathlib import Path

import pytest

from tests.training.helpers import TINY, ckpt_dir, finetune_cmd, merge, metrics, run, run_dirs
from training.checkpoint import MARKER, latest_complete
from training.config import ConfigError, parse_args
from training.deadline import (
    CAPACITY_VOTE,
    ENV,
    SIGTERM_VOTE,
    CapacityDeadline,
    parse_ends_at,
)

ENDS_IN_S = 60
"""Seconds from the start of the run to the capacity end: the imports and the model take
about 6 s on an idle machine and over 20 s with the whole suite on two cores, so the run
trains for several steps before it must stop however it is started."""
WRITE_ESTIMATE_S = 2.0
"""--checkpoint_write_estimate_s: the tiny model's checkpoint takes well under a second, so
the lead is the estimate's (2 writes x 1.25 x 2 s + 2 s = 7 s plus the longest step)."""


def _iso(t: float) -> str:
    return dt.datetime.fromtimestamp(t, dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def test_run_stops_before_the_capacity_end_then_resumes(tmp_path: Path) -> None:
    name = "block"
    argv = merge(
        TINY,
        [
            "--batch_size_training=4",
            "--num_epochs=1000",
            "--max_train_step=100000",
            f"--checkpoint_write_estimate_s={WRITE_ESTIMATE_S}",
        ],
        run_dirs(tmp_path, name),
    )
    ends_at = float(int(time.time()) + ENDS_IN_S)  # whole seconds: the variable's precision
    proc = run(finetune_cmd(0, argv), timeout=300, **{ENV: _iso(ends_at)})
    out = proc.stdout + proc.stderr
    assert proc.returncode == 0, out[-3000:]
    latest = latest_complete(ckpt_dir(tmp_path, name))
    assert latest is not None, out[-3000:]
    stopped_at = json.loads((latest / "meta.json").read_text())["step"]
    assert stopped_at >= 1
    # complete on disk before the end (the marker is the last file a checkpoint writes)
    assert (latest / MARKER).stat().st_mtime < ends_at
    assert f"capacity ends at {_iso(ends_at)}: stopped at step {stopped_at}" in out, out[-3000:]
    assert "exiting 0" in out and "SIGTERM" not in out
    summary = json.loads((tmp_path / name / "out" / "summary.json").read_text())
    assert summary["capacity_end"] is True and summary["preempted"] is False
    assert summary["steps"] == stopped_at
    assert [r["step"] for r in metrics(tmp_path, name)] == list(range(1, stopped_at + 1))

    # New capacity, no end announced: the run continues from that checkpoint; every step once.
    end = stopped_at + 3
    again = merge(argv, [f"--max_train_step={end}", "--num_epochs=1000", "--resume"])
    proc = run(finetune_cmd(0, again), timeout=300, **{ENV: ""})
    assert proc.returncode == 0, (proc.stdout + proc.stderr)[-3000:]
    assert f"resumed from {latest} at step {stopped_at}" in proc.stdout
    assert [r["step"] for r in metrics(tmp_path, name)] == list(range(1, end + 1))
    summary = json.loads((tmp_path / name / "out" / "summary.json").read_text())
    assert summary["capacity_end"] is False and summary["steps"] == end


def test_a_bad_end_time_stops_the_run_with_one_line(tmp_path: Path) -> None:
    argv = merge(TINY, ["--max_train_step=2"], run_dirs(tmp_path, "bad"))
    proc = run(finetune_cmd(0, argv), timeout=300, **{ENV: "2026-12-17T12:30:00+02:00"})
    assert proc.returncode == 2
    errors = [
        line for line in proc.stderr.splitlines() if line.startswith("eks-fsdp train: error:")
    ]
    assert errors == [
        f"eks-fsdp train: error: {ENV}: '2026-12-17T12:30:00+02:00' is not in UTC: end it with Z"
    ]
    assert (
        not (tmp_path / "bad" / "ckpt").exists()
        or latest_complete(ckpt_dir(tmp_path, "bad")) is None
    )


class _Clock:
    def __init__(self, t: float) -> None:
        self.t = t

    def __call__(self) -> float:
        return self.t


def test_the_lead_is_the_longest_step_plus_the_checkpoint_writes() -> None:
    """1,000 s to the end, steps of 10 s and 30 s, a measured write of 100 s, asynchronous
    checkpoints: lead = 30 + 2 x 1.25 x 100 + 2 = 282 s; the run votes to stop at the first
    step after which fewer than 282 s remain."""
    clock = _Clock(0.0)
    d = CapacityDeadline(1000.0, write_estimate_s=5.0, async_checkpoint=True, clock=clock)
    assert d.vote(False, None) == 0.0  # no step measured yet: 2 x 1.25 x 5 + 2 = 14.5 s
    clock.t = 10.0
    assert d.vote(False, 100.0) == 0.0
    clock.t = 40.0
    assert d.lead_s(100.0) == 10 + 2 * 1.25 * 100 + 2  # before the 30 s step is measured
    assert d.vote(False, 100.0) == 0.0
    assert d.lead_s(100.0) == 30 + 2 * 1.25 * 100 + 2
    votes = {}
    while clock.t < 1000.0 and not votes.get(clock.t):
        clock.t += 30.0  # steps of 30 s: at 700, 300 s left; at 730, 270 s < 282 s
        votes[clock.t] = d.vote(False, 100.0)
    assert max(votes) == 730.0 and votes[730.0] == CAPACITY_VOTE
    assert set(votes.values()) == {0.0, CAPACITY_VOTE} and votes[700.0] == 0.0
    sync = CapacityDeadline(1000.0, write_estimate_s=100.0, async_checkpoint=False, clock=clock)
    assert sync.lead_s(None) == 1.25 * 100 + 2  # one write when nothing may be in flight


def test_ranks_agree_and_a_sigterm_wins() -> None:
    """The trainer all-reduces the votes with MAX: one rank past its lead stops every rank for
    the capacity end (exit 0); a SIGTERM on any rank makes it a preemption (exit 143)."""
    clock = _Clock(996.0)  # 4 s left; the lead (no step yet) is 2 x 1.25 x 1 + 2 = 4.5 s
    late, early = (CapacityDeadline(1000.0, clock=clock) for _ in range(2))
    early.ends_at = 10_000.0  # another clock, another view: it alone would go on
    votes = [late.vote(False, 1.0), early.vote(False, 1.0)]
    assert votes == [CAPACITY_VOTE, 0.0]
    assert all(d.decided(max(votes)) for d in (late, early))
    assert late.reached and early.reached
    assert late.exit_status(True, 143) == 0
    votes = [late.vote(False, 1.0), early.vote(True, 1.0)]
    assert max(votes) == SIGTERM_VOTE
    assert all(d.decided(max(votes)) for d in (late, early))
    assert not late.reached and late.exit_status(True, 143) == 143
    none = CapacityDeadline(None, clock=clock)
    assert none.vote(False, 1e9) == 0.0 and none.exit_status(False, 143) == 0


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("tomorrow", f"{ENV}: 'tomorrow' is not an ISO 8601 time"),
        ("2026-12-17T10:30:00", f"{ENV}: '2026-12-17T10:30:00' is not in UTC: end it with Z"),
    ],
)
def test_bad_times_are_one_line(text: str, message: str) -> None:
    with pytest.raises(ConfigError) as err:
        parse_ends_at(text)
    assert str(err.value) == message
    cfg = parse_args(["--model_name=tiny-llama-2l"])
    with pytest.raises(ConfigError):
        CapacityDeadline.from_env(cfg, {ENV: text})
    assert CapacityDeadline.from_env(cfg, {ENV: "2026-12-17T10:30:00Z"}).ends_at == (
        dt.datetime(2026, 12, 17, 10, 30, tzinfo=dt.UTC).timestamp()
    )
