"""The preflight's thresholds: a fixed fraction of what the planner itself expects at the size
the preflight judges.

If this fails, the thresholds rendered into an EFA job (``--preflight_expect``) stop being 60%
of the planner's own figures at the collective size the preflight compares them with: a
healthy pair of p5 nodes could fail the job (a floor taken from the bandwidth alone is 73% of
the planner's busbw at 256 MiB once the ring's per-hop latency is counted), or a degraded one
could pass. nccl-tests' bus bandwidth (NVIDIA/nccl-tests doc/PERFORMANCE.md): busbw = S / t x
(n-1)/n for all-gather and reduce-scatter, S the full array. Pure arithmetic; nothing mocked.
"""

from __future__ import annotations

import pytest

from infra.instances import lookup
from planner.assumptions import DEFAULT
from planner.expect import JUDGED_BYTES, PREFLIGHT_FLOOR, busbw_at, expectations
from training.preflight import busbw_gbps, default_sizes


def test_the_judged_size_is_the_preflights_largest_gpu_size() -> None:
    assert default_sizes(cuda=True)[-1] == JUDGED_BYTES == 256 * 2**20


def test_p5_thresholds_are_sixty_percent_of_the_ring_model_at_256_mib() -> None:
    p5 = lookup("p5.48xlarge")
    e = expectations(p5, 16)
    # one node: 8 ranks on NVLink, 450 GB/s x 0.8, 3 us per hop
    t_intra = JUDGED_BYTES * 7 / 8 / (450e9 * 0.8) + 7 * 3e-6
    assert busbw_at(JUDGED_BYTES, 8, 8, p5, DEFAULT) == pytest.approx(
        busbw_gbps("all_gather", 8, JUDGED_BYTES, t_intra)
    )
    assert e["intra_busbw"] == pytest.approx(0.6 * 348.8, abs=0.1)
    # a pair of nodes: 16 ranks, the ring enters each node once (3200 Gbit/s x 0.75), 12 us
    t_inter = JUDGED_BYTES * 15 / 16 / (400e9 * 0.75) + 15 * 12e-6
    assert busbw_at(JUDGED_BYTES, 16, 8, p5, DEFAULT) == pytest.approx(
        busbw_gbps("reduce_scatter", 16, JUDGED_BYTES, t_inter)
    )
    assert e["inter_busbw"] == pytest.approx(0.6 * 247.0, abs=0.2)
    assert (e["gpus"], e["net"], e["tflops"], e["mem_gbps"]) == (8, "OFI", 445.0, 1407.0)
    # the latency matters at this size: the bandwidth-only floor would be 180 GB/s, 73% of
    # what the planner expects a healthy pair to measure
    assert 0.6 * 400 * 0.75 / busbw_at(JUDGED_BYTES, 16, 8, p5, DEFAULT) == pytest.approx(
        0.729, abs=0.001
    )


@pytest.mark.parametrize("instance", ["p5.48xlarge", "p4de.24xlarge"])
def test_a_node_at_the_planners_efficiency_passes_and_one_at_half_fails(instance: str) -> None:
    it = lookup(instance)
    e = expectations(it, 2)
    for key, ranks in (("intra_busbw", it.gpus), ("inter_busbw", 2 * it.gpus)):
        healthy = busbw_at(JUDGED_BYTES, ranks, it.gpus, it, DEFAULT)
        assert float(e[key]) == pytest.approx(PREFLIGHT_FLOOR * healthy, abs=0.05)
        assert healthy > float(e[key]) > 0.5 * healthy
    assert "inter_busbw" not in expectations(it, 1) and "net" not in expectations(it, 1)
