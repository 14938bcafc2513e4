"""``eks-fsdp jobs`` with an ``api: v2`` job file: a Trainer v2 TrainJob, over real HTTP.

The requests go to ``FakeKube`` (``tests/jobs/fake_kube.py``): the Trainer v2 controller (and
JobSet) does not run on the local control plane or here, so the test plays them, writing what
they write at the pins: the TrainJob's ``Complete``/``Failed``/``Suspended`` conditions
(``pkg/apis/trainer/v1alpha1/trainjob_types.go`` at v2.3.0) and pods labelled by JobSet
(``jobset.sigs.k8s.io/jobset-name``, ``replicatedjob-name``: ``labelAndAnnotateObject`` in
``pkg/controllers/jobset_controller.go`` at v0.12.0), by the runtime's ancestor label and by the
Job controller's completion index (``batch.kubernetes.io/job-completion-index``, the node rank
Trainer's torch plugin hands torchrun). Pods here name the TrainJob as their owner directly
(the real chain is TrainJob -> JobSet -> Job -> Pod), so deleting it collects them.

If these fail, ``submit`` of an ``api: v2`` job would create something other than what
``eks-fsdp render`` shows (the builders' TrainJob with the job's Kueue labels), lose
its record, or ``list``/``status``/``logs``/``suspend``/``cancel``/``resume`` would not find it,
read another node's log, or suspend it in a way Kueue undoes.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from jobs import queue
from jobs import schema as jobfile
from jobs.build import build as job_workloads
from jobs.cluster import trainjob as tjobs
from jobs.manifest import record_name
from tests.jobs.fake_kube import FakeKube, run_cli, served
from workloads.specs import trainjob as tj

EXAMPLES = Path(__file__).resolve().parents[2] / "jobs" / "examples"
P4DE = str(EXAMPLES / "p4de-odcr.yaml")
V2 = ["--set", "api=v2", "--set", "minWorkers=2", "--set", "workers=2"]
NAME = "llama2-13b-samsum"
IMAGE = "123456789012.dkr.ecr.us-east-1.amazonaws.com/eks-fsdp-p4de-odcr-training:sha-1"


@pytest.fixture
def kube(tmp_path: Path) -> Iterator[tuple[FakeKube, str]]:
    with served(tmp_path) as served_kube:
        yield served_kube


def _cli(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    return run_cli(capsys, *argv)


def _submit(
    capsys: pytest.CaptureFixture[str], kubeconfig: str, *extra: str
) -> tuple[int, str, str]:
    return _cli(capsys, "submit", P4DE, *V2, "--kubeconfig", kubeconfig, "--image", IMAGE, *extra)


def _last(err: str) -> str:
    """The error line (``submit`` prints the planner's estimate on stderr first)."""
    lines = err.splitlines()
    assert lines and not lines[-1].startswith("plan:"), err
    return lines[-1]


def _job(fake: FakeKube) -> dict[str, Any]:
    found = fake.get("trainjobs", NAME)
    assert found is not None, "no TrainJob"
    return found


def _operate(fake: FakeKube, *, phase: str = "Running") -> None:
    """What JobSet and the kubelet make of the TrainJob: one pod per node, its log."""
    job = _job(fake)
    for i in range(job["spec"]["trainer"]["numNodes"]):
        pod = f"{NAME}-node-0-{i}-x{i}z"
        fake.put(
            "pods",
            {
                "apiVersion": "v1",
                "kind": "Pod",
                "metadata": {
                    "name": pod,
                    "labels": {
                        tjobs.JOBSET_LABEL: NAME,
                        "jobset.sigs.k8s.io/replicatedjob-name": tj.NODE,
                        tj.ANCESTOR_LABEL: tj.ANCESTOR_TRAINER,
                        tjobs.INDEX_LABEL: str(i),
                    },
                    "ownerReferences": [
                        {"kind": "TrainJob", "name": NAME, "uid": job["metadata"]["uid"]}
                    ],
                },
                "status": {
                    "phase": phase,
                    "containerStatuses": [
                        {
                            "name": tj.NODE,
                            "restartCount": 0,
                            "state": {"running": {"startedAt": "2026-01-01T00:00:00Z"}},
                        }
                    ],
                },
            },
        )
        fake.logs[pod] = f"node {i} line 1\nnode {i} line 2\n"


def test_submit_creates_the_builders_trainjob_its_policy_and_its_record(
    kube: tuple[FakeKube, str], capsys: pytest.CaptureFixture[str]
) -> None:
    fake, kubeconfig = kube
    code, out, err = _submit(capsys, kubeconfig)
    assert code == 0, err
    assert out.startswith(f"submitted {NAME} (cluster in namespace default, generation 1")
    assert fake.get("pytorchjobs", NAME) is None
    created = _job(fake)
    job = jobfile.load(P4DE, sets=V2[1::2])
    want = tj.trainjob(job_workloads(job, image=IMAGE).job)
    assert job.queue is not None and job.queue.team is None  # a GPU job: its pool's queue
    want["metadata"]["labels"].update(job.queue.labels())
    assert job.queue.pod_annotations  # p4de is an EFA pool: Kueue keeps it in one block
    tj.pod_spec_patch(want)["metadata"].setdefault("annotations", {}).update(
        job.queue.pod_annotations
    )
    for key in ("uid", "creationTimestamp", "resourceVersion"):
        created["metadata"].pop(key)
    assert created == want  # the pure builder's TrainJob, with what the queue adds only
    tj.validate(created)
    assert created["metadata"]["labels"][queue.QUEUE_LABEL] == job.node_group
    (policy,) = fake.of("networkpolicies")
    assert policy["metadata"]["ownerReferences"][0]["kind"] == "TrainJob"
    record = fake.get("configmaps", record_name(NAME))
    assert record is not None and yaml.safe_load(record["data"]["job.yaml"])["api"] == "v2"
    assert record["data"]["image"] == IMAGE and record["data"]["generation"] == "1"
    assert record["data"]["rdzvId"] == tjobs.STATIC_RDZV  # no etcd, no rendezvous id
    assert "rdzvId static" in out
    code, _, err = _submit(capsys, kubeconfig)
    assert code == 2 and f"job '{NAME}' exists in default (Pending)" in _last(err)


def test_a_team_job_runs_as_the_teams_service_account() -> None:
    """``queue.queued`` on a TrainJob puts the ServiceAccount in its pod-spec patch (a field
    Trainer v2.3's ``PodSpecPatch`` allows: the CRD validates it)."""
    job = jobfile.load(P4DE, sets=V2[1::2])
    body = tj.trainjob(job_workloads(job, image=IMAGE).job)
    team = queue.Queue(name="p4de", priority="production", team="nlp")
    out = queue.queued(body, team, pod_template_paths=tjobs.templates)
    assert tj.pod_spec_patch(out)["spec"]["serviceAccountName"] == queue.SERVICE_ACCOUNT
    assert out["metadata"]["labels"][queue.PRIORITY_LABEL] == "production"
    tj.validate(out)


def test_status_list_logs_suspend_cancel_and_resume_find_the_trainjob(
    kube: tuple[FakeKube, str], capsys: pytest.CaptureFixture[str]
) -> None:
    fake, kubeconfig = kube
    assert _submit(capsys, kubeconfig)[0] == 0
    _operate(fake)
    code, out, _ = _cli(capsys, "status", NAME, "--kubeconfig", kubeconfig, "--json")
    info = json.loads(out)
    assert code == 0 and (info["phase"], info["ready"], info["wanted"]) == ("Running", 2, 2)
    assert info["where"]["trainjob"] == f"default/{NAME}"
    code, out, _ = _cli(capsys, "list", "--kubeconfig", kubeconfig)
    assert [line.split()[:3] for line in out.splitlines()[1:]] == [[NAME, "Running", "2/2"]]
    code, out, _ = _cli(capsys, "logs", NAME, "--kubeconfig", kubeconfig, "--rank", "1")
    assert code == 0 and out == "node 1 line 1\nnode 1 line 2\n"  # completion index 1's pod
    code, out, _ = _cli(capsys, "logs", NAME, "--kubeconfig", kubeconfig, "--tail", "1", "-f")
    assert code == 0 and out == "node 0 line 2\n"
    code, _, err = _cli(capsys, "logs", NAME, "--kubeconfig", kubeconfig, "--rank", "5")
    assert code == 2 and "--rank 0..1" in err

    # No Workload (Kueue not installed): the TrainJob's own spec.suspend.
    code, out, _ = _cli(capsys, "suspend", NAME, "--kubeconfig", kubeconfig)
    assert code == 0 and "spec.suspend: true" in out and _job(fake)["spec"]["suspend"] is True
    assert _cli(capsys, "unsuspend", NAME, "--kubeconfig", kubeconfig)[0] == 0
    assert _job(fake)["spec"]["suspend"] is False
    # Queued and admitted: through the Workload (Kueue would undo spec.suspend).
    workload = fake.put(
        "workloads",
        {
            "apiVersion": "kueue.x-k8s.io/v1beta2",
            "kind": "Workload",
            "metadata": {
                "name": f"trainjob-{NAME}-1a2b3",
                "labels": {queue.JOB_UID_LABEL: _job(fake)["metadata"]["uid"]},
            },
            "spec": {"active": True},
            "status": {"conditions": [{"type": "Admitted", "status": "True"}]},
        },
    )
    code, out, _ = _cli(capsys, "suspend", NAME, "--kubeconfig", kubeconfig)
    workload = fake.get("workloads", workload["metadata"]["name"]) or {}
    assert code == 0 and "deactivated" in out and workload["spec"]["active"] is False
    assert _job(fake)["spec"]["suspend"] is False

    code, out, _ = _cli(capsys, "cancel", NAME, "--kubeconfig", kubeconfig)
    assert code == 0 and "the TrainJob and its pods are deleted" in out
    assert fake.get("trainjobs", NAME) is None and fake.of("pods") == []
    code, out, _ = _cli(capsys, "list", "--kubeconfig", kubeconfig)
    assert out.splitlines()[1].split()[:2] == [NAME, "Cancelled"]
    code, out, err = _cli(capsys, "resume", NAME, "--kubeconfig", kubeconfig)
    assert code == 0, err
    again = _job(fake)
    assert again["metadata"]["labels"]["eks-fsdp/generation"] == "2"
    assert "--resume" in again["spec"]["trainer"]["command"]
    assert fake.get("pytorchjobs", NAME) is None
    code, _, err = _cli(capsys, "resume", NAME, "--kubeconfig", kubeconfig)
    assert code == 1 and "is Pending: nothing to resume" in err
    again["status"] = {"conditions": [{"type": "Complete", "status": "True", "reason": "x"}]}
    code, out, _ = _cli(capsys, "status", NAME, "--kubeconfig", kubeconfig, "--json")
    assert json.loads(out)["phase"] == "Succeeded"
    code, _, err = _cli(capsys, "suspend", NAME, "--kubeconfig", kubeconfig)
    assert code == 1 and "is Succeeded: nothing to suspend" in err
    code, out, _ = _submit(capsys, kubeconfig, "--replace")
    assert code == 0 and _job(fake)["metadata"]["labels"]["eks-fsdp/generation"] == "1"
    code, out, _ = _cli(capsys, "cancel", NAME, "--kubeconfig", kubeconfig, "--purge")
    assert code == 0 and fake.get("configmaps", record_name(NAME)) is None


def test_a_cluster_without_trainer_v2_is_one_line(
    kube: tuple[FakeKube, str], capsys: pytest.CaptureFixture[str]
) -> None:
    fake, kubeconfig = kube
    fake.serve_trainer = False
    code, _, err = _submit(capsys, kubeconfig)
    assert code == 1 and "trainerV2: true" in _last(err), err
    assert fake.of("configmaps") == [] and fake.of("networkpolicies") == []
    assert (
        _cli(capsys, "list", "--kubeconfig", kubeconfig)[0] == 0
    )  # v1 jobs are still listed where no TrainJob API is served
