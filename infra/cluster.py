"""``Cluster``: the EKS control plane, its add-ons, the system nodegroup and the k8s provider.

pulumi-eks builds the control plane (a version in EKS standard support, public + private
subnets, OIDC provider for IRSA, access entries in ``API`` authentication mode, the vpc-cni and
kube-proxy add-ons at pinned builds). Secure by default: Secrets are envelope-encrypted with a
customer-managed KMS key (rotation on), all five control-plane log types go to CloudWatch, the
public API endpoint admits only ``api_public_access_cidrs`` (none: private endpoint only), and
the VPC CNI's network-policy agent is on, so the NetworkPolicies the workloads deploy (etcd's)
are enforced: the VPC CNI enforces them only with ``enableNetworkPolicy`` (EKS user guide,
"Limit Pod traffic with Kubernetes network policies"; off by default).
Everything that needs a node to become healthy is created here, after the system nodegroup:
CoreDNS, the EBS CSI driver (with its IRSA role), the EKS node monitoring agent (node
conditions for GPU/XID, network, kernel and storage faults; off with ``nodeMonitoringAgent``), optionally the FSx CSI driver (for
``sharedStorage.type: fsx``; no IAM role, see ``FSX_CSI_SERVICE_ACCOUNT``) and, optionally,
CloudWatch Observability.
The node IAM role (worker, CNI, ECR read-only, SSM, CloudWatch agent) is shared with the GPU
nodegroups. It carries no EBS or FSx policy: the EBS CSI controller assumes its own IRSA role, so
a pod that reaches the node role (it cannot: IMDSv2 hop limit 1 on GPU nodes; AL2023 managed
nodes default to 1 as well) could not delete volumes or file systems.

The component exposes ``provider``, a ``pulumi_kubernetes.Provider`` built from the
kubeconfig: workloads receive it through ``ResourceOptions(providers=[cluster.provider])``
and never build one.
"""

from __future__ import annotations

import json
import re
from collections.abc import Sequence
from dataclasses import dataclass, field

import pulumi
import pulumi_aws as aws
import pulumi_eks as eks
import pulumi_kubernetes as k8s

from infra import versions
from infra.addon_versions import pinned_problems
from infra.config import SystemNodeGroupConfig

TYPE_TOKEN = "eks-fsdp:infra:Cluster"

NODE_POLICY_ARNS: tuple[str, ...] = (
    "arn:aws:iam::aws:policy/AmazonEKSWorkerNodePolicy",
    "arn:aws:iam::aws:policy/AmazonEKS_CNI_Policy",
    "arn:aws:iam::aws:policy/AmazonEC2ContainerRegistryReadOnly",
    "arn:aws:iam::aws:policy/AmazonSSMManagedInstanceCore",
    "arn:aws:iam::aws:policy/CloudWatchAgentServerPolicy",
)
"""Managed policies on the node role. The CloudWatch agent of the amazon-cloudwatch-observability
add-on runs with host networking and uses the node role; the EBS CSI controller uses IRSA."""
CONTROL_PLANE_LOG_TYPES = ("api", "audit", "authenticator", "controllerManager", "scheduler")
"""Every EKS control-plane log type."""
EBS_CSI_POLICY_ARN = "arn:aws:iam::aws:policy/service-role/AmazonEBSCSIDriverPolicy"
EBS_CSI_SERVICE_ACCOUNT = "system:serviceaccount:kube-system:ebs-csi-controller-sa"
FSX_CSI_SERVICE_ACCOUNT = "system:serviceaccount:kube-system:fsx-csi-controller-sa"
"""The FSx CSI controller's service account, deliberately given no IAM role. The project
provisions FSx statically (``workloads/specs/storage.py``: a PersistentVolume naming the file
system, ``storageClassName: ""``, reclaim policy ``Retain``), so the controller is never asked
to create, delete or resize a file system, the only calls that reach the FSx API
(aws-fsx-csi-driver ``pkg/driver/controller.go``: ``CreateVolume``, ``DeleteVolume``,
``ControllerExpandVolume``, ``ValidateVolumeCapabilities``); the node plugin mounts with the
Lustre client and no IAM. The driver's ``docs/install.md`` asks for AmazonFSxFullAccess "to
create/delete file systems", which this project never lets it do."""
CLOUDWATCH_NO_GPU_METRICS: dict[str, object] = {
    "agent": {
        "config": {
            "logs": {
                "metrics_collected": {
                    "kubernetes": {
                        "enhanced_container_insights": True,
                        "accelerated_compute_metrics": False,
                    }
                }
            }
        }
    }
}
"""amazon-cloudwatch-observability configuration without its GPU path: Container Insights
(enhanced) and the container logs stay; ``accelerated_compute_metrics: false`` stops the agent's
DCGM scraper (amazon-cloudwatch-agent ``AcceleratedComputeMetricsEnabled``, default true) and
the operator's DCGM exporter (amazon-cloudwatch-agent-operator ``DcgmExporterReconciler`` reads
the same key; CloudWatch user guide, "NVIDIA GPU metrics": opt out with this key). ``agent.config``
replaces the add-on's default agent config, so Application Signals, which no workload here
uses, is off too. The stack's GPU metrics path is its own dcgm-exporter + Prometheus: the XID
and temperature alerts, the dashboard, the local runner's Prometheus and the preflight share
one list of XIDs there (docs/observability.md); CloudWatch would only duplicate it."""
CLUSTER_ADMIN_POLICY_ARN = "arn:aws:eks::aws:cluster-access-policy/AmazonEKSClusterAdminPolicy"
SYSTEM_NODEGROUP_LABEL = {"eks-fsdp/nodegroup": "system"}
SYSTEM_ROOT_VOLUME_GIB = 50
"""Root volume of the system nodes (images of the add-ons, etcd, the operator)."""

_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_-]{0,99}$")


@dataclass(frozen=True, kw_only=True)
class ClusterArgs:
    """Arguments of ``Cluster``."""

    cluster_name: str
    """EKS cluster name (physical name)."""
    kubernetes_version: str
    """Control-plane version, e.g. ``1.35``."""

    vpc_id: pulumi.Input[str]
    """VPC of the cluster."""
    public_subnet_ids: Sequence[pulumi.Input[str]]
    """Public subnets (internet-facing load balancers)."""
    private_subnet_ids: Sequence[pulumi.Input[str]]
    """Private subnets (nodes, internal load balancers)."""
    service_cidr: str = "172.20.0.0/16"
    """Kubernetes service IP range."""
    api_public_access_cidrs: tuple[str, ...] = ()
    """CIDRs allowed to reach the public API endpoint; empty (the default) = public endpoint off."""
    system_node_group: SystemNodeGroupConfig = field(default_factory=SystemNodeGroupConfig)
    """Size and type of the CPU nodegroup for add-ons."""
    access_entries: tuple[str, ...] = ()
    """IAM principal ARNs given cluster-admin."""
    cloudwatch_observability: bool = False
    """Install the amazon-cloudwatch-observability add-on."""
    fsx_csi_driver: bool = False
    """Install the aws-fsx-csi-driver add-on (no IAM role: static volumes only) for FSx for
    Lustre volumes."""
    cloudwatch_gpu_metrics: bool = True
    """Let the CloudWatch add-on collect GPU metrics with its own DCGM exporter. False when the
    stack runs ours (``observability.dcgm``): one GPU metrics path, not two."""
    node_monitoring_agent: bool = True
    """Install the eks-node-monitoring-agent add-on: a DaemonSet on every node that turns GPU
    (XID, DCGM), NCCL/EFA networking, kernel and storage faults into node conditions, which
    node auto repair on the GPU groups and the node-condition alerts act on."""
    tags: dict[str, str] | None = None
    """Extra tags on every AWS resource."""

    def __post_init__(self) -> None:
        if not _NAME.match(self.cluster_name):
            raise ValueError(f"ClusterArgs.cluster_name: {self.cluster_name!r} is not valid")
        if not re.fullmatch(r"1\.\d{2}", self.kubernetes_version):
            raise ValueError(
                f"ClusterArgs.kubernetes_version: {self.kubernetes_version!r} is not 1.NN"
            )
        if len(self.private_subnet_ids) < 2:
            raise ValueError("ClusterArgs.private_subnet_ids: EKS needs subnets in >= 2 zones")
        if len(self.public_subnet_ids) < 1:
            raise ValueError("ClusterArgs.public_subnet_ids: at least one public subnet")
        if len(set(self.access_entries)) != len(self.access_entries):
            raise ValueError("ClusterArgs.access_entries: lists a principal twice")
        if any(c.endswith("/0") for c in self.api_public_access_cidrs):
            raise ValueError(
                "ClusterArgs.api_public_access_cidrs: a /0 opens the API endpoint to the internet"
            )
        installed = ("kube-proxy", "vpc-cni", "coredns", "aws-ebs-csi-driver")
        installed += ("eks-node-monitoring-agent",) if self.node_monitoring_agent else ()
        installed += ("aws-fsx-csi-driver",) if self.fsx_csi_driver else ()
        installed += ("amazon-cloudwatch-observability",) if self.cloudwatch_observability else ()
        problems = pinned_problems(self.kubernetes_version, installed)
        if problems:
            raise ValueError(f"ClusterArgs.kubernetes_version: {'; '.join(problems)}")


def ebs_csi_trust_policy(oidc_provider_arn: str, oidc_issuer: str) -> str:
    """IRSA trust policy: only the EBS CSI controller's service account may assume the role."""
    return irsa_trust_policy(oidc_provider_arn, oidc_issuer, EBS_CSI_SERVICE_ACCOUNT)


def irsa_trust_policy(oidc_provider_arn: str, oidc_issuer: str, service_account: str) -> str:
    """IRSA trust policy: only ``service_account`` (``system:serviceaccount:<ns>:<name>``) may
    assume the role, through the cluster's OIDC provider."""
    issuer = oidc_issuer.removeprefix("https://")
    return json.dumps(
        {
            "Version": "2012-10-17",
            "Statement": [
                {
                    "Effect": "Allow",
                    "Principal": {"Federated": oidc_provider_arn},
                    "Action": "sts:AssumeRoleWithWebIdentity",
                    "Condition": {
                        "StringEquals": {
                            f"{issuer}:sub": service_account,
                            f"{issuer}:aud": "sts.amazonaws.com",
                        }
                    },
                }
            ],
        }
    )


EC2_TRUST_POLICY = json.dumps(
    {
        "Version": "2012-10-17",
        "Statement": [
            {
                "Effect": "Allow",
                "Principal": {"Service": "ec2.amazonaws.com"},
                "Action": "sts:AssumeRole",
            }
        ],
    }
)


class Cluster(pulumi.ComponentResource):
    """EKS control plane + add-ons + system nodegroup + the Kubernetes provider."""

    cluster_name: pulumi.Output[str]
    """EKS cluster name; resolves once the control plane exists (consumers wait for it)."""
    kubeconfig: pulumi.Output[str]
    """Kubeconfig JSON (secret)."""
    provider: k8s.Provider
    """Kubernetes provider for everything deployed into the cluster."""
    node_role: aws.iam.Role
    """IAM role of every node (system and GPU)."""
    node_role_arn: pulumi.Output[str]
    """ARN of ``node_role``."""
    oidc_provider_arn: pulumi.Output[str]
    """IRSA: ARN of the cluster's IAM OIDC provider."""
    oidc_issuer: pulumi.Output[str]
    """IRSA: OIDC issuer without ``https://``."""
    cluster_security_group_id: pulumi.Output[str]
    """The EKS-created cluster security group (control plane <-> every node)."""
    system_node_group_name: pulumi.Output[str]
    """Name of the system nodegroup."""
    secrets_key_arn: pulumi.Output[str]
    """KMS key that envelope-encrypts the cluster's Secrets."""

    def __init__(
        self, name: str, args: ClusterArgs, opts: pulumi.ResourceOptions | None = None
    ) -> None:
        super().__init__(TYPE_TOKEN, name, {}, opts)
        child = pulumi.ResourceOptions(parent=self)
        tags = {**(args.tags or {}), "eks-fsdp/cluster": args.cluster_name}

        self.node_role = aws.iam.Role(
            f"{name}-node-role",
            assume_role_policy=EC2_TRUST_POLICY,
            description=f"EKS nodes of {args.cluster_name}",
            tags=tags,
            opts=child,
        )
        attachments = [
            aws.iam.RolePolicyAttachment(
                f"{name}-node-{arn.rsplit('/', 1)[-1]}",
                role=self.node_role.name,
                policy_arn=arn,
                opts=child,
            )
            for arn in NODE_POLICY_ARNS
        ]

        secrets_key = aws.kms.Key(
            f"{name}-secrets-key",
            description=f"EKS Secrets envelope encryption of {args.cluster_name}",
            enable_key_rotation=True,
            deletion_window_in_days=30,
            tags=tags,
            opts=child,
        )
        self.secrets_key_arn = secrets_key.arn

        public = bool(args.api_public_access_cidrs)
        self._eks = eks.Cluster(
            f"{name}-eks",
            name=args.cluster_name,
            version=args.kubernetes_version,
            vpc_id=args.vpc_id,
            public_subnet_ids=list(args.public_subnet_ids),
            private_subnet_ids=list(args.private_subnet_ids),
            endpoint_public_access=public,
            endpoint_private_access=True,
            public_access_cidrs=list(args.api_public_access_cidrs) if public else None,
            encryption_config_key_arn=secrets_key.arn,
            kubernetes_service_ip_address_range=args.service_cidr,
            authentication_mode=eks.AuthenticationMode.API,
            access_entries={
                f"admin-{i}": eks.AccessEntryArgs(
                    principal_arn=arn,
                    access_policies={
                        "cluster-admin": eks.AccessPolicyAssociationArgs(
                            policy_arn=CLUSTER_ADMIN_POLICY_ARN,
                            access_scope=aws.eks.AccessPolicyAssociationAccessScopeArgs(
                                type="cluster"
                            ),
                        )
                    },
                )
                for i, arn in enumerate(args.access_entries)
            },
            create_oidc_provider=True,
            skip_default_node_group=True,
            skip_default_security_groups=True,
            vpc_cni_options=eks.VpcCniOptionsArgs(
                addon_version=versions.VPC_CNI_ADDON_VERSION, enable_network_policy=True
            ),
            kube_proxy_addon_options=eks.KubeProxyAddonOptionsArgs(
                enabled=True, version=versions.KUBE_PROXY_ADDON_VERSION
            ),
            # CoreDNS stays DEGRADED until a node exists: created below, after the nodegroup.
            coredns_addon_options=eks.CoreDnsAddonOptionsArgs(enabled=False),
            enabled_cluster_log_types=list(CONTROL_PLANE_LOG_TYPES),
            tags=tags,
            opts=child,
        )

        # The name is known up front; deriving it from an output of the control plane makes
        # every consumer (nodegroups, add-ons) wait until the cluster exists.
        self.cluster_name = self._eks.cluster_security_group_id.apply(lambda _: args.cluster_name)
        self.cluster_security_group_id = self._eks.cluster_security_group_id
        self.oidc_provider_arn = self._eks.oidc_provider_arn
        self.oidc_issuer = self._eks.oidc_issuer
        # The ARN resolves once every policy is attached, so nodegroups given it wait for them.
        self.node_role_arn = pulumi.Output.all(
            self.node_role.arn, *[a.id for a in attachments]
        ).apply(lambda values: values[0])
        self.kubeconfig = pulumi.Output.secret(self._eks.kubeconfig_json)

        system = args.system_node_group
        # Explicit rather than EKS's defaults: IMDSv2 only with hop limit 1 (CoreDNS, the CSI
        # controllers (IRSA), etcd and the operator read no instance metadata from a pod) and
        # an encrypted root volume whatever the account's EBS default.
        system_lt = aws.ec2.LaunchTemplate(
            f"{name}-system-lt",
            description=f"system nodegroup of {args.cluster_name}",
            metadata_options=aws.ec2.LaunchTemplateMetadataOptionsArgs(
                http_endpoint="enabled",
                http_tokens="required",
                http_put_response_hop_limit=1,
                instance_metadata_tags="disabled",
            ),
            block_device_mappings=[
                aws.ec2.LaunchTemplateBlockDeviceMappingArgs(
                    device_name="/dev/xvda",
                    ebs=aws.ec2.LaunchTemplateBlockDeviceMappingEbsArgs(
                        volume_size=SYSTEM_ROOT_VOLUME_GIB,
                        volume_type="gp3",
                        encrypted="true",
                        delete_on_termination="true",
                    ),
                )
            ],
            update_default_version=True,
            tags=tags,
            opts=child,
        )
        system_ng = aws.eks.NodeGroup(
            f"{name}-system",
            cluster_name=self.cluster_name,
            node_group_name="system",
            node_role_arn=self.node_role.arn,
            subnet_ids=list(args.private_subnet_ids),
            instance_types=[system.instance_type],
            ami_type=versions.SYSTEM_AMI_TYPE,
            capacity_type="ON_DEMAND",
            launch_template=aws.eks.NodeGroupLaunchTemplateArgs(
                id=system_lt.id, version=system_lt.latest_version.apply(str)
            ),
            scaling_config=aws.eks.NodeGroupScalingConfigArgs(
                min_size=system.min_size,
                desired_size=system.desired_size,
                max_size=system.max_size,
            ),
            labels=dict(SYSTEM_NODEGROUP_LABEL),
            tags=tags,
            opts=pulumi.ResourceOptions(
                parent=self, depends_on=attachments, delete_before_replace=True
            ),
        )
        self.system_node_group_name = system_ng.node_group_name
        after_nodes = pulumi.ResourceOptions(parent=self, depends_on=[system_ng])

        def addon(
            suffix: str,
            addon_name: str,
            version: str | None,
            opts: pulumi.ResourceOptions = after_nodes,
            role_arn: pulumi.Input[str] | None = None,
            configuration: dict[str, object] | None = None,
        ) -> aws.eks.Addon:
            """A pinned EKS add-on after the system nodes (our settings win conflicts)."""
            return aws.eks.Addon(
                f"{name}-{suffix}",
                cluster_name=self.cluster_name,
                addon_name=addon_name,
                addon_version=version,
                service_account_role_arn=role_arn,
                configuration_values=json.dumps(configuration) if configuration else None,
                resolve_conflicts_on_create="OVERWRITE",
                resolve_conflicts_on_update="OVERWRITE",
                tags=tags,
                opts=opts,
            )

        coredns = addon("coredns", "coredns", versions.COREDNS_ADDON_VERSION)

        def irsa_addon(
            suffix: str,
            label: str,
            addon_name: str,
            version: str | None,
            account: str,
            policy_arn: str,
        ) -> aws.eks.Addon:
            """An EKS add-on whose controller assumes its own IRSA role (``policy_arn``)."""
            role = aws.iam.Role(
                f"{name}-{suffix}-role",
                assume_role_policy=pulumi.Output.all(
                    self.oidc_provider_arn, self.oidc_issuer
                ).apply(lambda v: irsa_trust_policy(v[0], v[1], account)),
                description=f"{label} controller of {args.cluster_name} (IRSA)",
                tags=tags,
                opts=child,
            )
            attach = aws.iam.RolePolicyAttachment(
                f"{name}-{suffix}-policy", role=role.name, policy_arn=policy_arn, opts=child
            )
            opts = pulumi.ResourceOptions(parent=self, depends_on=[system_ng, attach])
            return addon(suffix, addon_name, version, opts, role.arn)

        irsa_addon(
            "ebs-csi",
            "EBS CSI",
            "aws-ebs-csi-driver",
            versions.EBS_CSI_ADDON_VERSION,
            EBS_CSI_SERVICE_ACCOUNT,
            EBS_CSI_POLICY_ARN,
        )
        self.fsx_csi_addon: aws.eks.Addon | None = None
        if args.fsx_csi_driver:
            # No service-account role: static provisioning only (see FSX_CSI_SERVICE_ACCOUNT).
            self.fsx_csi_addon = addon(
                "fsx-csi", "aws-fsx-csi-driver", versions.FSX_CSI_ADDON_VERSION
            )
        if args.node_monitoring_agent:
            # EKS user guide, "Detect node health issues and enable automatic node repair":
            # the agent needs no IAM role; its DaemonSet runs on every Linux node.
            addon(
                "node-monitoring",
                "eks-node-monitoring-agent",
                versions.NODE_MONITORING_AGENT_ADDON_VERSION,
            )
        if args.cloudwatch_observability:
            # The agent uses the node role (CloudWatchAgentServerPolicy is attached above).
            addon(
                "cloudwatch",
                "amazon-cloudwatch-observability",
                versions.CLOUDWATCH_OBSERVABILITY_ADDON_VERSION,
                configuration=None if args.cloudwatch_gpu_metrics else CLOUDWATCH_NO_GPU_METRICS,
            )

        # Everything deployed through the provider waits for a node and cluster DNS.
        self.provider = k8s.Provider(
            f"{name}-k8s",
            kubeconfig=self.kubeconfig,
            enable_server_side_apply=True,
            opts=pulumi.ResourceOptions(parent=self, depends_on=[system_ng, coredns]),
        )
        self.register_outputs(
            {
                "clusterName": self.cluster_name,
                "kubeconfig": self.kubeconfig,
                "nodeRoleArn": self.node_role_arn,
                "oidcProviderArn": self.oidc_provider_arn,
                "clusterSecurityGroupId": self.cluster_security_group_id,
                "systemNodeGroupName": self.system_node_group_name,
                "secretsKeyArn": self.secrets_key_arn,
            }
        )
