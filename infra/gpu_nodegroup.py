"""``GpuNodeGroup``: one GPU managed nodegroup with its own launch template.

pulumi-eks has no capacity-reservation argument, so each GPU nodegroup owns an EC2 launch
template carrying what the managed nodegroup API cannot: every EFA interface of the type
laid out as the current EC2 guide recommends (``efa_network_interfaces``), the ODCR / capacity-block target, the placement group, the
encrypted gp3 root volume and IMDSv2 with hop limit 1. The nodegroup itself
(``aws.eks.NodeGroup``, a plain resource: testable under mocks) uses the EKS-optimized NVIDIA
AMI, the GPU taint and labels, and only the private subnet of its zone.

IMDS hop limit 1: a pod in its own network namespace is one hop further than the node, so it
cannot get an IMDSv2 token and so cannot take the node role's credentials. Nothing on a GPU
node needs IMDS from a pod network namespace: the VPC CNI (aws-node), kube-proxy, the EFA
device plugin (eks-charts templates/daemonset.yaml) and the amazon-cloudwatch-observability
add-on's CloudWatch agent and Fluent Bit, the only pods that use the node role's credentials
(aws-observability/helm-charts, templates/linux/cloudwatch-agent-daemonset.yaml and
fluent-bit-daemonset.yaml), run with ``hostNetwork: true``, where the hop limit does not apply;
the NVIDIA device plugin, the DCGM exporter and the training pods call no AWS API.
AL2023 managed nodegroups default to hop limit 1 as well (kubernetes-sigs/
aws-load-balancer-controller#3695: controllers that read IMDS from a pod need 2 there).

Day 2 (full reservations and capacity blocks): the update strategy is ``MINIMAL`` with
``maxUnavailable`` 1, so an AMI or launch-template update terminates an old node before it
launches its replacement (the ``DEFAULT`` strategy launches first, which cannot succeed in a
full ODCR or capacity block and stalls; EKS API NodegroupUpdateConfig). The desired size is
the operator's after creation (``ignore_changes`` on ``scalingConfig.desiredSize``): scaling a
capacity-block group to 0 before the block ends (AWS suggests more than 30 minutes ahead) is not
undone by the next ``pulumi up``.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import pulumi
import pulumi_aws as aws

from infra import versions
from infra.config import GpuNodeGroupConfig
from infra.config.nodegroups import NODEGROUP_LABEL, node_labels
from infra.instances import InstanceType

TYPE_TOKEN = "eks-fsdp:infra:GpuNodeGroup"
ROOT_DEVICE = "/dev/xvda"
"""Root device of the AL2023 EKS AMIs."""
IMDS_HOP_LIMIT = 1
"""IMDSv2 PUT response hop limit on GPU nodes (see the module docstring)."""
UPDATE_STRATEGY = "MINIMAL"
"""EKS managed nodegroup update strategy: terminate before launch (no surge)."""
ENA_INTERFACE = "interface"
"""``InterfaceType`` of the ENA primary (the EC2 guide's run-instances example)."""
EFA_ONLY_INTERFACE = "efa-only"
"""``InterfaceType`` of an EFA device without ENA (no IP address)."""
DESIRED_SIZE_PATH = "scalingConfig.desiredSize"
"""Left to the operator after creation (``ignore_changes``)."""
_EFFECTS = {"NoSchedule": "NO_SCHEDULE", "NoExecute": "NO_EXECUTE",
            "PreferNoSchedule": "PREFER_NO_SCHEDULE"}  # fmt: skip


def efa_network_interfaces(
    instance: InstanceType, security_group_ids: Sequence[pulumi.Input[str]]
) -> list[dict[str, object]]:
    """Launch-template network interfaces attaching every EFA of ``instance``.

    The layout of the EC2 user guide, "Maximize network bandwidth on Amazon EC2 instances with
    multiple network cards" (docs.aws.amazon.com/AWSEC2/latest/UserGuide/efa-acc-inst-types.html,
    current English page; older translations still show an ``efa`` primary):

    - the primary interface (network card 0, device index 0) is an ENA interface
      (``interface``): an EFA-only interface cannot be the primary;
    - network card 0 also carries an ``efa-only`` interface at device index 1;
    - every other network card carries one ``efa-only`` interface at device index 0.

    ``efa-only`` interfaces take no IP address, so the VPC CNI and the subnet are not charged
    for them; one EFA (or EFA-only) interface per network card is the most a card takes
    (EC2 user guide, "Network cards"). So a type with N cards gets N EFA devices: 32 on
    p5/p5e.48xlarge, 16 on p5en.48xlarge, 8 on p6-b200.48xlarge, 4 on p4d/p4de.24xlarge,
    1 on g5/g6.48xlarge (one card: the ENA primary and one ``efa-only`` beside it).
    """
    if not instance.efa_supported:
        raise ValueError(f"instance: {instance.name} has no EFA interfaces")
    if not security_group_ids:
        raise ValueError("security_group_ids: EFA interfaces need at least one security group")

    def nic(card: int, device: int, kind: str) -> dict[str, object]:
        return {
            "network_card_index": card,
            "device_index": device,
            "interface_type": kind,
            "delete_on_termination": "true",
            "security_groups": list(security_group_ids),
        }

    interfaces = [nic(0, 0, ENA_INTERFACE), nic(0, 1, EFA_ONLY_INTERFACE)]
    interfaces += [nic(card, 0, EFA_ONLY_INTERFACE) for card in range(1, instance.efa_interfaces)]
    return interfaces


@dataclass(frozen=True, kw_only=True)
class GpuNodeGroupArgs:
    """Arguments of ``GpuNodeGroup``."""

    group: GpuNodeGroupConfig
    """The validated config entry (type, sizes, zone, EFA, reservation, placement)."""
    cluster_name: pulumi.Input[str]
    """EKS cluster name (an Output of ``Cluster`` so the nodegroup waits for it)."""
    node_role_arn: pulumi.Input[str]
    """IAM role of the nodes."""
    subnet_ids: Sequence[pulumi.Input[str]]
    """Private subnet(s) to launch into: only the one of ``group.availability_zone`` if set."""
    security_group_ids: Sequence[pulumi.Input[str]] = ()
    """Security groups of the EFA interfaces: the cluster SG and the EFA SG."""
    tags: dict[str, str] | None = None
    """Extra tags on AWS resources and instances."""

    def __post_init__(self) -> None:
        if not self.subnet_ids:
            raise ValueError("GpuNodeGroupArgs.subnet_ids: at least one private subnet")
        if self.group.availability_zone is not None and len(self.subnet_ids) != 1:
            raise ValueError(
                "GpuNodeGroupArgs.subnet_ids: a group pinned to"
                f" {self.group.availability_zone} takes exactly one subnet"
                f" (got {len(self.subnet_ids)})"
            )
        if self.group.efa and not self.security_group_ids:
            raise ValueError(
                "GpuNodeGroupArgs.security_group_ids: EFA interfaces need the cluster and EFA"
                " security groups"
            )
        if self.group.max_size <= 0:
            raise ValueError("GpuNodeGroupArgs.group: max_size must be > 0")


class GpuNodeGroup(pulumi.ComponentResource):
    """Launch template (+ placement group) + EKS managed nodegroup for one config entry."""

    node_group_name: pulumi.Output[str]
    """EKS nodegroup name."""
    launch_template_id: pulumi.Output[str]
    """Launch template id."""
    placement_group_name: pulumi.Output[str] | None
    """Placement group the instances launch into (None without one)."""
    node_group_resources: pulumi.Output[list]
    """``aws.eks.NodeGroup.resources``: the Auto Scaling group EKS made for the group
    (``infra.capacity_schedule`` schedules its scaling)."""

    def __init__(
        self, name: str, args: GpuNodeGroupArgs, opts: pulumi.ResourceOptions | None = None
    ) -> None:
        super().__init__(TYPE_TOKEN, name, {}, opts)
        child = pulumi.ResourceOptions(parent=self)
        group = args.group
        instance = group.instance
        tags = {**(args.tags or {}), NODEGROUP_LABEL: group.name}

        self.placement_group_name = None
        if group.creates_placement_group:
            pg = aws.ec2.PlacementGroup(f"{name}-pg", strategy="cluster", tags=tags, opts=child)
            self.placement_group_name = pg.name
        elif group.existing_placement_group is not None:
            self.placement_group_name = pulumi.Output.from_input(group.existing_placement_group)

        reservation = None
        if group.capacity_reservation_id:
            reservation = aws.ec2.LaunchTemplateCapacityReservationSpecificationArgs(
                capacity_reservation_target=aws.ec2.LaunchTemplateCapacityReservationSpecificationCapacityReservationTargetArgs(
                    capacity_reservation_id=group.capacity_reservation_id
                )
            )
        elif group.capacity_reservation_resource_group_arn:
            reservation = aws.ec2.LaunchTemplateCapacityReservationSpecificationArgs(
                capacity_reservation_target=aws.ec2.LaunchTemplateCapacityReservationSpecificationCapacityReservationTargetArgs(
                    capacity_reservation_resource_group_arn=group.capacity_reservation_resource_group_arn
                )
            )
        market = (
            aws.ec2.LaunchTemplateInstanceMarketOptionsArgs(market_type="capacity-block")
            if group.capacity_type == "capacity-block"
            else None
        )
        placement = (
            aws.ec2.LaunchTemplatePlacementArgs(group_name=self.placement_group_name)
            if self.placement_group_name is not None
            else None
        )
        interfaces = (
            [
                aws.ec2.LaunchTemplateNetworkInterfaceArgs(**nic)  # type: ignore[arg-type]
                for nic in efa_network_interfaces(instance, args.security_group_ids)
            ]
            if group.efa
            else None
        )
        lt = aws.ec2.LaunchTemplate(
            f"{name}-lt",
            description=f"GPU nodegroup {group.name}: {group.instance_type}",
            # Capacity Blocks want the instance type in the template, not in the nodegroup.
            instance_type=group.instance_type,
            network_interfaces=interfaces,
            capacity_reservation_specification=reservation,
            instance_market_options=market,
            placement=placement,
            block_device_mappings=[
                aws.ec2.LaunchTemplateBlockDeviceMappingArgs(
                    device_name=ROOT_DEVICE,
                    ebs=aws.ec2.LaunchTemplateBlockDeviceMappingEbsArgs(
                        volume_size=group.root_volume_gib,
                        volume_type="gp3",
                        encrypted="true",
                        delete_on_termination="true",
                    ),
                )
            ],
            metadata_options=aws.ec2.LaunchTemplateMetadataOptionsArgs(
                http_endpoint="enabled",
                http_tokens="required",
                http_put_response_hop_limit=IMDS_HOP_LIMIT,
                instance_metadata_tags="disabled",
            ),
            tag_specifications=[
                aws.ec2.LaunchTemplateTagSpecificationArgs(
                    resource_type=kind, tags={**tags, "Name": f"{group.name}"}
                )
                for kind in ("instance", "volume")
            ],
            update_default_version=True,
            tags=tags,
            opts=child,
        )
        self.launch_template_id = lt.id

        ng = aws.eks.NodeGroup(
            f"{name}-ng",
            cluster_name=args.cluster_name,
            node_group_name=group.name,
            node_role_arn=args.node_role_arn,
            subnet_ids=list(args.subnet_ids),
            ami_type=versions.GPU_AMI_TYPE,
            update_config=aws.eks.NodeGroupUpdateConfigArgs(
                max_unavailable=1, update_strategy=UPDATE_STRATEGY
            ),
            capacity_type="CAPACITY_BLOCK"
            if group.capacity_type == "capacity-block"
            else "ON_DEMAND",
            launch_template=aws.eks.NodeGroupLaunchTemplateArgs(
                id=lt.id, version=lt.latest_version.apply(str)
            ),
            scaling_config=aws.eks.NodeGroupScalingConfigArgs(
                min_size=group.min_size,
                desired_size=group.desired_size,
                max_size=group.max_size,
            ),
            # EKS node auto repair acts on the node monitoring agent's conditions (the
            # eks-node-monitoring-agent add-on, infra/cluster.py): a GPU with XID faults
            # (AcceleratedHardwareReady) is rebooted or replaced after 10 minutes (EKS user
            # guide, "Automatically repair nodes in EKS clusters"). On by default; off with
            # gpuNodeGroups[].nodeRepair: false.
            node_repair_config=aws.eks.NodeGroupNodeRepairConfigArgs(enabled=group.node_repair),
            labels=node_labels(group),
            taints=[
                aws.eks.NodeGroupTaintArgs(
                    key=group.taint.key,
                    value=group.taint.value,
                    effect=_EFFECTS[group.taint.effect],
                )
            ],
            tags=tags,
            # A reservation rarely has room for old and new nodes at once, and the name is
            # fixed: replace by deleting first. The desired size belongs to the operator once
            # the group exists (scale to 0 before a capacity block ends, or to upgrade one).
            opts=pulumi.ResourceOptions(
                parent=self, delete_before_replace=True, ignore_changes=[DESIRED_SIZE_PATH]
            ),
        )
        self.node_group_name = ng.node_group_name
        self.node_group_resources = ng.resources
        self.register_outputs(
            {
                "nodeGroupName": self.node_group_name,
                "launchTemplateId": self.launch_template_id,
                "placementGroupName": self.placement_group_name,
            }
        )
