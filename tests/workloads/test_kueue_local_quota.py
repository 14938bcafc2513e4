"""The local stand-in for Kueue refuses, at submit, a job larger than its whole quota.

With ``EKS_FSDP_LOCAL_QUEUE_WORKERS=N`` a local job waits until its workers fit the quota
(``jobs.local.queue``); a job of more than N workers never fits. If this fails, ``submit
--local`` of such a job would create it and leave it queued for ever instead of stopping
before any work with one line naming the culprit. Runs the real CLI on this machine (nothing
starts: the refusal comes first).
"""

from __future__ import annotations

from pathlib import Path

import pytest

from jobs import cli
from jobs.local.backend import STATE_ENV
from jobs.local.queue import QUOTA_ENV

DEV = str(Path(__file__).resolve().parents[2] / "jobs" / "examples" / "dev.yaml")


def test_a_job_larger_than_the_quota_is_refused_before_it_is_created(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv(STATE_ENV, str(tmp_path))
    monkeypatch.setenv(QUOTA_ENV, "1")
    argv = ["submit", "--local", DEV, "--name", "too-big", "--set=workers=2", "--set=minWorkers=2"]
    code = cli.main(argv)
    _, err = capsys.readouterr()
    (line,) = err.strip().splitlines()
    assert code == 2
    assert line == (
        f"eks-fsdp jobs: error: workers: 2 is more than the local queue's quota ({QUOTA_ENV}=1):"
        f" the job would wait for ever; lower workers or raise {QUOTA_ENV}"
    )
    assert not (tmp_path / "too-big").exists()
