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
from planner.timing import ring_link, ring_time

PREFLIGHT_FLOOR = 0.6
"""Fraction of the planner's expected figure below which the preflight fails. nccl-tests on a
healthy node lands within ~20% of the planner's bus bandwidth; a link that fell back to a
slower path (PCIe instead of NVLink, TCP instead of EFA) loses far more than 40%."""


JUDGED_BYTES = 256 * 2**20
"""The collective size the preflight judges: its largest default size on GPUs
(``training.preflight.default_sizes``; a test keeps the two equal)."""


def busbw_at(
    nbytes: int, ranks: int, ranks_per_node: int, it: InstanceType, a: Assumptions
) -> float:
    """The planner's own bus bandwidth, GB/s, of a ring collective of ``nbytes`` on ``ranks``
    ranks, in nccl-tests' terms (busbw = S/t x (n-1)/n for all-gather and reduce-scatter; an
    all-reduce doubles both the time and the factor, so the same figure): the ring model of
    ``planner.timing`` with its per-hop latency, which at 256 MiB is not negligible (15 hops
    x 12 us against 0.84 ms of bandwidth time on a pair of p5 nodes)."""
    link = ring_link(ranks, ranks_per_node, it, a)
    seconds = ring_time(nbytes, ranks, link)
    return nbytes / seconds * (ranks - 1) / ranks / 1e9


def expectations(
    it: InstanceType, workers: int, *, efa: bool = True, a: Assumptions = DEFAULT
) -> dict[str, float | int | str]:
    """Thresholds for ``training.preflight`` on ``workers`` nodes of ``it`` (``k=v`` keys).

    intra_busbw = floor x the planner's busbw of one node's ring of GPUs at ``JUDGED_BYTES``
    (NVLink GB/s x nvlink_efficiency, plus the per-hop latency); inter_busbw = floor x its
    busbw of a ring over two nodes (the preflight's pairs) at that size (a ring of whole nodes
    enters each node once: ``planner.timing.ring_link``); tflops = floor x dense bf16 peak x
    GEMM efficiency; mem_gbps = floor x HBM GB/s x hbm_efficiency; net = OFI where the nodes
    attach EFA and there is more than one; gpus = GPUs per node.
    """
    gen = generation(it.gpu_model)
    out: dict[str, float | int | str] = {"gpus": it.gpus}
    if it.gpus > 1:
        intra = busbw_at(JUDGED_BYTES, it.gpus, it.gpus, it, a)
        out["intra_busbw"] = round(PREFLIGHT_FLOOR * intra, 1)
    if workers > 1:
        inter = busbw_at(JUDGED_BYTES, 2 * it.gpus, it.gpus, it, a)
        out["inter_busbw"] = round(PREFLIGHT_FLOOR * inter, 1)
        if efa and it.efa_supported:
            out["net"] = "OFI"
    out["tflops"] = round(PREFLIGHT_FLOOR * it.peak_bf16_tflops * gen.gemm_efficiency, 1)
    out["mem_gbps"] = round(PREFLIGHT_FLOOR * gen.hbm_gbytes_per_s * a.hbm_efficiency, 1)
    return out


def expect_arg(it: InstanceType, workers: int, *, efa: bool = True) -> str:
    """The ``--preflight_expect`` value: ``gpus=8,intra_busbw=216,...``."""
    return ",".join(f"{k}={v}" for k, v in expectations(it, workers, efa=efa).items())
