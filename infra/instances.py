"""The GPU instance catalog: data, not code paths.

Everything that depends on an instance type derives from one row of ``CATALOG``: the number of
EFA interfaces in a launch template, the ``nvidia.com/gpu`` and ``vpc.amazonaws.com/efa`` a worker
pod requests, whether the job needs ``FI_*`` environment variables, and the planner's inputs
(GPU memory, peak FLOP/s, NVLink and EFA bandwidth, price).

Sources: AWS EC2 accelerated-computing instance pages and NVIDIA data sheets (dense, no
sparsity); network cards from the EC2 user guide's "Network cards" table (using-eni.html),
EFA interfaces = the type's ``MaximumEfaInterfaces`` (every card of these types supports EFA,
so it equals the cards; p6-b300, whose card 0 takes no EFA, is not in the catalog). Prices are us-east-1 on-demand list prices per hour after the June 2025 reduction
for P4/P5; a stack can override them (``gpuNodeGroups[].pricePerHour``) for reservations.
This module imports nothing outside the standard library.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, kw_only=True)
class InstanceType:
    """One EC2 GPU instance type, as the cluster, the job and the planner see it."""

    name: str
    """EC2 instance type name, e.g. ``p5.48xlarge``."""
    gpu_model: str
    """GPU model, e.g. ``H100-SXM-80GB``."""
    gpus: int
    """GPUs per instance (= torchrun ``nproc_per_node``)."""
    gpu_memory_gib: float
    """Memory of one GPU in GiB (as usable by CUDA)."""
    peak_bf16_tflops: float
    """Dense bf16 tensor-core peak of one GPU, TFLOP/s."""
    nvlink_gbytes_per_s: float
    """Intra-node bandwidth per GPU, one direction, GB/s (NVLink; PCIe where there is none)."""
    efa_interfaces: int
    """EFA interfaces the instance supports (one per network card); 0 = no EFA."""
    network_cards: int = 1
    """Network cards (EC2 user guide, "Network cards" table in "Elastic network interfaces";
    a type missing from that table has one). One EFA or EFA-only interface fits on each card."""
    network_gbps: float
    """Total network bandwidth of the instance, Gbit/s."""
    needs_fi_env: bool
    """Whether the job must set FI_PROVIDER=efa and FI_EFA_USE_DEVICE_RDMA=1 (p4d/p4de)."""
    vcpus: int
    """vCPUs of the instance."""
    memory_gib: int
    """Host memory, GiB."""
    usd_per_hour: float
    """On-demand list price per hour, us-east-1."""
    network_topology: bool = False
    """Whether EC2 describes the type's network topology, so that EKS labels its nodes
    ``topology.k8s.aws/network-node-layer-1..3`` (EC2 user guide, "Prerequisites for Amazon EC2
    topology", supported instance types: p3dn, p4d, p4de, p5, p5e, p5en, p6-b200, p6e-gb200,
    g6e, g7e, hpc*, trn*; not g5 or g6). Kueue counts a node for a Topology only when it
    carries every level's label, so a pool of another type must not get one."""

    @property
    def efa_supported(self) -> bool:
        """True when the type has at least one EFA interface."""
        return self.efa_interfaces > 0

    @property
    def gpu_memory_bytes(self) -> int:
        """Memory of one GPU in bytes."""
        return int(self.gpu_memory_gib * 2**30)

    @property
    def inter_node_gbytes_per_s(self) -> float:
        """Network bandwidth of the whole instance in GB/s (one direction)."""
        return self.network_gbps / 8.0

    def pod_resources(self) -> dict[str, int]:
        """Extended resources one worker pod (one pod per node) requests and limits."""
        resources = {"nvidia.com/gpu": self.gpus}
        if self.efa_supported:
            resources["vpc.amazonaws.com/efa"] = self.efa_interfaces
        return resources


def _row(**kwargs: object) -> InstanceType:
    return InstanceType(**kwargs)  # type: ignore[arg-type]


# fmt: off
CATALOG: dict[str, InstanceType] = {
    it.name: it
    for it in (
        # H100 SXM5: 989 TFLOP/s dense bf16, NVLink 4 = 900 GB/s bidirectional per GPU.
        _row(name="p5.48xlarge", gpu_model="H100-SXM-80GB", gpus=8, gpu_memory_gib=80,
             peak_bf16_tflops=989.0, nvlink_gbytes_per_s=450.0, efa_interfaces=32, network_cards=32,
             network_gbps=3200, needs_fi_env=False, vcpus=192, memory_gib=2048,
             usd_per_hour=55.04, network_topology=True),
        # H200 SXM: same compute as H100, 141 GB HBM3e.
        _row(name="p5e.48xlarge", gpu_model="H200-SXM-141GB", gpus=8, gpu_memory_gib=141,
             peak_bf16_tflops=989.0, nvlink_gbytes_per_s=450.0, efa_interfaces=32, network_cards=32,
             network_gbps=3200, needs_fi_env=False, vcpus=192, memory_gib=2048,
             usd_per_hour=60.00, network_topology=True),
        # p5en: H200 with EFAv3 on 16 network cards, 3200 Gbit/s.
        _row(name="p5en.48xlarge", gpu_model="H200-SXM-141GB", gpus=8, gpu_memory_gib=141,
             peak_bf16_tflops=989.0, nvlink_gbytes_per_s=450.0, efa_interfaces=16, network_cards=16,
             network_gbps=3200, needs_fi_env=False, vcpus=192, memory_gib=2048,
             usd_per_hour=63.30, network_topology=True),
        # p6-b200: 8x B200 (1,440 GB HBM3e per instance: 180 GB each), NVLink 5 = 1.8 TB/s
        # bidirectional per GPU, 2.25 PFLOP/s dense bf16 (HGX B200: 36 PFLOP/s sparse for 8);
        # EFAv4 on 8 network cards, 3200 Gbit/s; 192 vCPUs, 2 TiB. Price: on-demand list price
        # at launch (check the EC2 pricing page; pricePerHour overrides it for a reservation).
        _row(name="p6-b200.48xlarge", gpu_model="B200-180GB", gpus=8, gpu_memory_gib=180,
             peak_bf16_tflops=2250.0, nvlink_gbytes_per_s=900.0, efa_interfaces=8,
             network_cards=8, network_gbps=3200, needs_fi_env=False, vcpus=192,
             memory_gib=2048, usd_per_hour=113.93, network_topology=True),
        # A100 SXM4: 312 TFLOP/s dense bf16, NVLink 3 = 600 GB/s bidirectional per GPU.
        _row(name="p4d.24xlarge", gpu_model="A100-SXM-40GB", gpus=8, gpu_memory_gib=40,
             peak_bf16_tflops=312.0, nvlink_gbytes_per_s=300.0, efa_interfaces=4, network_cards=4,
             network_gbps=400, needs_fi_env=True, vcpus=96, memory_gib=1152,
             usd_per_hour=21.96, network_topology=True),
        _row(name="p4de.24xlarge", gpu_model="A100-SXM-80GB", gpus=8, gpu_memory_gib=80,
             peak_bf16_tflops=312.0, nvlink_gbytes_per_s=300.0, efa_interfaces=4, network_cards=4,
             network_gbps=400, needs_fi_env=True, vcpus=96, memory_gib=1152,
             usd_per_hour=27.45, network_topology=True),
        # A10G (g5) and L4 (g6): cheap dev stacks; PCIe Gen4 x16 between GPUs, no NVLink.
        _row(name="g5.xlarge", gpu_model="A10G-24GB", gpus=1, gpu_memory_gib=24,
             peak_bf16_tflops=70.0, nvlink_gbytes_per_s=25.0, efa_interfaces=0,
             network_gbps=10, needs_fi_env=False, vcpus=4, memory_gib=16, usd_per_hour=1.006),
        _row(name="g5.12xlarge", gpu_model="A10G-24GB", gpus=4, gpu_memory_gib=24,
             peak_bf16_tflops=70.0, nvlink_gbytes_per_s=25.0, efa_interfaces=0,
             network_gbps=40, needs_fi_env=False, vcpus=48, memory_gib=192,
             usd_per_hour=5.672),
        _row(name="g5.48xlarge", gpu_model="A10G-24GB", gpus=8, gpu_memory_gib=24,
             peak_bf16_tflops=70.0, nvlink_gbytes_per_s=25.0, efa_interfaces=1,
             network_gbps=100, needs_fi_env=True, vcpus=192, memory_gib=768,
             usd_per_hour=16.288),
        _row(name="g6.xlarge", gpu_model="L4-24GB", gpus=1, gpu_memory_gib=24,
             peak_bf16_tflops=121.0, nvlink_gbytes_per_s=25.0, efa_interfaces=0,
             network_gbps=10, needs_fi_env=False, vcpus=4, memory_gib=16, usd_per_hour=0.805),
        _row(name="g6.12xlarge", gpu_model="L4-24GB", gpus=4, gpu_memory_gib=24,
             peak_bf16_tflops=121.0, nvlink_gbytes_per_s=25.0, efa_interfaces=0,
             network_gbps=40, needs_fi_env=False, vcpus=48, memory_gib=192,
             usd_per_hour=4.602),
        _row(name="g6.48xlarge", gpu_model="L4-24GB", gpus=8, gpu_memory_gib=24,
             peak_bf16_tflops=121.0, nvlink_gbytes_per_s=25.0, efa_interfaces=1,
             network_gbps=100, needs_fi_env=True, vcpus=192, memory_gib=768,
             usd_per_hour=13.35),
    )
}
# fmt: on


def lookup(name: str) -> InstanceType:
    """The catalog row for ``name``; ``KeyError`` with the supported names otherwise."""
    try:
        return CATALOG[name]
    except KeyError:
        supported = ", ".join(sorted(CATALOG))
        raise KeyError(f"unknown instance type {name!r} (supported: {supported})") from None
