"""The collectives a preflight times, and nccl-tests' arithmetic for them.

Bandwidth as nccl-tests reports it (NVIDIA/nccl-tests doc/PERFORMANCE.md): ``algbw = S / t``
with S the full tensor, ``busbw = algbw x`` the op's correction factor. The calls are issued as
FSDP2 issues them, over rounds of disjoint links (each node alone, neighbouring node pairs, the
world) so that a slow link is named by its two ends.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import torch

OPS = ("all_gather", "reduce_scatter", "all_reduce")
SCOPES = ("intra", "inter", "world")
"""What a link spans, in report order: one node, a pair of nodes, every node."""


def bus_factor(op: str, n: int) -> float:
    """busbw / algbw for ``op`` on ``n`` ranks (nccl-tests doc/PERFORMANCE.md, 'Summary')."""
    if n < 1:
        raise ValueError(f"ranks {n}: must be >= 1")
    if op == "all_reduce":
        return 2.0 * (n - 1) / n
    if op in ("all_gather", "reduce_scatter"):
        return (n - 1) / n
    raise ValueError(f"op {op!r}: one of {', '.join(OPS)}")


def algbw_gbps(size_bytes: float, seconds: float) -> float:
    """Algorithm bandwidth, GB/s (10^9 bytes, as nccl-tests prints): S / t."""
    return size_bytes / seconds / 1e9 if seconds > 0 else math.inf


def busbw_gbps(op: str, n: int, size_bytes: float, seconds: float) -> float:
    """Bus bandwidth, GB/s: algbw x the op's correction factor."""
    return algbw_gbps(size_bytes, seconds) * bus_factor(op, n)


def collective(
    op: str, size: int, n: int, group: Any, device: torch.device
) -> Callable[[], object]:
    """One call of ``op`` whose full tensor is ``size`` bytes (fp32) across ``n`` ranks.

    As FSDP2 issues them: the all-gather's output and the reduce-scatter's output are new
    tensors every call (``_fsdp_collectives.py``: ``all_gather_comm.allocate`` /
    ``reduce_scatter_comm.allocate`` per unit and step), so the figure includes what a fresh
    buffer costs the device (nothing with CUDA's caching allocator; first-touch page faults
    on CPU, measured 1.3 -> 2.0 ms for a 2.9 MB gloo all-gather of 2 ranks).
    """
    import torch
    import torch.distributed as dist

    per_rank = max(1, size // 4 // n)
    full = torch.ones(per_rank * n, device=device, dtype=torch.float32)
    part = torch.ones(per_rank, device=device, dtype=torch.float32)
    if op == "all_gather":
        return lambda: dist.all_gather_into_tensor(torch.empty_like(full), part, group=group)
    if op == "reduce_scatter":
        return lambda: dist.reduce_scatter_tensor(torch.empty_like(part), full, group=group)
    return lambda: dist.all_reduce(full, group=group)


@dataclass(frozen=True)
class Link:
    """A set of ranks measured together, and what to call it in a failure line."""

    scope: str
    """``intra`` (one node), ``inter`` (a pair of nodes) or ``world`` (every node)."""
    name: str
    """``node-a`` / ``node-a <-> node-b`` / ``all N nodes``."""
    ranks: tuple[int, ...]


def links(nodes: Sequence[tuple[str, Sequence[int]]]) -> list[list[Link]]:
    """Rounds of disjoint links: every node alone, then neighbouring node pairs (two rounds, three
    for an odd ring), then the world.

    Links in one round share no rank, so they run at the same time (as training does).
    """
    rounds: list[list[Link]] = []
    intra = [Link("intra", name, tuple(r)) for name, r in nodes if len(r) > 1]
    if intra:
        rounds.append(intra)
    n = len(nodes)
    if n >= 2:
        pairs_a = [(i, i + 1) for i in range(0, n - 1, 2)]
        pairs_b = [(i, (i + 1) % n) for i in range(1, n, 2)] if n > 2 else []
        # an odd ring closes in a third round: (N-1, 0) shares a node with both others
        pairs_c = [(n - 1, 0)] if n > 2 and n % 2 else []
        for pairs in (pairs_a, pairs_b, pairs_c):
            if pairs:
                rounds.append(
                    [
                        Link(
                            "inter",
                            f"{nodes[i][0]} <-> {nodes[j][0]}",
                            tuple(sorted([*nodes[i][1], *nodes[j][1]])),
                        )
                        for i, j in pairs
                    ]
                )
    if n > 2:
        everyone = tuple(sorted(r for _name, rs in nodes for r in rs))
        rounds.append([Link("world", f"all {n} nodes", everyone)])
    return rounds
