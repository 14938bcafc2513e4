"""The deploying principal's least-privilege IAM policy, generated from what the program creates.

Pure data and functions (no Pulumi import): ``ACTIONS`` maps **each resource type** the program
registers (a Pulumi type token) to the IAM actions its create, read, update and delete call;
``COMPONENT_CHILDREN`` lists what a remote component creates inside itself, where Pulumi's mocks
show nothing; ``PROGRAM_READS`` and ``DOCTOR_READS`` are the calls made outside any resource.
``policy()`` folds them into one IAM policy document; ``python -m infra.iam_policy`` prints it,
and ``docs/iam-policy.json`` is that output (``tests/infra/test_iam_policy.py`` runs the program
for every stack and fails when a registered type has no row here or the file drifts).

Action names are those of the AWS Service Authorization Reference ("Actions, resources, and
condition keys for Amazon EC2 / Amazon EKS / AWS Identity and Access Management / AWS Key
Management Service / Amazon FSx / Amazon S3 / Amazon ECR / Amazon EC2 Auto Scaling / AWS
Service Quotas / AWS STS / Amazon SQS / Amazon EventBridge"); which API calls each resource makes
follows the pulumi-aws provider (the Terraform AWS provider's resource code: create, read,
update, delete of e.g. ``internal/service/ec2/vpc_.go``) and, for the ``eks:index:Cluster``
component, pulumi/pulumi-eks ``nodejs/eks/cluster/cluster.ts`` (the service role, the cluster,
the OIDC provider, the access entries and their policy associations, the VPC CNI and kube-proxy
add-ons).

Resources are ``*`` where the action has no resource-level permission or the names are made by
Pulumi's auto-naming at ``up`` time; IAM writes are scoped to the roles the stack names
(``ROLE_NAME_PREFIXES``: Pulumi appends a random suffix to the logical name) and the managed
policies it creates (``POLICY_NAME_PREFIXES``, attached only to those roles), ``iam:PassRole``
to those roles and the services they are passed to (``iam:PassedToService``), and
``iam:CreateServiceLinkedRole`` to the services that create one on first use
(``iam:AWSServiceName``; IAM User Guide, "Service-linked role permissions"), and the writes
a service makes with the caller's permissions on its own service-linked role (FSx's role for
S3 access, ``SERVICE_LINKED_ROLES``) to that role's path, only in a policy for a stack that
creates the resource behind it (``policy(types)``).
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

VERSION = "2012-10-17"
MANAGED_POLICY_MAX_CHARS = 6144
"""IAM quota: a customer managed policy's document, whitespace not counted (IAM User Guide,
"IAM and AWS STS quotas", "Managed policy size")."""

_TAGS_EC2 = ("ec2:CreateTags", "ec2:DeleteTags")
_TAGS_EKS = ("eks:TagResource", "eks:UntagResource", "eks:ListTagsForResource")

ACTIONS: dict[str, tuple[str, ...]] = {
    # --- network (infra/network.py, infra/subnets.py) ---------------------------------------
    "aws:ec2/vpc:Vpc": (
        "ec2:CreateVpc",
        "ec2:DeleteVpc",
        "ec2:DescribeVpcs",
        "ec2:DescribeVpcAttribute",
        "ec2:ModifyVpcAttribute",
        # read: the provider reads the VPC's default network ACL, route table and security group
        "ec2:DescribeNetworkAcls",
        "ec2:DescribeRouteTables",
        "ec2:DescribeSecurityGroups",
        *_TAGS_EC2,
    ),
    "aws:ec2/subnet:Subnet": (
        "ec2:CreateSubnet",
        "ec2:DeleteSubnet",
        "ec2:DescribeSubnets",
        "ec2:ModifySubnetAttribute",
        "ec2:DescribeNetworkInterfaces",  # delete waits for the subnet's interfaces to go
        *_TAGS_EC2,
    ),
    "aws:ec2/internetGateway:InternetGateway": (
        "ec2:CreateInternetGateway",
        "ec2:AttachInternetGateway",
        "ec2:DetachInternetGateway",
        "ec2:DeleteInternetGateway",
        "ec2:DescribeInternetGateways",
        *_TAGS_EC2,
    ),
    "aws:ec2/eip:Eip": (
        "ec2:AllocateAddress",
        "ec2:ReleaseAddress",
        "ec2:DisassociateAddress",
        "ec2:DescribeAddresses",
        "ec2:DescribeAddressesAttribute",
        *_TAGS_EC2,
    ),
    "aws:ec2/natGateway:NatGateway": (
        "ec2:CreateNatGateway",
        "ec2:DeleteNatGateway",
        "ec2:DescribeNatGateways",
        *_TAGS_EC2,
    ),
    "aws:ec2/routeTable:RouteTable": (
        "ec2:CreateRouteTable",
        "ec2:DeleteRouteTable",
        "ec2:DescribeRouteTables",
        "ec2:CreateRoute",
        "ec2:ReplaceRoute",
        "ec2:DeleteRoute",
        *_TAGS_EC2,
    ),
    "aws:ec2/routeTableAssociation:RouteTableAssociation": (
        "ec2:AssociateRouteTable",
        "ec2:DisassociateRouteTable",
        "ec2:ReplaceRouteTableAssociation",
        "ec2:DescribeRouteTables",
    ),
    "aws:ec2/securityGroup:SecurityGroup": (
        "ec2:CreateSecurityGroup",
        "ec2:DeleteSecurityGroup",
        "ec2:DescribeSecurityGroups",
        # create revokes the default allow-all egress rule; delete waits for interfaces
        "ec2:RevokeSecurityGroupEgress",
        "ec2:AuthorizeSecurityGroupEgress",
        "ec2:DescribeNetworkInterfaces",
        *_TAGS_EC2,
    ),
    "aws:vpc/securityGroupIngressRule:SecurityGroupIngressRule": (
        "ec2:AuthorizeSecurityGroupIngress",
        "ec2:RevokeSecurityGroupIngress",
        "ec2:ModifySecurityGroupRules",
        "ec2:DescribeSecurityGroupRules",
        *_TAGS_EC2,
    ),
    "aws:vpc/securityGroupEgressRule:SecurityGroupEgressRule": (
        "ec2:AuthorizeSecurityGroupEgress",
        "ec2:RevokeSecurityGroupEgress",
        "ec2:ModifySecurityGroupRules",
        "ec2:DescribeSecurityGroupRules",
        *_TAGS_EC2,
    ),
    "aws:ec2/vpcEndpoint:VpcEndpoint": (
        "ec2:CreateVpcEndpoint",
        "ec2:ModifyVpcEndpoint",
        "ec2:DeleteVpcEndpoints",
        "ec2:DescribeVpcEndpoints",
        "ec2:DescribeVpcEndpointServices",
        "ec2:DescribePrefixLists",
        # interface endpoints with private DNS associate the VPC with AWS's private hosted zone
        # (Amazon VPC PrivateLink guide, "Identity and access management")
        "route53:AssociateVPCWithHostedZone",
        *_TAGS_EC2,
    ),
    # --- nodes (infra/cluster.py, infra/gpu_nodegroup.py) -----------------------------------
    "aws:ec2/launchTemplate:LaunchTemplate": (
        "ec2:CreateLaunchTemplate",
        "ec2:CreateLaunchTemplateVersion",
        "ec2:ModifyLaunchTemplate",
        "ec2:DeleteLaunchTemplate",
        "ec2:DescribeLaunchTemplates",
        "ec2:DescribeLaunchTemplateVersions",
        *_TAGS_EC2,
    ),
    "aws:ec2/placementGroup:PlacementGroup": (
        "ec2:CreatePlacementGroup",
        "ec2:DeletePlacementGroup",
        "ec2:DescribePlacementGroups",
        *_TAGS_EC2,
    ),
    "aws:eks/nodeGroup:NodeGroup": (
        "eks:CreateNodegroup",
        "eks:DescribeNodegroup",
        "eks:UpdateNodegroupConfig",
        "eks:UpdateNodegroupVersion",
        "eks:DeleteNodegroup",
        "eks:DescribeUpdate",
        # EKS checks the launch template and subnets with the caller's credentials
        "ec2:DescribeLaunchTemplateVersions",
        "ec2:DescribeSubnets",
        "iam:GetRole",
        *_TAGS_EKS,
    ),
    "aws:autoscaling/schedule:Schedule": (
        "autoscaling:PutScheduledUpdateGroupAction",
        "autoscaling:DescribeScheduledActions",
        "autoscaling:DeleteScheduledAction",
    ),
    # --- the cluster and its add-ons ---------------------------------------------------------
    "eks:index:Cluster": (),  # a component: its children are in COMPONENT_CHILDREN
    "aws:eks/cluster:Cluster": (
        "eks:CreateCluster",
        "eks:DescribeCluster",
        "eks:UpdateClusterConfig",
        "eks:UpdateClusterVersion",
        "eks:AssociateEncryptionConfig",
        "eks:DescribeUpdate",
        "eks:DeleteCluster",
        "ec2:DescribeSubnets",
        "ec2:DescribeSecurityGroups",
        "ec2:DescribeVpcs",
        # secrets encryption with the stack's KMS key (EKS User Guide, "Encrypt Kubernetes
        # secrets with KMS": the creator needs kms:DescribeKey and kms:CreateGrant)
        "kms:DescribeKey",
        "kms:CreateGrant",
        *_TAGS_EKS,
    ),
    "aws:eks/addon:Addon": (
        "eks:CreateAddon",
        "eks:DescribeAddon",
        "eks:DescribeAddonVersions",
        "eks:UpdateAddon",
        "eks:DeleteAddon",
        "eks:DescribeUpdate",
        *_TAGS_EKS,
    ),
    "aws:eks/accessEntry:AccessEntry": (
        "eks:CreateAccessEntry",
        "eks:DescribeAccessEntry",
        "eks:UpdateAccessEntry",
        "eks:DeleteAccessEntry",
        *_TAGS_EKS,
    ),
    "aws:eks/accessPolicyAssociation:AccessPolicyAssociation": (
        "eks:AssociateAccessPolicy",
        "eks:ListAssociatedAccessPolicies",
        "eks:DisassociateAccessPolicy",
    ),
    "aws:eks/podIdentityAssociation:PodIdentityAssociation": (
        "eks:CreatePodIdentityAssociation",
        "eks:DescribePodIdentityAssociation",
        "eks:UpdatePodIdentityAssociation",
        "eks:DeletePodIdentityAssociation",
        *_TAGS_EKS,
    ),
    # --- IAM (scoped to the stack's roles in policy()) ---------------------------------------
    "aws:iam/role:Role": (
        "iam:CreateRole",
        "iam:GetRole",
        "iam:UpdateRole",
        "iam:UpdateAssumeRolePolicy",
        "iam:DeleteRole",
        "iam:TagRole",
        "iam:UntagRole",
        "iam:ListRolePolicies",
        "iam:ListAttachedRolePolicies",
        "iam:ListInstanceProfilesForRole",
    ),
    "aws:iam/rolePolicy:RolePolicy": (
        "iam:PutRolePolicy",
        "iam:GetRolePolicy",
        "iam:DeleteRolePolicy",
    ),
    "aws:iam/rolePolicyAttachment:RolePolicyAttachment": (
        "iam:AttachRolePolicy",
        "iam:DetachRolePolicy",
        "iam:ListAttachedRolePolicies",
    ),
    "aws:iam/policy:Policy": (
        # infra/karpenter.py: the controller's customer managed policies (scoped to
        # POLICY_NAME_PREFIXES in policy()); an update writes a new default version and drops
        # the oldest, a delete drops the non-default versions first
        "iam:CreatePolicy",
        "iam:GetPolicy",
        "iam:GetPolicyVersion",
        "iam:ListPolicyVersions",
        "iam:CreatePolicyVersion",
        "iam:DeletePolicyVersion",
        "iam:DeletePolicy",
        "iam:TagPolicy",
        "iam:UntagPolicy",
    ),
    "aws:iam/openIdConnectProvider:OpenIdConnectProvider": (
        "iam:CreateOpenIDConnectProvider",
        "iam:GetOpenIDConnectProvider",
        "iam:UpdateOpenIDConnectProviderThumbprint",
        "iam:AddClientIDToOpenIDConnectProvider",
        "iam:RemoveClientIDFromOpenIDConnectProvider",
        "iam:TagOpenIDConnectProvider",
        "iam:UntagOpenIDConnectProvider",
        "iam:DeleteOpenIDConnectProvider",
    ),
    # --- Karpenter's interruption queue and its rules (infra/karpenter.py) --------------------
    "aws:sqs/queue:Queue": (
        "sqs:CreateQueue",
        "sqs:DeleteQueue",
        "sqs:GetQueueAttributes",
        "sqs:SetQueueAttributes",
        "sqs:GetQueueUrl",
        "sqs:TagQueue",
        "sqs:UntagQueue",
        "sqs:ListQueueTags",
    ),
    "aws:sqs/queuePolicy:QueuePolicy": (
        "sqs:SetQueueAttributes",  # the policy is the queue's Policy attribute
        "sqs:GetQueueAttributes",
    ),
    "aws:cloudwatch/eventRule:EventRule": (
        "events:PutRule",
        "events:DescribeRule",
        "events:DeleteRule",
        "events:EnableRule",
        "events:DisableRule",
        "events:ListTargetsByRule",  # delete waits for the rule's targets to go
        "events:TagResource",
        "events:UntagResource",
        "events:ListTagsForResource",
    ),
    "aws:cloudwatch/eventTarget:EventTarget": (
        "events:PutTargets",
        "events:RemoveTargets",
        "events:ListTargetsByRule",
    ),
    # --- keys, storage, registry ---------------------------------------------------------------
    "aws:kms/key:Key": (
        "kms:CreateKey",
        "kms:DescribeKey",
        "kms:GetKeyPolicy",
        "kms:PutKeyPolicy",
        "kms:GetKeyRotationStatus",
        "kms:EnableKeyRotation",
        "kms:DisableKeyRotation",
        "kms:UpdateKeyDescription",
        "kms:ListResourceTags",
        "kms:TagResource",
        "kms:UntagResource",
        "kms:ScheduleKeyDeletion",
    ),
    "aws:fsx/lustreFileSystem:LustreFileSystem": (
        "fsx:CreateFileSystem",
        "fsx:DescribeFileSystems",
        "fsx:UpdateFileSystem",
        "fsx:DeleteFileSystem",
        "fsx:TagResource",
        "fsx:UntagResource",
        "fsx:ListTagsForResource",
        # FSx validates the network with the caller's credentials; PERSISTENT_2 encrypts with
        # the stack's key (FSx for Lustre User Guide, "Identity-based policy examples")
        "ec2:DescribeSubnets",
        "ec2:DescribeVpcs",
        "ec2:DescribeSecurityGroups",
        "ec2:DescribeNetworkInterfaces",
        "kms:DescribeKey",
        "kms:CreateGrant",
    ),
    # create reads the bucket's policy and listing (the CloudFormation resource schema of
    # AWS::FSx::DataRepositoryAssociation, handlers create/read/update/delete); the IAM calls on
    # FSx's service-linked role for S3 access are in SERVICE_LINKED_ROLES. s3:PutBucketPolicy is
    # left out on purpose: with iam:AttachRolePolicy/PutRolePolicy on that role FSx takes the
    # role path, and only without them does it edit the bucket policy the stack owns (FSx for
    # Lustre User Guide, "Setting up": "How FSx for Lustre checks for access to linked S3
    # buckets")
    "aws:fsx/dataRepositoryAssociation:DataRepositoryAssociation": (
        "fsx:CreateDataRepositoryAssociation",
        "fsx:DescribeDataRepositoryAssociations",
        "fsx:UpdateDataRepositoryAssociation",
        "fsx:DeleteDataRepositoryAssociation",
        "fsx:TagResource",
        "fsx:UntagResource",
        "fsx:ListTagsForResource",
        "s3:ListBucket",
        "s3:GetBucketPolicy",
    ),
    "aws:s3/bucket:Bucket": (
        "s3:CreateBucket",
        "s3:DeleteBucket",
        "s3:ListBucket",
        "s3:GetBucketLocation",
        # read: the provider reads every bucket sub-configuration
        "s3:GetBucketAcl",
        "s3:GetBucketCORS",
        "s3:GetBucketWebsite",
        "s3:GetAccelerateConfiguration",
        "s3:GetBucketRequestPayment",
        "s3:GetBucketLogging",
        "s3:GetReplicationConfiguration",
        "s3:GetBucketObjectLockConfiguration",
        "s3:GetBucketTagging",
        "s3:PutBucketTagging",
        "s3:GetBucketPolicy",
        "s3:GetBucketVersioning",
        "s3:GetEncryptionConfiguration",
        "s3:GetLifecycleConfiguration",
    ),
    "aws:s3/bucketLifecycleConfiguration:BucketLifecycleConfiguration": (
        "s3:PutLifecycleConfiguration",  # also the action of DeleteBucketLifecycle
        "s3:GetLifecycleConfiguration",
    ),
    "aws:s3/bucketOwnershipControls:BucketOwnershipControls": (
        "s3:PutBucketOwnershipControls",
        "s3:GetBucketOwnershipControls",
    ),
    "aws:s3/bucketPolicy:BucketPolicy": (
        "s3:PutBucketPolicy",
        "s3:GetBucketPolicy",
        "s3:DeleteBucketPolicy",
    ),
    "aws:s3/bucketPublicAccessBlock:BucketPublicAccessBlock": (
        "s3:PutBucketPublicAccessBlock",
        "s3:GetBucketPublicAccessBlock",
    ),
    "aws:s3/bucketServerSideEncryptionConfiguration:BucketServerSideEncryptionConfiguration": (
        "s3:PutEncryptionConfiguration",  # also the action of DeleteBucketEncryption
        "s3:GetEncryptionConfiguration",
    ),
    "aws:s3/bucketVersioning:BucketVersioning": (
        "s3:PutBucketVersioning",
        "s3:GetBucketVersioning",
    ),
    "aws:ecr/repository:Repository": (
        "ecr:CreateRepository",
        "ecr:DescribeRepositories",
        "ecr:PutImageTagMutability",
        "ecr:PutImageScanningConfiguration",
        "ecr:ListTagsForResource",
        "ecr:TagResource",
        "ecr:UntagResource",
        "ecr:DeleteRepository",
    ),
    "aws:ecr/lifecyclePolicy:LifecyclePolicy": (
        "ecr:PutLifecyclePolicy",
        "ecr:GetLifecyclePolicy",
        "ecr:DeleteLifecyclePolicy",
    ),
    # docker-build pushes the training image and its registry cache with a token from
    # ecr:GetAuthorizationToken (PROGRAM_READS); ECR User Guide, "Pushing an image"
    "docker-build:index:Image": (
        "ecr:BatchCheckLayerAvailability",
        "ecr:InitiateLayerUpload",
        "ecr:UploadLayerPart",
        "ecr:CompleteLayerUpload",
        "ecr:PutImage",
        "ecr:BatchGetImage",
        "ecr:GetDownloadUrlForLayer",
    ),
}
"""Per resource type: the IAM actions of its create, read, update and delete."""

COMPONENT_CHILDREN: dict[str, tuple[str, ...]] = {
    # pulumi/pulumi-eks nodejs/eks/cluster/cluster.ts with authenticationMode API,
    # createOidcProvider, skipDefaultNodeGroup and skipDefaultSecurityGroups
    "eks:index:Cluster": (
        "aws:iam/role:Role",
        "aws:iam/rolePolicyAttachment:RolePolicyAttachment",
        "aws:eks/cluster:Cluster",
        "aws:iam/openIdConnectProvider:OpenIdConnectProvider",
        "aws:eks/accessEntry:AccessEntry",
        "aws:eks/accessPolicyAssociation:AccessPolicyAssociation",
        "aws:eks/addon:Addon",
    ),
}
"""What a remote component creates inside itself (Pulumi's mocks do not run it)."""

NO_AWS_CALLS = ("kubernetes:", "pulumi:", "eks-fsdp:")
"""Type prefixes that make no AWS call: Kubernetes objects (the cluster's API, reached through
the EKS access entry), providers, and the project's own components."""

PROGRAM_READS = (
    "sts:GetCallerIdentity",  # the provider's credential check; aws.get_caller_identity
    "ecr:GetAuthorizationToken",  # workloads/training_image.py: the push credentials
    "ecr:DescribeImages",  # workloads/training_image.py: aws.ecr.get_image
    "ec2:DescribeCapacityReservations",  # doctor/preview.py: the check at preview time
)
"""Calls the program makes outside any resource."""

DOCTOR_READS = (
    "ec2:DescribeRegions",
    "ec2:DescribeAvailabilityZones",
    "ec2:DescribeCapacityReservations",
    "ec2:DescribeAddresses",
    "ec2:DescribeVpcs",
    "servicequotas:GetServiceQuota",
)
"""``eks-fsdp doctor``'s calls (doctor/aws.py)."""

ROLE_NAME_PREFIXES = (
    "cluster-node-role-",  # infra/cluster.py: the nodes' role
    "cluster-ebs-csi-role-",  # infra/cluster.py: the EBS CSI driver's role
    "pod-identity-role-",  # infra/pod_identity.py: the data bucket's role
    "alertmanager-sns-role-",  # infra/pod_identity.py PodRole: Alertmanager's SNS publish
    "cluster-eks-",  # pulumi-eks: the cluster's service role (<name>-eksRole-role-<suffix>)
    "KarpenterNodeRole-",  # infra/karpenter.py: Karpenter's nodes (upstream's name, no suffix)
    "karpenter-controller-role-",  # infra/karpenter.py: the Karpenter controller (IRSA)
)
"""Role names the stack creates: the logical name plus Pulumi's random suffix, or the name
the stack gives (the Karpenter node role: ``KarpenterNodeRole-<clusterName>``)."""

POLICY_NAME_PREFIXES = ("karpenter-",)
"""Customer managed policies the stack creates (infra/karpenter.py: ``karpenter-<part>`` plus
Pulumi's random suffix); the stack may create, version, delete and attach only these."""

PASSED_TO = ("ec2.amazonaws.com", "eks.amazonaws.com", "pods.eks.amazonaws.com")
"""Services the stack's roles are passed to: EKS (cluster and node groups), EC2 (the node
instance profile EKS makes), EKS Pod Identity."""

SERVICE_LINKED = (
    "autoscaling.amazonaws.com",
    "eks.amazonaws.com",
    "eks-nodegroup.amazonaws.com",
    "fsx.amazonaws.com",
)
"""Services whose service-linked role is created on first use by the caller: EKS, EKS managed
node groups, FSx, EC2 Auto Scaling (each service's guide, "Using service-linked roles")."""

FSX_S3_SERVICE = "s3.data-source.lustre.fsx.amazonaws.com"
SERVICE_LINKED_ROLES: dict[str, tuple[str, str, tuple[str, ...]]] = {
    # FSx for Lustre User Guide, "Setting up" ("Adding permissions to use data repositories in
    # Amazon S3": iam:CreateServiceLinkedRole, iam:AttachRolePolicy and iam:PutRolePolicy on
    # arn:aws:iam::*:role/aws-service-role/s3.data-source.lustre.fsx.amazonaws.com/*) and
    # "Using service-linked roles for Amazon FSx" (AWSServiceRoleForFSxS3Access_<fs id>, one per
    # file system linked to a bucket)
    "aws:fsx/dataRepositoryAssociation:DataRepositoryAssociation": (
        "IamFsxS3AccessRole",
        FSX_S3_SERVICE,
        ("iam:AttachRolePolicy", "iam:PutRolePolicy"),
    ),
}
"""Per resource type that needs one: (statement id, service) of the service-linked role the service creates (and writes
the policy of) with the caller's permissions, and the IAM actions on that role's path. Its
statements are in the policy only when such a type is."""

_IAM_PREFIX = "iam:"


def required_types(registered: set[str]) -> set[str]:
    """The AWS-calling types behind ``registered`` (component children expanded)."""
    out = set()
    for typ in registered:
        if typ.startswith(NO_AWS_CALLS):
            continue
        out.add(typ)
        out.update(COMPONENT_CHILDREN.get(typ, ()))
    return out


def _role_arns() -> list[str]:
    return [f"arn:aws:iam::*:role/{p}*" for p in ROLE_NAME_PREFIXES]


def _policy_arns() -> list[str]:
    return [f"arn:aws:iam::*:policy/{p}*" for p in POLICY_NAME_PREFIXES]


def _service_role_arn(service: str) -> str:
    return f"arn:aws:iam::*:role/aws-service-role/{service}/*"


def policy(types: set[str] | None = None) -> dict:
    """The policy document: one statement per service (IAM split by what it acts on).

    ``types``: the AWS-calling types of one stack (``required_types`` of what it registers);
    None = every row (``docs/iam-policy.json``, which holds whatever any stack may create)."""
    rows = ACTIONS if types is None else {t: r for t, r in ACTIONS.items() if t in types}
    actions = {a for row in rows.values() for a in row}
    actions.update(PROGRAM_READS, DOCTOR_READS)
    linked = [role for t, role in SERVICE_LINKED_ROLES.items() if t in rows]
    by_service: dict[str, set[str]] = {}
    for action in actions:
        by_service.setdefault(action.split(":", 1)[0], set()).add(action)
    iam = by_service.pop("iam", set())
    statements = [
        {
            "Sid": f"{service.capitalize()}",
            "Effect": "Allow",
            "Action": sorted(names),
            "Resource": "*",
        }
        for service, names in sorted(by_service.items())
    ]
    oidc = {a for a in iam if "OpenIDConnectProvider" in a}
    attach = {"iam:AttachRolePolicy", "iam:DetachRolePolicy"} & iam
    managed = set(ACTIONS["aws:iam/policy:Policy"]) & iam
    statements += [
        {
            "Sid": "IamStackRoles",
            "Effect": "Allow",
            "Action": sorted(iam - oidc - attach - managed),
            "Resource": _role_arns(),
        },
        {
            "Sid": "IamAttachAwsManagedPolicies",
            "Effect": "Allow",
            "Action": sorted(attach),
            "Resource": _role_arns(),
            "Condition": {"ArnLike": {"iam:PolicyARN": "arn:aws:iam::aws:policy/*"}},
        },
        {
            "Sid": "IamStackPolicies",
            "Effect": "Allow",
            "Action": sorted(managed),
            "Resource": _policy_arns(),
        },
        {
            "Sid": "IamAttachStackPolicies",
            "Effect": "Allow",
            "Action": sorted(attach) if managed else [],
            "Resource": _role_arns(),
            "Condition": {"ArnLike": {"iam:PolicyARN": _policy_arns()}},
        },
        {
            "Sid": "IamEksOidcProvider",
            "Effect": "Allow",
            "Action": sorted(oidc),
            "Resource": "arn:aws:iam::*:oidc-provider/oidc.eks.*",
        },
        {
            "Sid": "IamPassStackRoles",
            "Effect": "Allow",
            "Action": "iam:PassRole",
            "Resource": _role_arns(),
            "Condition": {"StringEquals": {"iam:PassedToService": list(PASSED_TO)}},
        },
        {
            "Sid": "IamServiceLinkedRoles",
            "Effect": "Allow",
            "Action": "iam:CreateServiceLinkedRole",
            "Resource": "*",
            "Condition": {
                "StringEquals": {
                    "iam:AWSServiceName": [*SERVICE_LINKED, *(s for _, s, _ in linked)]
                }
            },
        },
    ]
    statements += [
        {"Sid": sid, "Effect": "Allow", "Action": sorted(names), "Resource": _service_role_arn(svc)}
        for sid, svc, names in linked
    ]
    statements = [s for s in statements if s["Action"]]
    return {"Version": VERSION, "Statement": statements}


def size(document: dict) -> int:
    """Characters IAM counts against the managed-policy quota (whitespace excluded)."""
    return len(json.dumps(document, separators=(",", ":")))


def parts(document: dict, limit: int = MANAGED_POLICY_MAX_CHARS) -> list[dict]:
    """``document``'s statements packed, in order, into documents of at most ``limit``
    characters each: one managed policy each (a principal holds up to 10 by default)."""
    out: list[dict] = [{"Version": VERSION, "Statement": []}]
    for statement in document["Statement"]:
        if size({**out[-1], "Statement": [*out[-1]["Statement"], statement]}) > limit:
            out.append({"Version": VERSION, "Statement": []})
        out[-1]["Statement"].append(statement)
    return out


def _text(document: dict) -> str:
    return json.dumps(document, indent=2) + "\n"


def files() -> dict[str, str]:
    """The files under ``docs/``: ``iam-policy.json`` (the whole policy, e.g. inline on a role,
    whose quota is 10,240 characters) and, when it is over one managed policy's quota,
    ``iam-policy-<n>.json``, the managed policies to attach together."""
    document = policy()
    out = {"iam-policy.json": _text(document)}
    if size(document) > MANAGED_POLICY_MAX_CHARS:
        for n, part in enumerate(parts(document), 1):
            out[f"iam-policy-{n}.json"] = _text(part)
    return out


def main(argv: list[str] | None = None) -> int:
    """``python -m infra.iam_policy [DIR]``: print the policy, or write ``files()`` into DIR."""
    args = sys.argv[1:] if argv is None else argv
    if not args:
        print(_text(policy()), end="")
        return 0
    folder = Path(args[0])
    for name, text in files().items():
        (folder / name).write_text(text)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
