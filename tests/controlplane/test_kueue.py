"""Kueue (sigs.k8s.io/kueue at ``KUEUE_VERSION``) queues the project's PyTorchJob.

A ResourceFlavor for the dev stack's GPU group, a ClusterQueue with quota for one job (the
job's CPU, memory and GPUs), a LocalQueue; two jobs labelled for the queue are suspended by
Kueue's webhook at creation; one is admitted (unsuspended, its pods created by the operator),
the other waits with its Workload not admitted, and quota is why (its ``QuotaReserved``
condition: ``insufficient unused quota``). Once the admitted job is deleted, the other is
admitted in turn. If this fails, queueing jobs with Kueue (the shared-cluster work) would not
behave as the project assumes: Kueue's webhooks are not served, its CRDs' conversion or CEL
rules reject our objects, its PyTorchJob integration does not see the operator's jobs, or a
finished job's quota is not released.
"""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import pytest

from controlplane import nodes
from controlplane.client import wait_for
from controlplane.cluster import ControlPlane
from tests.controlplane.helpers import (
    delete_and_wait,
    job_quota,
    namespaces_of,
    relocate,
    rendered_objects,
)

pytestmark = pytest.mark.controlplane
QUEUE_LABEL = "kueue.x-k8s.io/queue-name"
KUEUE = "kueue.x-k8s.io/v1beta2"
TIMEOUT_S = 90.0


def _condition(obj: dict[str, Any], kind: str) -> dict[str, Any]:
    for c in obj.get("status", {}).get("conditions", []) or []:
        if c["type"] == kind:
            return dict(c)
    return {}


def _suspended(job: dict[str, Any]) -> bool:
    return bool(job["spec"].get("runPolicy", {}).get("suspend"))


def test_one_of_two_jobs_is_admitted(control_plane: ControlPlane, tmp_path: Path) -> None:
    client = control_plane.client
    objs = relocate(rendered_objects("dev", tmp_path / "render"), "kueue")
    objs = namespaces_of(objs) + objs
    (job,) = [o for o in objs if o["kind"] == "PyTorchJob"]
    ns = job["metadata"]["namespace"]
    group = job["spec"]["pytorchReplicaSpecs"]["Worker"]["template"]["spec"]["nodeSelector"][
        nodes.NODEGROUP_LABEL
    ]
    quota = job_quota(job)
    flavor = {
        "apiVersion": KUEUE,
        "kind": "ResourceFlavor",
        "metadata": {"name": "kueue-test-gpu"},
        "spec": {"nodeLabels": {nodes.NODEGROUP_LABEL: group}},
    }
    cluster_queue = {
        "apiVersion": KUEUE,
        "kind": "ClusterQueue",
        "metadata": {"name": "kueue-test"},
        "spec": {
            "namespaceSelector": {},
            "resourceGroups": [
                {
                    "coveredResources": sorted(quota),
                    "flavors": [
                        {
                            "name": "kueue-test-gpu",
                            "resources": [
                                {"name": r, "nominalQuota": q} for r, q in sorted(quota.items())
                            ],
                        }
                    ],
                }
            ],
        },
    }
    local_queue = {
        "apiVersion": KUEUE,
        "kind": "LocalQueue",
        "metadata": {"name": "team", "namespace": ns},
        "spec": {"clusterQueue": "kueue-test"},
    }
    jobs = []
    for suffix in ("a", "b"):
        j = copy.deepcopy(job)
        j["metadata"]["name"] = f"{job['metadata']['name']}-{suffix}"
        j["metadata"]["labels"][QUEUE_LABEL] = "team"
        jobs.append(j)
    others = [o for o in objs if o["kind"] != "PyTorchJob"]
    try:
        control_plane.apply_all([*others, flavor, cluster_queue, local_queue])
        for j in jobs:
            created = client.create(j)
            assert _suspended(created), f"{j['metadata']['name']} not suspended by Kueue's webhook"

        def admitted() -> list[bool] | None:
            states = [not _suspended(client.read(j)) for j in jobs]
            return states if any(states) else None

        states = wait_for("one job admitted", admitted, timeout=TIMEOUT_S)
        assert sorted(states) == [False, True], states
        (running,) = [j for j, s in zip(jobs, states, strict=True) if s]
        (waiting,) = [j for j, s in zip(jobs, states, strict=True) if not s]
        replicas = job["spec"]["pytorchReplicaSpecs"]["Worker"]["replicas"]
        label = f"training.kubeflow.org/job-name={running['metadata']['name']}"
        wait_for(
            "the admitted job's pods",
            lambda: len(client.items("v1", "Pod", ns, labelSelector=label)) == replicas,
            timeout=TIMEOUT_S,
        )
        workloads = client.items(KUEUE, "Workload", ns)
        by_owner = {w["metadata"]["ownerReferences"][0]["name"]: w for w in workloads}
        assert set(by_owner) == {j["metadata"]["name"] for j in jobs}
        assert by_owner[running["metadata"]["name"]]["status"].get("admission")
        assert not by_owner[waiting["metadata"]["name"]]["status"].get("admission")
        assert _suspended(client.read(waiting))

        def counts() -> tuple[int, int] | None:
            status = client.read(cluster_queue).get("status", {})
            got = (status.get("admittedWorkloads", 0), status.get("pendingWorkloads", 0))
            return got if got == (1, 1) else None

        wait_for("ClusterQueue status: 1 admitted, 1 pending", counts, timeout=TIMEOUT_S)

        # Quota is why the other one waits.
        def quota_reason() -> dict[str, Any] | None:
            (w,) = [
                w
                for w in client.items(KUEUE, "Workload", ns)
                if w["metadata"]["ownerReferences"][0]["name"] == waiting["metadata"]["name"]
            ]
            cond = _condition(w, "QuotaReserved")
            return cond if "insufficient unused quota" in cond.get("message", "") else None

        cond = wait_for("the waiting Workload's QuotaReserved", quota_reason, timeout=TIMEOUT_S)
        assert cond["status"] == "False", cond
        assert "kueue-test-gpu" in cond["message"], cond

        # The admitted job deleted, its quota goes to the one that waited.
        client.delete(running)
        wait_for(
            "the waiting job admitted once the other is deleted",
            lambda: not _suspended(client.read(waiting)),
            timeout=TIMEOUT_S,
        )
        label = f"training.kubeflow.org/job-name={waiting['metadata']['name']}"
        wait_for(
            "the second job's pods",
            lambda: len(client.items("v1", "Pod", ns, labelSelector=label)) == replicas,
            timeout=TIMEOUT_S,
        )
    finally:
        for j in jobs:
            client.delete(j)
        delete_and_wait(client, objs)
        for obj in (local_queue, cluster_queue, flavor):
            client.delete(obj)
