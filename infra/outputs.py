"""Stack output keys (shared by ``__main__.py`` and the tests) and the next-steps text."""

from __future__ import annotations

from collections.abc import Mapping

CLUSTER_NAME = "clusterName"
"""EKS cluster name."""
REGION = "region"
"""AWS region of the stack."""
KUBECONFIG = "kubeconfig"
"""Kubeconfig JSON (secret)."""
VPC_ID = "vpcId"
"""VPC id."""
NODE_ROLE_ARN = "nodeRoleArn"
"""IAM role of the nodes."""
OIDC_PROVIDER_ARN = "oidcProviderArn"
"""IRSA: the cluster's IAM OIDC provider."""
SYSTEM_NODE_GROUP_NAME = "systemNodeGroupName"
"""Name of the CPU nodegroup."""
GPU_NODE_GROUP_NAMES = "gpuNodeGroupNames"
"""Names of the GPU nodegroups, in config order."""
PLACEMENT_GROUP_NAMES = "placementGroupNames"
"""Placement group of each GPU nodegroup that has one ({nodegroup: group name})."""
SHARED_FILE_SYSTEM_ID = "sharedFileSystemId"
"""FSx for Lustre file system id (stacks with ``sharedStorage.type: fsx``)."""
SHARED_FILE_SYSTEM_DNS_NAME = "sharedFileSystemDnsName"
"""Its DNS name (``volumeAttributes.dnsname`` of the PersistentVolume)."""
SHARED_FILE_SYSTEM_MOUNT_NAME = "sharedFileSystemMountName"
"""Its Lustre mount name (``volumeAttributes.mountname``)."""
DATA_BUCKET_NAME = "dataBucketName"
"""The S3 bucket the cluster outlives (stacks with ``dataBucket.enabled``)."""
DATA_BUCKET_PREFIX = "dataBucketPrefix"
"""The key prefix jobs read and write (their role reaches nothing else)."""
DATA_BUCKET_URI = "dataBucketUri"
"""``s3://<bucket>/<prefix>``: the root of a job's ``s3://`` checkpoint and export URIs."""
DATA_BUCKET_KMS_KEY_ARN = "dataBucketKmsKeyArn"
"""The bucket's SSE-KMS key (``dataBucket.kmsKeyArn`` when a later stack adopts the bucket)."""
JOBS_ROLE_ARN = "jobsRoleArn"
"""IAM role the jobs' ServiceAccounts get through EKS Pod Identity."""
JOBS_SERVICE_ACCOUNT = "jobsServiceAccount"
"""``<namespace>/<name>`` of the ServiceAccount the role is associated with."""
NEXT_STEPS = "nextSteps"
"""The commands a user runs after ``pulumi up``."""


def next_steps(
    stack: str,
    cluster_name: str,
    region: str | None,
    node_counts: Mapping[str, int] | None = None,
) -> list[str]:
    """Commands to run after ``pulumi up`` (exported as ``nextSteps``).

    ``node_counts`` ({GPU nodegroup: desired size}) adds one node-count check per group: EKS
    reports a capacity-block or ODCR nodegroup ACTIVE whether or not its instances launched and
    joined, so a green ``pulumi up`` can leave zero GPU nodes.
    """
    region_flag = f" --region {region}" if region else ""
    counts = [
        f"kubectl get nodes -l eks-fsdp/nodegroup={name} --no-headers | wc -l   # expect {n}"
        for name, n in (node_counts or {}).items()
    ]
    return [
        f"pulumi stack select {stack}",
        "pulumi stack output kubeconfig --show-secrets > kubeconfig",
        "export KUBECONFIG=$PWD/kubeconfig",
        f"# or: aws eks update-kubeconfig --name {cluster_name}{region_flag}",
        "kubectl get nodes -L eks-fsdp/nodegroup -L node.kubernetes.io/instance-type",
        "kubectl get ds -n kube-system nvidia-device-plugin aws-efa-k8s-device-plugin",
        "kubectl describe nodes -l nvidia.com/gpu.present=true | grep -E 'nvidia.com/gpu|vpc.amazonaws.com/efa'",
        *counts,
    ]
