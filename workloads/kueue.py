"""``Kueue``: the Kueue controller from its pinned chart, and the stack's queues.

The controller comes from upstream's chart at ``KUEUE_CHART_VERSION`` (a ``helm.v3.Release``,
as the device plugins and the observability charts are installed), with the values of
``workloads.specs.kueue.chart_values`` (the released image, its Configuration:
``waitForPodsReady`` and the PyTorchJob and TrainJob integrations). The Release waits for its
resources, so the queues' objects (``workloads.specs.kueue.cluster_objects``: flavors, the
topology, priority classes, ClusterQueues, the jobs namespace's LocalQueues), created after it,
find Kueue's CRDs and webhooks in place. A team's LocalQueues are the team's
(``workloads.team.Team``, which depends on this component).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

import pulumi
import pulumi_kubernetes as k8s

from infra import versions
from workloads.specs import kueue as spec
from workloads.specs.common import K8sObject

TYPE_TOKEN = "eks-fsdp:workloads:Kueue"
OUTPUT_CLUSTER_QUEUES = "clusterQueues"
"""Stack output: the ClusterQueues' names."""
OUTPUT_TEAM_NAMESPACES = "teamNamespaces"
"""Stack output: team name -> its namespace (where ``eks-fsdp jobs submit --team`` puts a job)."""

_TYPED: dict[tuple[str, str], Any] = {
    ("v1", "Namespace"): k8s.core.v1.Namespace,
    ("v1", "ServiceAccount"): k8s.core.v1.ServiceAccount,
    ("networking.k8s.io/v1", "NetworkPolicy"): k8s.networking.v1.NetworkPolicy,
    ("rbac.authorization.k8s.io/v1", "Role"): k8s.rbac.v1.Role,
    ("rbac.authorization.k8s.io/v1", "RoleBinding"): k8s.rbac.v1.RoleBinding,
    (
        "admissionregistration.k8s.io/v1",
        "ValidatingAdmissionPolicy",
    ): k8s.admissionregistration.v1.ValidatingAdmissionPolicy,
    (
        "admissionregistration.k8s.io/v1",
        "ValidatingAdmissionPolicyBinding",
    ): k8s.admissionregistration.v1.ValidatingAdmissionPolicyBinding,
}


def _snake(key: str) -> str:
    return re.sub(r"(?<!^)(?=[A-Z])", "_", key).lower()


class KubernetesObject(pulumi.CustomResource):
    """Any object of a CRD, every top-level field kept (``apiextensions.CustomResource`` takes
    only ``spec``; a WorkloadPriorityClass has ``value`` and ``description`` beside it)."""

    def __init__(self, name: str, obj: K8sObject, opts: pulumi.ResourceOptions | None = None):
        props = {k: v for k, v in obj.items() if k not in ("apiVersion", "kind")}
        props = {"apiVersion": obj["apiVersion"], "kind": obj["kind"], **props}
        opts = pulumi.ResourceOptions.merge(
            opts,
            pulumi.ResourceOptions(version=k8s._utilities.get_version()),  # the SDK's plugin
        )
        super().__init__(f"kubernetes:{obj['apiVersion']}:{obj['kind']}", name, props, opts)


def resource_name(prefix: str, obj: K8sObject) -> str:
    """``<prefix>-<kind>-[<namespace>-]<name>`` in lower case (stable)."""
    meta = obj["metadata"]
    ns = f"{meta['namespace']}-" if "namespace" in meta else ""
    return f"{prefix}-{obj['kind'].lower()}-{ns}{meta['name']}"


def apply_object(prefix: str, obj: K8sObject, opts: pulumi.ResourceOptions) -> pulumi.Resource:
    """One object as a resource: a typed one for the built-in kinds teams use, a
    ``KubernetesObject`` for Kueue's (``ValueError`` for others)."""
    name = resource_name(prefix, obj)
    if spec.is_kueue(obj):
        return KubernetesObject(name, obj, opts)
    cls = _TYPED.get((obj["apiVersion"], obj["kind"]))
    if cls is None:
        raise ValueError(f"kind: no resource for {obj['apiVersion']} {obj['kind']}")
    body = {_snake(k): v for k, v in obj.items() if k not in ("apiVersion", "kind")}
    return cls(name, opts=opts, **body)  # type: ignore[no-any-return]


@dataclass(frozen=True, kw_only=True)
class KueueArgs:
    """Arguments of ``Kueue``."""

    settings: spec.KueueSettings
    """The Configuration's admission settings."""
    objects: tuple[K8sObject, ...]
    """The cluster's queue objects (``workloads.specs.kueue.cluster_objects``)."""

    def __post_init__(self) -> None:
        for i, obj in enumerate(self.objects):
            if not spec.is_kueue(obj):
                raise ValueError(f"KueueArgs.objects[{i}]: {obj.get('kind')} is not a Kueue kind")
            spec.validate(obj)
        if not any(o["kind"] == "ClusterQueue" for o in self.objects):
            raise ValueError("KueueArgs.objects: no ClusterQueue (a stack without GPU pools?)")

    @classmethod
    def from_stack(cls, stack_cfg: Any, settings: spec.KueueSettings | None = None) -> KueueArgs:
        s = settings or spec.KueueSettings()
        return cls(settings=s, objects=tuple(spec.cluster_objects(stack_cfg, s)))


class Kueue(pulumi.ComponentResource):
    """The Kueue controller (pinned chart) and the stack's flavors, queues and priorities."""

    version: pulumi.Output[str]
    """The Kueue release installed."""
    cluster_queues: pulumi.Output[list[str]]
    """Names of the ClusterQueues."""

    def __init__(self, name: str, args: KueueArgs, opts: pulumi.ResourceOptions | None = None):
        super().__init__(TYPE_TOKEN, name, {}, opts)
        self.release = k8s.helm.v3.Release(
            f"{name}-controller",
            name="kueue",
            chart=versions.KUEUE_CHART,
            version=versions.KUEUE_CHART_VERSION,
            namespace=spec.NAMESPACE,
            create_namespace=True,
            values=spec.chart_values(args.settings),
            opts=pulumi.ResourceOptions(parent=self),
        )
        after = pulumi.ResourceOptions(parent=self, depends_on=[self.release])
        self.objects = [apply_object(name, obj, after) for obj in args.objects]
        self.version = pulumi.Output.from_input(versions.KUEUE_VERSION)
        self.cluster_queues = pulumi.Output.from_input(
            [o["metadata"]["name"] for o in args.objects if o["kind"] == "ClusterQueue"]
        )
        self.register_outputs({"version": self.version, "clusterQueues": self.cluster_queues})
