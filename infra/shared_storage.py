"""``SharedStorage``: an FSx for Lustre file system every worker pod can mount.

torch.distributed.checkpoint writes one shard per rank; a checkpoint is loadable (``--resume``)
only where every pod sees every shard, so multi-node jobs keep their checkpoints on one shared
file system. This component owns that file system and its network access:

- an ``aws.fsx.LustreFileSystem`` (SCRATCH_2 or PERSISTENT_2, Lustre ``versions.FSX_LUSTRE_VERSION``)
  in the private subnet of one zone (the job's nodegroup zone: no cross-zone traffic);
- a security group admitting Lustre (TCP 988 and 1018-1023) from the client security groups
  (the cluster security group every node carries) and between the file servers themselves;
- on each client security group, inbound TCP 988 and 1018-1023 from the file system's
  security group: Lustre servers also open connections to the clients (FSx for Lustre user
  guide, "File system access control with Amazon VPC": the client rules go both ways).

Write-through (``sharedStorage.dataRepositoryPrefix``, PERSISTENT_2 only): an
``aws.fsx.DataRepositoryAssociation`` links the whole file system (``/``) to
``s3://<data bucket>/<prefix>/`` with automatic import and export of new, changed and deleted
files (FSx for Lustre user guide, "Automatically import updates from your S3 bucket" and
"Automatically export updates to your S3 bucket"): checkpoints written to the claim reach the
bucket without the job knowing, and a new file system imports the bucket's listing lazily
(``batch_import_meta_data_on_create``), so ``--resume`` on a fresh cluster finds the last
checkpoint. Export is asynchronous: docs/durable-data.md says how to wait for it before a
``pulumi destroy``. Deleting the association keeps the bucket's data
(``delete_data_in_filesystem`` false).

Encryption at rest: FSx for Lustre encrypts every file system at rest; SCRATCH_2 with an
AWS-owned key (no ``kms_key_id`` accepted), PERSISTENT_2 with ``kms_key_id`` (this component
passes a customer-managed key with rotation on). Data in transit between clients and
SCRATCH_2/PERSISTENT_2 servers is encrypted on Nitro instances (p4de, p5).

The Kubernetes side (the FSx CSI driver add-on, a static PersistentVolume and its claim) lives
in ``infra.cluster`` and ``workloads.checkpoint_volume``; they consume ``file_system_id``,
``dns_name`` and ``mount_name``.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import pulumi
import pulumi_aws as aws

from infra import versions
from infra.config import SharedStorageConfig

TYPE_TOKEN = "eks-fsdp:infra:SharedStorage"
LUSTRE_PORTS: tuple[tuple[int, int], ...] = ((988, 988), (1018, 1023))
"""TCP port ranges FSx for Lustre clients and servers talk on."""

DATA_REPOSITORY_EVENTS = ("NEW", "CHANGED", "DELETED")
"""File events imported from and exported to the linked bucket (all three: the file system and
the prefix stay mirrors of each other; FSx API reference, ``AutoExportPolicy.Events``)."""

_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_-]{0,99}$")


@dataclass(frozen=True, kw_only=True)
class SharedStorageArgs:
    """Arguments of ``SharedStorage``."""

    storage: SharedStorageConfig
    """The validated ``sharedStorage`` config; its ``type`` must be ``fsx``."""
    cluster_name: str
    """EKS cluster name (tags, security group name)."""
    vpc_id: pulumi.Input[str]
    """VPC of the cluster."""
    subnet_id: pulumi.Input[str]
    """Private subnet of ``storage.availability_zone`` (FSx for Lustre takes exactly one)."""
    client_security_group_ids: Sequence[pulumi.Input[str]]
    """Security groups of the nodes that mount the file system (the cluster security group)."""
    data_bucket_name: pulumi.Input[str] | None = None
    """The data bucket (``storage.data_repository_prefix`` set: the association's target)."""
    tags: Mapping[str, str] | None = None
    """Extra tags on every AWS resource."""

    def __post_init__(self) -> None:
        if not isinstance(self.storage, SharedStorageConfig) or not self.storage.is_fsx:
            raise ValueError("SharedStorageArgs.storage: expected a sharedStorage of type fsx")
        if not self.storage.availability_zone:
            raise ValueError("SharedStorageArgs.storage: availability_zone is not set")
        if not _NAME.match(self.cluster_name):
            raise ValueError(f"SharedStorageArgs.cluster_name: {self.cluster_name!r} is not valid")
        if not self.client_security_group_ids:
            raise ValueError(
                "SharedStorageArgs.client_security_group_ids: at least one client security group"
            )
        if self.storage.links_data_bucket and self.data_bucket_name is None:
            raise ValueError(
                "SharedStorageArgs.data_bucket_name: required with storage.data_repository_prefix"
            )


class SharedStorage(pulumi.ComponentResource):
    """FSx for Lustre file system + the security group that lets the nodes mount it."""

    file_system_id: pulumi.Output[str]
    """FSx file system id (``fs-...``): the PersistentVolume's ``volumeHandle``."""
    dns_name: pulumi.Output[str]
    """DNS name the clients mount (``volumeAttributes.dnsname``)."""
    mount_name: pulumi.Output[str]
    """Lustre mount name (``volumeAttributes.mountname``)."""
    security_group_id: pulumi.Output[str]
    """Security group of the file system's network interfaces."""
    availability_zone: str
    """Zone of the file system."""
    storage_capacity_gib: int
    """Capacity of the file system, GiB (the PersistentVolume's capacity)."""

    def __init__(
        self, name: str, args: SharedStorageArgs, opts: pulumi.ResourceOptions | None = None
    ) -> None:
        super().__init__(TYPE_TOKEN, name, {}, opts)
        child = pulumi.ResourceOptions(parent=self)
        storage = args.storage
        tags = {**(args.tags or {}), "eks-fsdp/cluster": args.cluster_name}

        sg = aws.ec2.SecurityGroup(
            f"{name}-sg",
            vpc_id=args.vpc_id,
            description="FSx for Lustre: Lustre traffic from the cluster nodes",
            tags={**tags, "Name": f"{args.cluster_name}-fsx-lustre"},
            opts=child,
        )
        for low, high in LUSTRE_PORTS:
            ports = f"{low}" if low == high else f"{low}-{high}"
            for i, client in enumerate(args.client_security_group_ids):
                aws.vpc.SecurityGroupIngressRule(
                    f"{name}-lustre-{ports}-client-{i}",
                    security_group_id=sg.id,
                    referenced_security_group_id=client,
                    ip_protocol="tcp",
                    from_port=low,
                    to_port=high,
                    description=f"Lustre {ports} from the cluster nodes",
                    opts=child,
                )
            for i, client in enumerate(args.client_security_group_ids):
                aws.vpc.SecurityGroupIngressRule(
                    f"{name}-lustre-{ports}-to-client-{i}",
                    security_group_id=client,
                    referenced_security_group_id=sg.id,
                    ip_protocol="tcp",
                    from_port=low,
                    to_port=high,
                    description=f"Lustre {ports} from the FSx file servers",
                    opts=child,
                )
            aws.vpc.SecurityGroupIngressRule(
                f"{name}-lustre-{ports}-self",
                security_group_id=sg.id,
                referenced_security_group_id=sg.id,
                ip_protocol="tcp",
                from_port=low,
                to_port=high,
                description=f"Lustre {ports} between the file servers",
                opts=child,
            )
        aws.vpc.SecurityGroupEgressRule(
            f"{name}-egress-all",
            security_group_id=sg.id,
            cidr_ipv4="0.0.0.0/0",
            ip_protocol="-1",
            description="replies to Lustre clients",
            opts=child,
        )

        persistent = storage.deployment_type == "PERSISTENT_2"
        kms_key = (
            aws.kms.Key(
                f"{name}-key",
                description=f"FSx for Lustre checkpoints of {args.cluster_name}",
                enable_key_rotation=True,
                deletion_window_in_days=30,
                tags=tags,
                opts=child,
            )
            if persistent
            else None
        )
        fs = aws.fsx.LustreFileSystem(
            f"{name}-lustre",
            storage_capacity=storage.storage_capacity_gib,
            deployment_type=storage.deployment_type,
            per_unit_storage_throughput=storage.per_unit_storage_throughput if persistent else None,
            file_system_type_version=versions.FSX_LUSTRE_VERSION,
            storage_type="SSD",
            kms_key_id=kms_key.arn if kms_key is not None else None,
            subnet_ids=args.subnet_id,
            security_group_ids=[sg.id],
            tags={**tags, "Name": f"{args.cluster_name}-checkpoints"},
            opts=child,
        )
        self.data_repository_association: aws.fsx.DataRepositoryAssociation | None = None
        if storage.data_repository_prefix is not None:
            events = list(DATA_REPOSITORY_EVENTS)
            self.data_repository_association = aws.fsx.DataRepositoryAssociation(
                f"{name}-data-repository",
                file_system_id=fs.id,
                file_system_path="/",
                data_repository_path=pulumi.Output.concat(
                    "s3://", args.data_bucket_name, "/", storage.data_repository_prefix, "/"
                ),
                batch_import_meta_data_on_create=True,
                delete_data_in_filesystem=False,
                s3=aws.fsx.DataRepositoryAssociationS3Args(
                    auto_import_policy=aws.fsx.DataRepositoryAssociationS3AutoImportPolicyArgs(
                        events=events
                    ),
                    auto_export_policy=aws.fsx.DataRepositoryAssociationS3AutoExportPolicyArgs(
                        events=events
                    ),
                ),
                tags=tags,
                opts=child,
            )
        self.file_system_id = fs.id
        self.dns_name = fs.dns_name
        self.mount_name = fs.mount_name
        self.security_group_id = sg.id
        self.availability_zone = storage.availability_zone or ""
        self.storage_capacity_gib = storage.storage_capacity_gib
        self.register_outputs(
            {
                "fileSystemId": self.file_system_id,
                "dnsName": self.dns_name,
                "mountName": self.mount_name,
                "securityGroupId": self.security_group_id,
            }
        )
