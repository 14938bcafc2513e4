"""``eks-fsdp jobs submit FILE`` on the cluster backend does each thing once.

The submission goes over real HTTP to the served stand-in API (``tests/jobs/fake_kube.py``); the
test counts, with wrappers around the project's own functions (nothing is replaced), how often
the job file is read from disk, how often the job's settings are built and how often the
PyTorchJob (or TrainJob) body is made, and checks that the object created is the one built. If
this fails, submit has gone back to reading the file at several places (where a file changed
between two reads would give a job made of two versions) or to building the objects several
times, each with its own checks (a team check and a create that could disagree).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from jobs import build as job_build
from jobs import schema
from jobs.cluster import trainjob
from tests.jobs.fake_kube import run_cli, served
from tests.jobs.test_revisions import FakeHub, hub, sha  # noqa: F401 - the fixture
from workloads.specs import pytorchjob as pj
from workloads.specs import trainjob as tj

EXAMPLE = Path(__file__).resolve().parents[2] / "jobs" / "examples" / "p4de-odcr.yaml"
IMAGE = "123456789012.dkr.ecr.us-east-1.amazonaws.com/eks-fsdp-p4de-odcr-training:sha-1"


def _counting(
    monkeypatch: pytest.MonkeyPatch, calls: Counter[str], owner: Any, name: str, key: str
) -> None:
    real: Callable[..., Any] = getattr(owner, name)

    def counted(*args: Any, **kwargs: Any) -> Any:
        calls[key] += 1
        return real(*args, **kwargs)

    monkeypatch.setattr(owner, name, counted)


@pytest.mark.parametrize("api", ["v1", "v2"])
def test_submit_reads_the_file_once_and_builds_the_job_once(
    api: str, tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    job_file = tmp_path / "job.yaml"
    text = EXAMPLE.read_text(encoding="utf-8")
    if api == "v2":  # Trainer v2 has no elastic policy: a fixed world size
        text = text.replace("minWorkers:", "# minWorkers:") + "api: v2\n"
    job_file.write_text(text, encoding="utf-8")
    reads: Counter[str] = Counter()
    real_read_bytes = Path.read_bytes

    def read_bytes(self: Path) -> bytes:
        if self.resolve() == job_file.resolve():
            reads["job file"] += 1
        return real_read_bytes(self)

    monkeypatch.setattr(Path, "read_bytes", read_bytes)
    calls: Counter[str] = Counter()
    _counting(monkeypatch, calls, schema, "parse", "parse")
    _counting(monkeypatch, calls, job_build, "job_settings", "settings")
    _counting(monkeypatch, calls, pj, "pytorchjob", "pytorchjob body")
    _counting(monkeypatch, calls, tj, "trainjob", "trainjob body")
    with served(tmp_path) as (fake, kubeconfig):
        code, _out, err = run_cli(
            capsys,
            "submit",
            str(job_file),
            "--kubeconfig",
            kubeconfig,
            "--image",
            IMAGE,
            "--set",
            "requireRevisions=false",
        )
        assert code == 0, err
        plural = "pytorchjobs" if api == "v1" else trainjob.PLURAL
        (created,) = fake.of(plural)
    assert reads["job file"] == 1
    assert calls["parse"] == 1  # no Hub revision to pin offline: one check of the values
    assert calls["settings"] == 1
    body = "pytorchjob body" if api == "v1" else "trainjob body"
    assert calls[body] == 1
    assert calls["pytorchjob body" if api == "v2" else "trainjob body"] == 0
    assert created["metadata"]["name"] == "llama2-13b-samsum"
    assert created["spec"] != {}


def test_pinned_revisions_are_applied_before_the_one_check(
    hub: FakeHub,  # noqa: F811
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """With the Hub answering (a loopback stand-in of its repo-info API), submit resolves the
    model's and the dataset's branch to commits from the file's keys as read, and checks the
    file once with the commits in: one parse, and the job created runs at those commits."""
    calls: Counter[str] = Counter()
    _counting(monkeypatch, calls, schema, "parse", "parse")
    with served(tmp_path) as (fake, kubeconfig):
        code, _out, err = run_cli(
            capsys, "submit", str(EXAMPLE), "--kubeconfig", kubeconfig, "--image", IMAGE
        )
        assert code == 0, err
        (created,) = fake.of("pytorchjobs")
    assert calls["parse"] == 1
    command = created["spec"]["pytorchReplicaSpecs"]["Worker"]["template"]["spec"]["containers"][0][
        "command"
    ]
    assert f"--model_revision={sha('model-1')}" in command
    assert f"--dataset_revision={sha('data-1')}" in command
