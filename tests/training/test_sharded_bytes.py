"""FSDP2 really shards: each rank holds 1/N of the parameter, gradient and optimizer bytes.

If these fail, a layer or the root is left unsharded (e.g. fully_shard not applied to the root
or to every decoder layer), gradients stay unsharded after backward, or the optimizer keeps full
copies, so memory per rank no longer falls as 1/N and a model that should fit no longer does.
Measured after one forward/backward/step of the tiny preset (FULL_SHARD, fp32, AdamW).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

pytestmark = pytest.mark.slow

TOL = 0.05


def _check(results: dict[str, Any], world: int) -> list[float]:
    ranks = results["bytes"]["ranks"]
    assert len(ranks) == world
    ratios = []
    for r in ranks:
        full = r["full_param_bytes"]
        assert r["n_grads"] == r["n_params"]  # every parameter received a gradient
        ideal = {
            "param_bytes": full / world,
            "grad_bytes": full / world,
            "optim_bytes": 2 * full / world,
        }
        for key, want in ideal.items():
            ratio = r[key] / want
            assert abs(ratio - 1) < TOL, f"rank holds {ratio:.3f} x the ideal {key}"
        total = r["param_bytes"] + r["grad_bytes"] + r["optim_bytes"]
        ratios.append(total / (4 * full / world))
    assert all(abs(x - 1) < TOL for x in ratios), ratios
    return ratios


def test_two_ranks_hold_half(world2: tuple[Path, dict[str, Any]]) -> None:
    _check(world2[1], 2)


def test_four_ranks_hold_a_quarter(world4: tuple[Path, dict[str, Any]]) -> None:
    _check(world4[1], 4)
