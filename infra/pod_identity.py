"""``PodIdentity``: the jobs' own AWS identity (EKS Pod Identity) scoped to the data bucket.

- the ``eks-pod-identity-agent`` EKS add-on (pinned, ``versions.POD_IDENTITY_AGENT_ADDON_VERSION``):
  the DaemonSet that hands pods their credentials (EKS user guide, "Set up the Amazon EKS Pod
  Identity Agent"; the agent uses the node role's ``eks-auth:AssumeRoleForPodIdentity``, which
  ``AmazonEKSWorkerNodePolicy``, already on the node role, grants). A cluster has it once
  (``CreateAddon`` answers ResourceInUseException for a second), so ``pod_identity_agent``
  makes it apart and ``PodIdentity`` and ``PodRole`` take it as an argument;
- an IAM role only EKS Pod Identity can assume: trust ``pods.eks.amazonaws.com`` with
  ``sts:AssumeRole`` and ``sts:TagSession`` (EKS user guide, "Create IAM role with trust policy
  required by EKS Pod Identity");
- its inline policy, least privilege on the bucket prefix: ``s3:ListBucket`` only with an
  ``s3:prefix`` under it, ``s3:GetObject``/``PutObject``/``DeleteObject``/``AbortMultipartUpload``
  on ``<bucket>/<prefix>/*`` (multipart uploads need ``s3:PutObject`` alone: S3 API reference,
  ``CreateMultipartUpload``, "Permissions"), ``kms:Decrypt`` and ``kms:GenerateDataKey`` on the
  bucket's key (SSE-KMS reads decrypt, writes generate a data key; S3 user guide, "Using
  server-side encryption with AWS KMS keys", "Permissions");
- one ``aws.eks.PodIdentityAssociation`` per (namespace, ServiceAccount) the jobs run as (the
  stack's jobs namespace and each team's), and the ServiceAccount of the stack's jobs namespace
  (teams' are ``workloads.team``'s; no API token mounted: the Pod Identity
  webhook injects its own projected token volume and the credentials environment,
  amazon-eks-pod-identity-webhook ``pkg/handler/handler.go``, independently of
  ``automountServiceAccountToken``).

The node role keeps what ECR needs (``AmazonEC2ContainerRegistryReadOnly``: ``ecr:*`` reads, no
S3 action) and gains nothing: pods reach the bucket only through this role, and nodes cannot
(IMDS hop limit 1 keeps the node role away from pods in any case).
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import pulumi
import pulumi_aws as aws
import pulumi_kubernetes as k8s

from infra import versions

TYPE_TOKEN = "eks-fsdp:infra:PodIdentity"
POD_IDENTITY_PRINCIPAL = "pods.eks.amazonaws.com"
OBJECT_ACTIONS = ("s3:GetObject", "s3:PutObject", "s3:DeleteObject", "s3:AbortMultipartUpload")
KMS_ACTIONS = ("kms:Decrypt", "kms:GenerateDataKey")

_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_-]{0,99}$")
_DNS_LABEL = re.compile(r"^[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?$")

TRUST_POLICY = json.dumps(
    {
        "Version": "2012-10-17",
        "Statement": [
            {
                "Effect": "Allow",
                "Principal": {"Service": POD_IDENTITY_PRINCIPAL},
                "Action": ["sts:AssumeRole", "sts:TagSession"],
            }
        ],
    }
)
"""Only EKS Pod Identity may assume the jobs' role."""

AGENT_ADDON_NAME = "eks-pod-identity-agent"


def pod_identity_agent(
    name: str,
    *,
    cluster_name: pulumi.Input[str],
    label: str,
    formerly: Sequence[tuple[str, str]] = (),
    tags: Mapping[str, str] | None = None,
    opts: pulumi.ResourceOptions | None = None,
) -> aws.eks.Addon:
    """The cluster's one ``eks-pod-identity-agent`` add-on, for every component that
    associates a role with a ServiceAccount.

    ``formerly``: (type token, name) of the components that created the add-on as their
    child ``<name>-agent`` before; an alias for each keeps the add-on of an existing stack
    where it is instead of deleting it and creating another (Pulumi, "Resource option:
    aliases": ``Alias(name=..., parent=...)``, the parent given by URN)."""
    aliases = [
        pulumi.Alias(name=f"{former}-agent", parent=pulumi.create_urn(former, token))
        for token, former in formerly
    ]
    return aws.eks.Addon(
        name,
        cluster_name=cluster_name,
        addon_name=AGENT_ADDON_NAME,
        addon_version=versions.POD_IDENTITY_AGENT_ADDON_VERSION,
        resolve_conflicts_on_create="OVERWRITE",
        resolve_conflicts_on_update="OVERWRITE",
        tags={**(tags or {}), "eks-fsdp/cluster": label},
        opts=pulumi.ResourceOptions.merge(opts, pulumi.ResourceOptions(aliases=aliases)),
    )


def bucket_policy_document(bucket_arn: str, prefix: str, kms_key_arn: str | None) -> str:
    """The jobs' permissions: objects under ``<prefix>/`` of the bucket, listing only there, and
    the bucket key's data-key calls."""
    statements: list[dict[str, object]] = [
        {
            "Sid": "ListThePrefix",
            "Effect": "Allow",
            "Action": "s3:ListBucket",
            "Resource": bucket_arn,
            "Condition": {"StringLike": {"s3:prefix": [prefix, f"{prefix}/*"]}},
        },
        {
            "Sid": "ObjectsUnderThePrefix",
            "Effect": "Allow",
            "Action": list(OBJECT_ACTIONS),
            "Resource": f"{bucket_arn}/{prefix}/*",
        },
    ]
    if kms_key_arn:
        statements.append(
            {
                "Sid": "TheBucketKey",
                "Effect": "Allow",
                "Action": list(KMS_ACTIONS),
                "Resource": kms_key_arn,
            }
        )
    return json.dumps({"Version": "2012-10-17", "Statement": statements})


@dataclass(frozen=True, kw_only=True)
class PodIdentityArgs:
    """Arguments of ``PodIdentity``."""

    cluster_name: pulumi.Input[str]
    """EKS cluster name (resolves once the control plane exists)."""
    label: str
    """Cluster name as a plain string (role description, tags)."""
    bucket_arn: pulumi.Input[str]
    """ARN of the data bucket."""
    prefix: str
    """Key prefix the jobs may use (no leading or trailing slash)."""
    kms_key_arn: pulumi.Input[str] | None
    """The bucket's SSE-KMS key; None for an SSE-S3 bucket."""
    service_accounts: Sequence[tuple[str, str]]
    """(namespace, ServiceAccount) pairs the jobs run as, each given the role."""
    create_service_accounts: Sequence[tuple[str, str]] = ()
    """Those of ``service_accounts`` this component creates (on the Kubernetes provider of
    ``opts``); the others exist already (a team's, ``workloads.team``)."""
    agent: aws.eks.Addon
    """The cluster's ``eks-pod-identity-agent`` add-on (``pod_identity_agent``): the
    associations are made after it."""
    tags: Mapping[str, str] | None = None
    """Extra tags on every AWS resource."""

    def __post_init__(self) -> None:
        if not _NAME.match(self.label):
            raise ValueError(f"PodIdentityArgs.label: {self.label!r} is not valid")
        if not self.prefix or self.prefix.startswith("/") or self.prefix.endswith("/"):
            raise ValueError(
                f"PodIdentityArgs.prefix: {self.prefix!r} must be non-empty, without slashes"
                " at either end"
            )
        if not self.service_accounts:
            raise ValueError("PodIdentityArgs.service_accounts: at least one ServiceAccount")
        for namespace, account in self.service_accounts:
            for value in (namespace, account):
                if not _DNS_LABEL.match(value):
                    raise ValueError(
                        f"PodIdentityArgs.service_accounts: {value!r} is not a DNS label"
                    )
        if len(set(self.service_accounts)) != len(self.service_accounts):
            raise ValueError("PodIdentityArgs.service_accounts: lists a ServiceAccount twice")
        if not set(self.create_service_accounts) <= set(self.service_accounts):
            raise ValueError(
                "PodIdentityArgs.create_service_accounts: not all of them are in service_accounts"
            )


class PodIdentity(pulumi.ComponentResource):
    """The jobs' role on the bucket prefix + the associations (after the agent add-on)."""

    role_arn: pulumi.Output[str]
    """ARN of the jobs' role."""
    agent: aws.eks.Addon
    """The ``eks-pod-identity-agent`` add-on (``PodIdentityArgs.agent``)."""

    def __init__(
        self, name: str, args: PodIdentityArgs, opts: pulumi.ResourceOptions | None = None
    ) -> None:
        super().__init__(TYPE_TOKEN, name, {}, opts)
        child = pulumi.ResourceOptions(parent=self)
        tags = {**(args.tags or {}), "eks-fsdp/cluster": args.label}

        self.agent = args.agent
        role = aws.iam.Role(
            f"{name}-role",
            assume_role_policy=TRUST_POLICY,
            description=f"training jobs of {args.label} (EKS Pod Identity): the data bucket prefix",
            tags=tags,
            opts=child,
        )
        policy = aws.iam.RolePolicy(
            f"{name}-bucket",
            role=role.name,
            policy=pulumi.Output.all(args.bucket_arn, args.kms_key_arn).apply(
                lambda v: bucket_policy_document(v[0], args.prefix, v[1])
            ),
            opts=child,
        )
        for namespace, account in args.service_accounts:
            suffix = f"{namespace}-{account}"
            depends: list[pulumi.Resource] = [policy, self.agent]
            if (namespace, account) in args.create_service_accounts:
                depends.append(
                    k8s.core.v1.ServiceAccount(
                        f"{name}-sa-{suffix}",
                        metadata=k8s.meta.v1.ObjectMetaArgs(
                            name=account,
                            namespace=namespace,
                            labels={
                                "app.kubernetes.io/part-of": "eks-fsdp",
                                "app.kubernetes.io/component": "jobs",
                            },
                        ),
                        automount_service_account_token=False,
                        opts=child,
                    )
                )
            aws.eks.PodIdentityAssociation(
                f"{name}-{suffix}",
                cluster_name=args.cluster_name,
                namespace=namespace,
                service_account=account,
                role_arn=role.arn,
                tags=tags,
                opts=pulumi.ResourceOptions(parent=self, depends_on=depends),
            )
        self.role_arn = role.arn
        self.register_outputs({"roleArn": self.role_arn})


# --- one role for one workload's ServiceAccount (the Alertmanager's SNS publish) -------------

POD_ROLE_TYPE_TOKEN = "eks-fsdp:infra:PodRole"
SNS_PUBLISH_ACTION = "sns:Publish"


def sns_publish_policy_document(topic_arn: str) -> str:
    """Publish to one topic and nothing else (SNS API reference, Publish: the action
    ``sns:Publish`` on the topic's ARN). A topic encrypted with a customer managed KMS key
    also needs ``kms:GenerateDataKey``/``kms:Decrypt`` on it, granted in the key's policy."""
    return json.dumps(
        {
            "Version": "2012-10-17",
            "Statement": [
                {
                    "Sid": "PublishToTheAlertTopic",
                    "Effect": "Allow",
                    "Action": SNS_PUBLISH_ACTION,
                    "Resource": topic_arn,
                }
            ],
        }
    )


@dataclass(frozen=True, kw_only=True)
class PodRoleArgs:
    """Arguments of ``PodRole``."""

    cluster_name: pulumi.Input[str]
    """EKS cluster name (resolves once the control plane exists)."""
    label: str
    """Cluster name as a plain string (role description, tags)."""
    purpose: str
    """What the role is for, in a few words (the role's description)."""
    policy: pulumi.Input[str]
    """The role's inline policy (JSON)."""
    service_account: tuple[str, str]
    """(namespace, ServiceAccount) given the role; the ServiceAccount is created elsewhere (a
    Helm chart) and may not exist yet: the association names it, EKS does not check."""
    agent: aws.eks.Addon
    """The cluster's ``eks-pod-identity-agent`` add-on (``pod_identity_agent``): the
    association is made after it."""
    tags: Mapping[str, str] | None = None
    """Extra tags on every AWS resource."""

    def __post_init__(self) -> None:
        if not _NAME.match(self.label):
            raise ValueError(f"PodRoleArgs.label: {self.label!r} is not valid")
        for value in self.service_account:
            if not _DNS_LABEL.match(value):
                raise ValueError(f"PodRoleArgs.service_account: {value!r} is not a DNS label")


class PodRole(pulumi.ComponentResource):
    """An IAM role only EKS Pod Identity may assume, its inline policy and the association of
    one ServiceAccount with it (the pattern of ``PodIdentity``, without the bucket)."""

    role_arn: pulumi.Output[str]
    """ARN of the role."""
    association: aws.eks.PodIdentityAssociation
    """The association; pods created after it get the role's credentials."""

    def __init__(
        self, name: str, args: PodRoleArgs, opts: pulumi.ResourceOptions | None = None
    ) -> None:
        super().__init__(POD_ROLE_TYPE_TOKEN, name, {}, opts)
        child = pulumi.ResourceOptions(parent=self)
        tags = {**(args.tags or {}), "eks-fsdp/cluster": args.label}
        role = aws.iam.Role(
            f"{name}-role",
            assume_role_policy=TRUST_POLICY,
            description=f"{args.purpose} of {args.label} (EKS Pod Identity)",
            tags=tags,
            opts=child,
        )
        policy = aws.iam.RolePolicy(
            f"{name}-policy", role=role.name, policy=args.policy, opts=child
        )
        namespace, account = args.service_account
        self.association = aws.eks.PodIdentityAssociation(
            f"{name}-{namespace}-{account}",
            cluster_name=args.cluster_name,
            namespace=namespace,
            service_account=account,
            role_arn=role.arn,
            tags=tags,
            opts=pulumi.ResourceOptions(parent=self, depends_on=[policy, args.agent]),
        )
        self.role_arn = role.arn
        self.register_outputs({"roleArn": self.role_arn})
