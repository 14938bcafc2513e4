"""``DataBucket``: the S3 bucket the cluster outlives (checkpoints, exports, datasets).

``pulumi destroy`` of a cluster between reservations must not take the results of the training
with it, so the bucket lives apart from everything else the stack builds:

- created (``dataBucket.name`` unset): an ``aws.s3.Bucket`` named
  ``<cluster>-data-<account>-<region>`` (deterministic: a second stack of the same cluster name
  cannot silently start an empty bucket beside a retained one; it fails and is told to adopt)
  with its own customer-managed KMS key (rotation on) as the default encryption (SSE-KMS,
  S3 Bucket Key on: S3 makes each object's data key from a short-lived bucket-level key instead
  of asking KMS for every object, so far fewer KMS requests, S3 user guide "Reducing the cost
  of SSE-KMS with Amazon S3 Bucket Keys"; the encryption context is then the bucket's ARN, not
  the object's, which the key policy matches), every public-access block
  on, ACLs off (``BucketOwnerEnforced``), a bucket policy that denies any request made without
  TLS (``aws:SecureTransport`` false; S3 user guide, "Security best practices for Amazon S3":
  "Enforce encryption of data in transit"), versioning with a lifecycle that expires old
  checkpoints and noncurrent versions (after a day under the checkpoint prefix) and aborts
  abandoned multipart uploads;
- adopted (``dataBucket.name`` set): an existing bucket, taken by name; the stack declares
  nothing on it (its owner's settings stay as they are) and only grants the jobs access.

Protection: unless the stack says ``dataBucket.protect: false``, the bucket, its key and its
settings carry ``protect=True`` (``pulumi destroy`` refuses them; ``pulumi destroy
--exclude-protected`` destroys everything else, Pulumi CLI ``pulumi destroy`` reference) and
``retain_on_delete=True`` (if they are ever unprotected and deleted from the stack, AWS keeps
them). The key must outlive the bucket: without it every object is unreadable.

Versioning, why: the jobs' role may delete objects (DCP keeps two checkpoints and removes the
older ones; the FSx association exports deletions), so a bug or a mistyped ``rm -r`` on the
file system would otherwise erase exports for good. Noncurrent versions expire after
``NONCURRENT_VERSION_DAYS``, which bounds what the safety net costs; under the checkpoint
prefix after ``CHECKPOINT_NONCURRENT_VERSION_DAYS``: a job re-saves and prunes checkpoints all
the time (DCP keeps two), and every shard it overwrote or deleted would otherwise stay billed
for the whole undo window. The same holds under the file system's write-through prefix
(``DataBucketArgs.write_through_prefix``), where the association exports the checkpoints of
jobs writing to the shared file system (current versions there are not expired: that prefix
also holds outputs). Where the two rules overlap S3 honours the shorter expiration (S3
user guide, "How Amazon S3 handles conflicts in lifecycle configurations").

Pulumi AWS 7 names (pulumi-aws 7.51): ``aws.s3.Bucket`` is the former ``BucketV2`` and the
bucket's settings are separate resources (``BucketServerSideEncryptionConfiguration``,
``BucketVersioning``, ``BucketLifecycleConfiguration``...); the ``...V2`` classes are deprecated
aliases of them (``pulumi_aws/s3/bucket_versioning_v2.py``: "deprecated in favor of
aws.s3/bucketversioning.BucketVersioning").
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from dataclasses import dataclass

import pulumi
import pulumi_aws as aws

from infra.config import DataBucketConfig, bucket_name_problem

TYPE_TOKEN = "eks-fsdp:infra:DataBucket"
NONCURRENT_VERSION_DAYS = 7
"""Days a replaced or deleted object's old version is kept (the undo window)."""
CHECKPOINT_NONCURRENT_VERSION_DAYS = 1
"""The same under ``dataBucket.checkpointPrefix``: pruned checkpoints are not kept a week."""
ABORT_MULTIPART_DAYS = 2
"""Days after which an unfinished multipart upload (a save killed mid-upload) is removed."""
FSX_S3_ACCESS_ROLE = (
    "role/aws-service-role/s3.data-source.lustre.fsx.amazonaws.com/AWSServiceRoleForFSxS3Access_*"
)
"""The service-linked roles FSx for Lustre reads and writes a linked bucket with, one per file
system (``..._fs-<id>``). A bucket under SSE-KMS with a customer-managed key must let them use
the key (FSx for Lustre user guide, "Working with server-side encrypted Amazon S3 buckets").
The key policy names them by pattern (``aws:PrincipalArn``), so the key does not wait for a file
system and any file system of the account linked to this bucket can use it."""

_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_-]{0,99}$")


def bucket_name(cluster_name: str, account: str, region: str) -> str:
    """``<cluster>-data-<account>-<region>``: the cluster name lowercased, underscores as
    hyphens, cut so that the whole is at most 63 characters (S3 bucket naming rules)."""
    tail = f"-data-{account}-{region}"
    base = cluster_name.lower().replace("_", "-")[: 63 - len(tail)].strip("-")
    return f"{base}{tail}"


def tls_only_policy(bucket_arn: str) -> str:
    """Deny every request to the bucket and its objects that does not use TLS."""
    return json.dumps(
        {
            "Version": "2012-10-17",
            "Statement": [
                {
                    "Sid": "DenyInsecureTransport",
                    "Effect": "Deny",
                    "Principal": "*",
                    "Action": "s3:*",
                    "Resource": [bucket_arn, f"{bucket_arn}/*"],
                    "Condition": {"Bool": {"aws:SecureTransport": "false"}},
                }
            ],
        }
    )


def key_policy(partition: str, account: str, region: str, bucket_name: str) -> str:
    """The bucket key's policy: the account administers it through IAM (the AWS default key
    policy statement, which lets IAM policies such as the jobs' role grant its use), and the FSx
    S3-access service-linked roles use it through S3 for this bucket only."""
    return json.dumps(
        {
            "Version": "2012-10-17",
            "Statement": [
                {
                    "Sid": "AccountAdministersThroughIam",
                    "Effect": "Allow",
                    "Principal": {"AWS": f"arn:{partition}:iam::{account}:root"},
                    "Action": "kms:*",
                    "Resource": "*",
                },
                {
                    "Sid": "FsxLinkedFileSystemsThroughS3",
                    "Effect": "Allow",
                    "Principal": {"AWS": "*"},
                    "Action": [
                        "kms:Encrypt",
                        "kms:Decrypt",
                        "kms:ReEncrypt*",
                        "kms:GenerateDataKey*",
                        "kms:DescribeKey",
                    ],
                    "Resource": "*",
                    "Condition": {
                        "ArnLike": {
                            "aws:PrincipalArn": f"arn:{partition}:iam::{account}:{FSX_S3_ACCESS_ROLE}"
                        },
                        "StringEquals": {
                            "kms:CallerAccount": account,
                            "kms:ViaService": f"s3.{region}.amazonaws.com",
                        },
                        # With S3 Bucket Keys the encryption context is the bucket's ARN,
                        # not an object's (``bucket/*`` would never match): S3 user guide,
                        # "Configuring your bucket to use an S3 Bucket Key with SSE-KMS"
                        "StringLike": {
                            "kms:EncryptionContext:aws:s3:arn": f"arn:{partition}:s3:::{bucket_name}"
                        },
                    },
                },
            ],
        }
    )


@dataclass(frozen=True, kw_only=True)
class DataBucketArgs:
    """Arguments of ``DataBucket``."""

    bucket: DataBucketConfig
    """The validated ``dataBucket`` config; ``enabled`` must be true."""
    cluster_name: str
    """EKS cluster name (bucket name prefix, tags)."""
    region: str
    """AWS region of the stack (the key policy's ``kms:ViaService``)."""
    tags: Mapping[str, str] | None = None
    """Extra tags on every AWS resource."""
    write_through_prefix: str | None = None
    """``sharedStorage.dataRepositoryPrefix`` when the file system writes through to this
    bucket: its checkpoints are re-saved and pruned there too (through the association's
    export), so its noncurrent versions expire after ``CHECKPOINT_NONCURRENT_VERSION_DAYS``."""

    def __post_init__(self) -> None:
        if not isinstance(self.bucket, DataBucketConfig) or not self.bucket.enabled:
            raise ValueError("DataBucketArgs.bucket: expected an enabled dataBucket config")
        if not _NAME.match(self.cluster_name):
            raise ValueError(f"DataBucketArgs.cluster_name: {self.cluster_name!r} is not valid")
        if not re.fullmatch(r"[a-z]{2}(-[a-z]+)+-\d", self.region or ""):
            raise ValueError(f"DataBucketArgs.region: {self.region!r} is not an AWS region")
        through = self.write_through_prefix
        if through is not None and (not through or through[0] == "/" or through[-1] == "/"):
            raise ValueError(
                f"DataBucketArgs.write_through_prefix: {through!r} must be non-empty, without "
                "leading or trailing slashes"
            )
        problem = bucket_name_problem(bucket_name(self.cluster_name, "0" * 12, self.region))
        if not self.bucket.adopted and problem is not None:
            raise ValueError(f"DataBucketArgs.cluster_name: the bucket name {problem}")


class DataBucket(pulumi.ComponentResource):
    """The data bucket: created (encrypted, private, TLS only, protected) or adopted by name."""

    bucket_name: pulumi.Output[str]
    """Physical bucket name (the jobs' ``s3://`` URIs)."""
    bucket_arn: pulumi.Output[str]
    """``arn:<partition>:s3:::<name>``."""
    kms_key_arn: pulumi.Output[str] | None
    """The key objects are encrypted with; None for an adopted bucket without ``kmsKeyArn``."""
    prefix: str
    """Key prefix the jobs use (``dataBucket.prefix``)."""
    adopted: bool
    """True when the stack adopted an existing bucket and declares nothing on it."""

    def __init__(
        self, name: str, args: DataBucketArgs, opts: pulumi.ResourceOptions | None = None
    ) -> None:
        super().__init__(TYPE_TOKEN, name, {}, opts)
        cfg = args.bucket
        self.prefix = cfg.prefix
        self.adopted = cfg.adopted
        invoke = pulumi.InvokeOutputOptions(parent=self)
        partition = aws.get_partition_output(opts=invoke).partition
        if cfg.name is not None:
            self.bucket_name = pulumi.Output.from_input(cfg.name)
            self.bucket_arn = partition.apply(lambda p: f"arn:{p}:s3:::{cfg.name}")
            self.kms_key_arn = (
                pulumi.Output.from_input(cfg.kms_key_arn) if cfg.kms_key_arn else None
            )
            self.register_outputs(
                {"bucketName": self.bucket_name, "bucketArn": self.bucket_arn, "adopted": True}
            )
            return

        tags = {**(args.tags or {}), "eks-fsdp/cluster": args.cluster_name}
        kept = pulumi.ResourceOptions(
            parent=self, protect=cfg.protect, retain_on_delete=cfg.protect
        )
        account = aws.get_caller_identity_output(opts=invoke).account_id
        physical = account.apply(lambda a: bucket_name(args.cluster_name, a, args.region))
        bucket = aws.s3.Bucket(
            f"{name}-bucket",
            bucket=physical,
            force_destroy=False,
            tags={**tags, "eks-fsdp/data": "checkpoints-exports-datasets"},
            opts=kept,
        )
        # Derived from the name (what S3 computes), so consumers need not wait for outputs.
        arn = pulumi.Output.all(partition, bucket.bucket).apply(lambda v: f"arn:{v[0]}:s3:::{v[1]}")
        key = aws.kms.Key(
            f"{name}-key",
            description=f"SSE-KMS of the data bucket of {args.cluster_name}",
            enable_key_rotation=True,
            deletion_window_in_days=30,
            policy=pulumi.Output.all(partition, account, physical).apply(
                lambda v: key_policy(v[0], v[1], args.region, v[2])
            ),
            tags=tags,
            opts=kept,
        )
        aws.s3.BucketOwnershipControls(
            f"{name}-ownership",
            bucket=bucket.id,
            rule=aws.s3.BucketOwnershipControlsRuleArgs(object_ownership="BucketOwnerEnforced"),
            opts=kept,
        )
        public_access = aws.s3.BucketPublicAccessBlock(
            f"{name}-public-access",
            bucket=bucket.id,
            block_public_acls=True,
            block_public_policy=True,
            ignore_public_acls=True,
            restrict_public_buckets=True,
            opts=kept,
        )
        aws.s3.BucketServerSideEncryptionConfiguration(
            f"{name}-encryption",
            bucket=bucket.id,
            rules=[
                aws.s3.BucketServerSideEncryptionConfigurationRuleArgs(
                    apply_server_side_encryption_by_default=aws.s3.BucketServerSideEncryptionConfigurationRuleApplyServerSideEncryptionByDefaultArgs(
                        sse_algorithm="aws:kms", kms_master_key_id=key.arn
                    ),
                    bucket_key_enabled=True,
                )
            ],
            opts=kept,
        )
        # After the public-access block: with BlockPublicPolicy on, S3 refuses public policies;
        # this one only denies.
        aws.s3.BucketPolicy(
            f"{name}-tls-only",
            bucket=bucket.id,
            policy=arn.apply(tls_only_policy),
            opts=pulumi.ResourceOptions.merge(
                kept, pulumi.ResourceOptions(depends_on=[public_access])
            ),
        )
        versioning = aws.s3.BucketVersioning(
            f"{name}-versioning",
            bucket=bucket.id,
            versioning_configuration=aws.s3.BucketVersioningVersioningConfigurationArgs(
                status="Enabled"
            ),
            opts=kept,
        )
        # S3 user guide, "Lifecycle configuration elements": Expiration.Days is a positive
        # integer; on a versioned bucket it adds a delete marker, and
        # NoncurrentVersionExpiration then removes the old version.
        aws.s3.BucketLifecycleConfiguration(
            f"{name}-lifecycle",
            bucket=bucket.id,
            rules=[
                aws.s3.BucketLifecycleConfigurationRuleArgs(
                    id="expire-old-checkpoints",
                    status="Enabled",
                    filter=aws.s3.BucketLifecycleConfigurationRuleFilterArgs(
                        prefix=f"{cfg.checkpoint_prefix}/"
                    ),
                    expiration=aws.s3.BucketLifecycleConfigurationRuleExpirationArgs(
                        days=cfg.checkpoint_expiration_days
                    ),
                    noncurrent_version_expiration=aws.s3.BucketLifecycleConfigurationRuleNoncurrentVersionExpirationArgs(
                        noncurrent_days=CHECKPOINT_NONCURRENT_VERSION_DAYS
                    ),
                ),
                *(
                    [
                        aws.s3.BucketLifecycleConfigurationRuleArgs(
                            id="write-through-noncurrent-versions",
                            status="Enabled",
                            filter=aws.s3.BucketLifecycleConfigurationRuleFilterArgs(
                                prefix=f"{args.write_through_prefix}/"
                            ),
                            noncurrent_version_expiration=aws.s3.BucketLifecycleConfigurationRuleNoncurrentVersionExpirationArgs(
                                noncurrent_days=CHECKPOINT_NONCURRENT_VERSION_DAYS
                            ),
                        )
                    ]
                    if args.write_through_prefix
                    else []
                ),
                aws.s3.BucketLifecycleConfigurationRuleArgs(
                    id="noncurrent-versions-and-torn-uploads",
                    status="Enabled",
                    filter=aws.s3.BucketLifecycleConfigurationRuleFilterArgs(prefix=""),
                    noncurrent_version_expiration=aws.s3.BucketLifecycleConfigurationRuleNoncurrentVersionExpirationArgs(
                        noncurrent_days=NONCURRENT_VERSION_DAYS
                    ),
                    abort_incomplete_multipart_upload=aws.s3.BucketLifecycleConfigurationRuleAbortIncompleteMultipartUploadArgs(
                        days_after_initiation=ABORT_MULTIPART_DAYS
                    ),
                ),
            ],
            opts=pulumi.ResourceOptions.merge(
                kept, pulumi.ResourceOptions(depends_on=[versioning])
            ),
        )
        self.bucket_name = bucket.bucket
        self.bucket_arn = arn
        self.kms_key_arn = key.arn
        self.register_outputs(
            {
                "bucketName": self.bucket_name,
                "bucketArn": self.bucket_arn,
                "kmsKeyArn": self.kms_key_arn,
                "adopted": False,
            }
        )
