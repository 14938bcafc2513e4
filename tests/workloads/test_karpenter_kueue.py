"""Kueue's objects for a Karpenter pool: admitted while the pool has no nodes.

If these fail, a job queued on an EFA Karpenter pool would never start: its ResourceFlavor
would name the Topology, or the job's pods would carry the preferred-topology annotation, and
Kueue's topology-aware scheduling counts only the capacity of existing Ready nodes; its one
way to get more is the cluster-autoscaler ProvisioningRequest admission check (Kueue docs,
concepts/topology_aware_scheduling, "Capacity calculation" and "ClusterAutoscaler support"),
which Karpenter does not implement. A pool at zero nodes would stay unadmitted, its pods
suspended, and Karpenter (which launches for pending pods only) would never launch. They also
fail when the pool's quota is not the NodePool's limit, so that jobs would wait as Pending pods
Karpenter cannot place instead of in the queue.

Nothing is mocked: the stack is the shipped p4de-odcr one with its pool switched to Karpenter,
the objects are the dicts the stack applies, the queue is the one ``eks-fsdp jobs submit``
resolves.
"""

from __future__ import annotations

import copy
from typing import Any

from infra.config import parse
from jobs import queue
from tests.pulumi_mocks import stack_config
from tests.workloads.test_karpenter_specs import karpenter_raw
from workloads.specs import karpenter as k
from workloads.specs import kueue


def _stacks() -> tuple[Any, Any]:
    """p4de-odcr as shipped (a managed EFA group) and with its pool switched to Karpenter."""
    managed = parse(copy.deepcopy(stack_config("p4de-odcr")), stack="p4de-odcr")
    return managed, parse(karpenter_raw("p4de-odcr"), stack="p4de-odcr")


def _by_kind(objs: list[dict[str, Any]], kind: str) -> list[dict[str, Any]]:
    return [o for o in objs if o["kind"] == kind]


def test_an_efa_karpenter_pool_has_no_topology_and_its_jobs_no_annotation() -> None:
    managed, ours = _stacks()
    (m_group,), (k_group,) = managed.gpu_node_groups, ours.gpu_node_groups
    assert m_group.efa and k_group.efa and k_group.uses_karpenter

    # the managed EFA pool is topology-aware: the difference is the provisioner alone
    (m_flavor,) = _by_kind(kueue.cluster_objects(managed), "ResourceFlavor")
    assert m_flavor["spec"]["topologyName"] == kueue.TOPOLOGY
    assert kueue.pod_annotations(m_group) == {
        kueue.PREFERRED_TOPOLOGY_ANNOTATION: kueue.PREFERRED_TOPOLOGY_LEVEL
    }

    objs = kueue.cluster_objects(ours)
    (flavor,) = _by_kind(objs, "ResourceFlavor")
    assert "topologyName" not in flavor["spec"]
    assert _by_kind(objs, "Topology") == []
    assert kueue.pod_annotations(k_group) == {}
    for obj in objs:
        kueue.validate(obj)

    # the job submit builds: labelled for the pool's queue, no annotation on its pods
    q = queue.resolve({}, ours, gpu_job=True)
    assert q is not None and q.name == k_group.name and q.pod_annotations == ()
    body: dict[str, Any] = {
        "metadata": {"name": "j"},
        "spec": {"template": {"metadata": {"annotations": {"a": "b"}}, "spec": {}}},
    }
    out = queue.queued(body, q, pod_template_paths=lambda b: [b["spec"]["template"]])
    assert out["metadata"]["labels"][queue.QUEUE_LABEL] == k_group.name
    assert out["spec"]["template"]["metadata"]["annotations"] == {"a": "b"}


def test_a_karpenter_pools_quota_is_its_nodepools_limit() -> None:
    """The ClusterQueue admits what the NodePool may launch: ``maxSize`` nodes' GPUs, counted
    whether or not the nodes exist (a ClusterQueue's ``nominalQuota`` is a number, not a count
    of nodes: Kueue docs, concepts/cluster_queue), so a second job waits in the queue rather
    than as pods Karpenter cannot place."""
    _, ours = _stacks()
    (group,) = ours.gpu_node_groups
    (cq,) = _by_kind(kueue.cluster_objects(ours), "ClusterQueue")
    (flavor,) = cq["spec"]["resourceGroups"][0]["flavors"]
    quota = {r["name"]: r["nominalQuota"] for r in flavor["resources"]}
    limit = k.nodepool(group)["spec"]["limits"][kueue.GPU]
    assert quota[kueue.GPU] == limit == str(group.max_size * group.instance.gpus) == "16"
    assert quota[kueue.EFA] == str(group.max_size * group.instance.efa_interfaces)


def test_kueue_waits_longer_for_pods_on_a_stack_with_a_karpenter_pool() -> None:
    """On a Karpenter pool Kueue admits a job before its nodes exist: ``waitForPodsReady``
    then covers the instance's launch and join as well as the image pull, so the stack's
    Configuration gets ``KARPENTER_PODS_READY_TIMEOUT_S``; a managed stack keeps the default."""
    managed, ours = _stacks()
    assert kueue.stack_settings(managed) == kueue.KueueSettings()
    settings = kueue.stack_settings(ours)
    assert settings == kueue.KueueSettings(pods_ready_timeout_s=1200)
    assert settings.pods_ready_timeout_s > kueue.KueueSettings().pods_ready_timeout_s
    wait = kueue.configuration(settings)["waitForPodsReady"]
    assert wait["timeout"] == "1200s"
    default = kueue.KueueSettings().recovery_timeout_s
    assert wait["recoveryTimeout"] == f"{default}s"  # the rest as before
    assert kueue.configuration(kueue.stack_settings(managed)) == kueue.configuration()
