"""Kueue's objects for a stack, as plain data: who may use which GPUs, when, and in what order.

Every name and field below is Kueue's ``kueue.x-k8s.io/v1beta2`` API at ``KUEUE_VERSION``
(sigs.k8s.io/kueue ``apis/kueue/v1beta2/*_types.go`` at v0.17.0, the storage version of every
CRD at that tag) and its ``config.kueue.x-k8s.io/v1beta2`` Configuration
(``apis/config/v1beta2/configuration_types.go``). For each GPU pool (a ``gpuNodeGroups`` entry):

- a **ResourceFlavor** named for the pool: ``nodeLabels`` = the labels the group's nodes carry
  (``infra.config.nodegroups.node_labels``; Kueue injects them into an admitted job's pods),
  ``tolerations`` = the group's taint (Kueue adds them to admitted pods), and on EFA pools
  ``topologyName`` = the **Topology** over the network-node layers EKS labels nodes with
  (EKS user guide, "Place distributed AI/ML workloads with network topology labels":
  ``topology.k8s.aws/network-node-layer-1`` is the top of the hierarchy, ``-3`` the bottom for
  most types), then ``kubernetes.io/hostname``, the lowest level Kueue's TAS docs use;
  topology-aware scheduling is Beta and on by default at v0.17 (``pkg/features``);
- a **ClusterQueue** per team (``<team>-<pool>``, the team's quota) and one for the pool
  itself (``<pool>``, what the teams' quotas leave: the whole pool on a stack without teams),
  all in one cohort, so quota a queue does not use is lent to the others (no
  ``borrowingLimit``/``lendingLimit``) and taken back when its owner needs it
  (``reclaimWithinCohort: Any``); within a queue a job preempts lower-priority ones
  (``withinClusterQueue: LowerPriority``). A borrowing job never preempts another queue's
  job that runs within its own quota (``borrowWithinCohort`` left at ``Never``). Quotas are
  whole nodes: GPUs, EFA devices, and the cpu and memory one worker requests
  (``workloads.specs.pytorchjob.worker_requests``), times the nodes;
- a **LocalQueue** named for the pool in every namespace that may use it: the jobs namespace
  (``default``) for the pool's own queue, each team's namespace for the team's queue. A job
  names it with the label ``kueue.x-k8s.io/queue-name: <pool>``;
- **WorkloadPriorityClasses** ``production`` and ``experiment`` (``infra.config.teams``); a job
  picks one with the label ``kueue.x-k8s.io/priority-class``.

The controller is installed from Kueue's chart at the pinned version
(``oci://registry.k8s.io/kueue/charts/kueue``, ``charts/kueue/values.yaml`` at the tag) with
the image pinned and the Configuration of ``configuration``: all-or-nothing admission
(``waitForPodsReady``) and the PyTorchJob and TrainJob integrations.

``validate`` checks an object against the CRD's ``v1beta2`` OpenAPI schema vendored from the
tag (``workloads/manifests/kueue/crds``), strictly (an unknown field fails). The CEL rules
(``x-kubernetes-validations``) are left to the API server, which the control-plane suite runs.
"""

from __future__ import annotations

import functools
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from infra import versions
from infra.config.nodegroups import EFA_DRA, NODEGROUP_LABEL, GpuNodeGroupConfig, node_labels
from infra.config.teams import PRIORITIES, TeamConfig, cluster_queue_name
from workloads.specs.common import PART_OF, K8sObject
from workloads.specs.pytorchjob import worker_requests

API_VERSION = "kueue.x-k8s.io/v1beta2"
CONFIG_API_VERSION = "config.kueue.x-k8s.io/v1beta2"
QUEUE_LABEL = "kueue.x-k8s.io/queue-name"
"""The label a job names its LocalQueue with (``pkg/controller/constants`` ``QueueLabel``)."""
PRIORITY_LABEL = "kueue.x-k8s.io/priority-class"
"""The label a job names its WorkloadPriorityClass with (``WorkloadPriorityClassLabel``)."""
COHORT = "eks-fsdp"
"""The one cohort every ClusterQueue of the stack lends to and borrows from."""
NAMESPACE = versions.KUEUE_NAMESPACE
JOBS_NAMESPACE = "default"
"""The namespace of jobs submitted without a team (``workloads.specs.stack.JOBS_NAMESPACE``)."""
TOPOLOGY = "aws-network"
TOPOLOGY_LEVELS = (
    "topology.k8s.aws/network-node-layer-1",
    "topology.k8s.aws/network-node-layer-2",
    "topology.k8s.aws/network-node-layer-3",
    "kubernetes.io/hostname",
)
"""Top to bottom: the EKS network-node layers, then the node."""
PREFERRED_TOPOLOGY_ANNOTATION = "kueue.x-k8s.io/podset-preferred-topology"
"""On a job's pod template: Kueue places the pod set within one domain of this level if it
can, else the fewest domains of the levels above (``PodSetPreferredTopologyAnnotation``,
``apis/kueue/v1beta2/topology_types.go`` at v0.17.0; Kueue's "Topology Aware Scheduling"
docs)."""
PREFERRED_TOPOLOGY_LEVEL = "topology.k8s.aws/network-node-layer-3"
"""The bottom EKS network layer of most supported types, "nodes that share this value are
physically closest to each other" (EKS user guide, network topology labels)."""
GPU = "nvidia.com/gpu"
EFA = "vpc.amazonaws.com/efa"
FRAMEWORKS = ("kubeflow.org/pytorchjob", "trainer.kubeflow.org/trainjob")
"""Kueue integrations the stack enables (``Integrations.Frameworks`` lists both at v0.17)."""
MAX_FLAVOR_LABELS = 8
"""``ResourceFlavorSpec.nodeLabels``: ``MaxProperties=8``."""
CRD_DIR = Path(__file__).resolve().parents[1] / "manifests" / "kueue" / "crds"


@dataclass(frozen=True, kw_only=True)
class KueueSettings:
    """How Kueue admits jobs (its Configuration) and where it runs."""

    pods_ready_timeout_s: int = 600
    """``waitForPodsReady.timeout``: an admitted job whose pods are not all ready by then is
    evicted (its pods deleted, its quota released) and requeued: no job holds GPUs half-started.
    Ten minutes covers pulling the training image (10+ GB) on a fresh node."""
    recovery_timeout_s: int = 1800
    """``waitForPodsReady.recoveryTimeout``: how long an admitted, running job may stay not
    ready (a lost node's pod waiting for its replacement) before Kueue evicts the whole job and
    requeues it (``"0s"`` would turn the check off; left out, it defaults to ``timeout``). It
    must be finite: with ``blockAdmission`` a job that stays not ready holds back admission on
    every ClusterQueue, so a TrainJob that lost a pod (not ready while its JobSet is short of a
    pod: Kueue v0.17.0 ``pkg/controller/jobs/trainjob``, ``PodsReady``) would freeze every
    team. An elastic PyTorchJob is not evicted by it while it trains on fewer nodes: Kueue reads
    a v1 job as ready when its ``Running`` condition is true (``pkg/controller/jobs/kubeflow/
    kubeflowjob/kubeflowjob_controller.go``, ``PodsReady``), which training-operator v1.9.4
    sets again once a worker runs (``pytorchjob_controller.go``, ``pkg/core/status.go``).
    30 minutes leaves time for a node group to replace a node before the job is requeued (it
    resumes from its newest checkpoint when readmitted)."""
    block_admission: bool = True
    """``waitForPodsReady.blockAdmission``: admit the next job only once the last admitted one
    has all its pods ready, so two jobs never split the nodes that exist between them (the
    quota counts ``maxSize`` nodes; fewer may be up)."""
    backoff_base_s: int = 60
    """``requeuingStrategy.backoffBaseSeconds``: the n-th requeue waits about base x 2^(n-1)."""
    backoff_max_s: int = 1800
    """``requeuingStrategy.backoffMaxSeconds``."""
    backoff_limit: int = 5
    """``requeuingStrategy.backoffLimitCount``: after that many timeouts the job is deactivated
    (``spec.active: false`` on its Workload) instead of retrying for ever."""
    frameworks: tuple[str, ...] = FRAMEWORKS
    """``integrations.frameworks``."""
    cohort: str = COHORT
    """The cohort of every ClusterQueue."""
    jobs_namespace: str = JOBS_NAMESPACE
    """Namespace whose LocalQueues point at the pools' own ClusterQueues."""

    def __post_init__(self) -> None:
        for name in ("pods_ready_timeout_s", "backoff_base_s", "backoff_max_s"):
            if getattr(self, name) <= 0:
                raise ValueError(f"KueueSettings.{name}: must be positive")
        if self.backoff_limit < 0:
            raise ValueError("KueueSettings.backoff_limit: must be >= 0")
        if self.recovery_timeout_s < 0:
            raise ValueError("KueueSettings.recovery_timeout_s: must be >= 0 (0 = off)")
        if self.backoff_max_s < self.backoff_base_s:
            raise ValueError("KueueSettings.backoff_max_s: below backoff_base_s")


KARPENTER_PODS_READY_TIMEOUT_S = 1200
"""``waitForPodsReady.timeout`` on a stack with a Karpenter pool: Kueue admits a job before its
nodes exist there, so the timeout also covers the launch (Karpenter reacts to the pending
pods, EC2 boots the instance, it joins, the NVIDIA and EFA device plugins start: minutes on a
p5 before the image pull starts) on top of the image pull the default's ten minutes cover.
Too short, and every first job on an empty pool is evicted and requeued while its nodes come
up (``WaitForPodsReady.Timeout``: "Timeout defines the time for an admitted workload to
reach the PodsReady=true condition", ``apis/config/v1beta2/configuration_types.go``)."""


def stack_settings(stack_cfg: Any) -> KueueSettings:
    """The stack's admission settings: the defaults, with ``KARPENTER_PODS_READY_TIMEOUT_S``
    when a pool is provisioned by Karpenter."""
    if any(g.uses_karpenter for g in stack_cfg.gpu_node_groups):
        return KueueSettings(pods_ready_timeout_s=KARPENTER_PODS_READY_TIMEOUT_S)
    return KueueSettings()


@dataclass(frozen=True, kw_only=True)
class Pool:
    """One GPU pool: a nodegroup as Kueue sees it."""

    group: GpuNodeGroupConfig
    """The nodegroup."""
    teams: Mapping[str, int] = field(default_factory=dict)
    """GPUs of the pool each team owns (``TeamConfig.quota``)."""

    @property
    def name(self) -> str:
        return self.group.name

    @property
    def gpus_per_node(self) -> int:
        return self.group.instance.gpus

    @property
    def nodes(self) -> int:
        """The pool's capacity: ``maxSize``."""
        return self.group.max_size

    @property
    def shared_nodes(self) -> int:
        """Nodes no team owns (the pool's own ClusterQueue)."""
        return self.nodes - sum(self.teams.values()) // self.gpus_per_node


def pools(groups: Iterable[GpuNodeGroupConfig], teams: Iterable[TeamConfig] = ()) -> list[Pool]:
    """Every GPU pool with the teams' quotas on it."""
    teams = tuple(teams)
    return [Pool(group=g, teams={t.name: t.quota.get(g.name, 0) for t in teams}) for g in groups]


def local_queue_name(pool: str) -> str:
    """The LocalQueue a job on ``pool`` names (the same in every namespace): the pool's name."""
    return pool


def _labels(component: str) -> dict[str, str]:
    return {"app.kubernetes.io/component": component, "app.kubernetes.io/part-of": PART_OF}


def node_resources(group: GpuNodeGroupConfig, nodes: int) -> dict[str, str]:
    """What ``nodes`` workers of ``group`` request in all: GPUs, EFA devices (EFA groups), cpu
    and memory (``worker_requests``), as quantities."""
    it = group.instance
    per_node = worker_requests(group.instance_type)
    memory = per_node["memory"]
    if not memory.endswith("Gi"):
        raise ValueError(f"worker_requests({group.instance_type}): memory {memory!r} not in Gi")
    out = {
        "cpu": str(int(per_node["cpu"]) * nodes),
        "memory": f"{int(memory[:-2]) * nodes}Gi",
        GPU: str(it.gpus * nodes),
    }
    # A DRA pool's pods request no vpc.amazonaws.com/efa (their ResourceClaim holds the
    # devices) and no device plugin advertises it there: a quota on it would be dead weight.
    # Kueue counts DRA devices only behind its DynamicResourceAllocation gate ("quota
    # accounting for DRA devices", alpha at v0.17, pkg/features/kube_features.go), which stays
    # off; the flavor's node labels keep such jobs on the pool.
    if group.efa and group.efa_driver != EFA_DRA:
        out[EFA] = str(it.efa_interfaces * nodes)
    return out


def resource_flavor(group: GpuNodeGroupConfig) -> K8sObject:
    """The pool's ResourceFlavor (topology-aware on EFA pools)."""
    labels = node_labels(group)
    if len(labels) > MAX_FLAVOR_LABELS:
        raise ValueError(
            f"gpuNodeGroups {group.name}: {len(labels)} node labels, a ResourceFlavor takes"
            f" at most {MAX_FLAVOR_LABELS}: drop some of its labels"
        )
    spec: dict[str, Any] = {
        "nodeLabels": dict(sorted(labels.items())),
        "tolerations": [group.taint.toleration()],
    }
    if topology_aware(group):
        spec["topologyName"] = TOPOLOGY
    return {
        "apiVersion": API_VERSION,
        "kind": "ResourceFlavor",
        "metadata": {"name": group.name, "labels": _labels("kueue")},
        "spec": spec,
    }


def topology_aware(group: GpuNodeGroupConfig) -> bool:
    """Whether the pool's flavor has the Topology: EFA pools, whose jobs talk node to node, of
    an instance type whose nodes EKS labels with the network layers
    (``InstanceType.network_topology``: Kueue counts a node only when it carries every level's
    label, ``pkg/util/tas/node.go`` ``NodeMatchesFlavor`` at v0.17.0, so a g5.48xlarge pool
    with a Topology would never be admitted), but not Karpenter pools. Kueue's TAS counts only
    the capacity of existing Ready nodes, and its
    only way to get more is the cluster-autoscaler ProvisioningRequest admission check (Kueue
    docs, concepts/topology_aware_scheduling: "Capacity calculation", "ClusterAutoscaler
    support"), which Karpenter does not implement: a Karpenter pool at zero nodes would never
    be admitted, so Karpenter would never launch. Its placement group keeps its nodes close."""
    return bool(group.efa) and group.instance.network_topology and not group.uses_karpenter


def pod_annotations(group: GpuNodeGroupConfig) -> dict[str, str]:
    """What the pod templates of a job queued on ``group``'s pool carry for Kueue: on a
    topology-aware pool the preferred level (one network-node-layer-3 block if the job fits),
    else nothing (a topology request on a flavor without a Topology is never admitted)."""
    if not topology_aware(group):
        return {}
    return {PREFERRED_TOPOLOGY_ANNOTATION: PREFERRED_TOPOLOGY_LEVEL}


def topology() -> K8sObject:
    """The Topology of EFA pools: network layers 1-3, then the node."""
    return {
        "apiVersion": API_VERSION,
        "kind": "Topology",
        "metadata": {"name": TOPOLOGY, "labels": _labels("kueue")},
        "spec": {"levels": [{"nodeLabel": label} for label in TOPOLOGY_LEVELS]},
    }


def priority_classes() -> list[K8sObject]:
    """One WorkloadPriorityClass per ``infra.config.teams.PRIORITIES`` entry."""
    return [
        {
            "apiVersion": API_VERSION,
            "kind": "WorkloadPriorityClass",
            "metadata": {"name": name, "labels": _labels("kueue")},
            "value": value,
            "description": f"{name} jobs (Kueue priority {value})",
        }
        for name, value in PRIORITIES.items()
    ]


def cluster_queue(
    pool: Pool, namespace: str, team: str | None = None, s: KueueSettings | None = None
) -> K8sObject:
    """The ClusterQueue of ``team`` (None: the pool's own) on ``pool``, admitting jobs of
    ``namespace`` only."""
    s = s or KueueSettings()
    nodes = pool.shared_nodes if team is None else pool.teams[team] // pool.gpus_per_node
    quota = node_resources(pool.group, nodes)
    return {
        "apiVersion": API_VERSION,
        "kind": "ClusterQueue",
        "metadata": {"name": cluster_queue_name(pool.name, team), "labels": _labels("kueue")},
        "spec": {
            "cohortName": s.cohort,
            "namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": namespace}},
            "queueingStrategy": "BestEffortFIFO",
            "resourceGroups": [
                {
                    "coveredResources": sorted(quota),
                    "flavors": [
                        {
                            "name": pool.name,
                            "resources": [
                                {"name": r, "nominalQuota": q} for r, q in sorted(quota.items())
                            ],
                        }
                    ],
                }
            ],
            "preemption": {
                "reclaimWithinCohort": "Any",
                "withinClusterQueue": "LowerPriority",
            },
        },
    }


def local_queue(pool: str, namespace: str, cluster_queue_ref: str) -> K8sObject:
    """The LocalQueue named for ``pool`` in ``namespace``."""
    return {
        "apiVersion": API_VERSION,
        "kind": "LocalQueue",
        "metadata": {
            "name": local_queue_name(pool),
            "namespace": namespace,
            "labels": _labels("kueue"),
        },
        "spec": {"clusterQueue": cluster_queue_ref},
    }


def team_local_queues(team: TeamConfig, groups: Iterable[GpuNodeGroupConfig]) -> list[K8sObject]:
    """A team's LocalQueues: one per pool, in its namespace, at its ClusterQueue."""
    return [
        local_queue(g.name, team.namespace, cluster_queue_name(g.name, team.name)) for g in groups
    ]


def cluster_objects(stack_cfg: Any, s: KueueSettings | None = None) -> list[K8sObject]:
    """Everything Kueue of the stack but the teams' LocalQueues (their namespaces are the
    teams', ``workloads.specs.teams``): flavors, the topology (EFA pools), priority classes,
    every ClusterQueue, and the jobs namespace's LocalQueues."""
    s = s or KueueSettings()
    groups = tuple(stack_cfg.gpu_node_groups)
    teams = tuple(stack_cfg.teams)
    out: list[K8sObject] = []
    if any(topology_aware(g) for g in groups):
        out.append(topology())
    out += [resource_flavor(g) for g in groups]
    out += priority_classes()
    for pool in pools(groups, teams):
        out.append(cluster_queue(pool, s.jobs_namespace, None, s))
        out += [cluster_queue(pool, t.namespace, t.name, s) for t in teams]
    out += [local_queue(g.name, s.jobs_namespace, cluster_queue_name(g.name)) for g in groups]
    return out


# --- the controller's install ------------------------------------------------------------------


def configuration(s: KueueSettings | None = None) -> dict[str, Any]:
    """Kueue's ``Configuration``: the chart's own defaults (``charts/kueue/values.yaml``
    ``managerConfig.controllerManagerConfigYaml`` at the tag) with all-or-nothing admission
    and the project's integrations. In v1beta2 ``waitForPodsReady`` has no ``enable``: being
    set turns it on. ``recoveryTimeout`` (a running job whose pod is lost and not replaced in
    time is suspended and requeued) defaults to ``timeout`` (``apis/config/v1beta2/
    defaults.go``) and ``"0s"`` turns it off (``configuration_types.go``; ``pkg/controller/
    core/core.go`` keeps only a positive one): ``KueueSettings.recovery_timeout_s``."""
    s = s or KueueSettings()
    timeout = f"{s.pods_ready_timeout_s}s"
    return {
        "apiVersion": CONFIG_API_VERSION,
        "kind": "Configuration",
        "health": {"healthProbeBindAddress": ":8081"},
        "metrics": {"bindAddress": ":8443"},
        "webhook": {"port": 9443},
        "leaderElection": {"leaderElect": True, "resourceName": "c1f6bfd2.kueue.x-k8s.io"},
        "controller": {
            "groupKindConcurrency": {
                "Job.batch": 5,
                "Pod": 5,
                "Workload.kueue.x-k8s.io": 5,
                "LocalQueue.kueue.x-k8s.io": 1,
                "ClusterQueue.kueue.x-k8s.io": 1,
                "ResourceFlavor.kueue.x-k8s.io": 1,
            }
        },
        "clientConnection": {"qps": 50, "burst": 100},
        "waitForPodsReady": {
            "timeout": timeout,
            "recoveryTimeout": f"{s.recovery_timeout_s}s",
            "blockAdmission": s.block_admission,
            "requeuingStrategy": {
                "timestamp": "Eviction",
                "backoffLimitCount": s.backoff_limit,
                "backoffBaseSeconds": s.backoff_base_s,
                "backoffMaxSeconds": s.backoff_max_s,
            },
        },
        "integrations": {"frameworks": list(s.frameworks)},
    }


def chart_values(s: KueueSettings | None = None) -> dict[str, Any]:
    """Values of the pinned chart: the released image (the chart's source values name a
    staging image), the controller on the system nodes, the Configuration."""
    return {
        "controllerManager": {
            "manager": {
                "image": {
                    "repository": versions.KUEUE_IMAGE_NAME,
                    "tag": versions.KUEUE_VERSION,
                    "pullPolicy": "IfNotPresent",
                }
            },
            "nodeSelector": {NODEGROUP_LABEL: "system"},
        },
        "managerConfig": {
            "controllerManagerConfigYaml": yaml.safe_dump(configuration(s), sort_keys=False)
        },
    }


def helm_command(values_file: Path) -> str:
    """The ``helm`` install of the pinned chart with ``values_file``."""
    return (
        f"helm upgrade --install kueue {versions.KUEUE_CHART} --version {versions.KUEUE_CHART_VERSION}"
        f" -n {NAMESPACE} --create-namespace -f {values_file}"
    )


# --- validation against the vendored CRDs ------------------------------------------------------

KINDS = ("ResourceFlavor", "ClusterQueue", "LocalQueue", "WorkloadPriorityClass", "Topology")
_PLURALS = {
    "ResourceFlavor": "resourceflavors",
    "ClusterQueue": "clusterqueues",
    "LocalQueue": "localqueues",
    "WorkloadPriorityClass": "workloadpriorityclasses",
    "Topology": "topologies",
}


@functools.cache
def crd(kind: str) -> dict[str, Any]:
    """The vendored CRD of ``kind``."""
    path = CRD_DIR / f"kueue.x-k8s.io_{_PLURALS[kind]}.yaml"
    return yaml.safe_load(path.read_text())  # type: ignore[no-any-return]


@functools.cache
def _validator(kind: str) -> Any:
    from workloads.specs.validate import crd_validator

    return crd_validator(crd(kind), API_VERSION.split("/")[1])


def validate(obj: K8sObject) -> None:
    """Check a Kueue object against its CRD at the pin (``ValueError`` naming the object and
    the field)."""
    from workloads.specs.validate import validate_custom

    validate_custom(obj, api_version=API_VERSION, kinds=KINDS, crd=crd, validator=_validator)


def is_kueue(obj: Mapping[str, Any]) -> bool:
    """Whether ``obj`` is one of the Kueue kinds ``validate`` knows."""
    return obj.get("apiVersion") == API_VERSION and obj.get("kind") in KINDS
