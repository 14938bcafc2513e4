"""``eks-fsdp jobs status`` shows the preflight gate's line: the node and the failed check.

If these fail, a job stopped by its gate would show only "exit 3" (cluster: the pod's exit code;
local: the runner's reason), and nobody would know which node to take out. A cluster pod's
line is its container's termination message (``status.containerStatuses[].state.terminated
.message`` or ``lastState`` after a restart; Kubernetes docs, "Determine the Reason for Pod
Failure"), read from pod objects shaped as the API returns them. The local job is real: a
detached ``submit --local`` of the dev stack's job whose gate demands one EFA device, which
this machine does not have (no ``/dev/infiniband/uverbs*``), so the check fails for real,
training never starts, and ``status`` names the host.
"""

from __future__ import annotations

import json
import os
import socket
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from jobs import cli
from jobs.cluster.efa_claim import template
from jobs.gate_status import from_output, from_pods
from jobs.local.backend import STATE_ENV, LocalBackend
from workloads.specs.settings import JobSettings
from workloads.specs.validate import validate_builtin

REPO = Path(__file__).resolve().parents[2]
LINE = "preflight failed on node ip-10-1-2-3.ec2.internal: EFA devices 0/32"


def _pod(state: dict[str, Any], last: dict[str, Any] | None = None) -> dict[str, Any]:
    status = {"name": "pytorch", "state": state, "lastState": last or {}, "restartCount": 1}
    return {"metadata": {"name": "j-worker-0"}, "status": {"containerStatuses": [status]}}


def test_the_termination_message_of_a_pod_is_the_status_line() -> None:
    done = {"terminated": {"exitCode": 3, "reason": "Error", "message": LINE + "\n"}}
    assert from_pods([_pod(done)], "pytorch") == LINE
    waiting = {"waiting": {"reason": "CrashLoopBackOff"}}
    assert from_pods([_pod(waiting, last=done)], "pytorch") == LINE  # restarted since
    other = {"terminated": {"exitCode": 1, "message": "Traceback ..."}}
    assert from_pods([_pod(other)], "pytorch") == ""
    assert from_pods([_pod(done)], "node") == ""  # another container's message


def test_a_local_report_gives_the_same_line(tmp_path: Path) -> None:
    report = {"passed": False, "failures": ["node ip-10-1-2-3.ec2.internal: EFA devices 0/32"]}
    (tmp_path / "preflight.json").write_text(json.dumps(report))
    assert from_output(tmp_path) == LINE
    (tmp_path / "preflight.json").write_text(json.dumps({"passed": True, "failures": []}))
    assert from_output(tmp_path) == ""


@pytest.mark.parametrize("version", ["1.34", "1.35"])
def test_a_dra_jobs_claim_template_is_valid(version: str) -> None:
    s = JobSettings(
        name="llama",
        namespace="jobs",
        image="i:1",
        instance_type="p5.48xlarge",
        workers=2,
        min_workers=2,
        efa_dra=True,
    )
    body = template(s)
    validate_builtin(body, version)
    assert body["metadata"]["name"] == "llama-efa"
    assert body["spec"]["spec"]["devices"]["requests"][0]["exactly"]["count"] == 32


@pytest.fixture
def home(tmp_path: Path) -> Iterator[Path]:
    previous = os.environ.get(STATE_ENV)
    os.environ[STATE_ENV] = str(tmp_path / "state")
    try:
        yield tmp_path / "state"
    finally:
        backend = LocalBackend(tmp_path / "state")
        if backend.alive("gate-bad"):
            backend.cancel("gate-bad")
        if previous is None:
            os.environ.pop(STATE_ENV, None)
        else:
            os.environ[STATE_ENV] = previous


@pytest.mark.slow
def test_a_local_job_stopped_by_its_gate_names_the_host(
    home: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    job = yaml.safe_load((REPO / "jobs" / "examples" / "dev.yaml").read_text())
    job.update(
        name="gate-bad",
        model="tiny-llama-2l",
        contextLength=128,
        maxRestarts=0,
        preflight={"expect": "efa=1"},
    )
    job["args"].update(max_train_samples=64, mixed_precision=False, run_validation=False)
    path = tmp_path / "gate.yaml"
    path.write_text(yaml.safe_dump(job))
    assert cli.main(["submit", "--local", str(path)]) == 0
    backend = LocalBackend(home)
    deadline = time.monotonic() + 240
    while time.monotonic() < deadline and backend.status("gate-bad").phase not in (
        "Failed",
        "Succeeded",
    ):
        time.sleep(0.5)
    info = backend.status("gate-bad")
    assert info.phase == "Failed"
    host = socket.gethostname()
    assert info.last_failure.startswith(f"preflight failed on node {host}")
    assert "EFA devices 0/1" in info.last_failure
    assert not backend.metrics_path("gate-bad").exists(), "training started after the gate"
    capsys.readouterr()
    assert cli.main(["status", "--local", "gate-bad"]) == 0
    out = capsys.readouterr().out
    assert f"last failure: preflight failed on node {host}" in out
