"""Where checkpoints go, and how fast they can be written there.

The training package always saves a DCP checkpoint of the sharded model AND its AdamW state
(``training/checkpoint.py``: ``ModelOptimizerState``; ``--save_optimizer`` is accepted for
llama-recipes compatibility but DCP checkpoints always hold the optimizer). Every rank writes
its own shards in parallel, so the time of one checkpoint is its total bytes over the write
bandwidth the ranks share:

- ``fsx`` (the stack's ``sharedStorage``): FSx for Lustre, throughput proportional to
  capacity. Writes are bounded by the lower of the file servers' network throughput and their
  disk throughput ("Amazon FSx for Lustre performance", docs.aws.amazon.com/fsx/latest/
  LustreGuide/performance.html), per TiB provisioned (".../LustreGuide/ssd-storage.html"):
  SCRATCH_2 network 200 MB/s/TiB baseline, disk 200 read / **100 write**; PERSISTENT_2 at
  125 / 250 / 500 / 1000 MB/s/TiB disk (network 320 / 640 / 1300 / 2600). Burst credits are
  left out: a checkpoint of minutes outlasts them.
- sizing (``fsx_capacity_for``): the smallest capacity that holds the checkpoints on the volume
  and writes one within a time budget, for either deployment type.
- ``node-disk`` (no shared storage: an emptyDir on each node's root volume): gp3 without
  provisioned throughput, 125 MiB/s per volume (Amazon EBS gp3 baseline), per node.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass

TIB = 2**40
MB = 1e6

FSX_WRITE_MB_PER_TIB: dict[str, float] = {"SCRATCH_2": 100.0}
"""Write-bound throughput per TiB of the fixed-throughput deployment types (disk write)."""
FSX_NETWORK_MB_PER_TIB: dict[tuple[str, int | None], float] = {
    ("SCRATCH_2", None): 200.0,
    ("PERSISTENT_2", 125): 320.0,
    ("PERSISTENT_2", 250): 640.0,
    ("PERSISTENT_2", 500): 1300.0,
    ("PERSISTENT_2", 1000): 2600.0,
}
"""Baseline network throughput per TiB (the file servers' side)."""
GP3_BASELINE_BYTES_PER_S = 125 * 2**20


@dataclass(frozen=True, kw_only=True)
class Storage:
    """The checkpoint target of a job."""

    kind: str = "node-disk"
    """``node-disk`` (emptyDir on the root gp3 volume of each node) or ``fsx``."""
    deployment_type: str = "SCRATCH_2"
    """FSx: SCRATCH_2 | PERSISTENT_2."""
    capacity_gib: int = 1200
    """FSx: storage capacity, GiB."""
    per_unit_throughput: int | None = None
    """FSx PERSISTENT_2: MB/s per TiB (125 | 250 | 500 | 1000)."""

    def __post_init__(self) -> None:
        if self.kind not in ("node-disk", "fsx"):
            raise ValueError(f"storage kind {self.kind!r}: node-disk or fsx")
        if self.kind == "fsx":
            key = (self.deployment_type, self.per_unit_throughput)
            if key not in FSX_NETWORK_MB_PER_TIB:
                raise ValueError(
                    f"FSx {self.deployment_type} at {self.per_unit_throughput} MB/s/TiB: "
                    "SCRATCH_2, or PERSISTENT_2 at 125, 250, 500 or 1000"
                )

    def write_bytes_per_s(self, nodes: int) -> float:
        """Aggregate write bandwidth of ``nodes`` nodes writing at once, bytes/s."""
        if self.kind == "node-disk":
            return GP3_BASELINE_BYTES_PER_S * nodes
        tib = self.capacity_gib * 2**30 / TIB
        disk = FSX_WRITE_MB_PER_TIB.get(self.deployment_type, float(self.per_unit_throughput or 0))
        network = FSX_NETWORK_MB_PER_TIB[(self.deployment_type, self.per_unit_throughput)]
        return min(disk, network) * MB * tib

    def describe(self) -> str:
        if self.kind == "node-disk":
            return "node-local gp3 (125 MiB/s per node)"
        unit = f" {self.per_unit_throughput} MB/s/TiB" if self.per_unit_throughput else ""
        return f"FSx for Lustre {self.deployment_type}{unit}, {self.capacity_gib} GiB"


def checkpoint_bytes(n_params: int, param_bytes: int, optim_bytes: int) -> int:
    """Bytes of one checkpoint: parameters as stored plus AdamW's exp_avg and exp_avg_sq."""
    return n_params * (param_bytes + 2 * optim_bytes)


def checkpoint_seconds(total_bytes: int, storage: Storage, nodes: int) -> float:
    """Seconds to write ``total_bytes`` from ``nodes`` nodes in parallel."""
    return total_bytes / storage.write_bytes_per_s(nodes) if total_bytes else 0.0


FSX_MIN_CAPACITY_GIB = 1200
FSX_CAPACITY_STEP_GIB = 2400
"""SCRATCH_2 and PERSISTENT_2 (SSD): 1200 GiB, 2400 GiB, then increments of 2400 GiB (FSx API
reference, ``CreateFileSystem.StorageCapacity``; ``infra.config.storage`` checks the same)."""
CHECKPOINTS_HELD = 3
"""Checkpoints on the volume at once: the two ``training.checkpoint`` keeps plus the one being
written (``step-N.tmp``) before the oldest is pruned."""


def fsx_capacities() -> Iterator[int]:
    """Every valid FSx for Lustre SSD capacity, GiB, smallest first."""
    yield FSX_MIN_CAPACITY_GIB
    step = FSX_CAPACITY_STEP_GIB
    while True:
        yield step
        step += FSX_CAPACITY_STEP_GIB


def fsx_capacity_for(
    checkpoint: int,
    *,
    write_s: float,
    deployment_type: str = "SCRATCH_2",
    per_unit_throughput: int | None = None,
    nodes: int = 1,
    held: int = CHECKPOINTS_HELD,
) -> Storage:
    """The smallest FSx for Lustre file system of ``deployment_type`` that holds ``held``
    checkpoints of ``checkpoint`` bytes and writes one in at most ``write_s`` seconds.

    Throughput scales with capacity (per TiB, ``Storage.write_bytes_per_s``), so a slow type
    needs more TiB for the same write time: SCRATCH_2 writes 100 MB/s/TiB, PERSISTENT_2 its
    provisioned 125 to 1000 ("Amazon FSx for Lustre performance", docs.aws.amazon.com/fsx/latest/
    LustreGuide/performance.html). ``ValueError`` when ``write_s`` is not positive."""
    if write_s <= 0:
        raise ValueError(f"write_s: {write_s} must be > 0")
    for gib in fsx_capacities():
        storage = Storage(
            kind="fsx",
            deployment_type=deployment_type,
            capacity_gib=gib,
            per_unit_throughput=per_unit_throughput,
        )
        fits = gib * 2**30 >= held * checkpoint
        if fits and checkpoint_seconds(checkpoint, storage, nodes) <= write_s:
            return storage
    raise AssertionError("unreachable: capacities are unbounded")


def from_stack_config(shared: object | None) -> Storage:
    """``infra.config.SharedStorageConfig`` -> Storage (``type: none`` -> node-disk)."""
    if shared is None or not getattr(shared, "is_fsx", False):
        return Storage()
    return Storage(
        kind="fsx",
        deployment_type=str(getattr(shared, "deployment_type", "SCRATCH_2")),
        capacity_gib=int(getattr(shared, "storage_capacity_gib", 1200)),
        per_unit_throughput=getattr(shared, "per_unit_storage_throughput", None),
    )


def parse(text: str) -> Storage:
    """``--storage``: ``node-disk`` | ``SCRATCH_2:1200`` | ``PERSISTENT_2:2400:250``."""
    if text == "node-disk":
        return Storage()
    parts = text.split(":")
    try:
        if parts[0] == "SCRATCH_2" and len(parts) == 2:
            return Storage(kind="fsx", capacity_gib=int(parts[1]))
        if parts[0] == "PERSISTENT_2" and len(parts) == 3:
            return Storage(
                kind="fsx",
                deployment_type="PERSISTENT_2",
                capacity_gib=int(parts[1]),
                per_unit_throughput=int(parts[2]),
            )
    except ValueError as e:
        raise ValueError(f"--storage {text}: {e}") from None
    raise ValueError(
        f"--storage {text}: node-disk, SCRATCH_2:<GiB> or PERSISTENT_2:<GiB>:<MB/s/TiB>"
    )


NODE_DISK = Storage()
"""No shared storage: each node writes its shards to its own root volume."""
