"""The real training operator (kubeflow/training-operator at ``TRAINING_OPERATOR_VERSION``)
reconciles the PyTorchJob each stack renders, on fake nodes shaped like the stack's groups.

For each stack: the operator's pods and Services exist, with the container's command and env,
the operator's PET_* env, its labels and the replica's restart policy; the scheduler places
every worker on a node of the job's group (labels, taint, GPUs, EFA); kwok runs them and the
job reaches Running; a deleted worker pod is recreated; a worker that exits 0 (kwok's
``eks-fsdp-pod-exit`` stage) ends the elastic job as Succeeded, as the operator's rule says.
If this fails, the job we render would not run (or not finish) as we expect on EKS.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from controlplane import nodes
from controlplane.__main__ import all_stacks
from controlplane.client import Client, wait_for
from controlplane.cluster import ControlPlane
from tests.controlplane.helpers import (
    condition,
    delete_and_wait,
    namespaces_of,
    relocate,
    rendered_objects,
)

pytestmark = pytest.mark.controlplane
JOB_LABEL = "training.kubeflow.org/job-name"
INDEX_LABEL = "training.kubeflow.org/replica-index"
TIMEOUT_S = 90.0


def _worker_pods(client: Client, job: dict[str, Any]) -> list[dict[str, Any]]:
    ns, name = job["metadata"]["namespace"], job["metadata"]["name"]
    pods = client.items("v1", "Pod", ns, labelSelector=f"{JOB_LABEL}={name}")
    return sorted(pods, key=lambda p: int(p["metadata"]["labels"][INDEX_LABEL]))


def _env(container: dict[str, Any]) -> dict[str, str]:
    """Each variable's value, or its source as text (the API server defaults a downward-API
    ``fieldRef``'s ``apiVersion``, so that source is its field path)."""
    out = {}
    for e in container.get("env", []):
        source = e.get("valueFrom") or {}
        if "fieldRef" in source:
            out[e["name"]] = f"fieldRef:{source['fieldRef']['fieldPath']}"
        else:
            out[e["name"]] = e.get("value", json.dumps(source, sort_keys=True))
    return out


@pytest.mark.parametrize("stack", all_stacks())
def test_operator_runs_the_rendered_job(
    control_plane: ControlPlane, stack: str, tmp_path: Path
) -> None:
    client = control_plane.client
    objs = relocate(rendered_objects(stack, tmp_path / "render"), f"op-{stack}")
    objs = namespaces_of(objs) + objs
    (job,) = [o for o in objs if o["kind"] == "PyTorchJob"]
    worker = job["spec"]["pytorchReplicaSpecs"]["Worker"]
    template = worker["template"]
    (want,) = [c for c in template["spec"]["containers"] if c["name"] == "pytorch"]
    name, replicas = job["metadata"]["name"], worker["replicas"]
    group = template["spec"]["nodeSelector"][nodes.NODEGROUP_LABEL]
    try:
        control_plane.apply_all(objs)
        pods = wait_for(
            f"{stack}: {replicas} worker pods",
            lambda: (p := _worker_pods(client, job)) and len(p) == replicas and p,
            timeout=TIMEOUT_S,
        )
        assert [p["metadata"]["name"] for p in pods] == [
            f"{name}-worker-{i}" for i in range(replicas)
        ]
        for i, pod in enumerate(pods):
            labels = pod["metadata"]["labels"]
            assert template["metadata"]["labels"].items() <= labels.items()
            assert labels[JOB_LABEL] == name
            assert labels["training.kubeflow.org/replica-type"] == "worker"
            assert labels[INDEX_LABEL] == str(i)
            assert pod["spec"]["restartPolicy"] == worker["restartPolicy"]
            (got,) = [c for c in pod["spec"]["containers"] if c["name"] == "pytorch"]
            assert got["command"] == want["command"]
            env = _env(got)
            assert _env(want).items() <= env.items()
            assert env["PET_NNODES"] == (
                f"{job['spec']['elasticPolicy']['minReplicas']}:"
                f"{job['spec']['elasticPolicy']['maxReplicas']}"
            )
            assert got["resources"] == want["resources"]
        want_services = [f"{name}-worker-{i}" for i in range(replicas)]

        def services() -> list[str] | None:
            got = client.items(
                "v1", "Service", job["metadata"]["namespace"], labelSelector=f"{JOB_LABEL}={name}"
            )
            names = sorted(s["metadata"]["name"] for s in got)
            return names if len(names) == replicas else None

        assert wait_for(f"{stack}: services", services, timeout=TIMEOUT_S) == sorted(want_services)

        # The scheduler places each worker on its own node of the job's group; kwok runs it.
        def running() -> list[dict[str, Any]] | None:
            pods = _worker_pods(client, job)
            ok = len(pods) == replicas and all(p["status"].get("phase") == "Running" for p in pods)
            return pods if ok else None

        pods = wait_for(f"{stack}: workers Running", running, timeout=TIMEOUT_S)
        placed = [p["spec"]["nodeName"] for p in pods]
        assert all(n.startswith(f"{group}-") for n in placed), placed
        assert len(set(placed)) == replicas, placed
        wait_for(
            f"{stack}: job Running",
            lambda: condition(client.read(job), "Running") == "True",
            timeout=TIMEOUT_S,
        )

        # A deleted worker is recreated under its name (a new pod, the same index).
        victim = pods[-1]
        client.delete(victim)
        uid = victim["metadata"]["uid"]

        def recreated() -> bool:
            again = client.find(
                "v1", "Pod", victim["metadata"]["name"], victim["metadata"]["namespace"]
            )
            return bool(
                again
                and again["metadata"]["uid"] != uid
                and again["spec"]["restartPolicy"] == worker["restartPolicy"]
            )

        wait_for(f"{stack}: {victim['metadata']['name']} recreated", recreated, timeout=TIMEOUT_S)

        # Worker 0 exits 0: an elastic job then Succeeds (pytorchjob_controller.go).
        first = client.read(pods[0])
        first["metadata"].setdefault("annotations", {})[nodes.EXIT_CODE_ANNOTATION] = "0"
        client.request("PUT", client.path(first), first)
        wait_for(
            f"{stack}: job Succeeded",
            lambda: condition(client.read(job), "Succeeded") == "True",
            timeout=TIMEOUT_S,
        )
        assert client.read(pods[0])["status"]["phase"] == "Succeeded"
    finally:
        delete_and_wait(client, objs)
