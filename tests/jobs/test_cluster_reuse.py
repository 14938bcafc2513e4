"""A cluster job's progress, a name used again, the printed commands and odd jobs: the client
layer over real HTTP.

The requests go to ``FakeKube`` (``tests/jobs/fake_kube.py``), a loopback server answering in
the upstream API's response shapes (no API server runs here); the test plays the operator, the
kubelet, the garbage collector (``deferred_gc``: dependents go only when the test calls
``collect()``, as the controller manager's collector removes them after a background-propagation
DELETE) and the cluster's Prometheus (series with the scrape job's labels, answered in the
Prometheus HTTP API's instant-vector format). The exporter text is the real
``training.prometheus.PrometheusSink``'s.

If these fail: ``status``/``list`` would show no progress for a job whose worker 0 is not
global rank 0 (etcd rendezvous orders ranks freely), or whose worker 0 is not running, or on
EKS, where the workers' NetworkPolicy keeps the API server's pod proxy out and only the
cluster's Prometheus can tell; a resume of a Failed job or a ``submit --replace`` would fail on
the old job's NetworkPolicy that the garbage collector has not removed yet; the printed
"follow it" command would talk to another cluster than ``--kubeconfig``/``--stack`` named; a
PyTorchJob made by other means would print a stack trace; and ``resume`` could not move a job
to a new image when its old one expired from the registry.
"""

from __future__ import annotations

import json
import os
import urllib.request
from pathlib import Path
from typing import Any
from urllib.parse import unquote

import pytest
import yaml

from jobs.manifest import record_name
from tests.jobs.fake_kube import FakeKube
from tests.jobs.test_cluster_follow import _fake_pulumi
from tests.jobs.test_cluster_jobs import (
    IMAGE,
    NAME,
    P4DE,
    _cli,
    _obj,
    _operate,
    _submit,
    kube,
)
from workloads.specs import pytorchjob as pj
from workloads.specs.prometheus_files import TRAINING_METRICS_PORT

__all__ = ["kube"]  # the fixture, shared with test_cluster_jobs

FAILED = {
    "conditions": [
        {
            "type": "Failed",
            "status": "True",
            "reason": "PyTorchJobFailed",
            "message": "PyTorchJob default/x has failed because 1 Worker replica(s) failed.",
        }
    ]
}


def _exporter(step: int, rank: int) -> str:
    """What the exporter of a pod whose local rank 0 is global rank ``rank`` serves."""
    from training.prometheus import PrometheusSink

    sink = PrometheusSink(0, addr="127.0.0.1", env={"RANK": str(rank), "WORLD_SIZE": "16"})
    try:
        sink.log({"loss": 1.5, "tokens_per_s": 40000.0, "step_time_s": 2.0, "goodput": 0.9}, step)
        with urllib.request.urlopen(sink.url, timeout=5) as resp:
            return resp.read().decode()
    finally:
        sink.close()


def _scraped(text: str, **target: str) -> list[tuple[dict[str, str], float]]:
    """The series Prometheus stores from an exporter's text: its labels plus the scrape job's
    target labels (``training_job``, ``namespace``, ``pod``:
    ``workloads.specs.prometheus_files.kubernetes_scrape_configs``)."""
    out = []
    for line in text.splitlines():
        if not line.startswith("eksfsdp_"):
            continue
        head, _, value = line.rpartition(" ")
        name, _, labels = head.partition("{")
        pairs = dict(p.split("=", 1) for p in labels.rstrip("}").split(",") if "=" in p)
        series = {k: v.strip('"') for k, v in pairs.items()}
        out.append(({**series, **target, "__name__": name}, float(value)))
    return out


def _status(capsys: pytest.CaptureFixture[str], kubeconfig: str) -> dict[str, Any]:
    code, out, err = _cli(capsys, "status", NAME, "--kubeconfig", kubeconfig, "--json")
    assert code == 0, err
    return json.loads(out)  # type: ignore[no-any-return]


def _pod_proxy_requests(fake: FakeKube) -> list[str]:
    return [unquote(p) for _, p in fake.requests if "/pods/" in p and p.endswith("/proxy/metrics")]


def test_progress_from_a_worker_0_that_is_not_rank_0(
    kube: tuple[FakeKube, str], capsys: pytest.CaptureFixture[str]
) -> None:
    """Pod proxy path (no Prometheus): worker 0's local rank 0 is global rank 8."""
    fake, kubeconfig = kube
    assert _submit(capsys, kubeconfig)[0] == 0
    _operate(fake, NAME)
    fake.metrics[f"{NAME}-worker-0"] = _exporter(57, rank=8)
    assert 'rank="8"' in fake.metrics[f"{NAME}-worker-0"]
    p = _status(capsys, kubeconfig)["progress"]
    assert (p["step"], p["loss"], p["tokens_per_s"], p["world_size"]) == (57, 1.5, 40000.0, 16)
    code, out, _ = _cli(capsys, "list", "--kubeconfig", kubeconfig)
    assert code == 0 and out.splitlines()[1].split()[4] == "57"


def test_progress_from_worker_1_when_worker_0_is_pending(
    kube: tuple[FakeKube, str], capsys: pytest.CaptureFixture[str]
) -> None:
    fake, kubeconfig = kube
    assert _submit(capsys, kubeconfig)[0] == 0
    _operate(fake, NAME)
    pod0 = _obj(fake, "pods", f"{NAME}-worker-0")
    pod0["status"] = {"phase": "Pending"}
    fake.metrics[f"{NAME}-worker-0"] = ""
    fake.metrics[f"{NAME}-worker-1"] = _exporter(33, rank=0)
    p = _status(capsys, kubeconfig)["progress"]
    assert (p["step"], p["goodput"]) == (33, 0.9)
    assert (
        _pod_proxy_requests(fake)[-1].split("/")[-3] == f"{NAME}-worker-1:{TRAINING_METRICS_PORT}"
    )


def test_progress_comes_from_the_clusters_prometheus_through_the_service_proxy(
    kube: tuple[FakeKube, str], capsys: pytest.CaptureFixture[str]
) -> None:
    """Where the workers' NetworkPolicy keeps the API server out (EKS), the job's series in the
    cluster's Prometheus are the only way in: no pod-proxy request is made when it answers."""
    fake, kubeconfig = kube
    assert _submit(capsys, kubeconfig)[0] == 0
    _operate(fake, NAME)
    fake.metrics.clear()  # a pod-proxy request would find nothing
    ours = {"training_job": NAME, "namespace": "default"}
    fake.prometheus = [
        *_scraped(_exporter(88, rank=8), **ours, pod=f"{NAME}-worker-0"),
        *_scraped(_exporter(88, rank=0), **ours, pod=f"{NAME}-worker-1"),
        # another job, and a job of the same name in another namespace
        *_scraped(_exporter(999, rank=0), training_job="other", namespace="default", pod="o-0"),
        *_scraped(_exporter(777, rank=0), training_job=NAME, namespace="team-a", pod="t-0"),
    ]
    p = _status(capsys, kubeconfig)["progress"]
    assert (p["step"], p["loss"], p["tokens_per_s"], p["goodput"], p["world_size"]) == (
        88,
        1.5,
        40000.0,
        0.9,
        16,
    )
    if p["total"] is not None:
        assert p["eta_s"] == pytest.approx((p["total"] - 88) * 2.0)
    queries = [unquote(path) for _, path in fake.requests if "/services/" in path]
    assert queries and queries[-1] == (
        "/api/v1/namespaces/monitoring/services/kps-prometheus:9090/proxy/api/v1/query"
    )
    assert _pod_proxy_requests(fake) == []
    fake.prometheus = []  # Prometheus answers but has not scraped the job yet
    p = _status(capsys, kubeconfig)["progress"]
    assert p["step"] is None and _pod_proxy_requests(fake) == []


@pytest.mark.parametrize("how", ["resume", "replace", "cancel-resume"])
def test_a_name_used_again_while_the_gc_still_holds_the_old_policy(
    kube: tuple[FakeKube, str], capsys: pytest.CaptureFixture[str], how: str
) -> None:
    fake, kubeconfig = kube
    fake.deferred_gc = True
    assert _submit(capsys, kubeconfig)[0] == 0
    old_uid = _obj(fake, "pytorchjobs", NAME)["metadata"]["uid"]
    if how == "cancel-resume":
        assert _cli(capsys, "cancel", NAME, "--kubeconfig", kubeconfig)[0] == 0
    else:
        _obj(fake, "pytorchjobs", NAME)["status"] = FAILED
    policy = _obj(fake, "networkpolicies", f"{NAME}-workers")
    if how == "replace":
        code, _, err = _submit(capsys, kubeconfig, "--replace")
    else:
        code, _, err = _cli(capsys, "resume", NAME, "--kubeconfig", kubeconfig)
    assert code == 0, err
    job = _obj(fake, "pytorchjobs", NAME)
    assert job["metadata"]["uid"] != old_uid
    again = _obj(fake, "networkpolicies", f"{NAME}-workers")
    assert again["metadata"]["uid"] != policy["metadata"]["uid"]
    assert again["metadata"]["ownerReferences"][0]["uid"] == job["metadata"]["uid"]
    fake.collect()  # the collector's late pass leaves the new job's policy alone
    assert (
        _obj(fake, "networkpolicies", f"{NAME}-workers")["metadata"]["uid"]
        == (again["metadata"]["uid"])
    )


def test_a_policy_not_owned_by_a_job_is_left_alone(
    kube: tuple[FakeKube, str], capsys: pytest.CaptureFixture[str]
) -> None:
    fake, kubeconfig = kube
    fake.put(
        "networkpolicies",
        {
            "apiVersion": "networking.k8s.io/v1",
            "kind": "NetworkPolicy",
            "metadata": {"name": f"{NAME}-workers"},
            "spec": {"podSelector": {}},
        },
    )
    code, _, err = _submit(capsys, kubeconfig)
    assert code == 1 and err.count("\n") == 1 and "networkpolicy" in err and "already exists" in err
    assert fake.get("pytorchjobs", NAME) is None  # nothing half-made is left behind
    assert "ownerReferences" not in _obj(fake, "networkpolicies", f"{NAME}-workers")["metadata"]


def test_printed_commands_carry_the_kubeconfig(
    kube: tuple[FakeKube, str], capsys: pytest.CaptureFixture[str]
) -> None:
    fake, kubeconfig = kube
    code, out, _ = _submit(capsys, kubeconfig)
    where = f"--kubeconfig {kubeconfig} -n default"
    assert code == 0 and f"eks-fsdp jobs logs {NAME} --follow {where}" in out
    _operate(fake, NAME)
    assert _status(capsys, kubeconfig)["next_step"] == f"eks-fsdp jobs logs {NAME} --follow {where}"
    code, out, _ = _cli(capsys, "cancel", NAME, "--kubeconfig", kubeconfig)
    assert f"eks-fsdp jobs resume {NAME} {where}" in out
    assert _status(capsys, kubeconfig)["next_step"] == f"eks-fsdp jobs resume {NAME} {where}"


def test_printed_commands_carry_the_stack(
    tmp_path: Path,
    kube: tuple[FakeKube, str],
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    fake, kubeconfig = kube
    fake.namespaces.add("team-a")
    outputs = {
        "kubeconfig": json.dumps(yaml.safe_load(Path(kubeconfig).read_text())),
        "jobsNamespace": "team-a",
        "trainingImage": IMAGE,
    }
    monkeypatch.setenv("PATH", _fake_pulumi(tmp_path, outputs) + os.pathsep + os.environ["PATH"])
    code, out, err = _cli(capsys, "submit", P4DE, "--stack", "p4de-odcr")
    assert code == 0, err
    assert f"eks-fsdp jobs logs {NAME} --follow --stack p4de-odcr -n team-a" in out


def _foreign_job(fake: FakeKube, replicas: dict[str, Any]) -> None:
    """A PyTorchJob made by other means (kubectl apply of the operator's own example)."""
    fake.put(
        "pytorchjobs",
        {
            "apiVersion": pj.API_VERSION,
            "kind": pj.KIND,
            "metadata": {"name": "other"},
            "spec": {"pytorchReplicaSpecs": replicas},
        },
    )


def test_jobs_made_elsewhere_are_shown_or_refused_in_one_line(
    kube: tuple[FakeKube, str], capsys: pytest.CaptureFixture[str]
) -> None:
    """The training operator's mnist example: a ``Master`` replica and ``python3
    /opt/pytorch-mnist/mnist.py`` (kubeflow/trainer v1.9.4
    ``examples/pytorch/simple.yaml``)."""
    fake, kubeconfig = kube
    template = {
        "spec": {
            "containers": [
                {
                    "name": "pytorch",
                    "image": "docker.io/kubeflowkatib/pytorch-mnist:v1beta1-45c5727",
                    "command": ["python3", "/opt/pytorch-mnist/mnist.py", "--epochs=1"],
                }
            ]
        }
    }
    _foreign_job(fake, {"Worker": {"replicas": 1, "template": template}})
    code, out, err = _cli(capsys, "status", "other", "--kubeconfig", kubeconfig, "--json")
    assert code == 0, err
    assert json.loads(out)["progress"]["total"] is None
    fake.objects.clear()
    _foreign_job(fake, {"Master": {"replicas": 1, "template": template}})
    for argv in (["status", "other"], ["logs", "other"], ["logs", "other", "-f"]):
        code, _, err = _cli(capsys, *argv, "--kubeconfig", kubeconfig)
        assert code == 1 and err.count("\n") == 1, err
        assert "pytorchjob default/other has no Worker replica (Master)" in err


def test_an_api_error_listing_workloads_is_one_line(
    kube: tuple[FakeKube, str], capsys: pytest.CaptureFixture[str]
) -> None:
    fake, kubeconfig = kube
    assert _submit(capsys, kubeconfig)[0] == 0  # a GPU job: in its pool's Kueue queue
    fake.broken["workloads"] = 500
    code, _, err = _cli(capsys, "status", NAME, "--kubeconfig", kubeconfig)
    assert code == 1 and err.count("\n") == 1 and "list workloads in default: 500" in err, err
    code, _, err = _cli(capsys, "list", "--kubeconfig", kubeconfig)
    assert code == 1 and err.count("\n") == 1 and "list workloads in default: 500" in err, err


def test_resume_keeps_the_recorded_image_or_takes_a_new_one(
    kube: tuple[FakeKube, str], capsys: pytest.CaptureFixture[str]
) -> None:
    """ADR 0010: a resume runs the image its job was submitted with; ``--image`` moves it to
    another (the registry's lifecycle rule may have expired the old one), and the record
    keeps it for the next resume."""
    fake, kubeconfig = kube

    def image() -> str:
        job = _obj(fake, "pytorchjobs", NAME)
        return str(
            job["spec"]["pytorchReplicaSpecs"]["Worker"]["template"]["spec"]["containers"][0][
                "image"
            ]
        )

    assert _submit(capsys, kubeconfig)[0] == 0
    assert _cli(capsys, "cancel", NAME, "--kubeconfig", kubeconfig)[0] == 0
    assert _cli(capsys, "resume", NAME, "--kubeconfig", kubeconfig)[0] == 0
    assert image() == IMAGE
    _obj(fake, "pytorchjobs", NAME)["status"] = FAILED
    before = {k: dict(v) for k, v in fake.objects.items()}
    code, out, err = _cli(
        capsys, "resume", NAME, "--kubeconfig", kubeconfig, "--image", "training:new"
    )
    assert code == 2 and out == "" and err.count("\n") == 1 and "names no registry" in err
    assert {k: dict(v) for k, v in fake.objects.items()} == before
    newer = IMAGE.replace(":sha-1", ":sha-2")
    code, _, err = _cli(capsys, "resume", NAME, "--kubeconfig", kubeconfig, "--image", newer)
    assert code == 0, err
    assert image() == newer
    assert _obj(fake, "configmaps", record_name(NAME))["data"]["image"] == newer
    _obj(fake, "pytorchjobs", NAME)["status"] = FAILED
    assert _cli(capsys, "resume", NAME, "--kubeconfig", kubeconfig)[0] == 0
    assert image() == newer  # kept
    code, _, err = _cli(capsys, "resume", "--local", NAME, "--image", newer)
    assert code == 2 and err.count("\n") == 1 and "--image: a local job runs" in err


def test_a_team_may_query_prometheus_for_progress_and_nothing_else(
    kube: tuple[FakeKube, str], capsys: pytest.CaptureFixture[str]
) -> None:
    """The team's Role in the metrics namespace grants ``get`` on ``services/proxy`` of the
    Service the CLI's query names (Kubernetes RBAC: a proxy request authorises the
    ``services/proxy`` subresource of the named Service), and only on stacks with
    observability."""
    from infra.config import parse, project_defaults, stack_file_values
    from jobs.cluster import metrics as cluster_metrics
    from workloads.specs import teams
    from workloads.specs.validate import validate

    assert teams.PROMETHEUS_PORT == cluster_metrics.PROMETHEUS_PORT
    team = {"name": "nlp", "principalArns": ["arn:aws:iam::123456789012:role/nlp"]}
    values = {**project_defaults(), **stack_file_values("p5-16"), "teams": [team]}
    cfg = parse(values, stack="p5-16")
    assert cfg.observability.enabled
    objs = {(o["kind"], o["metadata"]["name"]): o for o in teams.metrics_objects(cfg.teams[0], cfg)}
    role = objs[("Role", "job-metrics-nlp")]
    binding = objs[("RoleBinding", "job-metrics-nlp")]
    assert role["metadata"]["namespace"] == binding["metadata"]["namespace"] == "monitoring"
    assert binding["subjects"][0]["name"] == teams.group_name("nlp")
    for obj in (role, binding):
        validate(obj, cfg.kubernetes_version)  # strict: the Kubernetes schema of the version
    (rule,) = role["rules"]
    assert (rule["resources"], rule["verbs"]) == (["services/proxy"], ["get"])
    fake, kubeconfig = kube
    assert _submit(capsys, kubeconfig)[0] == 0
    _operate(fake, NAME)
    fake.prometheus = []
    assert _cli(capsys, "status", NAME, "--kubeconfig", kubeconfig)[0] == 0
    (path,) = [unquote(p) for _, p in fake.requests if "/services/" in p]
    ns, service = path.split("/")[4], path.split("/")[6]
    assert ns == role["metadata"]["namespace"] and service in rule["resourceNames"]
    off = parse({**values, "observability": {"enabled": False}}, stack="p5-16")
    assert teams.metrics_objects(off.teams[0], off) == []


def test_a_finished_job_removed_by_its_ttl_still_shows_how_it_ended(
    kube: tuple[FakeKube, str], capsys: pytest.CaptureFixture[str]
) -> None:
    """The operator deletes a finished job ``ttlSecondsAfterFinished`` after it ends
    (``runPolicy``, kubeflow/trainer v1.9.4 ``pkg/controller.v1/common/job.go``
    ``CleanupJob``); the record remembers Succeeded or Failed, so the job does not look
    resumable after a success (a resume would train it again)."""
    fake, kubeconfig = kube
    assert _submit(capsys, kubeconfig)[0] == 0
    _obj(fake, "pytorchjobs", NAME)["status"] = {
        "conditions": [{"type": "Succeeded", "status": "True", "reason": "PyTorchJobSucceeded"}]
    }
    code, out, _ = _cli(capsys, "list", "--kubeconfig", kubeconfig)
    assert out.splitlines()[1].split()[:2] == [NAME, "Succeeded"]
    assert _obj(fake, "configmaps", record_name(NAME))["data"]["finalPhase"] == "Succeeded"
    fake._delete("pytorchjobs", "default", NAME)  # the TTL
    info = _status(capsys, kubeconfig)
    assert (info["phase"], info["next_step"]) == ("Succeeded", "")
    code, out, err = _cli(capsys, "resume", NAME, "--kubeconfig", kubeconfig)
    assert code == 1 and err.count("\n") == 1 and "succeeded: nothing to resume" in err
    assert fake.get("pytorchjobs", NAME) is None
    # a Failed one stays resumable, and the resumed generation forgets the old ending
    assert _submit(capsys, kubeconfig, "--replace")[0] == 0
    _obj(fake, "pytorchjobs", NAME)["status"] = FAILED
    assert _status(capsys, kubeconfig)["phase"] == "Failed"
    fake._delete("pytorchjobs", "default", NAME)
    code, out, _ = _cli(capsys, "list", "--kubeconfig", kubeconfig)
    assert out.splitlines()[1].split()[:2] == [NAME, "Failed"]
    assert _cli(capsys, "resume", NAME, "--kubeconfig", kubeconfig)[0] == 0
    assert "finalPhase" not in _obj(fake, "configmaps", record_name(NAME))["data"]
    assert _status(capsys, kubeconfig)["phase"] == "Pending"


def test_a_webhook_message_over_several_lines_is_one_line() -> None:
    """An admission webhook's denial is a ``Status`` whose message the webhook wrote; the
    operator's lists field errors (``field.ErrorList.ToAggregate``), and a webhook may put
    newlines in it. The client's own ``ApiException`` carries it, as the API server sends it."""
    from kubernetes.client.exceptions import ApiException

    from jobs.cluster.kube import api_errors
    from jobs.types import JobsError

    err = ApiException(status=422, reason="Unprocessable Entity")
    err.body = json.dumps(
        {
            "kind": "Status",
            "status": "Failure",
            "reason": "Invalid",
            "code": 422,
            "message": 'admission webhook "validator.pytorchjob.training-operator.kubeflow.org" '
            'denied the request: [metadata.name: Invalid value: "1abc":\n  should match: a '
            "DNS-1035 label,\n\tspec.elasticPolicy: Required value]",
        }
    )

    class Api:
        configuration = type("C", (), {"host": "https://127.0.0.1:6443"})()

    with pytest.raises(JobsError) as raised, api_errors(Api(), "create pytorchjob 1abc"):
        raise err
    text = str(raised.value)
    assert "\n" not in text and "\t" not in text
    assert text.startswith("create pytorchjob 1abc: 422 Unprocessable Entity: admission webhook")
    assert 'Invalid value: "1abc": should match: a DNS-1035 label, spec.elasticPolicy' in text


def test_the_record_comes_first_and_goes_when_the_job_is_not_made(
    kube: tuple[FakeKube, str],
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A job without a record could be neither resumed nor listed once deleted: the record is
    created first, and removed again when the job is not created (an API error, or Ctrl-C
    arriving while it is)."""
    from jobs.cluster.backend import ClusterBackend

    fake, kubeconfig = kube
    assert _submit(capsys, kubeconfig)[0] == 0
    posts = [path.split("/")[-1] for method, path in fake.requests if method == "POST"]
    assert posts == ["configmaps", "pytorchjobs", "networkpolicies"]
    assert _cli(capsys, "cancel", NAME, "--kubeconfig", kubeconfig, "--purge")[0] == 0
    assert fake.objects == {}

    def interrupted(*args: Any, **kwargs: Any) -> Any:
        raise KeyboardInterrupt

    monkeypatch.setattr(ClusterBackend, "_create", interrupted)
    with pytest.raises(KeyboardInterrupt):
        _submit(capsys, kubeconfig)
    assert fake.objects == {}
    monkeypatch.undo()
    fake.serve_kubeflow = False  # the record is made, the job is refused: nothing is left
    code, _, err = _submit(capsys, kubeconfig)
    assert code == 1 and err.count("\n") == 1 and "no PyTorchJob API" in err
    assert fake.objects == {}
