"""The Pulumi program: the composition root. Reads the stack config once and wires components.

Network -> Cluster -> GPU nodegroups -> device plugins -> data bucket and the jobs' Pod
Identity -> shared storage (FSx, when configured; linked to the bucket when asked) ->
observability -> workloads (the platform jobs run on: image, operator, etcd, claim). No job:
jobs are submitted apart from the stack (``eks-fsdp jobs``).
"""

import pulumi

from doctor.preview import check_on_preview
from infra import outputs
from infra.cluster import Cluster, ClusterArgs
from infra.config import from_pulumi
from infra.data_bucket import DataBucket, DataBucketArgs
from infra.device_plugins import DevicePlugins, DevicePluginsArgs
from infra.efa_dra import EfaDraDriver, EfaDraDriverArgs
from infra.gpu_nodegroup import GpuNodeGroup, GpuNodeGroupArgs
from infra.network import Network, NetworkArgs
from infra.pod_identity import (
    POD_ROLE_TYPE_TOKEN,
    PodIdentity,
    PodIdentityArgs,
    pod_identity_agent,
)
from infra.pod_identity import TYPE_TOKEN as POD_IDENTITY_TYPE_TOKEN
from infra.shared_storage import SharedStorage, SharedStorageArgs
from workloads.program import deploy as deploy_workloads
from workloads.specs.pytorchjob import SERVICE_ACCOUNT as JOBS_SERVICE_ACCOUNT
from workloads.specs.stack import JOBS_NAMESPACE

cfg = from_pulumi()
# At preview (and so before `pulumi up` changes anything): each GPU group's reservation exists
# and matches it, when AWS credentials resolve (docs/doctor.md).
check_on_preview(cfg)

network = Network(
    "network",
    NetworkArgs(
        cluster_name=cfg.cluster_name,
        vpc_cidr=cfg.vpc_cidr,
        availability_zones=cfg.availability_zones,
        nat_gateways=cfg.nat_gateways,
        vpc_endpoints=cfg.vpc_endpoints,
        region=cfg.region,
    ),
)
cluster = Cluster(
    "cluster",
    ClusterArgs(
        cluster_name=cfg.cluster_name,
        kubernetes_version=cfg.kubernetes_version,
        api_public_access_cidrs=cfg.api_public_access_cidrs or (),
        vpc_id=network.vpc_id,
        public_subnet_ids=network.public_subnet_ids,
        private_subnet_ids=network.private_subnet_ids,
        service_cidr=cfg.kubernetes_service_cidr,
        system_node_group=cfg.system_node_group,
        access_entries=cfg.access_entries,
        cloudwatch_observability=cfg.cloudwatch_observability,
        fsx_csi_driver=cfg.shared_storage.is_fsx,
        node_monitoring_agent=cfg.node_monitoring_agent,
        # One GPU metrics path: ours (dcgm-exporter + Prometheus) when the stack runs it.
        cloudwatch_gpu_metrics=not (
            cfg.observability.enabled and cfg.observability.dcgm and bool(cfg.gpu_node_groups)
        ),
    ),
)
gpu_node_groups = {
    group.name: GpuNodeGroup(
        f"gpu-{group.name}",
        GpuNodeGroupArgs(
            group=group,
            cluster_name=cluster.cluster_name,
            node_role_arn=cluster.node_role_arn,
            subnet_ids=network.private_subnets_in(group.availability_zone),
            security_group_ids=[cluster.cluster_security_group_id, network.efa_security_group_id],
        ),
    )
    for group in cfg.gpu_node_groups
    if not group.uses_karpenter
}
# --- Karpenter: the controller once, an EC2NodeClass + NodePool per pool (docs/karpenter.md) ---
karpenter_pools: dict = {}
if any(group.uses_karpenter for group in cfg.gpu_node_groups):
    from infra.cluster import SYSTEM_NODEGROUP_LABEL
    from infra.karpenter import Karpenter, KarpenterArgs
    from infra.karpenter_pool import KarpenterPool, KarpenterPoolArgs

    karpenter = Karpenter(
        "karpenter",
        KarpenterArgs(
            cluster_name=cfg.cluster_name,
            cluster=cluster.cluster_name,
            region=cfg.region or "",
            oidc_provider_arn=cluster.oidc_provider_arn,
            oidc_issuer=cluster.oidc_issuer,
            system_node_selector=dict(SYSTEM_NODEGROUP_LABEL),
            replicas=min(2, max(1, cfg.system_node_group.desired_size)),
            node_repair=all(g.node_repair for g in cfg.gpu_node_groups if g.uses_karpenter),
        ),
        opts=pulumi.ResourceOptions(providers=[cluster.provider]),
    )
    karpenter_pools = {
        group.name: KarpenterPool(
            f"karpenter-{group.name}",
            KarpenterPoolArgs(
                group=group,
                cluster_name=cfg.cluster_name,
                jobs_namespace=JOBS_NAMESPACE,
                controller=karpenter.release,
            ),
            opts=pulumi.ResourceOptions(providers=[cluster.provider]),
        )
        for group in cfg.gpu_node_groups
        if group.uses_karpenter
    }
# Bound on every path: a stack without GPU node groups (a CPU-only or observability-only
# stack) has no device plugins, and nothing below may name an unbound variable for it.
device_plugins: DevicePlugins | None = None
if cfg.gpu_node_groups:
    device_plugins = DevicePlugins(
        "device-plugins",
        DevicePluginsArgs(
            gpu_taints=tuple(g.taint for g in cfg.gpu_node_groups),
            efa=any(g.efa and g.efa_driver != "dra" for g in cfg.gpu_node_groups),
        ),
        opts=pulumi.ResourceOptions(providers=[cluster.provider]),
    )
if dra_groups := [g for g in cfg.gpu_node_groups if g.efa and g.efa_driver == "dra"]:
    EfaDraDriver(  # instead of the EFA device plugin on those groups' nodes
        "efa-dra",
        EfaDraDriverArgs(gpu_taints=tuple(g.taint for g in dra_groups)),
        opts=pulumi.ResourceOptions(providers=[cluster.provider]),
    )

pulumi.export(outputs.CLUSTER_NAME, cluster.cluster_name)
pulumi.export(outputs.REGION, cfg.region)
pulumi.export(outputs.KUBECONFIG, cluster.kubeconfig)
pulumi.export(outputs.VPC_ID, network.vpc_id)
pulumi.export(outputs.NODE_ROLE_ARN, cluster.node_role_arn)
pulumi.export(outputs.OIDC_PROVIDER_ARN, cluster.oidc_provider_arn)
pulumi.export(outputs.SYSTEM_NODE_GROUP_NAME, cluster.system_node_group_name)
pulumi.export(outputs.GPU_NODE_GROUP_NAMES, [ng.node_group_name for ng in gpu_node_groups.values()])
pulumi.export(
    outputs.PLACEMENT_GROUP_NAMES,
    {
        name: ng.placement_group_name
        for name, ng in {**gpu_node_groups, **karpenter_pools}.items()
        if ng.placement_group_name is not None
    },
)
# --- Capacity blocks: scaled up at the start, to zero before the end; the end told to jobs -----
from infra.capacity_schedule import OUTPUT_KEY as CAPACITY_BLOCKS_OUTPUT  # noqa: E402
from infra.capacity_schedule import CapacitySchedule, CapacityScheduleArgs, output_value  # noqa: E402
from workloads.specs.capacity import capacity_block_configmap  # noqa: E402
from workloads.specs.stack import JOBS_NAMESPACE as CAPACITY_NAMESPACE  # noqa: E402

capacity_schedules = {
    group.name: CapacitySchedule(
        f"capacity-{group.name}",
        CapacityScheduleArgs(
            group=group,
            node_group_resources=gpu_node_groups[group.name].node_group_resources,
            configmap=capacity_block_configmap(group.name, output_value(group), CAPACITY_NAMESPACE),
        ),
        opts=pulumi.ResourceOptions(providers=[cluster.provider]),
    )
    for group in cfg.gpu_node_groups
    if group.capacity_block is not None and not group.uses_karpenter
}
pulumi.export(
    CAPACITY_BLOCKS_OUTPUT,
    {
        **{name: s.window for name, s in capacity_schedules.items()},
        **{name: p.window for name, p in karpenter_pools.items() if p.window is not None},
    },
)
# --- EKS Pod Identity's agent: one add-on per cluster, for every role given to pods ---------
# The data bucket's jobs and Alertmanager's SNS publish both need it; each used to make its
# own (the aliases keep an existing stack's add-on where it is).
sns_topic_arn = cfg.observability.alerts.sns_topic_arn if cfg.observability.enabled else None
pod_identity_agent_addon = None
if cfg.data_bucket.enabled or sns_topic_arn is not None:
    pod_identity_agent_addon = pod_identity_agent(
        "pod-identity-agent",
        # Resolves once the system nodegroup exists: the agent is a DaemonSet add-on, which
        # stays DEGRADED without a node (as CoreDNS, created after the nodes in Cluster).
        cluster_name=pulumi.Output.all(cluster.cluster_name, cluster.system_node_group_name).apply(
            lambda v: v[0]
        ),
        label=cfg.cluster_name,
        formerly=(
            (POD_IDENTITY_TYPE_TOKEN, "pod-identity"),
            (POD_ROLE_TYPE_TOKEN, "alertmanager-sns"),
        ),
    )

# --- The data bucket the cluster outlives, and the jobs' identity on it (docs/durable-data.md) --
data_bucket = None
if cfg.data_bucket.enabled and pod_identity_agent_addon is not None:
    data_bucket = DataBucket(
        "data-bucket",
        DataBucketArgs(
            bucket=cfg.data_bucket,
            cluster_name=cfg.cluster_name,
            region=cfg.region or "",
            write_through_prefix=(
                cfg.shared_storage.data_repository_prefix
                if cfg.shared_storage.links_data_bucket
                else None
            ),
        ),
    )
    pod_identity = PodIdentity(
        "pod-identity",
        PodIdentityArgs(
            # Resolves once the system nodegroup exists: the agent is a DaemonSet add-on, which
            # stays DEGRADED without a node (as CoreDNS, created after the nodes in Cluster).
            cluster_name=pulumi.Output.all(
                cluster.cluster_name, cluster.system_node_group_name
            ).apply(lambda v: v[0]),
            label=cfg.cluster_name,
            bucket_arn=data_bucket.bucket_arn,
            prefix=data_bucket.prefix,
            kms_key_arn=data_bucket.kms_key_arn,
            # The stack's jobs namespace and every team's (workloads.team creates theirs).
            service_accounts=(
                (JOBS_NAMESPACE, JOBS_SERVICE_ACCOUNT),
                *((team.name, JOBS_SERVICE_ACCOUNT) for team in cfg.teams),
            ),
            create_service_accounts=((JOBS_NAMESPACE, JOBS_SERVICE_ACCOUNT),),
            agent=pod_identity_agent_addon,
        ),
        opts=pulumi.ResourceOptions(providers=[cluster.provider]),
    )
    pulumi.export(outputs.DATA_BUCKET_NAME, data_bucket.bucket_name)
    pulumi.export(outputs.DATA_BUCKET_PREFIX, data_bucket.prefix)
    pulumi.export(
        outputs.DATA_BUCKET_URI,
        pulumi.Output.concat("s3://", data_bucket.bucket_name, "/", data_bucket.prefix),
    )
    if data_bucket.kms_key_arn is not None:
        pulumi.export(outputs.DATA_BUCKET_KMS_KEY_ARN, data_bucket.kms_key_arn)
    pulumi.export(outputs.JOBS_ROLE_ARN, pod_identity.role_arn)
    pulumi.export(outputs.JOBS_SERVICE_ACCOUNT, f"{JOBS_NAMESPACE}/{JOBS_SERVICE_ACCOUNT}")

shared_storage = None
if cfg.shared_storage.is_fsx:
    shared_storage = SharedStorage(
        "shared-storage",
        SharedStorageArgs(
            storage=cfg.shared_storage,
            cluster_name=cfg.cluster_name,
            vpc_id=network.vpc_id,
            subnet_id=network.private_subnets_in(cfg.shared_storage.availability_zone)[0],
            client_security_group_ids=[cluster.cluster_security_group_id],
            data_bucket_name=data_bucket.bucket_name if data_bucket is not None else None,
        ),
    )
    pulumi.export(outputs.SHARED_FILE_SYSTEM_ID, shared_storage.file_system_id)
    pulumi.export(outputs.SHARED_FILE_SYSTEM_DNS_NAME, shared_storage.dns_name)
    pulumi.export(outputs.SHARED_FILE_SYSTEM_MOUNT_NAME, shared_storage.mount_name)
pulumi.export(
    outputs.NEXT_STEPS,
    outputs.next_steps(
        cfg.stack,
        cfg.cluster_name,
        cfg.region,
        # Karpenter pools have no nodes until a job's pods wait for them: nothing to count.
        {g.name: g.desired_size for g in cfg.gpu_node_groups if not g.uses_karpenter},
    ),
)


# --- Observability: Prometheus, Grafana, dcgm-exporter (workloads/observability.py) -----------
if cfg.observability.enabled:
    from workloads.observability import OUTPUT_KEY, Observability, ObservabilityArgs

    # Receiver sns: Alertmanager publishes with its own Pod Identity role (sns:Publish on the
    # topic only); the association exists before the chart starts its pods.
    alert_role = None
    if sns_topic_arn is not None and pod_identity_agent_addon is not None:
        from infra.pod_identity import PodRole, PodRoleArgs, sns_publish_policy_document
        from workloads.specs.observability import settings_from_stack

        obs_settings = settings_from_stack(cfg)
        alert_role = PodRole(
            "alertmanager-sns",
            PodRoleArgs(
                cluster_name=pulumi.Output.all(
                    cluster.cluster_name, cluster.system_node_group_name
                ).apply(lambda v: v[0]),
                label=cfg.cluster_name,
                purpose="Alertmanager's SNS publish",
                policy=sns_publish_policy_document(sns_topic_arn),
                service_account=(obs_settings.namespace, obs_settings.alertmanager_service_account),
                agent=pod_identity_agent_addon,
            ),
        )
    observability = Observability(
        "observability",
        ObservabilityArgs.from_stack(cfg, (alert_role.association,) if alert_role else ()),
        opts=pulumi.ResourceOptions(providers=[cluster.provider]),
    )
    pulumi.export(OUTPUT_KEY, observability.port_forward)

# --- workloads: training image, training operator, etcd, debug tools, checkpoint claim --------
# The platform jobs run on; jobs themselves are submitted apart (eks-fsdp jobs, docs/jobs.md).
if device_plugins is not None:
    deploy_workloads(
        cfg,
        cluster.provider,
        depends_on=[
            device_plugins,
            *([cluster.fsx_csi_addon] if cluster.fsx_csi_addon is not None else []),
        ],
        shared_storage=shared_storage,
    )

# --- queues and teams: Kueue (workloads/kueue.py), a namespace and queues per team -----------
if device_plugins is not None:
    from workloads.kueue import (
        OUTPUT_CLUSTER_QUEUES,
        OUTPUT_TEAM_NAMESPACES,
        Kueue,
        KueueArgs,
    )
    from workloads.specs.kueue import stack_settings
    from workloads.team import Team, TeamArgs

    kueue = Kueue(
        "kueue",
        KueueArgs.from_stack(cfg, stack_settings(cfg)),
        opts=pulumi.ResourceOptions(providers=[cluster.provider], depends_on=[device_plugins]),
    )
    teams = {
        team.name: Team(
            f"team-{team.name}",
            TeamArgs.from_stack(
                team,
                cfg,
                cluster.cluster_name,
                metrics_after=(observability,) if cfg.observability.enabled else (),
                shared_storage=shared_storage,
            ),
            opts=pulumi.ResourceOptions(providers=[cluster.provider], depends_on=[kueue]),
        )
        for team in cfg.teams
    }
    pulumi.export(OUTPUT_CLUSTER_QUEUES, kueue.cluster_queues)
    pulumi.export(OUTPUT_TEAM_NAMESPACES, {name: t.namespace for name, t in teams.items()})
