"""Local jobs through a queue, suspended and unsuspended, for real.

Nothing is mocked: ``submit --local`` with ``EKS_FSDP_LOCAL_QUEUE_WORKERS=1`` (the local
stand-in for Kueue, ``jobs.local.queue``: a queue per node group with a quota of one worker)
starts two detached runners, each with its own etcd and one torchrun agent training the tiny
preset. The second waits while the first runs, then runs; it is suspended once a checkpoint
is complete (every pod gets SIGTERM; the training program's StopSignal writes an emergency
checkpoint, ``training/checkpoint.py``, docs/adr/0004) and unsuspended (its pods start
again and resume from the newest complete checkpoint, as the training operator re-creates a
suspended job's pods, ``pkg/controller.v1/common/job.go`` at v1.9.4).

If this fails, two local jobs over one quota would run at once, ``status`` would not say why
a job waits, a suspend would lose more than one checkpoint interval or the job itself, or a
resumed job would redo or skip steps.
"""

from __future__ import annotations

import os
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from jobs import cli
from jobs.local.backend import STATE_ENV, LocalBackend
from jobs.local.queue import QUOTA_ENV
from localrun.result import complete_checkpoint_steps, read_metrics

pytestmark = [pytest.mark.slow, pytest.mark.integration]

DEV = str(Path(__file__).resolve().parents[2] / "jobs" / "examples" / "dev.yaml")
TINY = (
    "model=tiny-llama-2l",
    "contextLength=128",
    "workers=1",
    "args.max_train_samples=256",
    "args.mixed_precision=false",  # fp32: bf16 is ~10x slower on most CPUs
    "args.run_validation=false",
    "args.save_model=false",
    "args.plot_metrics=false",
)
FIRST_STEPS, SECOND_STEPS, EVERY = 4, 16, 3
TIMEOUT_S = 240.0


def _wait(what: str, check: Any, timeout_s: float = TIMEOUT_S) -> Any:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        value = check()
        if value:
            return value
        time.sleep(0.2)
    raise AssertionError(f"timed out waiting for {what}")


def _status(name: str) -> dict[str, Any]:
    return LocalBackend().status(name).as_dict()


@pytest.fixture
def home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    monkeypatch.setenv(STATE_ENV, str(tmp_path))
    monkeypatch.setenv(QUOTA_ENV, "1")
    try:
        yield tmp_path
    finally:
        backend = LocalBackend(tmp_path)
        for name in ("q-first", "q-second"):
            if (tmp_path / name).is_dir() and backend.alive(name):
                backend.cancel(name)


def test_two_jobs_over_one_quota_run_in_turn_and_a_suspend_loses_at_most_an_interval(
    home: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    sets = [f"--set={s}" for s in TINY]
    for name, steps in (("q-first", FIRST_STEPS), ("q-second", SECOND_STEPS)):
        code = cli.main(
            [
                *("submit", "--local", DEV, "--name", name, *sets),
                *(f"--set=maxTrainStep={steps}", f"--set=checkpointEvery={EVERY}"),
            ]
        )
        assert code == 0
    capsys.readouterr()
    first = _wait(
        "q-first admitted", lambda: (s := _status("q-first"))["admission"] == "admitted" and s
    )
    assert first["queue"] == "gpu-g5 (local, 1 workers)"
    # the second may first wait behind the first while that one is not yet admitted ("1 free":
    # an earlier job that fits goes first); once the first holds the quota, the reason says so
    reason = "waiting for 1 worker in gpu-g5, 0 free"
    second = _wait(
        "q-second queued behind the first",
        lambda: (
            (s := _status("q-second"))["admission"] == "queued"
            and s["admission_reason"] == reason
            and s
        ),
    )
    assert second["admission_reason"] == reason
    code = cli.main(["list", "--local"])
    table = capsys.readouterr().out
    assert code == 0 and table.splitlines()[0].split()[-1] == "QUEUE"
    assert "queued: waiting for 1 worker in gpu-g5, 0 free" in table
    # while the first runs, the second has no pod and no step
    while _status("q-first")["phase"] in ("Pending", "Running", "Restarting"):
        s = _status("q-second")
        assert s["admission"] == "queued" and s["ready"] == 0 and s["progress"]["step"] is None
        time.sleep(0.3)
    assert _status("q-first")["phase"] == "Succeeded"

    ckpt = home / "q-second" / "shared" / "q-second"
    metrics = ckpt / "output" / "metrics.jsonl"
    _wait("q-second's first checkpoint", lambda: complete_checkpoint_steps(ckpt))
    assert _status("q-second")["admission"] == "admitted"
    code = cli.main(["suspend", "--local", "q-second"])
    out = capsys.readouterr().out
    assert code == 0 and "suspended q-second" in out, out
    suspended = _status("q-second")
    assert suspended["phase"] == "Suspended" and suspended["admission"] == "suspended"
    assert suspended["next_step"] == "eks-fsdp jobs unsuspend --local q-second"
    logged = max(r["step"] for r in read_metrics(metrics))
    kept = complete_checkpoint_steps(ckpt)[-1]
    assert logged < SECOND_STEPS  # suspended mid-run
    assert logged - kept <= EVERY, (logged, kept)  # at most one checkpoint interval lost
    assert cli.main(["suspend", "--local", "q-second"]) == 1  # not running: one line
    assert "nothing to suspend" in capsys.readouterr().err

    code = cli.main(["unsuspend", "--local", "q-second"])
    assert code == 0 and f"from step {kept}" in capsys.readouterr().out
    done = _wait(
        "q-second to end",
        lambda: (
            (s := _status("q-second"))["phase"] not in ("Pending", "Running", "Restarting") and s
        ),
    )
    assert done["phase"] == "Succeeded" and done["generation"] == 2, done
    steps = [r["step"] for r in read_metrics(metrics)]
    assert steps == list(range(1, SECOND_STEPS + 1))  # every step logged exactly once
    pods = "".join(p.read_text(errors="replace") for p in (home / "q-second" / "logs").glob("*"))
    assert f"at step {kept}" in pods  # the resumed pod loaded the kept checkpoint
    # result.json comes before the runner's exit: then nothing of the jobs is left running
    _wait(
        "every process of the jobs to exit",
        lambda: (
            not [
                e.name
                for e in Path("/proc").iterdir()
                if e.name.isdigit()
                and int(e.name) != os.getpid()
                and str(home).encode() in _cmdline(e)
            ]
        ),
        timeout_s=60.0,
    )


def _cmdline(entry: Path) -> bytes:
    try:
        return (entry / "cmdline").read_bytes()
    except OSError:
        return b""
