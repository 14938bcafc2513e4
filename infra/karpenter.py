"""``Karpenter``: the Karpenter controller of a cluster with a ``provisioner: karpenter`` pool.

Installed once per cluster, as upstream's getting-started does at the pinned release
(aws/karpenter-provider-aws ``website/content/en/docs/getting-started/getting-started-with-
karpenter/cloudformation.yaml`` and ``scripts/step08-apply-helm-chart.sh``):

- the nodes' IAM role ``KarpenterNodeRole-<cluster>`` (upstream's name; the EC2NodeClass names
  it) with the managed node role's policies (``infra.cluster.NODE_POLICY_ARNS``: upstream's
  worker, CNI, ECR and SSM policies plus the CloudWatch agent's, as the managed GPU nodes have),
  and an EKS access entry of type ``EC2_LINUX`` for it, so its nodes can join (EKS user guide,
  "Create access entries": EC2_LINUX for self-managed and Karpenter nodes; a managed node group
  makes its own entry, which is why this role is not the managed groups' role);
- the interruption queue (SQS, 300 s retention, SSE-SQS, a policy that lets EventBridge send
  and refuses plain HTTP) and the EventBridge rules that feed it: AWS Health events (scheduled
  changes), Spot interruption warnings, rebalance recommendations, instance state changes and
  capacity-reservation interruption warnings, each as upstream declares them;
- the controller's IAM role, assumed through IRSA by the chart's ServiceAccount
  (``kube-system/karpenter``), with upstream's controller policies statement for statement
  (``controller_policies``): node lifecycle, IAM integration, EKS integration, interruption and
  resource discovery (upstream's file is vendored as
  ``workloads/manifests/karpenter/cloudformation.yaml`` and a test compares the documents).
  Upstream's zonal-shift policy is left out: ``settings.enableZonalShift`` stays off. IRSA rather than EKS Pod Identity: the cluster always has its OIDC provider, the
  Pod Identity agent exists only on stacks with a data bucket (``infra.pod_identity``);
- the CRDs as their own release (``versions.KARPENTER_CRD_CHART`` at the same version), as
  upstream's upgrade guide recommends: Helm installs a chart's ``crds/`` only on first install,
  so a version bump through the controller's chart alone would leave the old CRDs;
- the chart (``versions.KARPENTER_CHART`` at ``versions.KARPENTER_VERSION``, ``skip_crds``:
  the CRD release owns them) with ``workloads.specs.karpenter.controller_values``:
  settings.clusterName and interruptionQueue, the controller on the system node group.
"""

from __future__ import annotations

import functools
import json
from dataclasses import dataclass
from typing import Any

import pulumi
import pulumi_aws as aws
import pulumi_kubernetes as k8s

from infra import versions
from infra.cluster import EC2_TRUST_POLICY, NODE_POLICY_ARNS, irsa_trust_policy
from workloads.specs import karpenter as spec

TYPE_TOKEN = "eks-fsdp:infra:Karpenter"
RELEASE_NAME = "karpenter"
CRD_RELEASE_NAME = "karpenter-crd"
"""Upstream's release name for the CRD chart (upgrade-guide.md at v1.14.1, "CRD Upgrades")."""
SERVICE_ACCOUNT = f"system:serviceaccount:{versions.KARPENTER_NAMESPACE}:{spec.SERVICE_ACCOUNT}"
QUEUE_RETENTION_SECONDS = 300
"""Upstream's ``MessageRetentionPeriod``: an interruption notice older than 5 minutes is moot."""
QUEUE_TARGET_ID = "KarpenterInterruptionQueueTarget"
INTERRUPTION_EVENTS: dict[str, dict[str, list[str]]] = {
    "scheduled-change": {"source": ["aws.health"], "detail-type": ["AWS Health Event"]},
    "spot-interruption": {
        "source": ["aws.ec2"],
        "detail-type": ["EC2 Spot Instance Interruption Warning"],
    },
    "rebalance": {"source": ["aws.ec2"], "detail-type": ["EC2 Instance Rebalance Recommendation"]},
    "instance-state-change": {
        "source": ["aws.ec2"],
        "detail-type": ["EC2 Instance State-change Notification"],
    },
    "capacity-reservation-interruption": {
        "source": ["aws.ec2"],
        "detail-type": ["EC2 Capacity Reservation Instance Interruption Warning"],
    },
}
"""The EventBridge patterns of upstream's ScheduledChangeRule, SpotInterruptionRule,
RebalanceRule, InstanceStateChangeRule and CapacityReservationInterruptionRule."""


def queue_policy(queue_arn: str) -> dict[str, Any]:
    """Upstream's KarpenterInterruptionQueuePolicy: EventBridge (and SQS) may send; no plain
    HTTP for anyone."""
    return {
        "Version": "2012-10-17",
        "Id": "EC2InterruptionPolicy",
        "Statement": [
            {
                "Effect": "Allow",
                "Principal": {"Service": ["events.amazonaws.com", "sqs.amazonaws.com"]},
                "Action": "sqs:SendMessage",
                "Resource": queue_arn,
            },
            {
                "Sid": "DenyHTTP",
                "Effect": "Deny",
                "Action": "sqs:*",
                "Resource": queue_arn,
                "Condition": {"Bool": {"aws:SecureTransport": "false"}},
                "Principal": "*",
            },
        ],
    }


def controller_policies(
    *,
    partition: str,
    region: str,
    account: str,
    cluster_name: str,
    node_role_arn: str,
    queue_arn: str,
) -> dict[str, dict[str, Any]]:
    """The controller's policies, statement for statement upstream's NodeLifecyclePolicy,
    IAMIntegrationPolicy, EKSIntegrationPolicy, InterruptionPolicy and ResourceDiscoveryPolicy
    (cloudformation.yaml at v1.14.1): launches and deletions only of resources tagged for this
    cluster and a NodePool, PassRole only of the node role to EC2."""
    ec2 = f"arn:{partition}:ec2:{region}"
    iam_profiles = f"arn:{partition}:iam::{account}:instance-profile/*"
    owned = {f"aws:ResourceTag/kubernetes.io/cluster/{cluster_name}": "owned"}
    request_owned = {
        f"aws:RequestTag/kubernetes.io/cluster/{cluster_name}": "owned",
        "aws:RequestTag/eks:eks-cluster-name": cluster_name,
    }
    tagged_kinds = [
        f"{ec2}:*:{kind}/*"
        for kind in (
            "fleet",
            "instance",
            "volume",
            "network-interface",
            "launch-template",
            "spot-instances-request",
        )
    ]
    nodepool_any = {"aws:ResourceTag/karpenter.sh/nodepool": "*"}
    lifecycle = [
        {
            "Sid": "AllowScopedEC2InstanceAccessActions",
            "Effect": "Allow",
            "Resource": [
                f"{ec2}::image/*",
                f"{ec2}::snapshot/*",
                f"{ec2}:*:security-group/*",
                f"{ec2}:*:subnet/*",
                f"{ec2}:*:capacity-reservation/*",
                f"{ec2}:*:placement-group/*",
            ],
            "Action": ["ec2:RunInstances", "ec2:CreateFleet"],
        },
        {
            "Sid": "AllowScopedEC2LaunchTemplateAccessActions",
            "Effect": "Allow",
            "Resource": f"{ec2}:*:launch-template/*",
            "Action": ["ec2:RunInstances", "ec2:CreateFleet"],
            "Condition": {"StringEquals": owned, "StringLike": nodepool_any},
        },
        {
            "Sid": "AllowScopedEC2InstanceActionsWithTags",
            "Effect": "Allow",
            "Resource": tagged_kinds,
            "Action": ["ec2:RunInstances", "ec2:CreateFleet", "ec2:CreateLaunchTemplate"],
            "Condition": {
                "StringEquals": request_owned,
                "StringLike": {"aws:RequestTag/karpenter.sh/nodepool": "*"},
            },
        },
        {
            "Sid": "AllowScopedResourceCreationTagging",
            "Effect": "Allow",
            "Resource": tagged_kinds,
            "Action": "ec2:CreateTags",
            "Condition": {
                "StringEquals": {
                    **request_owned,
                    "ec2:CreateAction": ["RunInstances", "CreateFleet", "CreateLaunchTemplate"],
                },
                "StringLike": {"aws:RequestTag/karpenter.sh/nodepool": "*"},
            },
        },
        {
            "Sid": "AllowScopedResourceTagging",
            "Effect": "Allow",
            "Resource": f"{ec2}:*:instance/*",
            "Action": "ec2:CreateTags",
            "Condition": {
                "StringEquals": owned,
                "StringLike": nodepool_any,
                "StringEqualsIfExists": {"aws:RequestTag/eks:eks-cluster-name": cluster_name},
                "ForAllValues:StringEquals": {
                    "aws:TagKeys": ["eks:eks-cluster-name", "karpenter.sh/nodeclaim", "Name"]
                },
            },
        },
        {
            "Sid": "AllowScopedDeletion",
            "Effect": "Allow",
            "Resource": [f"{ec2}:*:instance/*", f"{ec2}:*:launch-template/*"],
            "Action": ["ec2:TerminateInstances", "ec2:DeleteLaunchTemplate"],
            "Condition": {"StringEquals": owned, "StringLike": nodepool_any},
        },
    ]
    region_tag = {"aws:ResourceTag/topology.kubernetes.io/region": region}
    request_region = {"aws:RequestTag/topology.kubernetes.io/region": region}
    nodeclass_any = "aws:ResourceTag/karpenter.k8s.aws/ec2nodeclass"
    request_nodeclass_any = "aws:RequestTag/karpenter.k8s.aws/ec2nodeclass"
    integration = [
        {
            "Sid": "AllowPassingInstanceRole",
            "Effect": "Allow",
            "Resource": node_role_arn,
            "Action": "iam:PassRole",
            "Condition": {
                "StringEquals": {
                    "iam:PassedToService": ["ec2.amazonaws.com", "ec2.amazonaws.com.cn"]
                }
            },
        },
        {
            "Sid": "AllowScopedInstanceProfileCreationActions",
            "Effect": "Allow",
            "Resource": iam_profiles,
            "Action": ["iam:CreateInstanceProfile"],
            "Condition": {
                "StringEquals": {**request_owned, **request_region},
                "StringLike": {request_nodeclass_any: "*"},
            },
        },
        {
            "Sid": "AllowScopedInstanceProfileTagActions",
            "Effect": "Allow",
            "Resource": iam_profiles,
            "Action": ["iam:TagInstanceProfile"],
            "Condition": {
                "StringEquals": {**owned, **region_tag, **request_owned, **request_region},
                "StringLike": {nodeclass_any: "*", request_nodeclass_any: "*"},
            },
        },
        {
            "Sid": "AllowScopedInstanceProfileActions",
            "Effect": "Allow",
            "Resource": iam_profiles,
            "Action": [
                "iam:AddRoleToInstanceProfile",
                "iam:RemoveRoleFromInstanceProfile",
                "iam:DeleteInstanceProfile",
            ],
            "Condition": {
                "StringEquals": {**owned, **region_tag},
                "StringLike": {nodeclass_any: "*"},
            },
        },
    ]
    eks = [
        {
            "Sid": "AllowAPIServerEndpointDiscovery",
            "Effect": "Allow",
            "Resource": f"arn:{partition}:eks:{region}:{account}:cluster/{cluster_name}",
            "Action": "eks:DescribeCluster",
        }
    ]
    interruption = [
        {
            "Sid": "AllowInterruptionQueueActions",
            "Effect": "Allow",
            "Resource": queue_arn,
            "Action": ["sqs:DeleteMessage", "sqs:GetQueueUrl", "sqs:ReceiveMessage"],
        }
    ]
    discovery = [
        {
            "Sid": "AllowRegionalReadActions",
            "Effect": "Allow",
            "Resource": "*",
            "Action": [
                "ec2:DescribeCapacityReservations",
                "ec2:DescribeImages",
                "ec2:DescribeInstances",
                "ec2:DescribeInstanceStatus",
                "ec2:DescribeInstanceTypeOfferings",
                "ec2:DescribeInstanceTypes",
                "ec2:DescribeLaunchTemplates",
                "ec2:DescribePlacementGroups",
                "ec2:DescribeSecurityGroups",
                "ec2:DescribeSpotPriceHistory",
                "ec2:DescribeSubnets",
            ],
            "Condition": {"StringEquals": {"aws:RequestedRegion": region}},
        },
        {
            "Sid": "AllowSSMReadActions",
            "Effect": "Allow",
            "Resource": f"arn:{partition}:ssm:{region}::parameter/aws/service/*",
            "Action": "ssm:GetParameter",
        },
        {
            "Sid": "AllowPricingReadActions",
            "Effect": "Allow",
            "Resource": "*",
            "Action": "pricing:GetProducts",
        },
        {
            "Sid": "AllowUnscopedInstanceProfileListAction",
            "Effect": "Allow",
            "Resource": "*",
            "Action": "iam:ListInstanceProfiles",
        },
        {
            "Sid": "AllowInstanceProfileReadActions",
            "Effect": "Allow",
            "Resource": iam_profiles,
            "Action": "iam:GetInstanceProfile",
        },
    ]
    return {
        name: {"Version": "2012-10-17", "Statement": statements}
        for name, statements in (
            ("node-lifecycle", lifecycle),
            ("iam-integration", integration),
            ("eks-integration", eks),
            ("interruption", interruption),
            ("resource-discovery", discovery),
        )
    }


def _document_json(key: str, documents: dict[str, dict[str, Any]]) -> str:
    return json.dumps(documents[key])


@dataclass(frozen=True, kw_only=True)
class KarpenterArgs:
    """Arguments of ``Karpenter``."""

    cluster_name: str
    """EKS cluster name (physical; names the roles, the queue and the policies' scopes)."""
    cluster: pulumi.Input[str]
    """The cluster's name as an Output of ``Cluster``, so everything waits for the cluster."""
    region: str
    """AWS region of the cluster (the policies' ARNs)."""
    oidc_provider_arn: pulumi.Input[str]
    """IRSA: the cluster's OIDC provider."""
    oidc_issuer: pulumi.Input[str]
    """IRSA: the OIDC issuer (with or without ``https://``)."""
    system_node_selector: dict[str, str]
    """Labels of the system node group: where the controller runs."""
    replicas: int = 2
    """Controller replicas (upstream's 2; the chart spreads them over nodes)."""
    node_repair: bool = True
    """Karpenter's NodeRepair gate: replace nodes whose node monitoring agent conditions stay
    unhealthy (website/content/en/docs/concepts/disruption.md, "Node Auto Repair")."""
    tags: dict[str, str] | None = None
    """Extra tags on AWS resources."""

    def __post_init__(self) -> None:
        if not self.region:
            raise ValueError("KarpenterArgs.region: required (aws:region)")
        role = spec.node_role_name(self.cluster_name)
        if len(role) > spec.MAX_ROLE_NAME:
            raise ValueError(
                f"KarpenterArgs.cluster_name: the node role {role!r} is longer than"
                f" {spec.MAX_ROLE_NAME} characters"
            )
        if self.replicas < 1:
            raise ValueError(f"KarpenterArgs.replicas: {self.replicas} (at least 1)")
        if not self.system_node_selector:
            raise ValueError("KarpenterArgs.system_node_selector: the system nodes' labels")


class Karpenter(pulumi.ComponentResource):
    """Karpenter's IAM, interruption queue and rules, and the controller chart."""

    node_role_arn: pulumi.Output[str]
    """ARN of the Karpenter nodes' role."""
    controller_role_arn: pulumi.Output[str]
    """ARN of the controller's IRSA role."""
    queue_name: pulumi.Output[str]
    """The interruption queue's name."""
    crds: k8s.helm.v3.Release
    """The CRD chart: the controller's release waits for it."""
    release: k8s.helm.v3.Release
    """The controller chart (after the CRDs): pools depend on it."""

    def __init__(
        self, name: str, args: KarpenterArgs, opts: pulumi.ResourceOptions | None = None
    ) -> None:
        super().__init__(TYPE_TOKEN, name, {}, opts)
        child = pulumi.ResourceOptions(parent=self)
        tags = {**(args.tags or {}), "eks-fsdp/cluster": args.cluster_name}

        node_role = aws.iam.Role(
            f"{name}-node-role",
            name=spec.node_role_name(args.cluster_name),
            assume_role_policy=EC2_TRUST_POLICY,
            description=f"Karpenter nodes of {args.cluster_name}",
            tags=tags,
            opts=child,
        )
        node_attachments = [
            aws.iam.RolePolicyAttachment(
                f"{name}-node-{arn.rsplit('/', 1)[-1]}",
                role=node_role.name,
                policy_arn=arn,
                opts=child,
            )
            for arn in NODE_POLICY_ARNS
        ]
        access = aws.eks.AccessEntry(
            f"{name}-node-access",
            cluster_name=args.cluster,
            principal_arn=node_role.arn,
            type="EC2_LINUX",
            tags=tags,
            opts=child,
        )
        self.node_role_arn = node_role.arn

        queue = aws.sqs.Queue(
            f"{name}-queue",
            name=spec.interruption_queue_name(args.cluster_name),
            message_retention_seconds=QUEUE_RETENTION_SECONDS,
            sqs_managed_sse_enabled=True,
            tags=tags,
            opts=child,
        )
        self.queue_name = queue.name
        aws.sqs.QueuePolicy(
            f"{name}-queue-policy",
            queue_url=queue.url,
            policy=queue.arn.apply(lambda arn: json.dumps(queue_policy(arn))),
            opts=child,
        )
        for suffix, pattern in INTERRUPTION_EVENTS.items():
            rule = aws.cloudwatch.EventRule(
                f"{name}-{suffix}",
                description=f"Karpenter interruption events of {args.cluster_name}: {suffix}",
                event_pattern=json.dumps(pattern),
                tags=tags,
                opts=child,
            )
            aws.cloudwatch.EventTarget(
                f"{name}-{suffix}-target",
                rule=rule.name,
                target_id=QUEUE_TARGET_ID,
                arn=queue.arn,
                opts=child,
            )

        controller_role = aws.iam.Role(
            f"{name}-controller-role",
            assume_role_policy=pulumi.Output.all(args.oidc_provider_arn, args.oidc_issuer).apply(
                lambda v: irsa_trust_policy(v[0], v[1], SERVICE_ACCOUNT)
            ),
            description=f"Karpenter controller of {args.cluster_name} (IRSA)",
            tags=tags,
            opts=child,
        )
        self.controller_role_arn = controller_role.arn
        partition = aws.get_partition_output().partition
        account = aws.get_caller_identity_output().account_id
        documents = pulumi.Output.all(partition, account, node_role.arn, queue.arn).apply(
            lambda v: controller_policies(
                partition=v[0],
                region=args.region,
                account=v[1],
                cluster_name=args.cluster_name,
                node_role_arn=v[2],
                queue_arn=v[3],
            )
        )
        policy_attachments = []
        for key in ("node-lifecycle", "iam-integration", "eks-integration", "interruption",
                    "resource-discovery"):  # fmt: skip
            policy = aws.iam.Policy(
                f"{name}-{key}",
                description=f"Karpenter controller of {args.cluster_name}: {key}",
                policy=documents.apply(functools.partial(_document_json, key)),
                tags=tags,
                opts=child,
            )
            policy_attachments.append(
                aws.iam.RolePolicyAttachment(
                    f"{name}-{key}-attach",
                    role=controller_role.name,
                    policy_arn=policy.arn,
                    opts=child,
                )
            )

        values = controller_role.arn.apply(
            lambda arn: spec.controller_values(
                cluster_name=args.cluster_name,
                region=args.region,
                interruption_queue=spec.interruption_queue_name(args.cluster_name),
                role_arn=arn,
                node_selector=dict(args.system_node_selector),
                replicas=args.replicas,
                node_repair=args.node_repair,
            )
        )
        self.crds = k8s.helm.v3.Release(
            f"{name}-crds",
            name=CRD_RELEASE_NAME,
            chart=versions.KARPENTER_CRD_CHART,
            version=versions.KARPENTER_VERSION,
            namespace=versions.KARPENTER_NAMESPACE,
            opts=child,
        )
        self.release = k8s.helm.v3.Release(
            f"{name}-controller",
            name=RELEASE_NAME,
            chart=versions.KARPENTER_CHART,
            version=versions.KARPENTER_VERSION,
            namespace=versions.KARPENTER_NAMESPACE,
            values=values,
            skip_crds=True,
            opts=pulumi.ResourceOptions(
                parent=self,
                depends_on=[self.crds, access, queue, *node_attachments, *policy_attachments],
            ),
        )
        self.register_outputs(
            {
                "nodeRoleArn": self.node_role_arn,
                "controllerRoleArn": self.controller_role_arn,
                "queueName": self.queue_name,
            }
        )
