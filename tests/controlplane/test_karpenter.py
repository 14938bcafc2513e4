"""Karpenter's CRDs at the pin and every stack's pools as Karpenter objects meet a real API server.

The vendored CRDs (``workloads/manifests/karpenter/crds``: aws/karpenter-provider-aws
``pkg/apis/crds`` at ``versions.KARPENTER_VERSION``) are installed, then each shipped stack's
GPU pools, switched to ``provisioner: karpenter``, are applied server-side with strict field
validation, dry-run then for real. The API server runs what the offline JSON-schema check
cannot: the CRDs' CEL rules (``x-kubernetes-validations``: the EFA primary interface, one EFA
device per card, the restricted label domains, ...), defaulting and structural pruning. If this
fails, ``pulumi up`` (or ``kubectl apply`` of ``workloads.render``'s ``karpenter.yaml``) would be
refused on a cluster running the pinned Karpenter, or would store something else. Two broken
objects show the CEL rules are enforced here at all. It also fails when the real Kueue would
not admit a job on a Karpenter pool that has no nodes yet (then no pod would ever be pending
for Karpenter to launch a node for).

Nothing is mocked: a local kube-apiserver built from ``k8s.io/kubernetes`` (ADR 0009), with
Kueue and the training operator. No Karpenter controller runs (it would call EC2): only the
API objects, and Kueue's admission of a pool without nodes, are checked.
"""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import pytest
import yaml

from controlplane.client import ApiError
from controlplane.cluster import ControlPlane
from infra.config import parse
from tests.pulumi_mocks import stack_config
from workloads.specs import karpenter

pytestmark = pytest.mark.controlplane
MANAGER = "eks-fsdp-test"
STACKS = ("dev", "p4de-odcr", "p5-16")


def _pool_objects(stack: str) -> list[dict[str, Any]]:
    raw = copy.deepcopy(stack_config(stack))
    raw["gpuNodeGroups"] = [
        {**g, "provisioner": "karpenter", "minSize": 0} for g in raw["gpuNodeGroups"]
    ]
    return karpenter.stack_objects(parse(raw, stack=stack))


def _strict_apply(plane: ControlPlane, obj: dict[str, Any], *, dry_run: bool) -> Any:
    query = {"fieldManager": MANAGER, "fieldValidation": "Strict"}
    if dry_run:
        query["dryRun"] = "All"
    return plane.client.request(
        "PATCH",
        plane.client.path(obj),
        obj,
        query=query,
        content_type="application/apply-patch+yaml",
    )


@pytest.fixture(scope="module")
def with_crds(control_plane: ControlPlane) -> ControlPlane:
    crds = [
        yaml.safe_load(Path(karpenter.CRD_DIR / name).read_text())
        for name in sorted(p.name for p in karpenter.CRD_DIR.glob("*.yaml"))
    ]
    control_plane._install_crds(crds)
    return control_plane


@pytest.mark.parametrize("stack", STACKS)
def test_every_pool_is_accepted_as_rendered(with_crds: ControlPlane, stack: str) -> None:
    objs = _pool_objects(stack)
    assert objs
    for obj in objs:
        _strict_apply(with_crds, obj, dry_run=True)
        stored = _strict_apply(with_crds, obj, dry_run=False)
        assert stored["spec"] | obj["spec"] == stored["spec"], obj["metadata"]["name"]
    for obj in reversed(objs):
        with_crds.client.delete(obj)


def test_the_crds_cel_rules_are_enforced(with_crds: ControlPlane) -> None:
    nodeclass, nodepool = _pool_objects("p4de-odcr")
    no_primary = copy.deepcopy(nodeclass)
    no_primary["spec"]["networkInterfaces"] = [
        n for n in no_primary["spec"]["networkInterfaces"] if n["interfaceType"] == "efa-only"
    ]
    with pytest.raises(ApiError, match="must include a primary interface") as err:
        _strict_apply(with_crds, no_primary, dry_run=True)
    assert err.value.status == 422
    restricted = copy.deepcopy(nodepool)
    restricted["spec"]["template"]["metadata"]["labels"]["karpenter.sh/nodepool"] = "x"
    with pytest.raises(ApiError, match=r'label "karpenter\.sh/nodepool" is restricted'):
        _strict_apply(with_crds, restricted, dry_run=True)


# --- Kueue admits a Karpenter pool's job while the pool has no nodes ----------------------------

KQ = "kz-"
"""Prefix of this test's pools, queues, cohort, Topology and namespace (no fake node carries
its pools' labels: kwok's nodes are the shipped stacks' groups)."""
KQ_NAMESPACE = f"{KQ}jobs"
KQ_TIMEOUT_S = 90.0


def _kq_stack(provisioner: str) -> Any:
    """p4de-odcr's EFA pool renamed ``kz-<provisioner>``: a Karpenter pool or a managed one."""
    raw = copy.deepcopy(stack_config("p4de-odcr"))
    (group,) = raw["gpuNodeGroups"]
    raw["gpuNodeGroups"] = [
        {**group, "name": f"{KQ}{provisioner.lower()}", "provisioner": provisioner, "minSize": 0}
    ]
    return parse(raw, stack="p4de-odcr")


def _kq_objects(cfg: Any) -> list[dict[str, Any]]:
    """The stack's flavor, Topology, ClusterQueue and LocalQueue (jobs in ``kz-jobs``), each
    pool in a cohort of its own and the Topology renamed; no priority classes (shared)."""
    from workloads.specs import kueue

    out = []
    settings = kueue.KueueSettings(jobs_namespace=KQ_NAMESPACE)
    for obj in kueue.cluster_objects(cfg, settings):
        spec = obj.get("spec", {})
        if obj["kind"] == "WorkloadPriorityClass":
            continue
        if obj["kind"] == "Topology":
            obj["metadata"]["name"] = KQ + obj["metadata"]["name"]
        if "topologyName" in spec:
            spec["topologyName"] = KQ + spec["topologyName"]
        if obj["kind"] == "ClusterQueue":
            spec["cohortName"] = obj["metadata"]["name"]
        out.append(obj)
    return out


def _kq_job(template: dict[str, Any], group: Any, annotations: dict[str, str]) -> dict[str, Any]:
    """The project's PyTorchJob (two workers) queued on ``group``'s pool, its pods selecting
    the pool's nodes, with the pod annotations ``jobs.queue`` gives that pool."""
    from workloads.specs import kueue

    job = copy.deepcopy(template)
    job["metadata"] = {
        "name": group.name,
        "namespace": KQ_NAMESPACE,
        "labels": {kueue.QUEUE_LABEL: kueue.local_queue_name(group.name)},
    }
    worker = job["spec"]["pytorchReplicaSpecs"]["Worker"]
    job["spec"]["elasticPolicy"]["rdzvHost"] = f"{group.name}-worker-0"
    pod_meta = worker["template"].setdefault("metadata", {})
    pod_meta["annotations"] = {
        k: v
        for k, v in (pod_meta.get("annotations") or {}).items()
        if k != kueue.PREFERRED_TOPOLOGY_ANNOTATION
    } | annotations
    pod = worker["template"]["spec"]
    pod["nodeSelector"] = {"eks-fsdp/nodegroup": group.name}
    pod.pop("serviceAccountName", None)
    for volume in pod["volumes"]:
        if "persistentVolumeClaim" in volume:
            del volume["persistentVolumeClaim"]
            volume["emptyDir"] = {}
    return job


def test_kueue_admits_an_efa_karpenter_pools_job_with_no_nodes(
    control_plane: ControlPlane, tmp_path: Path
) -> None:
    """Karpenter launches nodes only for pending pods, and a queued job's pods exist only
    once Kueue admits it. The real Kueue (``KUEUE_VERSION``) admits a two-worker job on an EFA
    Karpenter pool that has no node at all (quota alone: the flavor names no Topology), and
    the training operator creates its pods, Pending for Karpenter to see. The same pool as a
    topology-aware managed group (its flavor on the Topology, the job preferring one layer-3
    block) is not admitted while it has no nodes: Kueue's TAS counts only existing nodes
    (Kueue docs, concepts/topology_aware_scheduling, "Capacity calculation"), which is why a
    Karpenter pool has no Topology."""
    from controlplane.client import wait_for
    from jobs import queue
    from tests.controlplane.helpers import rendered_objects
    from workloads.specs import kueue

    client = control_plane.client
    new_cfg, old_cfg = _kq_stack("karpenter"), _kq_stack("managedNodeGroup")
    (new,), (old,) = new_cfg.gpu_node_groups, old_cfg.gpu_node_groups
    assert new.efa and old.efa and new.uses_karpenter and not old.uses_karpenter
    label = f"eks-fsdp/nodegroup in ({new.name},{old.name})"
    assert client.items("v1", "Node", None, labelSelector=label) == []
    (template,) = [
        o for o in rendered_objects("p4de-odcr", tmp_path / "render") if o["kind"] == "PyTorchJob"
    ]
    new_queue = queue.resolve({"nodeGroup": new.name}, new_cfg, gpu_job=True)
    assert new_queue is not None and new_queue.pod_annotations == ()
    jobs = {
        "new": _kq_job(template, new, dict(new_queue.pod_annotations)),
        "old": _kq_job(template, old, kueue.pod_annotations(old)),
    }
    namespace = {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": KQ_NAMESPACE}}
    objs = [*_kq_objects(new_cfg), *_kq_objects(old_cfg)]
    assert sum(o["kind"] == "Topology" for o in objs) == 1  # the managed pool's only
    try:
        control_plane.apply_all([namespace, *objs])

        def active() -> bool:
            return all(
                any(
                    c["type"] == "Active" and c["status"] == "True"
                    for c in client.read(o).get("status", {}).get("conditions", []) or []
                )
                for o in objs
                if o["kind"] in ("ClusterQueue", "LocalQueue")
            )

        wait_for("the queues Active", active, timeout=KQ_TIMEOUT_S)
        for job in jobs.values():
            client.create(job)

        def suspended(job: dict[str, Any]) -> bool:
            return bool(client.read(job)["spec"].get("runPolicy", {}).get("suspend"))

        wait_for("the Karpenter pool's job admitted", lambda: not suspended(jobs["new"]),
                 timeout=KQ_TIMEOUT_S)  # fmt: skip
        selector = f"training.kubeflow.org/job-name={new.name}"

        def pending_pods() -> list[dict[str, Any]] | None:
            pods = client.items("v1", "Pod", KQ_NAMESPACE, labelSelector=selector)
            return pods if len(pods) == 2 else None

        pods = wait_for("its two pods", pending_pods, timeout=KQ_TIMEOUT_S)
        for pod in pods:
            assert pod["status"].get("phase") == "Pending" and not pod["spec"].get("nodeName")
            # Kueue injected the flavor's node labels: what the NodePool's nodes will carry
            assert pod["spec"]["nodeSelector"]["eks-fsdp/nodegroup"] == new.name

        def old_reason() -> dict[str, Any] | None:
            for w in client.items(kueue.API_VERSION, "Workload", KQ_NAMESPACE):
                if w["metadata"]["ownerReferences"][0]["name"] != old.name:
                    continue
                for c in w.get("status", {}).get("conditions", []) or []:
                    if c["type"] == "QuotaReserved" and c["status"] == "False":
                        return dict(c)
            return None

        cond = wait_for("the topology-aware pool's job held", old_reason, timeout=KQ_TIMEOUT_S)
        # Kueue's flavor assigner: "couldn't assign flavors to pod set worker: no topology
        # domains at level: topology.k8s.aws/network-node-layer-3" (no node, no domain)
        assert (
            f"no topology domains at level: {kueue.PREFERRED_TOPOLOGY_LEVEL}" in cond["message"]
        ), cond
        assert suspended(jobs["old"]), cond
    finally:
        for job in jobs.values():
            client.delete(job)
        for obj in reversed(objs):
            client.delete(obj)
        client.delete(namespace)
