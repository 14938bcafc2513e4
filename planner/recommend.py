"""The recommendation: the fitting (sharding, HSDP group, AC, micro-batch) with the best step throughput.

Searches with ``planner.predict``; ``planner.plan`` puts the result in each row.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from planner.memory import PRECISIONS, STRATEGIES
from planner.predict import PlanInput, predict


def candidates(
    gpus_per_node: int, nodes: int, min_nodes: int | None = None
) -> list[tuple[str, int | None]]:
    """Strategies to try, HYBRID_SHARD with every shard group of whole nodes below the world.
    An elastic job (``min_nodes`` < ``nodes``) may re-form at any node count in between
    (torchrun's ``--nnodes=MIN:MAX``), and training refuses a shard group that does not divide
    the world it finds (``training.parallelize.ParallelDims``): its groups divide every one."""
    out: list[tuple[str, int | None]] = [(s, None) for s in STRATEGIES if s != "HYBRID_SHARD"]
    worlds = range(min_nodes or nodes, nodes + 1)
    for k in range(1, nodes):
        if all(n % k == 0 for n in worlds):
            out.append(("HYBRID_SHARD", k * gpus_per_node))
    return out


def recommend(
    inp: PlanInput, nodes: int, max_batch: int | None = None, *, min_nodes: int | None = None
) -> dict[str, Any] | None:
    """Best steady-state tokens/s/GPU among configurations that fit (``min_nodes``: the
    elastic minimum, see ``candidates``).

    Searches the given precision first; when nothing fits, pure bf16 (half the sharded state),
    flagged in the result. None when nothing fits at all.
    """
    best = _search(inp, nodes, max_batch, min_nodes)
    if best is None and inp.precision.name != "pure_bf16":
        bf16 = replace(inp, precision=PRECISIONS["pure_bf16"])
        best = _search(bf16, nodes, max_batch, min_nodes)
    return best


def _search(
    inp: PlanInput, nodes: int, max_batch: int | None, min_nodes: int | None
) -> dict[str, Any] | None:
    limit = max_batch or max(8, inp.batch)
    best: tuple[tuple[float, int], dict[str, Any]] | None = None
    for strategy, group in candidates(inp.instance.gpus, nodes, min_nodes):
        for ac in (False, True):
            for batch in range(1, limit + 1):
                trial = replace(inp, strategy=strategy, hsdp_group=group, ac=ac, batch=batch)
                pr = predict(trial, nodes)
                if not pr.fits:
                    break  # a larger micro-batch needs more memory
                key = (pr.tokens_per_s_per_gpu, -pr.memory.total)
                if best is None or key > best[0]:
                    best = (
                        key,
                        {
                            "sharding": strategy,
                            "hsdp_group": group,
                            "activation_checkpointing": ac,
                            "micro_batch": batch,
                            "precision": inp.precision.name,
                            "tokens_per_s_per_gpu": pr.tokens_per_s_per_gpu,
                            "mem_per_gpu_bytes": pr.memory.total,
                            "mfu": pr.mfu,
                        },
                    )
    return best[1] if best else None
