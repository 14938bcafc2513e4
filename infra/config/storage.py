"""The storage section (``sharedStorage``): an FSx for Lustre file system for checkpoints."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from infra.config.fields import _check_keys, _choice, _fail, _int, _mapping, _opt_int, _opt_str
from infra.config.nodegroups import GpuNodeGroupConfig

SHARED_STORAGE_TYPES = ("none", "fsx")
FSX_DEPLOYMENT_TYPES = ("SCRATCH_2", "PERSISTENT_2")
FSX_THROUGHPUTS = (125, 250, 500, 1000)
"""MB/s per TiB a PERSISTENT_2 (SSD) file system can be provisioned with."""
FSX_MIN_CAPACITY_GIB = 1200
FSX_CAPACITY_STEP_GIB = 2400
"""SCRATCH_2 and PERSISTENT_2 (SSD): 1200 GiB, or a multiple of 2400 GiB."""
DEFAULT_CHECKPOINT_CLAIM = "fsx-checkpoints"
"""Name of the claim the stack creates for ``sharedStorage.type: fsx`` unless
``job.checkpointClaim`` names it."""

_SHARED_STORAGE_KEYS = (
    "type",
    "storageCapacityGiB",
    "deploymentType",
    "perUnitStorageThroughput",
    "availabilityZone",
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

    @property
    def is_fsx(self) -> bool:
        """True when the stack creates an FSx for Lustre file system."""
        return self.type == "fsx"


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
    if capacity != FSX_MIN_CAPACITY_GIB and (capacity <= 0 or capacity % FSX_CAPACITY_STEP_GIB):
        raise _fail(
            f"{path}.storageCapacityGiB",
            f"{capacity} is not {FSX_MIN_CAPACITY_GIB} or a multiple of {FSX_CAPACITY_STEP_GIB}"
            f" (FSx for Lustre {deployment})",
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
    return SharedStorageConfig(
        type=kind,
        storage_capacity_gib=capacity,
        deployment_type=deployment,
        per_unit_storage_throughput=throughput,
        availability_zone=az,
    )
