"""``eks-fsdp jobs status`` shows when a capacity-block job's capacity ends.

If these fail, a user watching a job on a capacity block no longer sees from ``status`` when
its nodes are scaled to zero (and so when the job will checkpoint and exit 0), or sees a time
other than the one its workers read (the ``capacity-block-<group>`` ConfigMap named in their
env), or a job without a block shows a capacity line. The Kubernetes API is ``FakeKube``
(``tests/jobs/fake_kube.py``; no API server runs in this lane), answering over real HTTP.
"""

from __future__ import annotations

import datetime as dt
import json
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from jobs import cli
from jobs.output import capacity_text
from tests.jobs.fake_kube import FakeKube, served
from workloads.specs import capacity

EXAMPLES = Path(__file__).resolve().parents[2] / "jobs" / "examples"
IMAGE = "123456789012.dkr.ecr.us-east-1.amazonaws.com/eks-fsdp-p5-16-training:sha-1"


@pytest.fixture
def kube(tmp_path: Path) -> Iterator[tuple[FakeKube, str]]:
    with served(tmp_path) as served_kube:
        yield served_kube


def _iso(t: float) -> str:
    return dt.datetime.fromtimestamp(t, dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def _status(capsys: pytest.CaptureFixture[str], name: str, kubeconfig: str, *extra: str) -> str:
    assert cli.main(["status", name, "--kubeconfig", kubeconfig, *extra]) == 0
    return capsys.readouterr().out


def test_status_shows_the_end_the_workers_read(
    kube: tuple[FakeKube, str], capsys: pytest.CaptureFixture[str]
) -> None:
    fake, kubeconfig = kube
    job_file = str(EXAMPLES / "p5-16.yaml")
    assert cli.main(["submit", job_file, "--kubeconfig", kubeconfig, "--image", IMAGE]) == 0
    out = capsys.readouterr().out
    job = next(o for o in fake.of("pytorchjobs"))
    name = job["metadata"]["name"]
    assert name in out
    env = job["spec"]["pytorchReplicaSpecs"]["Worker"]["template"]["spec"]["containers"][0]["env"]
    ref = next(e for e in env if e["name"] == "EKS_FSDP_CAPACITY_ENDS_AT")["valueFrom"]
    group = ref["configMapKeyRef"]["name"].removeprefix("capacity-block-")

    # no window in the stack yet: the ConfigMap is absent, no capacity line
    assert "capacity:" not in _status(capsys, name, kubeconfig)

    scale_down = float(int(time.time()) + 2 * 86400 + 3 * 3600 + 600)
    window = {
        "start": _iso(scale_down - 7 * 86400),
        "end": _iso(scale_down + 3600),
        "scaleDownAt": _iso(scale_down),
    }
    fake.put(
        "configmaps", capacity.capacity_block_configmap(group, window, job["metadata"]["namespace"])
    )
    page = _status(capsys, name, kubeconfig)
    line = next(x for x in page.splitlines() if x.startswith("capacity:"))
    assert line.startswith(f"capacity:  ends in 2d3h ({window['scaleDownAt']})"), page
    info = json.loads(_status(capsys, name, kubeconfig, "--json"))
    assert info["capacity_ends_at"] == window["scaleDownAt"]


def test_a_job_without_a_block_has_no_capacity_line(
    kube: tuple[FakeKube, str], capsys: pytest.CaptureFixture[str]
) -> None:
    fake, kubeconfig = kube
    job_file = str(EXAMPLES / "p4de-odcr.yaml")
    image = IMAGE.replace("p5-16", "p4de-odcr")
    assert cli.main(["submit", job_file, "--kubeconfig", kubeconfig, "--image", image]) == 0
    capsys.readouterr()
    name = next(o for o in fake.of("pytorchjobs"))["metadata"]["name"]
    page = _status(capsys, name, kubeconfig)
    assert "capacity:" not in page
    assert json.loads(_status(capsys, name, kubeconfig, "--json"))["capacity_ends_at"] == ""


def test_capacity_text_before_and_after_the_end() -> None:
    end = dt.datetime(2026, 12, 17, 10, 30, tzinfo=dt.UTC).timestamp()
    iso = "2026-12-17T10:30:00Z"
    assert capacity_text(iso, now=end - 45 * 60).startswith(f"ends in 45m ({iso})")
    assert capacity_text(iso, now=end + 90).startswith(f"ended 1m30s ago ({iso})")
    assert capacity_text("soon", now=end) == "soon"
