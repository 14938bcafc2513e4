"""The whole stack: ``StackConfig``, the top-level keys, the secrets, and ``parse``, which
validates each section in turn (the sections only know the ones they depend on)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from infra import versions
from infra.config.cluster import (
    _parse_access_entries,
    _parse_api_cidrs,
    _parse_cluster_name,
    _parse_kubernetes_version,
)
from infra.config.fields import _bool, _fail, _opt_str
from infra.config.network import DEFAULT_SERVICE_CIDR, _parse_network
from infra.config.nodegroups import (
    GpuNodeGroupConfig,
    SystemNodeGroupConfig,
    _parse_gpu_groups,
    _parse_system,
)
from infra.config.observability import ObservabilityConfig, _parse_observability
from infra.config.storage import (
    DataBucketConfig,
    SharedStorageConfig,
    _parse_data_bucket,
    _parse_shared_storage,
)
from infra.config.teams import TeamConfig, _parse_teams
from infra.subnets import SubnetPlan, plan_subnets

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
    "dataBucket",
    "debugTools",
    "trainerV2",
    "nodeMonitoringAgent",
    "vpcEndpoints",
    "teams",
)
SECRET_KEYS = ("hfToken", "grafanaAdminPassword", "alertsSecret")
"""Declared in Pulumi.yaml with ``default: ""`` and without ``secret: true`` (see the comment
there); a non-empty value must be a secret, which this package checks."""
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
    "dataBucket",
    "teams",
)


@dataclass(frozen=True)
class Secrets:
    """Secret config values as Pulumi Outputs (None when unset, or outside a Pulumi program)."""

    hf_token: Any = None
    """``hfToken``: Output[str] or None."""
    grafana_admin_password: Any = None
    """``grafanaAdminPassword``: Output[str] or None."""
    alerts_secret: Any = None
    """``alertsSecret``, the alert receiver's URL or key: Output[str] or None."""


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
    observability: ObservabilityConfig = field(default_factory=ObservabilityConfig)
    """Observability switches."""
    shared_storage: SharedStorageConfig = field(default_factory=SharedStorageConfig)
    """Shared checkpoint storage (FSx for Lustre or none)."""
    data_bucket: DataBucketConfig = field(default_factory=DataBucketConfig)
    """The S3 bucket the cluster outlives (checkpoints, exports, datasets)."""
    secrets: Secrets = field(default_factory=Secrets)
    """Secret values (Outputs), never plain strings."""
    debug_tools: bool = False
    """Deploy the htop/nvtop debug DaemonSets (opt-in)."""
    trainer_v2: bool = False
    """Install Kubeflow Trainer v2 and its torch runtime (``workloads.trainer``; opt-in)."""
    node_monitoring_agent: bool = True
    """Install the eks-node-monitoring-agent add-on (node conditions for auto repair)."""
    vpc_endpoints: bool = True
    """VPC endpoints: S3 gateway; ECR api/dkr, STS, Logs interface endpoints (``infra.network``)."""
    teams: tuple[TeamConfig, ...] = ()
    """Teams sharing the cluster: a namespace, queues and quotas each (``infra.config.teams``)."""

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


JOB_MOVED = (
    "jobs are not part of the cluster stack any more: move this block to a job file (keys as "
    "in jobs/examples/), submit it with `eks-fsdp jobs submit FILE --stack {stack}` and remove "
    "it from the stack; docs/jobs.md says how to keep a running job"
)
"""Why a ``job`` block is refused: ignored, a user would believe the next ``pulumi up`` submits
it (and that ``up`` deletes the job it created before; docs/jobs.md)."""


def _refuse_job(value: Any, stack: str = "<stack>") -> None:
    """``job`` may only be the empty default ``Pulumi.yaml`` declares."""
    if value in (None, {}, "{}", ""):
        return
    raise _fail("job", JOB_MOVED.format(stack=stack))


def _check_data_repository(storage: SharedStorageConfig, bucket: DataBucketConfig) -> None:
    """FSx links to the data bucket only when there is one, under the prefix the jobs' role
    reaches (so a job can also read what the file system exported, ``resume --from s3://``)."""
    link = storage.data_repository_prefix
    if link is None or not storage.is_fsx:
        return
    if not bucket.enabled:
        raise _fail("sharedStorage.dataRepositoryPrefix", "needs dataBucket.enabled: true")
    if not (link + "/").startswith(bucket.prefix + "/"):
        raise _fail(
            "sharedStorage.dataRepositoryPrefix",
            f"{link!r} is not under dataBucket.prefix {bucket.prefix!r}",
        )


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
    cluster_name = _parse_cluster_name(raw.get("clusterName", "eks-fsdp"))
    k8s = _parse_kubernetes_version(raw.get("kubernetesVersion", versions.KUBERNETES_VERSION))
    api_cidrs = _parse_api_cidrs(raw.get("apiPublicAccessCidrs"))
    azs, vpc_cidr, svc, nat = _parse_network(raw, region)
    system = _parse_system(raw.get("systemNodeGroup", {}))
    access = _parse_access_entries(raw.get("accessEntries", []))
    groups = _parse_gpu_groups(
        raw.get("gpuNodeGroups", []), azs, kubernetes_version=k8s, cluster_name=cluster_name
    )
    _refuse_job(raw.get("job"), stack)
    # FSx goes to the zone of the first GPU nodegroup unless sharedStorage names one (a job's
    # nodegroup chose it while the stack carried a job; every shipped stack has one group).
    shared_storage = _parse_shared_storage(
        raw.get("sharedStorage"), azs, groups[0] if groups else None
    )
    data_bucket = _parse_data_bucket(raw.get("dataBucket"))
    _check_data_repository(shared_storage, data_bucket)
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
        observability=_parse_observability(raw.get("observability"), region),
        shared_storage=shared_storage,
        data_bucket=data_bucket,
        secrets=secrets or Secrets(),
        debug_tools=_bool(raw.get("debugTools", False), "debugTools"),
        trainer_v2=_bool(raw.get("trainerV2", False), "trainerV2"),
        node_monitoring_agent=_bool(raw.get("nodeMonitoringAgent", True), "nodeMonitoringAgent"),
        vpc_endpoints=_bool(raw.get("vpcEndpoints", True), "vpcEndpoints"),
        teams=_parse_teams(raw.get("teams", []), groups, access),
    )
