"""The planner against every published FSDP run it knows (``planner.published.POINTS``).

If this fails, the planner's tokens/s/GPU has left the band the project promises users for a
run on the hardware it predicts (``planner.published.BAND``, 12%; docs/planner.md,
Validation), or it again refuses Llama 2 13B at micro-batch 2 x 4096 without activation
checkpointing on 64 A100-80GB, which torchtitan ran (2,162 tokens/s/GPU). Before the causes
in docs/planner.md were fixed (flash attention's backward counted as 2 forwards instead of
2.5, FSDP2's copy-out and reduce-scatter copy-in left out, the allocator's slack and a
layer's gradient counted on top of activations they do not coexist with) the planner was
4-22% above every one of these runs and put the 13B job at 88.2 GiB.
"""

from __future__ import annotations

import pytest

from infra.instances import lookup
from planner.memory import PRECISIONS
from planner.predict import PlanInput, predict
from planner.published import BAND, POINTS, PublishedPoint
from planner.shapes import BUILTIN

OUTSIDE_THE_BAND = {
    # The source's H100s ran at a 500 W cap with 2.4 TB/s HBM2e; p5's run at 700 W, 3.35 TB/s.
    "torchtitan FSDP2, Llama 3.1 8B on 8 H100": (0.25, 0.45),
    # The source's A100 fabric is unstated; on p4de's 400 Gbit/s, 4,096 tokens per micro-batch
    # of a 70B model leave the all-gathers exposed, which a faster fabric would hide.
    "torchtitan FSDP2, Llama 2 70B on 64 A100, op SAC, b1": (-0.35, -0.2),
}
"""Points whose setup the catalog cannot reproduce, with the error range they are held to."""

TPS = [p for p in POINTS if p.metric == "tokens_per_s_per_gpu"]


def _error(p: PublishedPoint) -> float:
    return p.predict() / p.published - 1.0


@pytest.mark.parametrize("point", TPS, ids=[p.name for p in TPS])
def test_every_published_throughput_is_within_its_band(point: PublishedPoint) -> None:
    low, high = OUTSIDE_THE_BAND.get(point.name, (-BAND, BAND))
    assert low <= _error(point) <= high, f"{point.name}: {_error(point):+.1%}"


def test_the_errors_are_not_one_sided() -> None:
    """The planner was above every run by 4.5-22.5%; its mean error over the runs on the
    hardware it predicts is now under half the band."""
    errors = [_error(p) for p in TPS if p.name not in OUTSIDE_THE_BAND]
    assert len(errors) >= 12
    assert abs(sum(errors) / len(errors)) < BAND / 2


def test_llama2_13b_without_ac_fits_on_64_a100_where_torchtitan_ran_it() -> None:
    """torchtitan ran Llama 2 13B at 2 x 4096 tokens without AC on 64 A100-80GB; the planner
    had 88.2 GiB per GPU. One sample more per GPU (3 x 4096) still does not fit."""
    inp = PlanInput(
        shape=BUILTIN["llama2-13b"],
        instance=lookup("p4de.24xlarge"),
        precision=PRECISIONS["mixed"],
        ac=0.0,
        batch=2,
        seq=4096,
    )
    two = predict(inp, 8)
    assert two.fits and two.memory.total / 2**30 < 80.0
    three = predict(PlanInput(**{**inp.__dict__, "batch": 3}), 8)
    assert not three.fits
