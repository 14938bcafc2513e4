"""Two teams' quotas on one GPU pool, played by the real Kueue on the local control plane.

The rendered Kueue and team objects of the p4de-odcr stack with two teams (``nlp`` owns one
of the pool's two nodes, ``vision`` the other by default) are applied to the API server with
Kueue (``KUEUE_VERSION``) and the training operator running, over fake p4de nodes that carry
the EKS network-topology labels (``controlplane.nodes.network_labels``: the pool is EFA, so its
flavor is topology-aware). Then, with the project's own PyTorchJob as submit sends it (its pod
template asks for ``kueue.x-k8s.io/podset-preferred-topology:
topology.k8s.aws/network-node-layer-3``):

- an ``nlp`` job of two workers (16 GPUs: its 8 and ``vision``'s idle 8, borrowed) is
  admitted with a topology request of that level and a topology assignment that names both
  nodes of the one layer-3 domain (Kueue assigns by hostname, the Topology's lowest level:
  ``tas_flavor_snapshot.go`` ``buildAssignment``), and its pods are created;
- a second ``nlp`` job stays suspended, its Workload not admitted, with Kueue's reason
  (``QuotaReserved`` False: ``insufficient unused quota``);
- a one-worker ``vision`` job (8 GPUs, within its own quota) takes its quota back: the
  borrowing job is evicted (preempted, in-cohort reclamation) and the ``vision`` job admitted.

If this fails, the cluster stack's queues do not behave as docs/sharing.md says: the CRDs or
Kueue's webhooks reject the rendered objects, a LocalQueue does not reach its ClusterQueue,
the cohort does not lend idle quota or take it back, an EFA job's topology preference does not
reach Kueue (or names a level the flavor's Topology lacks), or the team namespace's Role,
policies or queue names do not fit a real API server.
"""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import pytest

from controlplane.client import Client, wait_for
from controlplane.cluster import ControlPlane
from controlplane.nodes import network_labels
from infra.config import parse, project_defaults, stack_file_values
from tests.controlplane.helpers import delete_and_wait, prefix_queues, rendered_objects
from workloads.specs import kueue, teams

pytestmark = pytest.mark.controlplane
STACK = "p4de-odcr"
ARN = "arn:aws:iam::123456789012:role/{}"
PREFIX = "kq-"
"""Cluster-scoped names and the teams get it, so nothing collides with other tests' objects."""
TIMEOUT_S = 90.0
LAYER_3 = "topology.k8s.aws/network-node-layer-3"
HOSTNAME = "kubernetes.io/hostname"


def _stack() -> Any:
    raw = {
        **project_defaults(),
        **stack_file_values(STACK),
        "teams": [
            {
                "name": f"{PREFIX}nlp",
                "principalArns": [ARN.format("nlp")],
                "quota": {STACK: 8},
            },
            {"name": f"{PREFIX}vision", "principalArns": [ARN.format("vision")]},
        ],
    }
    return parse(raw, stack=STACK)


def _prefixed(obj: dict[str, Any]) -> dict[str, Any]:
    """``obj`` with its cluster-scoped names (and the references to them) prefixed."""
    return prefix_queues(obj, PREFIX)


def _condition(obj: dict[str, Any], kind: str) -> dict[str, Any]:
    for c in obj.get("status", {}).get("conditions", []) or []:
        if c["type"] == kind:
            return dict(c)
    return {}


def _suspended(client: Client, job: dict[str, Any]) -> bool:
    return bool(client.read(job)["spec"].get("runPolicy", {}).get("suspend"))


def _workload(client: Client, job: dict[str, Any]) -> dict[str, Any] | None:
    ns = job["metadata"]["namespace"]
    for w in client.items(kueue.API_VERSION, "Workload", ns):
        if w["metadata"]["ownerReferences"][0]["name"] == job["metadata"]["name"]:
            return dict(w)
    return None


def _job(template: dict[str, Any], name: str, team: str, workers: int) -> dict[str, Any]:
    """The project's PyTorchJob in ``team``'s namespace, queued, with ``workers`` workers (the
    checkpoint claim swapped for an emptyDir: the claim lives in the jobs namespace)."""
    job = copy.deepcopy(template)
    job["metadata"] = {
        "name": name,
        "namespace": team,
        "labels": {
            **template["metadata"].get("labels", {}),
            kueue.QUEUE_LABEL: kueue.local_queue_name(STACK),
            kueue.PRIORITY_LABEL: "experiment",
        },
    }
    spec = job["spec"]
    spec["elasticPolicy"].update(minReplicas=workers, maxReplicas=workers)
    spec["elasticPolicy"]["rdzvHost"] = f"{name}-worker-0"
    worker = spec["pytorchReplicaSpecs"]["Worker"]
    worker["replicas"] = workers
    pod = worker["template"]["spec"]
    pod["serviceAccountName"] = teams.SERVICE_ACCOUNT
    for volume in pod["volumes"]:
        if "persistentVolumeClaim" in volume:
            del volume["persistentVolumeClaim"]
            volume["emptyDir"] = {}
    return job


def _hostnames(assignment: dict[str, Any]) -> list[str]:
    """The nodes a v1beta2 ``TopologyAssignment`` names at its lowest level (``slices`` of
    ``valuesPerLevel``: one value for the whole slice, or prefix + roots + suffix each)."""
    level = assignment["levels"].index(HOSTNAME)
    names = []
    for piece in assignment["slices"]:
        values = piece["valuesPerLevel"][level]
        if "universal" in values:
            names += [values["universal"]] * int(piece["domainCount"])
        else:
            ind = values["individual"]
            names += [ind.get("prefix", "") + r + ind.get("suffix", "") for r in ind["roots"]]
    return names


def test_borrowed_quota_is_used_then_reclaimed(control_plane: ControlPlane, tmp_path: Path) -> None:
    client = control_plane.client
    cfg = _stack()
    (group,) = [g for g in cfg.gpu_node_groups if g.name == STACK]
    block = network_labels(group)[LAYER_3]  # the layer-3 network node of the fake p4de nodes
    nodes = {
        n["metadata"]["name"]
        for n in client.items("v1", "Node", None, labelSelector=f"{LAYER_3}={block}")
    }
    assert len(nodes) == 2, nodes
    (template,) = [
        o for o in rendered_objects(STACK, tmp_path / "render") if o["kind"] == "PyTorchJob"
    ]
    nlp, vision = (t.namespace for t in cfg.teams)
    team_objs = [
        _prefixed(o)
        for t in cfg.teams
        for o in teams.objects(t, cfg)
        if o["metadata"].get("namespace") != kueue.JOBS_NAMESPACE
    ]
    queues = [
        _prefixed(o)
        for o in kueue.cluster_objects(cfg)
        if o["metadata"].get("namespace") != kueue.JOBS_NAMESPACE
    ]
    local_queues = [o for o in team_objs if o["kind"] == "LocalQueue"]
    namespaced = [o for o in team_objs if o["kind"] != "LocalQueue"]
    annotations = template["spec"]["pytorchReplicaSpecs"]["Worker"]["template"]["metadata"]
    assert annotations["annotations"][kueue.PREFERRED_TOPOLOGY_ANNOTATION] == LAYER_3
    jobs = {
        "a": _job(template, "nlp-a", nlp, 2),
        "b": _job(template, "nlp-b", nlp, 2),
        "c": _job(template, "vision-c", vision, 1),
    }
    try:
        control_plane.apply_all([*namespaced, *queues, *local_queues])
        cluster_queues = [o for o in queues if o["kind"] == "ClusterQueue"]

        def active() -> bool:
            return all(
                _condition(client.read(q), "Active").get("status") == "True"
                for q in [*cluster_queues, *local_queues]
            )

        wait_for("ClusterQueues and LocalQueues Active", active, timeout=TIMEOUT_S)

        # 1. nlp's two-worker job: its one node and vision's idle one, borrowed.
        created = client.create(jobs["a"])
        assert created["spec"]["runPolicy"]["suspend"] is True  # Kueue's webhook suspends it
        wait_for("nlp-a admitted", lambda: not _suspended(client, jobs["a"]), timeout=TIMEOUT_S)
        label = "training.kubeflow.org/job-name=nlp-a"
        wait_for(
            "nlp-a's pods",
            lambda: len(client.items("v1", "Pod", nlp, labelSelector=label)) == 2,
            timeout=TIMEOUT_S,
        )
        nlp_cq = next(q for q in cluster_queues if q["metadata"]["name"].endswith("nlp-" + STACK))

        def borrowed() -> dict[str, Any] | None:
            for flavor in client.read(nlp_cq).get("status", {}).get("flavorsUsage", []):
                for r in flavor["resources"]:
                    if r["name"] == kueue.GPU and str(r.get("borrowed")) == "8":
                        return dict(r)
            return None

        usage = wait_for("nlp's queue borrowing 8 GPUs", borrowed, timeout=TIMEOUT_S)
        assert str(usage["total"]) == "16"
        # Topology-aware: the job asked for one layer-3 block, and Kueue placed its two
        # workers on the two nodes of that block (by hostname, the Topology's lowest level).
        workload = _workload(client, jobs["a"])
        assert workload is not None
        (wanted,) = workload["spec"]["podSets"]
        assert wanted["topologyRequest"]["preferred"] == LAYER_3, wanted.get("topologyRequest")
        (podset,) = workload["status"]["admission"]["podSetAssignments"]
        assignment = podset["topologyAssignment"]
        assert assignment["levels"] == [HOSTNAME], assignment
        assert sorted(_hostnames(assignment)) == sorted(nodes), assignment

        # 2. A second one does not fit: it waits, and quota is Kueue's reason.
        client.create(jobs["b"])

        def quota_reason() -> dict[str, Any] | None:
            w = _workload(client, jobs["b"])
            cond = _condition(w, "QuotaReserved") if w else {}
            return cond if "insufficient unused quota" in cond.get("message", "") else None

        cond = wait_for("nlp-b's QuotaReserved reason", quota_reason, timeout=TIMEOUT_S)
        assert cond["status"] == "False", cond
        assert _suspended(client, jobs["b"])

        # 3. vision wants its own node back: nlp-a is preempted, vision-c admitted.
        client.create(jobs["c"])
        wait_for("vision-c admitted", lambda: not _suspended(client, jobs["c"]), timeout=TIMEOUT_S)

        def preempted() -> dict[str, Any] | None:
            w = _workload(client, jobs["a"])
            cond = _condition(w, "Preempted") if w else {}
            return cond if cond.get("status") == "True" else None

        cond = wait_for("nlp-a preempted", preempted, timeout=TIMEOUT_S)
        assert cond["reason"] == "InCohortReclamation", cond
        assert _suspended(client, jobs["a"])
    finally:
        for job in jobs.values():
            client.delete(job)
        delete_and_wait(client, namespaced)
        for obj in reversed(queues):
            client.delete(obj)
