"""The node group sections: ``systemNodeGroup`` (CPU) and ``gpuNodeGroups`` (GPU capacity:
instance type, sizes, EFA, capacity reservations, placement groups, taints)."""

from __future__ import annotations

import datetime as dt
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from infra import instances, versions
from infra.config.fields import (
    _DNS_LABEL,
    _bool,
    _check_keys,
    _choice,
    _fail,
    _int,
    _mapping,
    _opt_str,
    _str,
)

CAPACITY_TYPES = ("on-demand", "capacity-block")
EFA_DEVICE_PLUGIN = "device-plugin"
EFA_DRA = "dra"
EFA_DRIVERS = (EFA_DEVICE_PLUGIN, EFA_DRA)
"""``efa: dra | device-plugin`` (or true / false: the device plugin, or no EFA)."""
PROVISIONER_MANAGED = "managedNodeGroup"
PROVISIONER_KARPENTER = "karpenter"
PROVISIONERS = (PROVISIONER_MANAGED, PROVISIONER_KARPENTER)
KARPENTER_CAPACITY_TYPES = ("reserved", "on-demand", "spot")
"""Values of Karpenter's ``karpenter.sh/capacity-type`` (website/content/en/docs/tasks/odcrs.md:
"any combination of the available capacity-types (on-demand, spot, and reserved)")."""
KARPENTER_NODE_ROLE_PREFIX = "KarpenterNodeRole-"
"""The Karpenter nodes' role is ``KarpenterNodeRole-<clusterName>``, upstream's name
(aws/karpenter-provider-aws ``website/content/en/docs/getting-started/getting-started-with-
karpenter/cloudformation.yaml`` at v1.14.1, ``RoleName``)."""
MAX_IAM_ROLE_NAME = 64
"""IAM role names are at most 64 characters (IAM API reference, ``CreateRole``, ``RoleName``)."""
MAX_KARPENTER_CLUSTER_NAME = MAX_IAM_ROLE_NAME - len(KARPENTER_NODE_ROLE_PREFIX)
"""46: the longest ``clusterName`` whose Karpenter node role IAM accepts."""
PLACEMENT_CREATE = "create"
PLACEMENT_NONE = "none"
TAINT_EFFECTS = ("NoSchedule", "PreferNoSchedule", "NoExecute")
DEFAULT_GPU_TAINT = "nvidia.com/gpu=true:NoSchedule"
DEFAULT_ROOT_VOLUME_GIB = 500
MAX_ROOT_VOLUME_GIB = 16384
"""gp3's largest volume, 16 TiB (EBS user guide, "Amazon EBS volume types", General Purpose
SSD: volume size 1 GiB - 16 TiB): a larger root volume fails only when EC2 launches a node."""
MAX_NODES_PER_GROUP = 450
"""EKS service quota "Nodes per managed node group" (EKS user guide, "View and manage Amazon
EKS and Fargate service quotas"): EKS refuses a larger maxSize when it creates the group."""
EC2_TERMINATION_LEAD_MINUTES = 30
"""EKS user guide, "Create self-managed nodes with Capacity Blocks for ML" (and the managed
node group page it points to): "we suggest that you schedule scaling to scale to zero more
than 30 minutes before the Capacity Block reservation end time" -- EC2 starts terminating a
block's instances ahead of its end. A scale-down margin must exceed it."""
DEFAULT_SCALE_DOWN_MINUTES = 60
"""Default margin: the 30 minutes EC2 takes plus 30 for the job to checkpoint and the pods to
drain (a checkpoint of the shipped jobs writes in 3-22 min on their FSx, Pulumi.p5-16.yaml)."""

_CR_ID = re.compile(r"^cr-[0-9a-f]{17}$")
_RG_ARN = re.compile(r"^arn:aws[a-z-]*:resource-groups:[a-z0-9-]+:\d{12}:group/[A-Za-z0-9._-]+$")
_PG_NAME = re.compile(r"^[A-Za-z0-9._-]{1,255}$")
_EC2_TYPE = re.compile(r"^[a-z][a-z0-9-]*\.[a-z0-9]+$")
_LABEL_KEY = re.compile(r"^([a-z0-9.-]{1,253}/)?[A-Za-z0-9]([-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?$")

_NODEGROUP_KEYS = (
    "name",
    "instanceType",
    "minSize",
    "desiredSize",
    "maxSize",
    "availabilityZone",
    "efa",
    "capacityReservationId",
    "capacityReservationResourceGroupArn",
    "capacityType",
    "placementGroup",
    "rootVolumeGiB",
    "pricePerHour",
    "labels",
    "taint",
    "nodeRepair",
    "capacityBlock",
    "provisioner",
    "karpenterCapacityTypes",
)
_CAPACITY_BLOCK_KEYS = ("start", "end", "scaleDownMinutesBeforeEnd")
_SYSTEM_KEYS = ("instanceType", "minSize", "desiredSize", "maxSize")


@dataclass(frozen=True, kw_only=True)
class Taint:
    """A Kubernetes node taint."""

    key: str
    """Taint key, e.g. ``nvidia.com/gpu``."""
    value: str
    """Taint value, e.g. ``true``."""
    effect: str
    """``NoSchedule`` | ``PreferNoSchedule`` | ``NoExecute``."""

    def __str__(self) -> str:
        return f"{self.key}={self.value}:{self.effect}"

    def toleration(self) -> dict[str, str]:
        """The Kubernetes toleration that tolerates exactly this taint."""
        return {"key": self.key, "operator": "Equal", "value": self.value, "effect": self.effect}


@dataclass(frozen=True, kw_only=True)
class SystemNodeGroupConfig:
    """The CPU nodegroup for cluster add-ons (CoreDNS, device plugins, etcd, operator)."""

    instance_type: str = "c5.2xlarge"
    """EC2 instance type (any type; not limited to the GPU catalog)."""
    min_size: int = 1
    """Minimum number of nodes."""
    desired_size: int = 2
    """Desired number of nodes."""
    max_size: int = 3
    """Maximum number of nodes."""


@dataclass(frozen=True, kw_only=True)
class CapacityBlockWindow:
    """When a Capacity Block for ML runs (``gpuNodeGroups[].capacityBlock``), in UTC."""

    start: dt.datetime
    """The block's start (aware, UTC)."""
    end: dt.datetime
    """The block's end (aware, UTC)."""
    scale_down_minutes_before_end: int = DEFAULT_SCALE_DOWN_MINUTES
    """How long before ``end`` the group is scaled to zero (> 30: EC2's termination lead)."""

    @property
    def scale_down_at(self) -> dt.datetime:
        """When the group is scaled to zero."""
        return self.end - dt.timedelta(minutes=self.scale_down_minutes_before_end)


def iso_utc(moment: dt.datetime) -> str:
    """``2026-12-10T11:30:00Z``: the form the Auto Scaling API and the stack file use."""
    return moment.astimezone(dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


@dataclass(frozen=True, kw_only=True)
class GpuNodeGroupConfig:
    """One GPU managed nodegroup (``gpuNodeGroups[i]``)."""

    name: str
    """Nodegroup name, a DNS label, unique in the stack."""
    instance_type: str
    """EC2 instance type; must be a row of ``infra.instances.CATALOG``."""
    min_size: int
    """Minimum number of nodes."""
    desired_size: int
    """Desired number of nodes (the job's default worker count)."""
    max_size: int
    """Maximum number of nodes (> 0)."""
    availability_zone: str | None = None
    """AZ the nodegroup is pinned to (required with EFA, a reservation or a placement group)."""
    efa: bool = False
    """Attach all EFA interfaces of the type (default: true when the type has EFA)."""
    efa_driver: str = EFA_DEVICE_PLUGIN
    """What hands the EFA devices to pods: ``device-plugin`` (``vpc.amazonaws.com/efa``) or
    ``dra`` (the EFA DRA driver; key ``efa: dra``; ``workloads.specs.efa``)."""
    capacity_reservation_id: str | None = None
    """ODCR or capacity-block reservation id, ``cr-`` + 17 hex digits."""
    capacity_reservation_resource_group_arn: str | None = None
    """Target reservations through a resource group instead of one id."""
    capacity_type: str = "on-demand"
    """``on-demand`` (incl. ODCR) | ``capacity-block`` (EC2 Capacity Blocks for ML)."""
    placement_group: str = PLACEMENT_NONE
    """``create`` (a cluster placement group) | ``none`` | the name of an existing group."""
    root_volume_gib: int = DEFAULT_ROOT_VOLUME_GIB
    """gp3 root volume size, GiB."""
    price_per_hour: float | None = None
    """Override of the catalog's on-demand price (reservations, discounts), USD."""
    labels: Mapping[str, str] = field(default_factory=dict)
    """Extra Kubernetes node labels."""
    taint: Taint = field(
        default_factory=lambda: Taint(key="nvidia.com/gpu", value="true", effect="NoSchedule")
    )
    """Taint on every node of the group; GPU pods tolerate it."""
    capacity_block: CapacityBlockWindow | None = None
    """The Capacity Block's window (capacity-block groups): the stack scales the group up at its
    start and to zero ``scaleDownMinutesBeforeEnd`` before its end (``infra.capacity_schedule``)."""
    node_repair: bool = True
    """EKS node auto repair (``nodeRepairConfig.enabled``): nodes whose node-monitoring-agent
    conditions (``AcceleratedHardwareReady`` for GPU/XID faults, ``NetworkingReady``, ...) stay
    unhealthy are rebooted or replaced by EKS (EKS user guide, "Automatically repair nodes in
    EKS clusters")."""
    provisioner: str = PROVISIONER_MANAGED
    """``managedNodeGroup`` (an EKS managed node group, ``infra.gpu_nodegroup``) | ``karpenter``
    (an EC2NodeClass and a NodePool, ``infra.karpenter_pool``: nodes only while pods wait)."""
    karpenter_capacity_types: tuple[str, ...] = ()
    """Karpenter pools: the NodePool's ``karpenter.sh/capacity-type`` values, in order of
    preference (``reserved`` with a reservation, else ``on-demand``; ``spot`` on request)."""

    @property
    def uses_karpenter(self) -> bool:
        """True when Karpenter provisions the pool's nodes."""
        return self.provisioner == PROVISIONER_KARPENTER

    @property
    def instance(self) -> instances.InstanceType:
        """The catalog row of ``instance_type``."""
        return instances.lookup(self.instance_type)

    @property
    def usd_per_hour(self) -> float:
        """Price of one node per hour: the override, else the catalog's on-demand price."""
        return (
            self.price_per_hour if self.price_per_hour is not None else self.instance.usd_per_hour
        )

    @property
    def creates_placement_group(self) -> bool:
        """True when the stack creates a cluster placement group for this nodegroup."""
        return self.placement_group == PLACEMENT_CREATE

    @property
    def existing_placement_group(self) -> str | None:
        """The name of a pre-existing placement group, or None."""
        if self.placement_group in (PLACEMENT_CREATE, PLACEMENT_NONE):
            return None
        return self.placement_group

    @property
    def has_reservation(self) -> bool:
        """True when instances launch into a capacity reservation (id or resource group)."""
        return bool(self.capacity_reservation_id or self.capacity_reservation_resource_group_arn)


def _sizes(obj: Mapping[str, Any], path: str, defaults: tuple[int, int, int]) -> tuple[int, ...]:
    lo = _int(obj.get("minSize", defaults[0]), f"{path}.minSize", minimum=0)
    hi = _int(obj.get("maxSize", defaults[2]), f"{path}.maxSize", minimum=0)
    desired = _int(obj.get("desiredSize", defaults[1]), f"{path}.desiredSize", minimum=0)
    if hi == 0:
        raise _fail(f"{path}.maxSize", "must be greater than 0")
    if hi > MAX_NODES_PER_GROUP:
        raise _fail(
            f"{path}.maxSize",
            f"{hi} is above EKS's {MAX_NODES_PER_GROUP} nodes per managed node group "
            "(split the nodes into several groups)",
        )
    if lo > hi:
        raise _fail(f"{path}.minSize", f"{lo} is greater than maxSize {hi}")
    if not lo <= desired <= hi:
        raise _fail(f"{path}.desiredSize", f"{desired} is outside [minSize {lo}, maxSize {hi}]")
    return lo, desired, hi


def _utc(value: Any, path: str) -> dt.datetime:
    """An ISO 8601 instant with an explicit UTC offset (``Z`` or ``+00:00``)."""
    if isinstance(value, dt.datetime):  # YAML turns an unquoted timestamp into a datetime
        moment = value
    elif isinstance(value, str):
        try:
            moment = dt.datetime.fromisoformat(value.strip())
        except ValueError:
            raise _fail(
                path, f"{value!r} is not an ISO 8601 time like 2026-12-10T11:30:00Z"
            ) from None
    else:
        raise _fail(path, f"expected an ISO 8601 UTC time like 2026-12-10T11:30:00Z, got {value!r}")
    if moment.tzinfo is None or moment.utcoffset() != dt.timedelta(0):
        raise _fail(path, f"{value!s} is not in UTC: end it with Z (capacity blocks run in UTC)")
    return moment.astimezone(dt.UTC)


def _parse_capacity_block(value: Any, path: str) -> CapacityBlockWindow:
    obj = _mapping(value, path)
    _check_keys(obj, _CAPACITY_BLOCK_KEYS, path)
    for key in ("start", "end"):
        if key not in obj:
            raise _fail(f"{path}.{key}", "is required (the block's times, UTC)")
    start = _utc(obj["start"], f"{path}.start")
    end = _utc(obj["end"], f"{path}.end")
    if end <= start:
        raise _fail(f"{path}.end", f"{iso_utc(end)} is not after the start {iso_utc(start)}")
    margin = _int(
        obj.get("scaleDownMinutesBeforeEnd", DEFAULT_SCALE_DOWN_MINUTES),
        f"{path}.scaleDownMinutesBeforeEnd",
    )
    if margin <= EC2_TERMINATION_LEAD_MINUTES:
        raise _fail(
            f"{path}.scaleDownMinutesBeforeEnd",
            f"{margin} min is not more than the {EC2_TERMINATION_LEAD_MINUTES} min EKS asks for"
            " (EC2 starts terminating the block's instances before its end)",
        )
    window = CapacityBlockWindow(start=start, end=end, scale_down_minutes_before_end=margin)
    if window.scale_down_at <= start:
        raise _fail(
            f"{path}.scaleDownMinutesBeforeEnd",
            f"{margin} min before {iso_utc(end)} is before the block starts ({iso_utc(start)})",
        )
    return window


def capacity_block_warnings(groups: Any) -> list[str]:
    """One line per capacity-block group without a ``capacityBlock`` window: the stack then
    never scales it down before EC2 terminates the block's instances, and jobs get no end time
    to checkpoint before (``infra.capacity_schedule``; docs/capacity.md). A warning, not an
    error: a stack may be brought up before the block's times are known."""
    return [
        f"gpuNodeGroups[{g.name}].capacityBlock is not set: the capacity block's group is never "
        "scaled down before the block ends and jobs get no end time to checkpoint before; set "
        "its start and end, UTC (eks-fsdp doctor shows the block's times)"
        for g in groups
        if g.capacity_type == "capacity-block" and g.capacity_block is None
    ]


def parse_taint(text: str, path: str = "taint") -> Taint:
    """``key=value:Effect`` -> ``Taint``; ``ConfigError`` naming ``path`` otherwise."""
    m = re.fullmatch(r"([^=:\s]+)=([^=:\s]*):(\w+)", text) if isinstance(text, str) else None
    if m is None or not _LABEL_KEY.match(m.group(1)):
        raise _fail(path, f"{text!r} is not shaped key=value:Effect")
    effect = _choice(m.group(3), TAINT_EFFECTS, path)
    return Taint(key=m.group(1), value=m.group(2), effect=effect)


def _parse_system(value: Any) -> SystemNodeGroupConfig:
    path = "systemNodeGroup"
    obj = _mapping(value, path)
    _check_keys(obj, _SYSTEM_KEYS, path)
    default = SystemNodeGroupConfig()
    instance_type = _str(obj.get("instanceType", default.instance_type), f"{path}.instanceType")
    if not _EC2_TYPE.match(instance_type):
        raise _fail(f"{path}.instanceType", f"{instance_type!r} is not an EC2 instance type")
    lo, desired, hi = _sizes(obj, path, (default.min_size, default.desired_size, default.max_size))
    return SystemNodeGroupConfig(
        instance_type=instance_type, min_size=lo, desired_size=desired, max_size=hi
    )


def _parse_gpu_group(value: Any, index: int, azs: tuple[str, ...]) -> GpuNodeGroupConfig:
    path = f"gpuNodeGroups[{index}]"
    obj = _mapping(value, path)
    _check_keys(obj, _NODEGROUP_KEYS, path)
    name = _str(obj.get("name"), f"{path}.name")
    if not _DNS_LABEL.match(name):
        raise _fail(f"{path}.name", f"{name!r} is not a DNS label (a-z, 0-9, '-')")
    if name == "default":
        # its LocalQueue would be `default`, where Kueue puts every job without a queue label
        # (LocalQueueDefaulting, GA and locked on at v0.17.0: pkg/features/kube_features.go)
        raise _fail(f"{path}.name", "'default' is reserved (Kueue's default LocalQueue): rename it")
    instance_type = _str(obj.get("instanceType"), f"{path}.instanceType")
    if instance_type not in instances.CATALOG:
        raise _fail(
            f"{path}.instanceType",
            f"unknown instance type {instance_type!r} (catalog: {', '.join(sorted(instances.CATALOG))})",
        )
    instance = instances.CATALOG[instance_type]
    for key in ("minSize", "desiredSize", "maxSize"):
        if key not in obj:
            raise _fail(f"{path}.{key}", "is required")
    lo, desired, hi = _sizes(obj, path, (0, 0, 0))

    az = _opt_str(obj.get("availabilityZone"), f"{path}.availabilityZone")
    if az is not None and az not in azs:
        raise _fail(
            f"{path}.availabilityZone", f"{az} is not in availabilityZones ({', '.join(azs)})"
        )

    efa_raw: Any = obj.get("efa", instance.efa_supported)
    efa_driver = EFA_DEVICE_PLUGIN
    if isinstance(efa_raw, str) and efa_raw in EFA_DRIVERS:
        efa_raw, efa_driver = True, efa_raw
    elif isinstance(efa_raw, str) and efa_raw.lower() not in ("true", "false"):
        raise _fail(f"{path}.efa", f"{efa_raw!r}: expected true, false, dra or device-plugin")
    efa = _bool(efa_raw, f"{path}.efa")
    if efa and not instance.efa_supported:
        raise _fail(f"{path}.efa", f"{instance_type} has no EFA interfaces")
    if efa and az is None:
        raise _fail(
            f"{path}.availabilityZone",
            "is required with efa: EFA traffic does not cross availability zones",
        )

    cr_id = _opt_str(obj.get("capacityReservationId"), f"{path}.capacityReservationId")
    if cr_id is not None and not _CR_ID.match(cr_id):
        raise _fail(f"{path}.capacityReservationId", f"{cr_id!r} is not shaped cr- + 17 hex digits")
    rg_arn = _opt_str(
        obj.get("capacityReservationResourceGroupArn"),
        f"{path}.capacityReservationResourceGroupArn",
    )
    if rg_arn is not None and not _RG_ARN.match(rg_arn):
        raise _fail(
            f"{path}.capacityReservationResourceGroupArn",
            f"{rg_arn!r} is not a resource-groups group ARN",
        )
    if cr_id and rg_arn:
        raise _fail(
            f"{path}.capacityReservationResourceGroupArn",
            "set either capacityReservationId or capacityReservationResourceGroupArn, not both",
        )
    capacity_type = _choice(
        obj.get("capacityType", "on-demand"), CAPACITY_TYPES, f"{path}.capacityType"
    )
    if capacity_type == "capacity-block" and cr_id is None:
        raise _fail(f"{path}.capacityReservationId", "is required with capacityType capacity-block")
    if (cr_id or rg_arn) and az is None:
        raise _fail(
            f"{path}.availabilityZone",
            "is required with a capacity reservation: reservations belong to one zone",
        )

    default_pg = PLACEMENT_CREATE if efa and not (cr_id or rg_arn) else PLACEMENT_NONE
    pg = _str(obj.get("placementGroup", default_pg), f"{path}.placementGroup")
    if not _PG_NAME.match(pg):
        raise _fail(f"{path}.placementGroup", f"{pg!r} is not create, none or a group name")
    if capacity_type == "capacity-block" and pg != PLACEMENT_NONE:
        # EC2 user guide, Capacity Blocks: the block's instances are already placed close
        # together in an UltraCluster; a cluster placement group is not supported with them
        # and launches into one fail with InsufficientInstanceCapacity.
        raise _fail(
            f"{path}.placementGroup",
            f"{pg!r} with capacityType capacity-block: a block is already co-located; set none",
        )
    if pg != PLACEMENT_NONE and az is None:
        raise _fail(
            f"{path}.availabilityZone",
            "is required with a placement group: a cluster placement group lives in one zone",
        )

    root = _int(obj.get("rootVolumeGiB", DEFAULT_ROOT_VOLUME_GIB), f"{path}.rootVolumeGiB")
    if root < 20:
        raise _fail(f"{path}.rootVolumeGiB", f"{root} GiB is below the 20 GiB the AMI needs")
    if root > MAX_ROOT_VOLUME_GIB:
        raise _fail(
            f"{path}.rootVolumeGiB",
            f"{root} GiB is above gp3's largest volume, {MAX_ROOT_VOLUME_GIB} GiB (16 TiB)",
        )
    price = obj.get("pricePerHour")
    if price is not None:
        if isinstance(price, bool) or not isinstance(price, int | float) or price <= 0:
            raise _fail(f"{path}.pricePerHour", f"expected a positive number, got {price!r}")
        price = float(price)
    labels_raw = _mapping(obj.get("labels", {}), f"{path}.labels")
    labels: dict[str, str] = {}
    for key, val in labels_raw.items():
        if not isinstance(key, str) or not _LABEL_KEY.match(key):
            raise _fail(f"{path}.labels", f"{key!r} is not a Kubernetes label key")
        labels[key] = _str(str(val), f"{path}.labels.{key}")
    taint = parse_taint(obj.get("taint", DEFAULT_GPU_TAINT), f"{path}.taint")
    node_repair = _bool(obj.get("nodeRepair", True), f"{path}.nodeRepair")
    capacity_block = None
    if obj.get("capacityBlock") is not None:
        if capacity_type != "capacity-block":
            raise _fail(
                f"{path}.capacityBlock",
                f"is only for capacityType capacity-block (this group is {capacity_type})",
            )
        capacity_block = _parse_capacity_block(obj["capacityBlock"], f"{path}.capacityBlock")
    provisioner, karpenter_types = _parse_provisioner(
        obj, path, min_size=lo, efa=efa, capacity_type=capacity_type, placement_group=pg
    )
    if efa_driver == EFA_DRA and provisioner != PROVISIONER_MANAGED:
        # EKS user guide, device-management-efa: Karpenter runs the DRA driver only on static
        # NodePools; this project's Karpenter pools launch nodes for waiting pods.
        raise _fail(
            f"{path}.efa",
            "dra is for managed node groups (Karpenter: DRA only on static NodePools): "
            "use efa: device-plugin",
        )
    return GpuNodeGroupConfig(
        name=name,
        instance_type=instance_type,
        min_size=lo,
        desired_size=desired,
        max_size=hi,
        availability_zone=az,
        efa=efa,
        efa_driver=efa_driver,
        capacity_reservation_id=cr_id,
        capacity_reservation_resource_group_arn=rg_arn,
        capacity_type=capacity_type,
        placement_group=pg,
        root_volume_gib=root,
        price_per_hour=price,
        labels=labels,
        taint=taint,
        node_repair=node_repair,
        capacity_block=capacity_block,
        provisioner=provisioner,
        karpenter_capacity_types=karpenter_types,
    )


def _karpenter_needs(feature: str, path: str) -> None:
    """Refuse a feature the pinned Karpenter lacks (``versions.KARPENTER_FEATURES_SINCE``)."""
    since = versions.KARPENTER_FEATURES_SINCE[feature]
    if versions.version_tuple(versions.KARPENTER_VERSION) < versions.version_tuple(since):
        raise _fail(
            path,
            f"{feature} needs Karpenter >= {since}; the stack pins {versions.KARPENTER_VERSION}",
        )


def _parse_provisioner(
    obj: Mapping[str, Any],
    path: str,
    *,
    min_size: int,
    efa: bool,
    capacity_type: str,
    placement_group: str,
) -> tuple[str, tuple[str, ...]]:
    """``provisioner`` and, for Karpenter pools, their capacity types, checked against what
    the pinned Karpenter supports."""
    provisioner = _choice(
        obj.get("provisioner", PROVISIONER_MANAGED), PROVISIONERS, f"{path}.provisioner"
    )
    types_path = f"{path}.karpenterCapacityTypes"
    if provisioner != PROVISIONER_KARPENTER:
        if obj.get("karpenterCapacityTypes") is not None:
            raise _fail(types_path, "is only for provisioner: karpenter")
        return provisioner, ()
    if obj.get("capacityReservationResourceGroupArn") is not None:
        raise _fail(
            f"{path}.capacityReservationResourceGroupArn",
            "Karpenter selects reservations by id or tags, not resource groups: set"
            " capacityReservationId",
        )
    if min_size != 0:
        # A dynamic NodePool keeps no floor: it launches nodes for pending pods only (a floor
        # is the alpha StaticCapacity gate, website/content/en/docs/reference/settings.md).
        raise _fail(
            f"{path}.minSize",
            f"{min_size} with provisioner karpenter: Karpenter launches nodes for waiting pods"
            " only; set 0",
        )
    reserved = obj.get("capacityReservationId") is not None
    raw = obj.get("karpenterCapacityTypes", ["reserved"] if reserved else ["on-demand"])
    if not isinstance(raw, list | tuple) or not raw:
        raise _fail(types_path, f"expected a non-empty list of {KARPENTER_CAPACITY_TYPES}")
    types = tuple(_choice(t, KARPENTER_CAPACITY_TYPES, types_path) for t in raw)
    if len(set(types)) != len(types):
        raise _fail(types_path, f"lists a capacity type twice: {list(types)}")
    if ("reserved" in types) != reserved:
        raise _fail(
            types_path,
            "reserved needs capacityReservationId"
            if not reserved
            else "has no reserved: the pool would never launch into capacityReservationId",
        )
    if capacity_type == "capacity-block" and types != ("reserved",):
        raise _fail(types_path, "a capacity-block pool launches only into its block: [reserved]")
    for kind in types:
        _karpenter_needs(f"capacity-type {kind}", types_path)
    if capacity_type == "capacity-block":
        _karpenter_needs("capacity blocks", f"{path}.capacityType")
    if efa:
        _karpenter_needs("networkInterfaces", f"{path}.efa")
    if placement_group != PLACEMENT_NONE:
        _karpenter_needs("placementGroupSelector", f"{path}.placementGroup")
    return provisioner, types


def _parse_gpu_groups(
    groups_raw: Any,
    azs: tuple[str, ...],
    *,
    kubernetes_version: str | None = None,
    cluster_name: str | None = None,
) -> tuple[GpuNodeGroupConfig, ...]:
    """``gpuNodeGroups``: each group parsed, names unique; ``efa: dra`` only where the
    cluster's Kubernetes has DRA (``kubernetes_version``, when given); Karpenter pools only
    where the pinned AMI alias publishes that Kubernetes and ``cluster_name`` (when given)
    fits the node role's name."""
    if not isinstance(groups_raw, list | tuple):
        raise _fail("gpuNodeGroups", f"expected a list, got {groups_raw!r}")
    groups = tuple(_parse_gpu_group(g, i, azs) for i, g in enumerate(groups_raw))
    for i, group in enumerate(groups):
        if group.efa_driver == EFA_DRA and kubernetes_version is not None:
            from infra.efa import dra_version_problem

            if (problem := dra_version_problem(kubernetes_version)) is not None:
                raise _fail(f"gpuNodeGroups[{i}].efa", f"dra {problem}")
    seen: set[str] = set()
    for i, group in enumerate(groups):
        if group.name in seen:
            raise _fail(f"gpuNodeGroups[{i}].name", f"{group.name!r} is used twice")
        seen.add(group.name)
    repair = {g.node_repair for g in groups if g.uses_karpenter}
    if len(repair) > 1:
        # Karpenter's node repair is one controller-wide feature gate (NodeRepair,
        # website/content/en/docs/concepts/disruption.md), not a per-pool switch.
        (i,) = [i for i, g in enumerate(groups) if g.uses_karpenter and not g.node_repair][:1]
        raise _fail(
            f"gpuNodeGroups[{i}].nodeRepair",
            "Karpenter repairs every pool or none: give its pools the same nodeRepair",
        )
    _check_karpenter_cluster(groups, kubernetes_version, cluster_name)
    return groups


def _check_karpenter_cluster(
    groups: tuple[GpuNodeGroupConfig, ...], kubernetes_version: str | None, cluster_name: str | None
) -> None:
    """What a Karpenter pool needs of the cluster: an AMI for its Kubernetes minor under the
    pinned alias (``versions.KARPENTER_AL2023_AMI_KUBERNETES``; Karpenter resolves the alias
    through the SSM parameter of that minor, which does not exist for others), and a
    ``clusterName`` short enough for the node role's name."""
    first = next((i for i, g in enumerate(groups) if g.uses_karpenter), None)
    if first is None:
        return
    published = versions.KARPENTER_AL2023_AMI_KUBERNETES
    if kubernetes_version is not None and kubernetes_version not in published:
        raise _fail(
            f"gpuNodeGroups[{first}].provisioner",
            f"karpenter: the pinned AMI alias {versions.KARPENTER_AL2023_AMI_ALIAS} has no AMI"
            f" for Kubernetes {kubernetes_version} (it publishes {published[0]}-{published[-1]})",
        )
    if cluster_name is not None and len(cluster_name) > MAX_KARPENTER_CLUSTER_NAME:
        raise _fail(
            "clusterName",
            f"{len(cluster_name)} characters; with a Karpenter pool at most"
            f" {MAX_KARPENTER_CLUSTER_NAME} (its node role {KARPENTER_NODE_ROLE_PREFIX}<clusterName>"
            f" must fit IAM's {MAX_IAM_ROLE_NAME})",
        )


NODEGROUP_LABEL = "eks-fsdp/nodegroup"
GPU_PRESENT_LABEL = "nvidia.com/gpu.present"
"""Matched by the NVIDIA device plugin's node affinity."""
EFA_PRESENT_LABEL = "vpc.amazonaws.com/efa.present"
"""Matched by the EFA device plugin's node affinity."""
EFA_DRA_LABEL = "eks-fsdp/efa-dra"
"""On ``efa: dra`` nodes instead: the EFA DRA driver's nodeSelector (``infra.efa_dra``). The
two never share a node (EKS user guide, device-management-efa: "cannot coexist")."""


def node_labels(group: GpuNodeGroupConfig) -> dict[str, str]:
    """Kubernetes labels of the group's nodes (config labels first, ours win): what the managed
    node group sets (``infra.gpu_nodegroup``) and the local control plane's fake nodes carry."""
    labels = {
        **dict(group.labels),
        NODEGROUP_LABEL: group.name,
        "node.kubernetes.io/instance-type": group.instance_type,
        GPU_PRESENT_LABEL: "true",
    }
    if group.efa and group.efa_driver == EFA_DRA:
        labels[EFA_DRA_LABEL] = "true"  # the DRA driver's nodeSelector, never the plugin's
    elif group.efa:
        labels[EFA_PRESENT_LABEL] = "true"
    return labels
