"""The stack configuration, read in one place into frozen, typed objects.

Three ways in, one parser:

- ``from_pulumi()`` inside a Pulumi program (imports ``pulumi`` lazily; secrets stay Outputs),
- ``load_stack_file(stack)`` anywhere else (``Pulumi.<stack>.yaml`` + the defaults declared in
  ``Pulumi.yaml``; no Pulumi engine, no CLI) for the renderer, the local runner and the planner,
- ``parse(raw)`` for both, and for tests.

Bad input raises ``ConfigError`` with one line naming the key, e.g.
``eks-fsdp:gpuNodeGroups[0].desiredSize: 5 is outside [minSize 0, maxSize 2]``.
This module imports no Pulumi at module level.
"""

from __future__ import annotations

import ipaddress
import json
import re
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from infra import instances, versions
from infra.subnets import SubnetPlan, plan_subnets

NAMESPACE = "eks-fsdp"
"""The project's config namespace (the project name in ``Pulumi.yaml``)."""
REPO_ROOT = Path(__file__).resolve().parent.parent
"""Where ``Pulumi.yaml`` and the stack files live."""

NAT_MODES = ("single", "perAz")
CAPACITY_TYPES = ("on-demand", "capacity-block")
PLACEMENT_CREATE = "create"
PLACEMENT_NONE = "none"
RDZV_BACKENDS = ("etcd", "c10d")
SHARDING_STRATEGIES = ("FULL_SHARD", "SHARD_GRAD_OP", "HYBRID_SHARD", "NO_SHARD")
DEVICES = ("cuda", "cpu")
TAINT_EFFECTS = ("NoSchedule", "PreferNoSchedule", "NoExecute")
DEFAULT_GPU_TAINT = "nvidia.com/gpu=true:NoSchedule"
DEFAULT_ROOT_VOLUME_GIB = 500
DEFAULT_SERVICE_CIDR = "172.20.0.0/16"
SHARED_STORAGE_TYPES = ("none", "fsx")
FSX_DEPLOYMENT_TYPES = ("SCRATCH_2", "PERSISTENT_2")
FSX_THROUGHPUTS = (125, 250, 500, 1000)
"""MB/s per TiB a PERSISTENT_2 (SSD) file system can be provisioned with."""
FSX_MIN_CAPACITY_GIB = 1200
FSX_CAPACITY_STEP_GIB = 2400
"""SCRATCH_2 and PERSISTENT_2 (SSD): 1200 GiB, or a multiple of 2400 GiB."""
DEFAULT_CHECKPOINT_CLAIM = "fsx-checkpoints"
"""Name of the claim the stack creates for ``sharedStorage.type: fsx`` unless
``job.checkpointClaim`` names it."""

_CR_ID = re.compile(r"^cr-[0-9a-f]{17}$")
_RG_ARN = re.compile(r"^arn:aws[a-z-]*:resource-groups:[a-z0-9-]+:\d{12}:group/[A-Za-z0-9._-]+$")
_IAM_ARN = re.compile(r"^arn:aws[a-z-]*:iam::\d{12}:(role|user)/[\w+=,.@/-]+$")
_DNS_LABEL = re.compile(r"^[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?$")
_DNS_SUBDOMAIN = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$")
_PG_NAME = re.compile(r"^[A-Za-z0-9._-]{1,255}$")
_EC2_TYPE = re.compile(r"^[a-z][a-z0-9-]*\.[a-z0-9]+$")
_AZ = re.compile(r"^[a-z]{2}(-[a-z]+)+-\d[a-z]$")
_K8S_VERSION = re.compile(r"^1\.\d{2}$")
_LABEL_KEY = re.compile(r"^([a-z0-9.-]{1,253}/)?[A-Za-z0-9]([-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?$")


class ConfigError(ValueError):
    """A stack config value is invalid; the message is one line naming the key."""


# --- the typed config -------------------------------------------------------------------------


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


@dataclass(frozen=True, kw_only=True)
class JobConfig:
    """The fine-tuning job (``job``); the workloads build the PyTorchJob from it."""

    enabled: bool = True
    """Whether the stack deploys the job."""
    name: str = "llama-finetune"
    """PyTorchJob name (DNS label)."""
    node_group: str
    """Name of the GPU nodegroup the workers run on."""
    workers: int
    """Worker pods (one per node) the job asks for (elastic max)."""
    min_workers: int
    """Fewest workers the job keeps running with (elastic min)."""
    max_restarts: int = 3
    """torchrun ``--max_restarts``."""
    rdzv_backend: str = "etcd"
    """Rendezvous backend: ``etcd`` (legacy, recovers from lost workers) | ``c10d``."""
    model: str = "meta-llama/Llama-2-7b-hf"
    """Hugging Face model name or a preset name of ``training``."""
    dataset: str = "samsum_dataset"
    """Dataset name understood by ``training``."""
    num_epochs: int = 1
    """Training epochs."""
    batch_size: int = 1
    """Per-GPU batch size."""
    context_length: int = 4096
    """Tokens per sample."""
    sharding_strategy: str = "FULL_SHARD"
    """FULL_SHARD | SHARD_GRAD_OP | HYBRID_SHARD | NO_SHARD."""
    max_train_step: int | None = None
    """Stop after this many optimizer steps (None: run all epochs)."""
    checkpoint_every: int | None = None
    """Checkpoint every N steps (None: the training package's default)."""
    extra_args: tuple[str, ...] = ()
    """Additional ``--flag=value`` arguments for ``python -m training.finetune``."""
    image: str | None = None
    """Training image; None = built by the stack and pushed to ECR."""
    hf_token_secret_name: str = "hf-token"
    """Kubernetes Secret holding the Hugging Face token."""
    device: str = "cuda"
    """``cuda`` on the cluster; ``cpu`` for the local run of the dev stack."""
    generation: int = 1
    """Submission counter (part of the rendezvous id); bump it to resubmit an unchanged job."""
    checkpoint_claim: str | None = None
    """PVC every worker mounts at the checkpoint folder (then the command carries ``--resume``).
    With ``sharedStorage.type: fsx`` the stack creates this claim (default
    ``DEFAULT_CHECKPOINT_CLAIM``); otherwise it must already exist. None = an emptyDir per pod."""
    namespace: str = "default"
    """Namespace of the job, its etcd, its Secret and its checkpoint claim (must exist)."""
    preflight: bool = False
    """Run ``training.preflight`` before step 1 of every (re)start (parsed default: on when the
    job's nodegroup attaches EFA)."""


@dataclass(frozen=True, kw_only=True)
class SharedStorageConfig:
    """Shared storage for checkpoints (``sharedStorage``): an FSx for Lustre file system."""

    type: str = "none"
    """``none`` (no shared storage) | ``fsx`` (FSx for Lustre + CSI driver + PV/PVC)."""
    storage_capacity_gib: int = FSX_MIN_CAPACITY_GIB
    """Capacity, GiB: 1200 or a multiple of 2400."""
    deployment_type: str = "SCRATCH_2"
    """``SCRATCH_2`` (no replication, cheapest) | ``PERSISTENT_2`` (replicated in its zone)."""
    per_unit_storage_throughput: int | None = None
    """PERSISTENT_2 only: MB/s per TiB, 125 | 250 | 500 | 1000 (default 125)."""
    availability_zone: str | None = None
    """Zone of the file system (its subnet); defaults to the job's nodegroup zone at parse time."""

    @property
    def is_fsx(self) -> bool:
        """True when the stack creates an FSx for Lustre file system."""
        return self.type == "fsx"


@dataclass(frozen=True, kw_only=True)
class ObservabilityConfig:
    """Prometheus/Grafana/DCGM switches (consumed by the observability workloads)."""

    enabled: bool = False
    """Deploy the observability stack."""
    dcgm: bool = True
    """Deploy the DCGM exporter on GPU nodes (only when ``enabled``)."""


@dataclass(frozen=True)
class Secrets:
    """Secret config values as Pulumi Outputs (None when unset, or outside a Pulumi program)."""

    hf_token: Any = None
    """``hfToken``: Output[str] or None."""
    grafana_admin_password: Any = None
    """``grafanaAdminPassword``: Output[str] or None."""


@dataclass(frozen=True, kw_only=True)
class StackConfig:
    """Everything a stack is configured with."""

    stack: str = "dev"
    """Stack name (``Pulumi.<stack>.yaml``)."""
    region: str | None = None
    """``aws:region``."""
    cluster_name: str = "eks-fsdp"
    """EKS cluster name."""
    kubernetes_version: str = versions.KUBERNETES_VERSION
    """EKS control-plane version (one of ``versions.EKS_STANDARD_SUPPORT_END``; whether it is
    in standard support on the day is the policy pack's ``eks-standard-support`` rule)."""
    api_public_access_cidrs: tuple[str, ...] | None = None
    """CIDRs allowed to reach the public API endpoint; () = no public endpoint; None = not set
    (only a stack file read outside Pulumi may leave it out: ``from_pulumi`` requires it)."""
    vpc_cidr: str = "10.0.0.0/16"
    """VPC CIDR block (/16 to /28)."""
    kubernetes_service_cidr: str = DEFAULT_SERVICE_CIDR
    """Kubernetes service IP range; must not overlap the VPC."""
    availability_zones: tuple[str, ...]
    """AZs of the VPC (at least 2, as EKS requires)."""
    nat_gateways: str = "single"
    """``single`` (one NAT, cheaper) | ``perAz`` (one per AZ, AZ-fault tolerant)."""
    system_node_group: SystemNodeGroupConfig = field(default_factory=SystemNodeGroupConfig)
    """The CPU nodegroup."""
    cloudwatch_observability: bool = False
    """Install the amazon-cloudwatch-observability EKS add-on."""
    access_entries: tuple[str, ...] = ()
    """IAM principal ARNs given cluster-admin through EKS access entries."""
    gpu_node_groups: tuple[GpuNodeGroupConfig, ...] = ()
    """The GPU nodegroups."""
    job: JobConfig | None = None
    """The fine-tuning job (None when there is no GPU nodegroup to run it on)."""
    observability: ObservabilityConfig = field(default_factory=ObservabilityConfig)
    """Observability switches."""
    shared_storage: SharedStorageConfig = field(default_factory=SharedStorageConfig)
    """Shared checkpoint storage (FSx for Lustre or none)."""
    secrets: Secrets = field(default_factory=Secrets)
    """Secret values (Outputs), never plain strings."""
    debug_tools: bool = False
    """Deploy the htop/nvtop debug DaemonSets (opt-in)."""

    @property
    def subnets(self) -> list[SubnetPlan]:
        """The subnet plan of the VPC (validated at parse time)."""
        return plan_subnets(self.vpc_cidr, self.availability_zones)

    def node_group(self, name: str) -> GpuNodeGroupConfig:
        """The GPU nodegroup called ``name``; ``KeyError`` otherwise."""
        for group in self.gpu_node_groups:
            if group.name == name:
                return group
        raise KeyError(f"no GPU nodegroup named {name!r}")

    @property
    def job_node_group(self) -> GpuNodeGroupConfig | None:
        """The nodegroup the job runs on (None without a job)."""
        return self.node_group(self.job.node_group) if self.job else None


# --- parsing ---------------------------------------------------------------------------------

TOP_LEVEL_KEYS = (
    "clusterName",
    "kubernetesVersion",
    "apiPublicAccessCidrs",
    "vpcCidr",
    "kubernetesServiceCidr",
    "availabilityZones",
    "natGateways",
    "systemNodeGroup",
    "cloudwatchObservability",
    "accessEntries",
    "gpuNodeGroups",
    "job",
    "observability",
    "sharedStorage",
    "debugTools",
)
SECRET_KEYS = ("hfToken", "grafanaAdminPassword")
"""Declared in Pulumi.yaml with ``default: ""`` and without ``secret: true`` (see the comment
there); a non-empty value must be a secret, which this module checks."""
_PLAINTEXT_SECRET = "is set in plaintext; remove it and run `pulumi config set --secret {key} ...`"
STRUCTURED_KEYS = (
    "availabilityZones",
    "apiPublicAccessCidrs",
    "systemNodeGroup",
    "accessEntries",
    "gpuNodeGroups",
    "job",
    "observability",
    "sharedStorage",
)
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
)
_SYSTEM_KEYS = ("instanceType", "minSize", "desiredSize", "maxSize")
_JOB_KEYS = (
    "enabled",
    "name",
    "nodeGroup",
    "workers",
    "minWorkers",
    "maxRestarts",
    "rdzvBackend",
    "model",
    "dataset",
    "numEpochs",
    "batchSize",
    "contextLength",
    "shardingStrategy",
    "maxTrainStep",
    "checkpointEvery",
    "extraArgs",
    "image",
    "hfTokenSecretName",
    "device",
    "generation",
    "checkpointClaim",
    "namespace",
    "preflight",
)
_OBSERVABILITY_KEYS = ("enabled", "dcgm")
_SHARED_STORAGE_KEYS = (
    "type",
    "storageCapacityGiB",
    "deploymentType",
    "perUnitStorageThroughput",
    "availabilityZone",
)


def _k(path: str) -> str:
    return f"{NAMESPACE}:{path}"


def _fail(path: str, message: str) -> ConfigError:
    return ConfigError(f"{_k(path)}: {message}")


def _check_keys(obj: Mapping[str, Any], known: tuple[str, ...], path: str) -> None:
    for key in obj:
        if key not in known:
            raise _fail(f"{path}.{key}", f"unknown key (known: {', '.join(known)})")


def _mapping(value: Any, path: str) -> Mapping[str, Any]:
    if not isinstance(value, Mapping):
        raise _fail(path, f"expected an object, got {value!r}")
    return value


def _str(value: Any, path: str) -> str:
    if not isinstance(value, str) or not value:
        raise _fail(path, f"expected a non-empty string, got {value!r}")
    return value


def _opt_str(value: Any, path: str) -> str | None:
    return None if value is None else _str(value, path)


def _int(value: Any, path: str, *, minimum: int | None = None) -> int:
    if isinstance(value, bool):
        raise _fail(path, f"expected an integer, got {value!r}")
    if isinstance(value, str) and re.fullmatch(r"-?\d+", value.strip()):
        value = int(value)
    if isinstance(value, float) and value.is_integer():
        value = int(value)  # Pulumi hands integers over as floats.
    if not isinstance(value, int):
        raise _fail(path, f"expected an integer, got {value!r}")
    if minimum is not None and value < minimum:
        raise _fail(path, f"{value} is below the minimum {minimum}")
    return value


def _opt_int(value: Any, path: str, *, minimum: int | None = None) -> int | None:
    return None if value is None else _int(value, path, minimum=minimum)


def _bool(value: Any, path: str) -> bool:
    if isinstance(value, str) and value.lower() in ("true", "false"):
        return value.lower() == "true"
    if not isinstance(value, bool):
        raise _fail(path, f"expected true or false, got {value!r}")
    return value


def _choice(value: Any, choices: tuple[str, ...], path: str) -> str:
    if value not in choices:
        raise _fail(path, f"{value!r} is not one of {', '.join(choices)}")
    return str(value)


def _str_list(value: Any, path: str) -> tuple[str, ...]:
    if not isinstance(value, list | tuple):
        raise _fail(path, f"expected a list, got {value!r}")
    return tuple(_str(v, f"{path}[{i}]") for i, v in enumerate(value))


def _sizes(obj: Mapping[str, Any], path: str, defaults: tuple[int, int, int]) -> tuple[int, ...]:
    lo = _int(obj.get("minSize", defaults[0]), f"{path}.minSize", minimum=0)
    hi = _int(obj.get("maxSize", defaults[2]), f"{path}.maxSize", minimum=0)
    desired = _int(obj.get("desiredSize", defaults[1]), f"{path}.desiredSize", minimum=0)
    if hi == 0:
        raise _fail(f"{path}.maxSize", "must be greater than 0")
    if lo > hi:
        raise _fail(f"{path}.minSize", f"{lo} is greater than maxSize {hi}")
    if not lo <= desired <= hi:
        raise _fail(f"{path}.desiredSize", f"{desired} is outside [minSize {lo}, maxSize {hi}]")
    return lo, desired, hi


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

    efa = _bool(obj.get("efa", instance.efa_supported), f"{path}.efa")
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
    return GpuNodeGroupConfig(
        name=name,
        instance_type=instance_type,
        min_size=lo,
        desired_size=desired,
        max_size=hi,
        availability_zone=az,
        efa=efa,
        capacity_reservation_id=cr_id,
        capacity_reservation_resource_group_arn=rg_arn,
        capacity_type=capacity_type,
        placement_group=pg,
        root_volume_gib=root,
        price_per_hour=price,
        labels=labels,
        taint=taint,
    )


def _parse_job(value: Any, groups: tuple[GpuNodeGroupConfig, ...]) -> JobConfig | None:
    path = "job"
    obj = _mapping(value if value is not None else {}, path)
    _check_keys(obj, _JOB_KEYS, path)
    enabled = _bool(obj.get("enabled", True), f"{path}.enabled")
    if not groups:
        if enabled and obj:
            raise _fail(f"{path}.nodeGroup", "there is no GPU nodegroup to run the job on")
        return None
    group_name = _str(obj.get("nodeGroup", groups[0].name), f"{path}.nodeGroup")
    by_name = {g.name: g for g in groups}
    if group_name not in by_name:
        raise _fail(
            f"{path}.nodeGroup", f"{group_name!r} is not a GPU nodegroup ({', '.join(by_name)})"
        )
    group = by_name[group_name]
    workers = _int(obj.get("workers", group.desired_size), f"{path}.workers", minimum=1)
    if workers > group.max_size:
        raise _fail(
            f"{path}.workers",
            f"{workers} is greater than maxSize {group.max_size} of nodegroup {group_name}",
        )
    min_workers = _int(obj.get("minWorkers", workers), f"{path}.minWorkers", minimum=1)
    if min_workers > workers:
        raise _fail(f"{path}.minWorkers", f"{min_workers} is greater than workers {workers}")
    name = _str(obj.get("name", "llama-finetune"), f"{path}.name")
    if not _DNS_LABEL.match(name):
        raise _fail(f"{path}.name", f"{name!r} is not a DNS label (a-z, 0-9, '-')")
    extra = _str_list(obj.get("extraArgs", []), f"{path}.extraArgs")
    for i, arg in enumerate(extra):
        if not arg.startswith("--"):
            raise _fail(f"{path}.extraArgs[{i}]", f"{arg!r} is not a --flag or --flag=value")
    namespace = _str(obj.get("namespace", "default"), f"{path}.namespace")
    if not _DNS_LABEL.match(namespace):
        raise _fail(f"{path}.namespace", f"{namespace!r} is not a DNS label (a-z, 0-9, '-')")
    claim = _opt_str(obj.get("checkpointClaim"), f"{path}.checkpointClaim")
    if claim is not None and (len(claim) > 253 or not _DNS_SUBDOMAIN.match(claim)):
        raise _fail(
            f"{path}.checkpointClaim",
            f"{claim!r} is not a DNS-1123 name (a-z, 0-9, '-', '.'; at most 253 characters)",
        )
    default = JobConfig(node_group=group_name, workers=workers, min_workers=min_workers)
    return JobConfig(
        enabled=enabled,
        name=name,
        node_group=group_name,
        workers=workers,
        min_workers=min_workers,
        max_restarts=_int(
            obj.get("maxRestarts", default.max_restarts), f"{path}.maxRestarts", minimum=0
        ),
        rdzv_backend=_choice(
            obj.get("rdzvBackend", default.rdzv_backend), RDZV_BACKENDS, f"{path}.rdzvBackend"
        ),
        model=_str(obj.get("model", default.model), f"{path}.model"),
        dataset=_str(obj.get("dataset", default.dataset), f"{path}.dataset"),
        num_epochs=_int(obj.get("numEpochs", default.num_epochs), f"{path}.numEpochs", minimum=1),
        batch_size=_int(obj.get("batchSize", default.batch_size), f"{path}.batchSize", minimum=1),
        context_length=_int(
            obj.get("contextLength", default.context_length), f"{path}.contextLength", minimum=8
        ),
        sharding_strategy=_choice(
            obj.get("shardingStrategy", default.sharding_strategy),
            SHARDING_STRATEGIES,
            f"{path}.shardingStrategy",
        ),
        max_train_step=_opt_int(obj.get("maxTrainStep"), f"{path}.maxTrainStep", minimum=1),
        checkpoint_every=_opt_int(obj.get("checkpointEvery"), f"{path}.checkpointEvery", minimum=1),
        extra_args=extra,
        image=_opt_str(obj.get("image"), f"{path}.image"),
        hf_token_secret_name=_str(
            obj.get("hfTokenSecretName", default.hf_token_secret_name),
            f"{path}.hfTokenSecretName",
        ),
        device=_choice(obj.get("device", default.device), DEVICES, f"{path}.device"),
        generation=_int(obj.get("generation", default.generation), f"{path}.generation", minimum=1),
        checkpoint_claim=claim,
        namespace=namespace,
        preflight=_bool(obj.get("preflight", group.efa), f"{path}.preflight"),
    )


def _parse_shared_storage(
    value: Any, azs: tuple[str, ...], job_group: GpuNodeGroupConfig | None
) -> SharedStorageConfig:
    path = "sharedStorage"
    obj = _mapping(value if value is not None else {}, path)
    _check_keys(obj, _SHARED_STORAGE_KEYS, path)
    kind = _choice(obj.get("type", "none"), SHARED_STORAGE_TYPES, f"{path}.type")
    capacity = _int(
        obj.get("storageCapacityGiB", FSX_MIN_CAPACITY_GIB), f"{path}.storageCapacityGiB"
    )
    deployment = _choice(
        obj.get("deploymentType", "SCRATCH_2"), FSX_DEPLOYMENT_TYPES, f"{path}.deploymentType"
    )
    if capacity != FSX_MIN_CAPACITY_GIB and (capacity <= 0 or capacity % FSX_CAPACITY_STEP_GIB):
        raise _fail(
            f"{path}.storageCapacityGiB",
            f"{capacity} is not {FSX_MIN_CAPACITY_GIB} or a multiple of {FSX_CAPACITY_STEP_GIB}"
            f" (FSx for Lustre {deployment})",
        )
    throughput = _opt_int(obj.get("perUnitStorageThroughput"), f"{path}.perUnitStorageThroughput")
    if deployment == "PERSISTENT_2":
        throughput = FSX_THROUGHPUTS[0] if throughput is None else throughput
        if throughput not in FSX_THROUGHPUTS:
            raise _fail(
                f"{path}.perUnitStorageThroughput",
                f"{throughput} is not one of {', '.join(map(str, FSX_THROUGHPUTS))} (MB/s/TiB)",
            )
    elif throughput is not None:
        raise _fail(
            f"{path}.perUnitStorageThroughput",
            f"only PERSISTENT_2 takes a throughput; {deployment} has a fixed one",
        )
    az = _opt_str(obj.get("availabilityZone"), f"{path}.availabilityZone")
    if az is not None and az not in azs:
        raise _fail(
            f"{path}.availabilityZone", f"{az} is not in availabilityZones ({', '.join(azs)})"
        )
    if az is None and kind == "fsx":
        az = job_group.availability_zone if job_group is not None else None
        if az is None:
            raise _fail(
                f"{path}.availabilityZone",
                "is required with type fsx when the job's nodegroup is not pinned to a zone",
            )
    return SharedStorageConfig(
        type=kind,
        storage_capacity_gib=capacity,
        deployment_type=deployment,
        per_unit_storage_throughput=throughput,
        availability_zone=az,
    )


def _parse_api_cidrs(value: Any) -> tuple[str, ...] | None:
    """``apiPublicAccessCidrs``: IPv4 networks, never the whole internet; None when absent."""
    path = "apiPublicAccessCidrs"
    if value is None:
        return None
    cidrs = () if value == [] else _str_list(value, path)
    for i, cidr in enumerate(cidrs):
        try:
            net = ipaddress.IPv4Network(cidr, strict=True)
        except ValueError as exc:
            raise _fail(f"{path}[{i}]", f"{cidr!r} is not an IPv4 network CIDR ({exc})") from None
        if net.prefixlen == 0:
            raise _fail(
                f"{path}[{i}]",
                "0.0.0.0/0 opens the API endpoint to the internet; name your egress CIDRs"
                " (or [] for a private endpoint)",
            )
    return cidrs


def _parse_observability(value: Any) -> ObservabilityConfig:
    path = "observability"
    obj = _mapping(value if value is not None else {}, path)
    _check_keys(obj, _OBSERVABILITY_KEYS, path)
    return ObservabilityConfig(
        enabled=_bool(obj.get("enabled", False), f"{path}.enabled"),
        dcgm=_bool(obj.get("dcgm", True), f"{path}.dcgm"),
    )


def _parse_network(raw: Mapping[str, Any], region: str | None) -> tuple[Any, ...]:
    azs = (
        _str_list(raw.get("availabilityZones"), "availabilityZones")
        if (raw.get("availabilityZones") is not None)
        else ()
    )
    if len(azs) < 2:
        raise _fail("availabilityZones", f"needs at least 2 zones for EKS, got {len(azs)}")
    for i, az in enumerate(azs):
        if not _AZ.match(az):
            raise _fail(f"availabilityZones[{i}]", f"{az!r} is not an availability zone name")
        if region and not (az.startswith(region) and len(az) == len(region) + 1):
            raise _fail(f"availabilityZones[{i}]", f"{az} is not in aws:region {region}")
    if len(set(azs)) != len(azs):
        raise _fail("availabilityZones", f"lists a zone twice: {', '.join(azs)}")
    vpc_cidr = _str(raw.get("vpcCidr", "10.0.0.0/16"), "vpcCidr")
    try:
        plan_subnets(vpc_cidr, azs)
    except ValueError as exc:
        raise _fail("vpcCidr", str(exc)) from None
    svc = _str(raw.get("kubernetesServiceCidr", DEFAULT_SERVICE_CIDR), "kubernetesServiceCidr")
    try:
        svc_net = ipaddress.IPv4Network(svc, strict=True)
    except ValueError as exc:
        raise _fail(
            "kubernetesServiceCidr", f"{svc!r} is not an IPv4 network CIDR ({exc})"
        ) from None
    if svc_net.overlaps(ipaddress.IPv4Network(vpc_cidr)):
        raise _fail("kubernetesServiceCidr", f"{svc} overlaps vpcCidr {vpc_cidr}")
    nat = _choice(raw.get("natGateways", "single"), NAT_MODES, "natGateways")
    return azs, vpc_cidr, svc, nat


def parse(
    raw: Mapping[str, Any], *, stack: str = "dev", secrets: Secrets | None = None
) -> StackConfig:
    """Validate ``raw`` (keys without the ``eks-fsdp:`` prefix, plus ``aws:region``).

    Keys of other namespaces (``aws:profile``, ``kubernetes:...``) are ignored; an unknown key
    of our namespace is an error (a typo would otherwise be silently dropped).
    """
    for key in raw:
        if ":" in key:
            continue
        if key not in TOP_LEVEL_KEYS and key not in SECRET_KEYS:
            raise _fail(key, f"unknown key (known: {', '.join(TOP_LEVEL_KEYS + SECRET_KEYS)})")
    for key in SECRET_KEYS:
        # Values read from a stack file or plain config: a secret one never reaches ``raw``.
        if raw.get(key) not in (None, ""):
            raise _fail(key, _PLAINTEXT_SECRET.format(key=key))
    region = _opt_str(raw.get("aws:region"), "aws:region")
    cluster_name = _str(raw.get("clusterName", "eks-fsdp"), "clusterName")
    if not re.fullmatch(r"[A-Za-z0-9][A-Za-z0-9_-]{0,99}", cluster_name):
        raise _fail("clusterName", f"{cluster_name!r} is not a valid EKS cluster name")
    k8s = _str(str(raw.get("kubernetesVersion", versions.KUBERNETES_VERSION)), "kubernetesVersion")
    if not _K8S_VERSION.match(k8s):
        raise _fail("kubernetesVersion", f"{k8s!r} is not shaped 1.NN (quote it in YAML: '1.30')")
    # Undated on purpose: the policy pack checks standard support at preview.
    unknown = versions.unknown_version_problem(k8s)
    if unknown is not None:
        raise _fail("kubernetesVersion", unknown)
    api_cidrs = _parse_api_cidrs(raw.get("apiPublicAccessCidrs"))
    azs, vpc_cidr, svc, nat = _parse_network(raw, region)
    system = _parse_system(raw.get("systemNodeGroup", {}))
    access = _str_list(raw.get("accessEntries", []), "accessEntries")
    for i, arn in enumerate(access):
        if not _IAM_ARN.match(arn):
            raise _fail(f"accessEntries[{i}]", f"{arn!r} is not an IAM role or user ARN")
    groups_raw = raw.get("gpuNodeGroups", [])
    if not isinstance(groups_raw, list | tuple):
        raise _fail("gpuNodeGroups", f"expected a list, got {groups_raw!r}")
    groups = tuple(_parse_gpu_group(g, i, azs) for i, g in enumerate(groups_raw))
    seen: set[str] = set()
    for i, group in enumerate(groups):
        if group.name in seen:
            raise _fail(f"gpuNodeGroups[{i}].name", f"{group.name!r} is used twice")
        seen.add(group.name)
    job = _parse_job(raw.get("job"), groups)
    job_group = next((g for g in groups if job and g.name == job.node_group), None)
    shared_storage = _parse_shared_storage(raw.get("sharedStorage"), azs, job_group)
    if job is not None and shared_storage.is_fsx and job.checkpoint_claim is None:
        job = replace(job, checkpoint_claim=DEFAULT_CHECKPOINT_CLAIM)
    return StackConfig(
        stack=stack,
        region=region,
        cluster_name=cluster_name,
        kubernetes_version=k8s,
        api_public_access_cidrs=api_cidrs,
        vpc_cidr=vpc_cidr,
        kubernetes_service_cidr=svc,
        availability_zones=azs,
        nat_gateways=nat,
        system_node_group=system,
        cloudwatch_observability=_bool(
            raw.get("cloudwatchObservability", False), "cloudwatchObservability"
        ),
        access_entries=access,
        gpu_node_groups=groups,
        job=job,
        observability=_parse_observability(raw.get("observability")),
        shared_storage=shared_storage,
        secrets=secrets or Secrets(),
        debug_tools=_bool(raw.get("debugTools", False), "debugTools"),
    )


# --- sources ---------------------------------------------------------------------------------


def _strip_namespace(key: str) -> str | None:
    """``eks-fsdp:x`` -> ``x``; ``aws:region`` stays; bare keys are ours; others -> None."""
    if ":" not in key:
        return key
    ns, _, name = key.partition(":")
    if ns == NAMESPACE:
        return name
    return key


def project_defaults(root: Path = REPO_ROOT) -> dict[str, Any]:
    """The ``default`` of every key declared under ``config:`` in ``Pulumi.yaml``."""
    import yaml

    project = yaml.safe_load((root / "Pulumi.yaml").read_text())
    out: dict[str, Any] = {}
    for key, decl in (project.get("config") or {}).items():
        name = _strip_namespace(key)
        if name is not None and isinstance(decl, Mapping) and "default" in decl:
            out[name] = decl["default"]
    return out


def stack_file_values(stack: str, root: Path = REPO_ROOT) -> dict[str, Any]:
    """The plain values of ``Pulumi.<stack>.yaml`` (secure values left out), namespace stripped."""
    import yaml

    path = root / f"Pulumi.{stack}.yaml"
    if not path.is_file():
        raise ConfigError(f"{path.name}: no such stack file")
    data = yaml.safe_load(path.read_text()) or {}
    out: dict[str, Any] = {}
    for key, value in (data.get("config") or {}).items():
        name = _strip_namespace(key)
        if name is None or (isinstance(value, Mapping) and "secure" in value):
            continue
        out[name] = value
    return out


def load_stack_file(stack: str, root: Path = REPO_ROOT) -> StackConfig:
    """``Pulumi.<stack>.yaml`` over the ``Pulumi.yaml`` defaults, parsed; no Pulumi engine."""
    raw = {**project_defaults(root), **stack_file_values(stack, root)}
    return parse(raw, stack=stack)


def _decode(value: str, key: str) -> Any:
    if key in STRUCTURED_KEYS:
        try:
            return json.loads(value)
        except json.JSONDecodeError:
            raise _fail(key, f"expected a structured (JSON) value, got {value!r}") from None
    return value


def from_pulumi() -> StackConfig:
    """Read the running Pulumi program's config once (call it from ``__main__.py`` only)."""
    import pulumi
    from pulumi.runtime import config as runtime_config

    cfg = pulumi.Config(NAMESPACE)
    raw: dict[str, Any] = {}
    for full_key in runtime_config.CONFIG.get():
        ns, _, name = full_key.partition(":")
        if ns == NAMESPACE and name not in TOP_LEVEL_KEYS and name not in SECRET_KEYS:
            raise _fail(name, f"unknown key (known: {', '.join(TOP_LEVEL_KEYS + SECRET_KEYS)})")
    for key in TOP_LEVEL_KEYS:
        value = cfg.get(key)
        if value is not None:
            raw[key] = _decode(value, key)
    region = pulumi.Config("aws").get("region")
    if region is not None:
        raw["aws:region"] = region
    for key in SECRET_KEYS:
        if runtime_config.get_config(_k(key)) and not runtime_config.is_config_secret(_k(key)):
            raise _fail(key, _PLAINTEXT_SECRET.format(key=key))
    secrets = Secrets(
        **{
            field_name: cfg.get_secret(key) if runtime_config.get_config(_k(key)) else None
            for key, field_name in (
                ("hfToken", "hf_token"),
                ("grafanaAdminPassword", "grafana_admin_password"),
            )
        }
    )
    parsed = parse(raw, stack=pulumi.get_stack(), secrets=secrets)
    if parsed.api_public_access_cidrs is None:
        raise _fail(
            "apiPublicAccessCidrs",
            "is required: the CIDRs that may reach the public API endpoint (your egress"
            " address /32), or [] for a private endpoint only",
        )
    return parsed
