"""``eks-fsdp jobs --local``: two real jobs at once on this machine, watched, cancelled and
resumed across separate invocations of the CLI.

Nothing is mocked: each ``submit --local`` starts a detached runner (``jobs.local.worker``) with its
own etcd 3.5 and two torchrun agents training the tiny preset with gloo. One scenario is shared
by the tests (two jobs cost about a minute of both cores): job A runs to completion next to
job B; B is cancelled once its first checkpoint is complete, then resumed to the end; a third,
D, is resumed from its checkpoints moved to another root (``resume --from``). If these
fail, two users' local jobs would collide (ports, etcd keys, folders), ``status`` would not
tell a running job's step, ``logs --rank`` would show the wrong pod, a cancel would lose the
checkpoint or leave processes behind, or a resumed job would redo or skip steps or ignore
the checkpoint root it was given.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from jobs import cli
from jobs.local.backend import STATE_ENV, LocalBackend
from localrun.result import complete_checkpoint_steps, read_metrics
from tests.jobs.fake_kube import run_cli

pytestmark = [pytest.mark.slow, pytest.mark.integration]

DEV = str(Path(__file__).resolve().parents[2] / "jobs" / "examples" / "dev.yaml")
TINY = (
    "model=tiny-llama-2l",
    "contextLength=128",
    "args.max_train_samples=256",  # tokenize 256 of the 2,160 rows
    "args.mixed_precision=false",  # fp32: bf16 is ~10x slower on most CPUs
    "args.run_validation=false",
    "args.save_model=false",
    "args.plot_metrics=false",
)
A_STEPS, B_STEPS, B_EVERY, D_STEPS = 12, 36, 4, 24
"""36: an epoch of the 256 samples is 39 steps of 4 sequences."""
TIMEOUT_S = 240.0


def _cli(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    return run_cli(capsys, *argv)


def _status(name: str) -> dict[str, Any]:
    return LocalBackend().status(name).as_dict()


def _wait(what: str, check: Any, timeout_s: float = TIMEOUT_S) -> Any:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        value = check()
        if value:
            return value
        time.sleep(0.3)
    raise AssertionError(f"timed out waiting for {what}")


def _processes_mentioning(text: str) -> list[str]:
    found = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit() and int(entry.name) != os.getpid():
            try:
                cmd = (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode()
            except OSError:
                continue
            if text in cmd:
                found.append(f"{entry.name}: {cmd[:120]}")
    return found


@pytest.fixture(scope="module")
def home(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    root = tmp_path_factory.mktemp("jobs")
    previous = os.environ.get(STATE_ENV)
    os.environ[STATE_ENV] = str(root)
    try:
        yield root
    finally:
        backend = LocalBackend(root)
        for name in ("job-a", "job-b", "job-d"):
            if backend.alive(name):
                backend.cancel(name)
        if previous is None:
            os.environ.pop(STATE_ENV, None)
        else:
            os.environ[STATE_ENV] = previous


@pytest.fixture(scope="module")
def running(home: Path) -> dict[str, Any]:
    """A and B submitted at once, then each seen Running with a step logged."""
    sets = [f"--set={s}" for s in TINY]
    assert (
        cli.main(
            [
                "submit",
                "--local",
                DEV,
                "--name",
                "job-a",
                *sets,
                f"--set=maxTrainStep={A_STEPS}",
                f"--set=checkpointEvery={B_EVERY}",
            ]
        )
        == 0
    )
    assert (
        cli.main(
            [
                "submit",
                "--local",
                DEV,
                "--name",
                "job-b",
                *sets,
                f"--set=maxTrainStep={B_STEPS}",
                f"--set=checkpointEvery={B_EVERY}",
            ]
        )
        == 0
    )
    seen = {}
    for name in ("job-a", "job-b"):
        seen[name] = _wait(
            f"{name} running with a step",
            lambda n=name: (
                (s := _status(n))["phase"] == "Running" and (s["progress"]["step"] or 0) >= 1 and s
            ),
        )
    return seen


def test_two_local_jobs_run_at_once_apart(home: Path, running: dict[str, Any]) -> None:
    a, b = running["job-a"], running["job-b"]
    assert a["ready"] == a["wanted"] == 2 and b["ready"] == b["wanted"] == 2
    assert a["rdzv_id"] != b["rdzv_id"]
    ports = {}
    for name in ("job-a", "job-b"):
        text = (home / name / "runner.log").read_text()
        found = re.search(r"rendezvous: etcd \S+ at 127\.0\.0\.1:(\d+)", text)
        assert found is not None, text
        ports[name] = found.group(1)
        assert (home / name / "etcd-data").is_dir()
    assert ports["job-a"] != ports["job-b"]
    # status while running: step, loss, tokens/s, goodput, an ETA to the planned total
    progress = b["progress"]
    assert progress["total"] == B_STEPS and progress["loss"] > 0 and progress["tokens_per_s"] > 0
    assert progress["eta_s"] is not None and 0 <= progress["goodput"] <= 1
    assert [r["state"] for r in b["replicas"]] == ["Running", "Running"]


def test_list_and_status_across_invocations(
    running: dict[str, Any], capsys: pytest.CaptureFixture[str]
) -> None:
    code, out, _ = _cli(capsys, "list", "--local")
    assert code == 0
    header, *rows = out.strip().splitlines()
    assert header.split() == ["NAME", "PHASE", "WORKERS", "RESTARTS", "STEP", "AGE"]
    assert {r.split()[0] for r in rows} == {"job-a", "job-b"}
    code, out, _ = _cli(capsys, "list", "--local", "--json")
    assert {j["name"] for j in json.loads(out)} == {"job-a", "job-b"}
    code, out, _ = _cli(capsys, "status", "--local", "job-b")
    assert code == 0 and "phase:" in out and "progress:  step " in out and "next: " in out


def test_cancel_keeps_the_checkpoint_and_stops_everything(
    home: Path, running: dict[str, Any], capsys: pytest.CaptureFixture[str]
) -> None:
    # Before any test that waits for job A to end: job B must still be running here, and on
    # a loaded machine it can finish its steps while A's end is awaited.
    ckpt = home / "job-b" / "shared" / "job-b"
    _wait("job-b's first checkpoint", lambda: complete_checkpoint_steps(ckpt))
    code, _, err = _cli(capsys, "submit", "--local", DEV, "--name", "job-b", "--replace")
    assert code == 2 and "--replace: job 'job-b' is Running; only a finished job" in err
    code, out, _ = _cli(capsys, "cancel", "--local", "job-b")
    assert code == 0 and "checkpoints kept" in out, out
    status = _status("job-b")
    assert status["phase"] == "Cancelled"
    steps = complete_checkpoint_steps(ckpt)
    assert steps and steps[-1] < B_STEPS
    assert _processes_mentioning(str(home / "job-b")) == []
    code, _, err = _cli(capsys, "cancel", "--local", "job-b")
    assert code == 1 and "not running (Cancelled)" in err


def test_logs_of_rank_1_are_the_second_pods(
    home: Path, running: dict[str, Any], capsys: pytest.CaptureFixture[str]
) -> None:
    """``--rank`` is the pod (replica index): the whole text is pod 1's log file, which is
    not pod 0's (read once job A has ended, so neither log grows)."""
    _wait("job-a to end", lambda: _status("job-a")["phase"] != "Running")
    code, out, _ = _cli(capsys, "logs", "--local", "job-a", "--rank", "1")
    logs = home / "job-a" / "logs"
    pod0 = (logs / "job-a-worker-0.log").read_text(errors="replace")
    pod1 = (logs / "job-a-worker-1.log").read_text(errors="replace")
    assert code == 0 and out == pod1 and out != pod0
    code, out0, _ = _cli(capsys, "logs", "--local", "job-a", "--tail", "3")
    assert code == 0 and len(out0.splitlines()) <= 3
    code, _, err = _cli(capsys, "logs", "--local", "job-a", "--rank", "2")
    assert code == 2 and err.count("\n") == 1 and "--rank 0..1" in err


def test_first_job_finishes_while_the_other_was_cancelled(running: dict[str, Any]) -> None:
    done = _wait("job-a to end", lambda: (s := _status("job-a"))["phase"] != "Running" and s)
    assert done["phase"] == "Succeeded", done
    assert done["progress"]["step"] == A_STEPS


def test_resume_completes_with_every_step_logged_once(
    home: Path, running: dict[str, Any], capsys: pytest.CaptureFixture[str]
) -> None:
    before = _status("job-b")
    assert before["phase"] == "Cancelled"
    resumed_from = complete_checkpoint_steps(home / "job-b" / "shared" / "job-b")[-1]
    code, out, _ = _cli(capsys, "resume", "--local", "job-b", "--follow")
    assert code == 0, out[-3000:]
    assert "resumed job-b" in out and "SUCCEEDED" in out
    after = _status("job-b")
    assert after["phase"] == "Succeeded" and after["generation"] == 2
    assert after["rdzv_id"] != before["rdzv_id"]
    rows = read_metrics(home / "job-b" / "shared" / "job-b" / "output" / "metrics.jsonl")
    assert [r["step"] for r in rows] == list(range(1, B_STEPS + 1))
    pods = "".join(p.read_text(errors="replace") for p in (home / "job-b" / "logs").glob("*.log"))
    assert f"at step {resumed_from}" in pods
    assert (home / "job-b" / "logs-g1").is_dir()  # the first generation's logs are kept
    assert _processes_mentioning(str(home / "job-b")) == []


@pytest.mark.parametrize(
    ("extra", "message"),
    [
        (["--set=wrokers=2"], "wrokers: unknown key (did you mean workers?)"),
        (["--set=workers=two"], "workers: expected an integer, got 'two'"),
        (["--set=nodeGroup=gpu-x"], "nodeGroup: 'gpu-x' is not a GPU nodegroup"),
        (["--name", "job-a"], "job 'job-a' exists (Succeeded)"),
        (["--image", "r/t:1"], "--image: a local job runs this checkout's training/"),
    ],
)
def test_bad_submissions_are_one_line_and_create_nothing(
    home: Path,
    running: dict[str, Any],
    capsys: pytest.CaptureFixture[str],
    extra: list[str],
    message: str,
) -> None:
    _wait("job-a to end", lambda: _status("job-a")["phase"] != "Running")
    before = sorted(p.name for p in home.iterdir())
    record = (home / "job-a" / "record.json").read_text()
    name = [] if "--name" in extra else ["--name", "job-c"]
    code, out, err = _cli(capsys, "submit", "--local", DEV, *name, *extra)
    assert code == 2 and out == "" and err.count("\n") == 1 and message in err, err
    assert sorted(p.name for p in home.iterdir()) == before
    assert (home / "job-a" / "record.json").read_text() == record


def test_a_missing_model_is_one_line(
    tmp_path: Path, home: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    job = tmp_path / "job.yaml"
    job.write_text("name: x\nstack: dev\nworkers: 1\n")
    code, _, err = _cli(capsys, "submit", "--local", str(job))
    assert (
        code == 2
        and err == f"eks-fsdp jobs: error: {job}: model: required: {cli_keys()['model']}\n"
    )
    assert not (home / "x").exists()


def cli_keys() -> dict[str, str]:
    from jobs.schema import KEYS

    return KEYS


def test_resume_from_another_root_completes_with_every_step_logged_once(
    home: Path, running: dict[str, Any], capsys: pytest.CaptureFixture[str]
) -> None:
    """``resume --from ROOT``: the checkpoints moved out of the job's folder to ROOT/job-d/
    (a copy kept elsewhere); the resumed job reads them there, writes its next ones there, and
    its metrics.jsonl still holds every step once."""
    _wait(
        "job-a and job-b to end",
        lambda: all(_status(n)["phase"] != "Running" for n in ("job-a", "job-b")),
    )
    sets = [f"--set={s}" for s in TINY]
    code, _, err = _cli(
        capsys,
        "submit",
        "--local",
        DEV,
        "--name",
        "job-d",
        *sets,
        f"--set=maxTrainStep={D_STEPS}",
        f"--set=checkpointEvery={B_EVERY}",
    )
    assert code == 0, err
    own = home / "job-d" / "shared" / "job-d"
    _wait("job-d's first checkpoint", lambda: complete_checkpoint_steps(own))
    assert _cli(capsys, "cancel", "--local", "job-d")[0] == 0
    resumed_from = complete_checkpoint_steps(own)[-1]
    assert resumed_from < D_STEPS
    elsewhere = home / "saved-checkpoints"
    (elsewhere / "job-d").mkdir(parents=True)
    for step in own.glob("step-*"):
        shutil.move(str(step), elsewhere / "job-d" / step.name)
    code, _, err = _cli(capsys, "resume", "--local", "job-d", "--from", str(home / "nowhere"))
    assert code == 2 and err == f"eks-fsdp jobs: error: --from {home / 'nowhere'}: no such folder\n"
    code, _, err = _cli(capsys, "resume", "--local", "job-d", "--from", str(home))
    assert (
        code == 2 and err.count("\n") == 1 and f"no complete checkpoint in {home / 'job-d'}" in err
    )
    code, out, _ = _cli(capsys, "resume", "--local", "job-d", "--from", str(elsewhere), "--follow")
    assert code == 0, out[-3000:]
    after = _status("job-d")
    assert after["phase"] == "Succeeded" and after["generation"] == 2
    rows = read_metrics(own / "output" / "metrics.jsonl")
    assert [r["step"] for r in rows] == list(range(1, D_STEPS + 1))
    assert list(own.glob("step-*")) == []  # nothing written to the old root
    assert complete_checkpoint_steps(elsewhere / "job-d")[-1] > resumed_from
    assert after["where"]["checkpoints"].startswith(str(elsewhere / "job-d"))
    pods = "".join(p.read_text(errors="replace") for p in (home / "job-d" / "logs").glob("*.log"))
    assert f"at step {resumed_from}" in pods
    job = json.loads((home / "job-d" / "pytorchjob.local.json").read_text())
    command = job["spec"]["pytorchReplicaSpecs"]["Worker"]["template"]["spec"]["containers"][0][
        "command"
    ]
    assert f"--dist_checkpoint_root_folder={elsewhere}" in command
