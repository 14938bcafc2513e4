"""``eks-fsdp jobs`` against the local control plane: a real kube-apiserver (admission, RBAC,
the garbage collector of kube-controller-manager), the real training operator reconciling the
PyTorchJob the CLI creates, kwok running its pods on fake nodes of the dev stack's nodegroup.

The job is the dev example in a namespace of its own, with a checkpoint claim (a static volume
bound to it, as the fsx stacks' claim is), so that it resumes with two workers. If these fail,
the CLI would create a job the operator does not run, misread the operator's conditions and
pods, follow a job's log before its first pod exists, leave the workers' NetworkPolicy or
pods behind after ``cancel`` (or lose the record ``resume`` needs), resume into a closed rendezvous, or report a refused request as something
other than one line.
"""

from __future__ import annotations

import base64
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from controlplane import nodes
from controlplane.client import Client, wait_for
from controlplane.cluster import ControlPlane
from jobs import cli
from jobs.manifest import record_name
from workloads.specs import pytorchjob

pytestmark = pytest.mark.controlplane

DEV = str(Path(__file__).resolve().parents[2] / "jobs" / "examples" / "dev.yaml")
NS = "jobs-cli"
NAME = "cp-dev"
CLAIM = "ckpt"
IMAGE = "123456789012.dkr.ecr.us-east-2.amazonaws.com/eks-fsdp:controlplane-test"
TIMEOUT_S = 90.0


def _cli(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    code = cli.main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


def _status(capsys: pytest.CaptureFixture[str], kubeconfig: str) -> dict[str, Any]:
    code, out, err = _cli(capsys, "status", NAME, "-n", NS, "--kubeconfig", kubeconfig, "--json")
    assert code == 0, err
    return json.loads(out)  # type: ignore[no-any-return]


def _volume() -> list[dict[str, Any]]:
    """A claim bound to a static volume, as the fsx stacks' claim is to the FSx volume."""
    return [
        {
            "apiVersion": "v1",
            "kind": "PersistentVolume",
            "metadata": {"name": f"{NS}-{CLAIM}"},
            "spec": {
                "capacity": {"storage": "1Gi"},
                "accessModes": ["ReadWriteMany"],
                "persistentVolumeReclaimPolicy": "Retain",
                "storageClassName": "",
                "hostPath": {"path": f"/tmp/{NS}-{CLAIM}"},
                "claimRef": {"namespace": NS, "name": CLAIM},
            },
        },
        {
            "apiVersion": "v1",
            "kind": "PersistentVolumeClaim",
            "metadata": {"name": CLAIM, "namespace": NS},
            "spec": {
                "accessModes": ["ReadWriteMany"],
                "storageClassName": "",
                "volumeName": f"{NS}-{CLAIM}",
                "resources": {"requests": {"storage": "1Gi"}},
            },
        },
    ]


@pytest.fixture(scope="module")
def cluster(control_plane: ControlPlane) -> Iterator[tuple[Client, str]]:
    client = control_plane.client
    namespace = {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": NS}}
    # The jobs' ServiceAccount, as the platform creates it (infra.pod_identity on EKS): the API
    # server refuses pods whose ServiceAccount does not exist.
    objs = [namespace, pytorchjob.service_account(NS), *_volume()]
    control_plane.apply_all(objs)
    try:
        yield client, str(control_plane.kubeconfig)
    finally:
        for obj in objs:
            client.delete(obj)
        wait_for(
            f"namespace {NS} deleted",
            lambda: client.find("v1", "Namespace", NS) is None,
            timeout=120,
            interval=0.5,
        )


def _workers(client: Client) -> list[dict[str, Any]]:
    pods = client.items("v1", "Pod", NS, labelSelector=f"training.kubeflow.org/job-name={NAME}")
    return sorted(pods, key=lambda p: p["metadata"]["name"])


def test_submit_status_list_and_logs(
    cluster: tuple[Client, str], capsys: pytest.CaptureFixture[str]
) -> None:
    client, kubeconfig = cluster
    code, out, err = _cli(
        capsys,
        "submit",
        DEV,
        "--kubeconfig",
        kubeconfig,
        "--name",
        NAME,
        "--image",
        IMAGE,
        "--set",
        f"namespace={NS}",
        "--set",
        f"checkpointClaim={CLAIM}",
        "--follow",
        "--wait-timeout",
        str(TIMEOUT_S),
    )
    # --follow waits for the operator to create worker pod 0 and for it to start, one line
    # per state, then asks for its log, which kwok's nodes do not serve (one line)
    assert out.startswith(f"submitted {NAME} (cluster in namespace {NS}, generation 1")
    *waiting, last = err.splitlines()
    note = f"waiting for pod {NAME}-worker-0 to start: "
    assert all(line.startswith(note) for line in waiting), err  # none if the operator was quick
    assert code == 1 and last.startswith(f"eks-fsdp jobs: error: logs of pod {NAME}-worker-0: "), (
        err
    )
    info = wait_for(
        "the operator runs the job on kwok's nodes",
        lambda: (s := _status(capsys, kubeconfig))["phase"] == "Running" and s["ready"] == 2 and s,
        timeout=TIMEOUT_S,
    )
    assert info["wanted"] == 2 and [c["type"] for c in info["conditions"]][:2] == [
        "Created",
        "Running",
    ]
    assert [r["name"] for r in info["replicas"]] == [f"{NAME}-worker-0", f"{NAME}-worker-1"]
    job = client.find("kubeflow.org/v1", "PyTorchJob", NAME, NS)
    assert job is not None and job["metadata"]["labels"]["eks-fsdp/generation"] == "1"
    policy = client.find("networking.k8s.io/v1", "NetworkPolicy", f"{NAME}-workers", NS)
    assert policy is not None
    assert policy["metadata"]["ownerReferences"][0]["uid"] == job["metadata"]["uid"]
    record = client.find("v1", "ConfigMap", record_name(NAME), NS)
    assert yaml.safe_load(record["data"]["job.yaml"])["name"] == NAME
    code, out, _ = _cli(capsys, "list", "-n", NS, "--kubeconfig", kubeconfig)
    assert out.splitlines()[1].split()[:3] == [NAME, "Running", "2/2"]
    code, _, err = _cli(
        capsys,
        "submit",
        DEV,
        "--kubeconfig",
        kubeconfig,
        "--name",
        NAME,
        "--image",
        IMAGE,
        "--set",
        f"namespace={NS}",
    )
    assert code == 2 and err.count("\n") == 1 and f"job '{NAME}' exists in {NS} (Running)" in err
    # kwok's nodes serve no container logs (the API server's dial to the kubelet port is
    # refused): the CLI asks for worker 1's pod and reports the answer in one line
    code, out, err = _cli(capsys, "logs", NAME, "-n", NS, "--kubeconfig", kubeconfig, "--rank", "1")
    assert code == 0 or (code == 1 and err.count("\n") == 1), err
    assert f"logs of pod {NAME}-worker-1: " in err or out


def test_cancel_deletes_the_job_and_what_it_owns_but_keeps_the_record(
    cluster: tuple[Client, str], capsys: pytest.CaptureFixture[str]
) -> None:
    client, kubeconfig = cluster
    code, _, err = _cli(capsys, "cancel", NAME, "-n", NS, "--kubeconfig", kubeconfig)
    assert code == 0, err
    wait_for(
        "the job, its pods and its NetworkPolicy gone",
        lambda: (
            client.find("kubeflow.org/v1", "PyTorchJob", NAME, NS) is None
            and not _workers(client)
            and client.find("networking.k8s.io/v1", "NetworkPolicy", f"{NAME}-workers", NS) is None
        ),
        timeout=TIMEOUT_S,
    )
    assert "cancelled" in client.find("v1", "ConfigMap", record_name(NAME), NS)["data"]
    assert _status(capsys, kubeconfig)["phase"] == "Cancelled"


def test_resume_creates_the_next_generation_which_succeeds(
    cluster: tuple[Client, str], capsys: pytest.CaptureFixture[str]
) -> None:
    client, kubeconfig = cluster
    first = client.find("v1", "ConfigMap", record_name(NAME), NS)["data"]["rdzvId"]
    code, _, err = _cli(capsys, "resume", NAME, "-n", NS, "--kubeconfig", kubeconfig)
    assert code == 0, err
    job = client.find("kubeflow.org/v1", "PyTorchJob", NAME, NS)
    rdzv = job["spec"]["elasticPolicy"]["rdzvId"]
    assert rdzv.startswith(f"{NAME}-g2-") and rdzv != first
    command = job["spec"]["pytorchReplicaSpecs"]["Worker"]["template"]["spec"]["containers"][0][
        "command"
    ]
    assert "--resume" in command

    def running() -> list[dict[str, Any]] | None:
        pods = _workers(client)
        ok = len(pods) == 2 and all(x["status"].get("phase") == "Running" for x in pods)
        return pods if ok else None

    pods = wait_for("generation 2 running", running, timeout=TIMEOUT_S)
    first_pod = client.read(pods[0])
    first_pod["metadata"].setdefault("annotations", {})[nodes.EXIT_CODE_ANNOTATION] = "0"
    client.request("PUT", client.path(first_pod), first_pod)
    done = wait_for(
        "the job Succeeded",
        lambda: (s := _status(capsys, kubeconfig))["phase"] == "Succeeded" and s,
        timeout=TIMEOUT_S,
    )
    assert done["generation"] == 2 and done["rdzv_id"] == rdzv
    code, _, err = _cli(capsys, "resume", NAME, "-n", NS, "--kubeconfig", kubeconfig)
    assert code == 1 and "succeeded: nothing to resume" in err
    code, _, _ = _cli(capsys, "cancel", NAME, "-n", NS, "--kubeconfig", kubeconfig, "--purge")
    assert code == 0 and client.find("v1", "ConfigMap", record_name(NAME), NS) is None


def test_a_user_without_the_role_gets_one_forbidden_line(
    cluster: tuple[Client, str], capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    """A service account with no role binding: RBAC refuses the create."""
    client, kubeconfig = cluster
    account = {
        "apiVersion": "v1",
        "kind": "ServiceAccount",
        "metadata": {"name": "nobody", "namespace": NS},
    }
    client.create(account)
    answer: dict[str, Any] = client.request(
        "POST",
        f"/api/v1/namespaces/{NS}/serviceaccounts/nobody/token",
        {"apiVersion": "authentication.k8s.io/v1", "kind": "TokenRequest", "spec": {}},
    )
    token = answer["status"]["token"]
    admin = yaml.safe_load(Path(kubeconfig).read_text())
    cluster_entry = admin["clusters"][0]
    ca = Path(cluster_entry["cluster"]["certificate-authority"]).read_bytes()
    restricted = tmp_path / "kubeconfig"
    restricted.write_text(
        yaml.safe_dump(
            {
                "apiVersion": "v1",
                "kind": "Config",
                "clusters": [
                    {
                        "name": "local",
                        "cluster": {
                            "server": cluster_entry["cluster"]["server"],
                            "certificate-authority-data": base64.b64encode(ca).decode(),
                        },
                    }
                ],
                "users": [{"name": "nobody", "user": {"token": token}}],
                "contexts": [{"name": "nobody", "context": {"cluster": "local", "user": "nobody"}}],
                "current-context": "nobody",
            }
        )
    )
    code, out, err = _cli(
        capsys,
        "submit",
        DEV,
        "--kubeconfig",
        str(restricted),
        "--name",
        "cp-denied",
        "--image",
        IMAGE,
        "--set",
        f"namespace={NS}",
    )
    assert code == 1 and out == "" and err.count("\n") == 1 and "forbidden" in err, err
    assert client.find("kubeflow.org/v1", "PyTorchJob", "cp-denied", NS) is None
    code, _, err = _cli(capsys, "list", "-n", NS, "--kubeconfig", str(restricted))
    assert code == 1 and err.count("\n") == 1 and "forbidden" in err, err
