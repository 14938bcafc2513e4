"""What a healthy node should measure in the preflight, from the instance catalog.

The thresholds are the planner's own expectations (the same efficiencies its step-time model
uses, ``planner.assumptions``) times ``PREFLIGHT_FLOOR``: a node below them is not "a bit
slow", it is broken (a degraded NVLink, NCCL on TCP sockets instead of EFA, a throttled GPU).
The PyTorchJob carries them as ``--preflight_expect`` (``workloads.specs``), so the training
image needs neither the catalog nor the planner.
"""

from __future__ import annotations

from infra.instances import InstanceType
from planner.assumptions import DEFAULT, Assumptions, generation

PREFLIGHT_FLOOR = 0.6
"""Fraction of the planner's expected figure below which the preflight fails. nccl-tests on a
healthy node lands within ~20% of the planner's bus bandwidth; a link that fell back to a
slower path (PCIe instead of NVLink, TCP instead of EFA) loses far more than 40%."""


def expectations(
    it: InstanceType, workers: int, *, efa: bool = True, a: Assumptions = DEFAULT
) -> dict[str, float | int | str]:
    """Thresholds for ``training.preflight`` on ``workers`` nodes of ``it`` (``k=v`` keys).

    intra_busbw = floor x NVLink GB/s x nvlink_efficiency (nodes with more than one GPU);
    inter_busbw = floor x network GB/s x network_efficiency (a ring of whole nodes enters each
    node once: ``planner.timing.ring_link``); tflops = floor x dense bf16 peak x GEMM
    efficiency; mem_gbps = floor x HBM GB/s x hbm_efficiency; net = OFI where the nodes attach
    EFA and there is more than one; gpus = GPUs per node.
    """
    gen = generation(it.gpu_model)
    out: dict[str, float | int | str] = {"gpus": it.gpus}
    if it.gpus > 1:
        out["intra_busbw"] = round(
            PREFLIGHT_FLOOR * it.nvlink_gbytes_per_s * a.nvlink_efficiency, 1
        )
    if workers > 1:
        out["inter_busbw"] = round(
            PREFLIGHT_FLOOR * it.inter_node_gbytes_per_s * a.network_efficiency, 1
        )
        if efa and it.efa_supported:
            out["net"] = "OFI"
    out["tflops"] = round(PREFLIGHT_FLOOR * it.peak_bf16_tflops * gen.gemm_efficiency, 1)
    out["mem_gbps"] = round(PREFLIGHT_FLOOR * gen.hbm_gbytes_per_s * a.hbm_efficiency, 1)
    return out


def expect_arg(it: InstanceType, workers: int, *, efa: bool = True) -> str:
    """The ``--preflight_expect`` value: ``gpus=8,intra_busbw=216,...``."""
    return ",".join(f"{k}={v}" for k, v in expectations(it, workers, efa=efa).items())
