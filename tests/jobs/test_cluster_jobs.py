"""``eks-fsdp jobs`` against a Kubernetes API: the client layer, over real HTTP.

No API server can run in this suite's default lane, so the requests go to ``FakeKube``
(``tests/jobs/fake_kube.py``): a loopback HTTP server that answers with the response shapes of
the upstream API (objects with uid and creationTimestamp, ``Status`` errors, label-selected
lists, the unregistered-API 404, merge-patched ConfigMaps, owner-reference garbage collection)
and of the training operator's CRD (``status.conditions``, ``replicaStatuses``); the test plays
the operator and the kubelet by writing those. The exporter text is the real
``training.prometheus.PrometheusSink``'s. What the API server itself decides (admission, the
operator's reconciliation) is covered against the real control plane in
``tests/controlplane/test_jobs_cli.py``.

If these fail, the cluster backend would create a job that differs from the builders' object
(or half of one), misread the operator's conditions, show another pod's log, lose a job's
record on cancel so it cannot be resumed, or print a stack trace where one line is due.
"""

from __future__ import annotations

import json
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from jobs import queue
from jobs import schema as jobfile
from jobs.build import build as job_workloads
from jobs.manifest import record_name
from tests.jobs.fake_kube import FakeKube, run_cli, served
from workloads.specs import pytorchjob as pj

EXAMPLES = Path(__file__).resolve().parents[2] / "jobs" / "examples"
P4DE = str(EXAMPLES / "p4de-odcr.yaml")
NAME = "llama2-13b-samsum"
IMAGE = "123456789012.dkr.ecr.us-east-1.amazonaws.com/eks-fsdp-p4de-odcr-training:sha-1"


@pytest.fixture
def kube(tmp_path: Path) -> Iterator[tuple[FakeKube, str]]:
    with served(tmp_path) as served_kube:
        yield served_kube


def _obj(fake: FakeKube, plural: str, name: str) -> dict[str, Any]:
    """An object the fake API server holds (``AssertionError`` when it does not)."""
    found = fake.get(plural, name)
    assert found is not None, f"{plural}/{name} does not exist"
    return found


def _cli(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    return run_cli(capsys, *argv)


def _submit(
    capsys: pytest.CaptureFixture[str], kubeconfig: str, *extra: str
) -> tuple[int, str, str]:
    return _cli(capsys, "submit", P4DE, "--kubeconfig", kubeconfig, "--image", IMAGE, *extra)


def _exporter_text(step: int) -> str:
    """What rank 0's exporter serves after ``step`` (the real sink, on loopback)."""
    from training.prometheus import PrometheusSink

    sink = PrometheusSink(0, addr="127.0.0.1", env={"RANK": "0", "WORLD_SIZE": "16"})
    try:
        sink.log(
            {
                "loss": 1.25,
                "tokens_per_s": 51234.0,
                "step_time_s": 2.0,
                "goodput": 0.93,
                "tokens": 9,
            },
            step,
        )
        with urllib.request.urlopen(sink.url, timeout=5) as resp:
            return resp.read().decode()
    finally:
        sink.close()


def _operate(fake: FakeKube, name: str, *, restarts: int = 0, step: int = 120) -> None:
    """Play the training operator and the kubelet: conditions, two running worker pods, logs."""
    job = fake.get("pytorchjobs", name)
    assert job is not None
    t = job["metadata"]["creationTimestamp"]
    job["status"] = {
        "conditions": [
            {
                "type": "Created",
                "status": "True",
                "reason": "PyTorchJobCreated",
                "message": f"PyTorchJob {name} is created.",
                "lastUpdateTime": t,
                "lastTransitionTime": t,
            },
            {
                "type": "Running",
                "status": "True",
                "reason": "PyTorchJobRunning",
                "message": f"PyTorchJob default/{name} is running.",
                "lastUpdateTime": t,
                "lastTransitionTime": t,
            },
        ],
        "replicaStatuses": {
            "Worker": {"active": 2, "selector": f"training.kubeflow.org/job-name={name}"}
        },
        "startTime": t,
    }
    for i in range(job["spec"]["pytorchReplicaSpecs"]["Worker"]["replicas"]):
        pod = f"{name}-worker-{i}"
        fake.put(
            "pods",
            {
                "apiVersion": "v1",
                "kind": "Pod",
                "metadata": {
                    "name": pod,
                    "labels": {
                        "training.kubeflow.org/job-name": name,
                        "training.kubeflow.org/replica-type": "worker",
                        "training.kubeflow.org/replica-index": str(i),
                        "training.kubeflow.org/operator-name": "pytorchjob-controller",
                    },
                    "ownerReferences": [
                        {
                            "apiVersion": pj.API_VERSION,
                            "kind": pj.KIND,
                            "name": name,
                            "uid": job["metadata"]["uid"],
                            "controller": True,
                        }
                    ],
                },
                "status": {
                    "phase": "Running",
                    "containerStatuses": [
                        {
                            "name": pj.CONTAINER,
                            "ready": True,
                            "restartCount": restarts if i == 1 else 0,
                            "state": {"running": {"startedAt": t}},
                            **(
                                {"lastState": {"terminated": {"exitCode": 143, "reason": "Error"}}}
                                if restarts and i == 1
                                else {}
                            ),
                        }
                    ],
                },
            },
        )
        fake.logs[pod] = f"pod {i} line 1\npod {i} line 2\npod {i} line 3\n"
    fake.metrics[f"{name}-worker-0"] = _exporter_text(step)


def test_submit_creates_the_builders_job_its_policy_and_its_record(
    kube: tuple[FakeKube, str], capsys: pytest.CaptureFixture[str]
) -> None:
    fake, kubeconfig = kube
    code, out, err = _submit(capsys, kubeconfig)
    assert code == 0, err
    assert out.startswith(f"submitted {NAME} (cluster in namespace default, generation 1")
    created = _obj(fake, "pytorchjobs", NAME)
    rdzv = created["spec"]["elasticPolicy"]["rdzvId"]
    job = jobfile.load(P4DE)
    w = job_workloads(job, image=IMAGE)
    want = pj.pytorchjob(w.job.replace(rdzv_id=rdzv), w.etcd.host)
    for key in ("uid", "creationTimestamp", "resourceVersion", "namespace"):
        created["metadata"].pop(key)
    want["metadata"].pop("namespace")
    assert job.queue is not None and job.queue.team is None  # a GPU job: its pool's queue
    want["metadata"]["labels"].update(
        {queue.QUEUE_LABEL: job.node_group, queue.PRIORITY_LABEL: "experiment"}
    )
    assert job.queue.pod_annotations  # p4de is an EFA pool: Kueue keeps it in one block
    for template in queue.pytorchjob_templates(want):
        template["metadata"].setdefault("annotations", {}).update(job.queue.pod_annotations)
    assert created == want  # the pure builders' object, with what the queue adds only
    assert rdzv.startswith(f"{NAME}-g1-") and rdzv != pj.rdzv_id(w.job)
    (policy,) = fake.of("networkpolicies")
    assert policy["metadata"]["name"] == f"{NAME}-workers"
    assert policy["metadata"]["ownerReferences"][0]["kind"] == pj.KIND
    record = _obj(fake, "configmaps", record_name(NAME))
    assert yaml.safe_load(record["data"]["job.yaml"]) == job.values
    assert record["data"]["rdzvId"] == rdzv and record["data"]["image"] == IMAGE
    code, _, err = _submit(capsys, kubeconfig)
    assert code == 2 and err.count("\n") == 1 and f"job '{NAME}' exists in default (Pending)" in err


def test_status_list_and_logs_read_the_operator_and_the_exporter(
    kube: tuple[FakeKube, str], capsys: pytest.CaptureFixture[str]
) -> None:
    fake, kubeconfig = kube
    assert _submit(capsys, kubeconfig)[0] == 0
    _operate(fake, NAME, restarts=1, step=120)
    code, out, _ = _cli(capsys, "status", NAME, "--kubeconfig", kubeconfig, "--json")
    assert code == 0
    info = json.loads(out)
    assert (info["phase"], info["ready"], info["wanted"], info["restarts"]) == ("Running", 2, 2, 1)
    p = info["progress"]
    assert (p["step"], p["loss"], p["tokens_per_s"], p["goodput"], p["world_size"]) == (
        120,
        1.25,
        51234.0,
        0.93,
        16,
    )
    assert [c["type"] for c in info["conditions"]] == ["Created", "Running"]
    assert info["replicas"][1]["exit_code"] == 143 and info["last_failure"].endswith("(exit 143)")
    code, out, _ = _cli(capsys, "list", "--kubeconfig", kubeconfig)
    assert out.splitlines()[1].split()[:5] == [NAME, "Running", "2/2", "1", "120"]
    code, out, _ = _cli(capsys, "logs", NAME, "--kubeconfig", kubeconfig, "--rank", "1")
    assert code == 0 and out == fake.logs[f"{NAME}-worker-1"]  # the pod of replica index 1
    assert out != fake.logs[f"{NAME}-worker-0"]
    code, out, _ = _cli(capsys, "logs", NAME, "--kubeconfig", kubeconfig, "--tail", "1", "-f")
    assert code == 0 and out == "pod 0 line 3\n"
    code, _, err = _cli(capsys, "logs", NAME, "--kubeconfig", kubeconfig, "--rank", "5")
    assert code == 2 and "--rank 0..1" in err


def test_cancel_keeps_the_record_and_resume_makes_the_next_generation(
    kube: tuple[FakeKube, str], capsys: pytest.CaptureFixture[str]
) -> None:
    fake, kubeconfig = kube
    assert _submit(capsys, kubeconfig)[0] == 0
    _operate(fake, NAME)
    first = _obj(fake, "pytorchjobs", NAME)["spec"]["elasticPolicy"]["rdzvId"]
    code, out, _ = _cli(capsys, "cancel", NAME, "--kubeconfig", kubeconfig)
    assert code == 0 and "checkpoints stay on the claim" in out
    assert fake.get("pytorchjobs", NAME) is None
    assert fake.of("pods") == [] and fake.of("networkpolicies") == []  # owned: collected
    assert "cancelled" in _obj(fake, "configmaps", record_name(NAME))["data"]
    code, out, _ = _cli(capsys, "list", "--kubeconfig", kubeconfig)
    assert out.splitlines()[1].split()[:2] == [NAME, "Cancelled"]
    code, out, _ = _cli(capsys, "resume", NAME, "--kubeconfig", kubeconfig)
    assert code == 0 and out.startswith(
        f"resumed {NAME} (cluster in namespace default, generation 2"
    )
    again = _obj(fake, "pytorchjobs", NAME)
    rdzv = again["spec"]["elasticPolicy"]["rdzvId"]
    assert rdzv.startswith(f"{NAME}-g2-") and rdzv != first
    assert (
        "--resume"
        in again["spec"]["pytorchReplicaSpecs"]["Worker"]["template"]["spec"]["containers"][0][
            "command"
        ]
    )
    assert again["metadata"]["labels"]["eks-fsdp/generation"] == "2"
    record = _obj(fake, "configmaps", record_name(NAME))["data"]
    assert record["generation"] == "2" and record["rdzvId"] == rdzv and "cancelled" not in record
    code, _, err = _cli(capsys, "resume", NAME, "--kubeconfig", kubeconfig)
    assert code == 1 and "is Pending: nothing to resume" in err
    code, _, err = _submit(capsys, kubeconfig, "--replace")
    assert code == 2 and f"--replace: job '{NAME}' is Pending; only a finished job" in err
    _obj(fake, "pytorchjobs", NAME)["status"] = {
        "conditions": [
            {
                "type": "Failed",
                "status": "True",
                "reason": "PyTorchJobFailed",
                "message": "PyTorchJob default/x has failed because 1 Worker replica(s) failed.",
            }
        ]
    }
    code, out, _ = _submit(capsys, kubeconfig, "--replace")
    assert code == 0 and out.startswith(
        f"submitted {NAME} (cluster in namespace default, generation 1"
    )
    assert _obj(fake, "configmaps", record_name(NAME))["data"]["generation"] == "1"
    code, out, _ = _cli(capsys, "cancel", NAME, "--kubeconfig", kubeconfig, "--purge")
    assert code == 0 and fake.get("configmaps", record_name(NAME)) is None


def _one_line(code: int, err: str, status: int, text: str) -> None:
    assert code == status and err.count("\n") == 1 and text in err, err


@pytest.mark.parametrize(
    ("setup", "argv", "status", "text"),
    [
        (lambda f: f.forbidden.add("POST"), [], 1, 'is forbidden: User "alice" cannot post'),
        (
            lambda f: setattr(f, "serve_kubeflow", False),
            [],
            1,
            "no PyTorchJob API (kubeflow.org/v1)",
        ),
        (lambda f: None, ["--set", "namespace=team-a"], 1, "namespace 'team-a' not found"),
        (
            lambda f: None,
            ["--set", "nodeGroup=gpu-x"],
            2,
            "nodeGroup: 'gpu-x' is not a GPU nodegroup",
        ),
        (lambda f: None, ["--set", "wrokers=2"], 2, "wrokers: unknown key (did you mean workers?)"),
    ],
)
def test_submit_errors_are_one_line_and_leave_nothing(
    kube: tuple[FakeKube, str],
    capsys: pytest.CaptureFixture[str],
    setup: Any,
    argv: list[str],
    status: int,
    text: str,
) -> None:
    fake, kubeconfig = kube
    setup(fake)
    code, out, err = _submit(capsys, kubeconfig, *argv)
    _one_line(code, err, status, text)
    assert out == "" and fake.objects == {}
    if status == 2:  # bad input stops before any request
        assert fake.requests == []


def test_client_errors_are_one_line(
    tmp_path: Path, kube: tuple[FakeKube, str], capsys: pytest.CaptureFixture[str]
) -> None:
    fake, kubeconfig = kube
    code, _, err = _cli(capsys, "status", "nope", "--kubeconfig", kubeconfig)
    _one_line(code, err, 1, "no job 'nope' in namespace default")
    code, _, err = _cli(capsys, "list", "--kubeconfig", str(tmp_path / "missing"))
    _one_line(code, err, 2, "no such file")
    fake.stop()  # the API server goes away
    code, _, err = _cli(capsys, "list", "--kubeconfig", kubeconfig)
    _one_line(code, err, 1, f"API server unreachable at {fake.url}")
    code, _, err = _submit(capsys, kubeconfig, "--image", "eks-fsdp-training:sha-1")
    _one_line(code, err, 2, "names no registry")
    code, _, err = _cli(capsys, "list", "--kubeconfig", kubeconfig, "--local")
    _one_line(code, err, 2, "--local runs jobs on this machine: drop --kubeconfig")


def test_the_stack_output_key_is_the_programs() -> None:
    from infra import outputs
    from jobs.cluster.kube import KUBECONFIG_OUTPUT

    assert KUBECONFIG_OUTPUT == outputs.KUBECONFIG


def test_the_scaling_sweep_submits_and_deletes_through_this_backend(
    kube: tuple[FakeKube, str],
) -> None:
    """``sweeps.cloud.ClusterJobs``: the stack's job file sized to a count, with the stack's
    kubeconfig output and its ``trainingImage``; deleting it leaves no record behind."""
    from sweeps.cloud import ClusterJobs
    from sweeps.prerequisites import Plan

    fake, kubeconfig = kube
    root = EXAMPLES.parents[1]
    plan = Plan(
        stack_file=root / "Pulumi.p5-16.yaml",
        group_index=0,
        group_name="p5-block",
        min_size=0,
        max_size=16,
        base_job="llama2-7b-samsum-128gpu",
        namespace="default",
        usd_per_node_hour=1.0,
        deployed=True,
        job_file=EXAMPLES / "p5-16.yaml",
    )
    outputs = {
        "kubeconfig": json.dumps(yaml.safe_load(Path(kubeconfig).read_text())),
        "trainingImage": IMAGE,
    }
    jobs = ClusterJobs(outputs, plan, "p5-16")
    jobs.submit("llama2-7b-4n-ab12", 4, 40)
    job = _obj(fake, "pytorchjobs", "llama2-7b-4n-ab12")
    elastic = job["spec"]["elasticPolicy"]
    assert (elastic["minReplicas"], elastic["maxReplicas"]) == (4, 4)
    container = job["spec"]["pytorchReplicaSpecs"]["Worker"]["template"]["spec"]["containers"][0]
    assert container["image"] == IMAGE and "--max_train_step=40" in container["command"]
    jobs.delete("llama2-7b-4n-ab12")
    assert fake.objects == {}
