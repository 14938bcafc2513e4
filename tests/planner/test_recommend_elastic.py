"""An elastic job's recommended HSDP group divides every world it can re-form at.

torchrun's ``--nnodes=MIN:MAX`` lets the rendezvous close at any node count in between
(``torch/distributed/elastic/rendezvous``: ``min_nodes``..``max_nodes``), and training refuses
a ``--sharding_group_size`` that does not divide ``WORLD_SIZE``
(``training.parallelize.ParallelDims``). If this failed, the planner (and ``new-stack``) would
write a job whose restart after losing a node stops with that refusal instead of training on.
"""

from __future__ import annotations

from planner.recommend import candidates


def _groups(nodes: int, min_nodes: int | None) -> list[int]:
    return [g for s, g in candidates(8, nodes, min_nodes) if s == "HYBRID_SHARD" and g]


def test_a_fixed_world_tries_every_group_of_whole_nodes() -> None:
    assert _groups(16, None) == [8, 16, 32, 64]
    assert _groups(16, 16) == [8, 16, 32, 64]


def test_an_elastic_world_keeps_the_groups_that_divide_every_size() -> None:
    assert _groups(16, 14) == [8]  # 14, 15 and 16 nodes: one node is the only common divisor
    assert _groups(16, 12) == [8]
    assert _groups(8, 4) == [8]  # 4..8: 5 and 7 are prime
    assert _groups(12, 12) == [8, 16, 24, 32, 48]


def test_the_shipped_elastic_example_is_within_them() -> None:
    from pathlib import Path

    from jobs.schema import load

    job = load(Path(__file__).resolve().parents[2] / "jobs" / "examples" / "p5-16.yaml")
    worlds = range(job.min_workers, job.workers + 1)
    if job.sharding_strategy == "HYBRID_SHARD":
        size = next(
            int(a.split("=", 1)[1]) for a in job.extra_args if a.startswith("--sharding_group_size")
        )
        assert all(n * 8 % size == 0 for n in worlds)
    assert job.min_workers < job.workers  # the example is elastic, so the rule applies to it
