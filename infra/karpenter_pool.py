"""``KarpenterPool``: one GPU pool with ``provisioner: karpenter``.

The pool's EC2NodeClass and NodePool (``workloads.specs.karpenter``: built and validated against
the pinned CRDs there), applied after the controller's chart (which brings the CRDs), the
cluster placement group the pool asks the stack to create (named ``<cluster>-<pool>``, so the
EC2NodeClass can select it by name), and for a capacity-block pool with a ``capacityBlock``
window the jobs' ConfigMap with the block's times (the same ConfigMap a managed group's
``CapacitySchedule`` writes). No scheduled scaling: Karpenter launches nodes when pods wait and
the reservation is active, and drains a block's nodes ten minutes before EC2 starts terminating
them (website/content/en/docs/tasks/odcrs.md, "Capacity Blocks").
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import pulumi
import pulumi_aws as aws
import pulumi_kubernetes as k8s

from infra.capacity_schedule import output_value
from infra.config import GpuNodeGroupConfig
from workloads.specs import karpenter as spec
from workloads.specs.capacity import capacity_block_configmap
from workloads.specs.common import K8sObject

TYPE_TOKEN = "eks-fsdp:infra:KarpenterPool"


@dataclass(frozen=True, kw_only=True)
class KarpenterPoolArgs:
    """Arguments of ``KarpenterPool``."""

    group: GpuNodeGroupConfig
    """The validated config entry (``provisioner: karpenter``)."""
    cluster_name: str
    """EKS cluster name (physical: selector tags, the node role's and placement group's names)."""
    jobs_namespace: str
    """Namespace of the jobs' capacity-block ConfigMap."""
    controller: pulumi.Resource | None = None
    """The Karpenter chart (``Karpenter.release``): the objects wait for the CRDs it installs."""
    tags: dict[str, str] | None = None
    """Extra tags on AWS resources."""

    def __post_init__(self) -> None:
        if not self.group.uses_karpenter:
            raise ValueError(
                f"KarpenterPoolArgs.group: {self.group.name} is provisioned by"
                f" {self.group.provisioner}"
            )


def _custom_resource(name: str, obj: K8sObject, opts: pulumi.ResourceOptions) -> Any:
    return k8s.apiextensions.CustomResource(
        name,
        api_version=obj["apiVersion"],
        kind=obj["kind"],
        metadata=obj["metadata"],
        spec=obj["spec"],
        opts=opts,
    )


class KarpenterPool(pulumi.ComponentResource):
    """EC2NodeClass + NodePool (+ placement group, + capacity-block ConfigMap) of one pool."""

    node_pool_name: pulumi.Output[str]
    """The NodePool's name (the pool's)."""
    placement_group_name: pulumi.Output[str] | None
    """The placement group the nodes launch into (None without one)."""
    window: dict[str, str] | None
    """The capacity block's ``start``, ``end``, ``scaleDownAt`` (None without a window)."""

    def __init__(
        self, name: str, args: KarpenterPoolArgs, opts: pulumi.ResourceOptions | None = None
    ) -> None:
        super().__init__(TYPE_TOKEN, name, {}, opts)
        child = pulumi.ResourceOptions(parent=self)
        group = args.group
        nodeclass, nodepool = spec.pool_objects(group, args.cluster_name)

        self.placement_group_name = None
        after: list[pulumi.Resource] = [args.controller] if args.controller is not None else []
        pg_name = spec.placement_group_name(args.cluster_name, group)
        if group.creates_placement_group and pg_name is not None:
            pg = aws.ec2.PlacementGroup(
                f"{name}-pg",
                name=pg_name,
                strategy="cluster",
                tags={**(args.tags or {}), "eks-fsdp/nodegroup": group.name},
                opts=child,
            )
            self.placement_group_name = pg.name
            after.append(pg)
        elif pg_name is not None:
            self.placement_group_name = pulumi.Output.from_input(pg_name)

        nc = _custom_resource(
            f"{name}-nodeclass",
            nodeclass,
            pulumi.ResourceOptions(parent=self, depends_on=after),
        )
        np = _custom_resource(
            f"{name}-nodepool",
            nodepool,
            pulumi.ResourceOptions(parent=self, depends_on=[*after, nc]),
        )
        self.node_pool_name = np.metadata.apply(lambda m: m["name"])

        self.window = None
        if group.capacity_block is not None:
            self.window = output_value(group)
            cm = capacity_block_configmap(group.name, self.window, args.jobs_namespace)
            meta = cm["metadata"]
            k8s.core.v1.ConfigMap(
                f"{name}-configmap",
                metadata=k8s.meta.v1.ObjectMetaArgs(
                    name=meta["name"], namespace=meta["namespace"], labels=meta.get("labels")
                ),
                data=dict(cm["data"]),
                opts=child,
            )
        self.register_outputs(
            {"nodePoolName": self.node_pool_name, "placementGroupName": self.placement_group_name}
        )
