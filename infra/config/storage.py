"""The storage sections: ``sharedStorage`` (an FSx for Lustre file system for checkpoints) and
``dataBucket`` (the S3 bucket that outlives the cluster: checkpoints, exports, datasets)."""

from __future__ import annotations

import ipaddress
import re
from dataclasses import dataclass
from typing import Any

from infra.config.fields import (
    _bool,
    _check_keys,
    _choice,
    _fail,
    _int,
    _mapping,
    _opt_int,
    _opt_str,
)
from infra.config.nodegroups import GpuNodeGroupConfig

SHARED_STORAGE_TYPES = ("none", "fsx")
FSX_DEPLOYMENT_TYPES = ("SCRATCH_2", "PERSISTENT_2")
FSX_THROUGHPUTS = (125, 250, 500, 1000)
"""MB/s per TiB a PERSISTENT_2 (SSD) file system can be provisioned with (FSx API reference,
``UpdateFileSystemLustreConfiguration.PerUnitStorageThroughput``: "For PERSISTENT_2
SSD-based deployment types, valid values are 125, 250, 500, and 1000 MB/s/TiB")."""
FSX_MIN_CAPACITY_GIB = 1200
FSX_CAPACITY_STEP_GIB = 2400
"""SCRATCH_2 and PERSISTENT_2 (SSD): 1200 GiB, or a multiple of 2400 GiB (FSx API reference,
``CreateFileSystem.StorageCapacity``: "For SCRATCH_2, PERSISTENT_2, and PERSISTENT_1
deployment types using SSD storage type, the valid values are 1200 GiB, 2400 GiB, and
increments of 2400 GiB"). Both types share the rule; ``FSX_CAPACITY_RULES`` keeps it per type."""
FSX_CAPACITY_RULES: dict[str, tuple[int, int]] = {
    "SCRATCH_2": (FSX_MIN_CAPACITY_GIB, FSX_CAPACITY_STEP_GIB),
    "PERSISTENT_2": (FSX_MIN_CAPACITY_GIB, FSX_CAPACITY_STEP_GIB),
}
"""Per deployment type: (smallest capacity, increment) in GiB."""
DATA_REPOSITORY_TYPES = ("PERSISTENT_2",)
"""Deployment types this stack links to the bucket. FSx itself allows a data repository
association on every file system but Lustre 2.10 and SCRATCH_1 (FSx for Lustre user guide,
"Overview of data repositories": "Data repository associations, automatic export, and support
for multiple data repositories aren't available on FSx for Lustre 2.10 file systems or Scratch
1 file systems"), so SCRATCH_2 on Lustre 2.12/2.15 could take one; pulumi-aws's
``fsx.DataRepositoryAssociation`` documents "only compatible with ... PERSISTENT_2 deployment
type", and a scratch file system is not replicated (what it has not exported yet is lost with
a disk), so write-through stays on PERSISTENT_2."""
DATA_REPOSITORY_REFUSAL = (
    "a data repository association is linked here only on PERSISTENT_2, not {deployment}: FSx "
    "allows one on any Lustre 2.12/2.15 file system but SCRATCH_1 (FSx for Lustre user guide, "
    "Overview of data repositories), pulumi-aws's fsx.DataRepositoryAssociation supports "
    "PERSISTENT_2 only, and a scratch file system loses what it has not exported with a disk: "
    "set deploymentType PERSISTENT_2"
)
DEFAULT_CHECKPOINT_CLAIM = "fsx-checkpoints"
"""Name of the claim the stack creates for ``sharedStorage.type: fsx`` unless
``job.checkpointClaim`` names it."""

_SHARED_STORAGE_KEYS = (
    "type",
    "storageCapacityGiB",
    "deploymentType",
    "perUnitStorageThroughput",
    "availabilityZone",
    "dataRepositoryPrefix",
)


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
    """Zone of the file system (its subnet); defaults to the first GPU nodegroup's zone at parse time."""
    data_repository_prefix: str | None = None
    """PERSISTENT_2 only: the data bucket's key prefix the whole file system is linked to (a
    data repository association with automatic import and export of new, changed and deleted
    files); None = no link."""

    @property
    def is_fsx(self) -> bool:
        """True when the stack creates an FSx for Lustre file system."""
        return self.type == "fsx"

    @property
    def links_data_bucket(self) -> bool:
        """True when the file system writes through to the data bucket."""
        return self.is_fsx and self.data_repository_prefix is not None


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
    smallest, step = FSX_CAPACITY_RULES[deployment]
    if capacity != smallest and (capacity <= 0 or capacity % step):
        raise _fail(
            f"{path}.storageCapacityGiB",
            f"{capacity} is not {smallest} or a multiple of {step} (FSx for Lustre {deployment})",
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
                "is required with type fsx when the first GPU nodegroup is not pinned to a zone",
            )
    link = _opt_str(obj.get("dataRepositoryPrefix"), f"{path}.dataRepositoryPrefix")
    if link is not None:
        link = _key_prefix(link, f"{path}.dataRepositoryPrefix")
        if deployment not in DATA_REPOSITORY_TYPES:
            raise _fail(
                f"{path}.dataRepositoryPrefix",
                DATA_REPOSITORY_REFUSAL.format(deployment=deployment),
            )
    return SharedStorageConfig(
        type=kind,
        storage_capacity_gib=capacity,
        deployment_type=deployment,
        per_unit_storage_throughput=throughput,
        availability_zone=az,
        data_repository_prefix=link,
    )


# --- dataBucket ------------------------------------------------------------------------------

_DATA_BUCKET_KEYS = (
    "enabled",
    "name",
    "kmsKeyArn",
    "prefix",
    "checkpointPrefix",
    "checkpointExpirationDays",
    "protect",
)
DEFAULT_DATA_PREFIX = "training"
"""Key prefix of everything the jobs read and write (their role is scoped to it)."""
DEFAULT_CHECKPOINT_PREFIX = "training/checkpoints"
"""Key prefix of the checkpoints the lifecycle rule expires."""
DEFAULT_CHECKPOINT_EXPIRATION_DAYS = 30
_BUCKET_NAME = re.compile(r"^[a-z0-9][a-z0-9.-]{1,61}[a-z0-9]$")
_BUCKET_RESERVED_PREFIXES = ("xn--", "sthree-", "amzn-s3-demo-")
_BUCKET_RESERVED_SUFFIXES = ("-s3alias", "--ol-s3", ".mrap", "--x-s3", "--table-s3")
_KEY_PREFIX = re.compile(r"^[A-Za-z0-9!_.*'()-]+(/[A-Za-z0-9!_.*'()-]+)*$")
_KMS_KEY_ARN = re.compile(r"^arn:aws[a-z-]*:kms:[a-z0-9-]+:\d{12}:key/[A-Za-z0-9-]+$")


def bucket_name_problem(name: str) -> str | None:
    """Why ``name`` is not a valid S3 general purpose bucket name (None when it is).

    The rules of the Amazon S3 user guide, "General purpose bucket naming rules"
    (docs.aws.amazon.com/AmazonS3/latest/userguide/bucketnamingrules.html): 3 to 63 characters;
    lowercase letters, numbers, dots and hyphens; a letter or number first and last; no two
    adjacent periods; not an IP address; not starting with ``xn--``, ``sthree-`` or
    ``amzn-s3-demo-``; not ending with ``-s3alias``, ``--ol-s3``, ``.mrap``, ``--x-s3`` or
    ``--table-s3``."""
    if not 3 <= len(name) <= 63:
        return f"{name!r} is not 3 to 63 characters long"
    if not _BUCKET_NAME.match(name):
        return (
            f"{name!r} may hold only lowercase letters, numbers, dots and hyphens, and must begin"
            " and end with a letter or number"
        )
    if ".." in name:
        return f"{name!r} contains two adjacent periods"
    try:
        ipaddress.IPv4Address(name)
    except ValueError:
        pass
    else:
        return f"{name!r} is formatted as an IP address"
    for prefix in _BUCKET_RESERVED_PREFIXES:
        if name.startswith(prefix):
            return f"{name!r} starts with the reserved prefix {prefix}"
    for suffix in _BUCKET_RESERVED_SUFFIXES:
        if name.endswith(suffix):
            return f"{name!r} ends with the reserved suffix {suffix}"
    return None


def _key_prefix(value: str, path: str) -> str:
    """An S3 key prefix without leading or trailing slashes, of the characters the S3 user guide
    calls safe ("Naming Amazon S3 objects": letters, digits, ``! - _ . * ' ( )``) and ``/``."""
    prefix = value.strip("/")
    if not prefix or not _KEY_PREFIX.match(prefix):
        raise _fail(
            path,
            f"{value!r} is not a key prefix (segments of letters, digits and !-_.*'() joined by /)",
        )
    return prefix


@dataclass(frozen=True, kw_only=True)
class DataBucketConfig:
    """The S3 bucket the cluster outlives (``dataBucket``): checkpoints, exports, datasets."""

    enabled: bool = True
    """Declare (or adopt) the bucket and give the jobs access to it."""
    name: str | None = None
    """An existing bucket to adopt by name (the stack then creates no bucket and sets nothing on
    it); None = the stack creates one (``<clusterName>-data-<suffix>``)."""
    kms_key_arn: str | None = None
    """Adopted bucket only: the KMS key its objects are encrypted with (the jobs' role gets
    Decrypt/GenerateDataKey on it); None with an adopted bucket = SSE-S3."""
    prefix: str = DEFAULT_DATA_PREFIX
    """Key prefix the jobs read and write; their role reaches nothing else in the bucket."""
    checkpoint_prefix: str = DEFAULT_CHECKPOINT_PREFIX
    """Key prefix of the checkpoints the lifecycle rule expires (under ``prefix``)."""
    checkpoint_expiration_days: int = DEFAULT_CHECKPOINT_EXPIRATION_DAYS
    """Days after which an object under ``checkpoint_prefix`` expires (>= 1)."""
    protect: bool = True
    """``protect`` and ``retainOnDelete`` on the bucket and its key: ``pulumi destroy`` keeps
    them (``--exclude-protected`` destroys the rest). false = the stack may delete them."""

    @property
    def adopted(self) -> bool:
        """True when the bucket exists already and is adopted by name."""
        return self.name is not None


def _parse_data_bucket(value: Any) -> DataBucketConfig:
    path = "dataBucket"
    obj = _mapping(value if value is not None else {}, path)
    _check_keys(obj, _DATA_BUCKET_KEYS, path)
    enabled = _bool(obj.get("enabled", True), f"{path}.enabled")
    name = obj.get("name") or None
    if name is not None:
        if not isinstance(name, str):
            raise _fail(f"{path}.name", f"expected a string, got {name!r}")
        problem = bucket_name_problem(name)
        if problem is not None:
            raise _fail(f"{path}.name", f"{problem} (S3 bucket naming rules)")
    key = obj.get("kmsKeyArn") or None
    if key is not None:
        if not isinstance(key, str) or not _KMS_KEY_ARN.match(key):
            raise _fail(f"{path}.kmsKeyArn", f"{key!r} is not a KMS key ARN")
        if name is None:
            raise _fail(
                f"{path}.kmsKeyArn",
                "only for an adopted bucket (dataBucket.name); a created bucket has its own key",
            )
    prefix = _key_prefix(str(obj.get("prefix", DEFAULT_DATA_PREFIX)), f"{path}.prefix")
    checkpoints = _key_prefix(
        str(obj.get("checkpointPrefix", DEFAULT_CHECKPOINT_PREFIX)), f"{path}.checkpointPrefix"
    )
    if not (checkpoints + "/").startswith(prefix + "/"):
        raise _fail(
            f"{path}.checkpointPrefix", f"{checkpoints!r} is not under dataBucket.prefix {prefix!r}"
        )
    days = _int(
        obj.get("checkpointExpirationDays", DEFAULT_CHECKPOINT_EXPIRATION_DAYS),
        f"{path}.checkpointExpirationDays",
    )
    if days < 1:
        raise _fail(
            f"{path}.checkpointExpirationDays",
            f"{days} is below 1 (S3 lifecycle Expiration Days must be a positive integer)",
        )
    return DataBucketConfig(
        enabled=enabled,
        name=name,
        kms_key_arn=key,
        prefix=prefix,
        checkpoint_prefix=checkpoints,
        checkpoint_expiration_days=days,
        protect=_bool(obj.get("protect", True), f"{path}.protect"),
    )
