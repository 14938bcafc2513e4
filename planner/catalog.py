"""Instance types the planner knows: the EC2 GPU catalog plus machines of their own kind.

``infra.instances.CATALOG`` holds what a stack can launch. The planner also predicts runs on
machines no stack launches, so it can be checked against real runs here: ``local-cpu``, one
training process per "node" on this machine's CPU cores with gloo (how ``localrun``
runs a ``device: cpu`` job). Its figures are nominal round numbers, like a data sheet's
peaks: what a given CPU achieves of them is measured by the preflight and fitted by
``planner.calibrate``, exactly as for a GPU type.
"""

from __future__ import annotations

from infra.instances import CATALOG, InstanceType

LOCAL_CPU = InstanceType(
    name="local-cpu",
    gpu_model="CPU",
    gpus=1,
    gpu_memory_gib=8.0,
    peak_bf16_tflops=0.1,
    nvlink_gbytes_per_s=10.0,
    efa_interfaces=0,
    network_gbps=8.0,
    needs_fi_env=False,
    vcpus=2,
    memory_gib=8,
    usd_per_hour=0.0,
)
"""One process per node on a CPU: nominal 0.1 TFLOP/s fp32 per process, 10 GB/s between
processes of a node (shared memory), 1 GB/s (8 Gbit/s) between nodes (gloo over loopback TCP);
the generation row ``CPU`` in ``planner.assumptions`` holds its memory bandwidth."""

OWN_KIND: dict[str, InstanceType] = {LOCAL_CPU.name: LOCAL_CPU}


def lookup(name: str) -> InstanceType:
    """A GPU type of the EC2 catalog or a machine of the planner's own kind; KeyError naming both."""
    if name in CATALOG:
        return CATALOG[name]
    if name in OWN_KIND:
        return OWN_KIND[name]
    known = ", ".join([*sorted(CATALOG), *sorted(OWN_KIND)])
    raise KeyError(f"unknown instance type {name!r} (supported: {known})")
