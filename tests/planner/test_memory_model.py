"""Properties of the planner's memory model (FSDP2 sharding, activations, overheads).

If this fails, the planner's per-GPU memory stops behaving like FSDP2: more nodes must shrink
FULL_SHARD's sharded state, AC must shrink activations, HYBRID_SHARD must shard over its group
only, SHARD_GRAD_OP must keep the whole model unsharded between forward and backward, mixed
precision must cost 16 bytes per parameter. The fits verdicts (e.g. Llama-2-70B on 2 p4de)
would be wrong. Pure arithmetic, nothing mocked.
"""

from __future__ import annotations

import itertools

import pytest

from infra.instances import lookup
from planner.assumptions import DEFAULT
from planner.memory import (
    PRECISIONS,
    activation_model,
    layout,
    memory,
    rank_shard_elements,
    shard_elements,
)
from planner.predict import PlanInput, predict
from planner.shapes import BUILTIN

S70 = BUILTIN["llama2-70b"]
MIXED = PRECISIONS["mixed"]


def _mem(strategy: str, world: int, ac: float = 1.0, batch: int = 3, group: int | None = None):
    lay = layout(strategy, world, 8, group)
    return memory(S70, lay, MIXED, batch=batch, seq=4096, ac=ac, a=DEFAULT)


def test_full_shard_memory_falls_with_nodes() -> None:
    totals = [_mem("FULL_SHARD", 8 * n).total for n in (1, 2, 4, 8, 16)]
    assert totals == sorted(totals, reverse=True)
    states = [_mem("FULL_SHARD", 8 * n).sharded_state for n in (1, 2, 4, 8, 16)]
    for a, b in itertools.pairwise(states):
        assert a / b == pytest.approx(2.0, rel=1e-3)


def test_mixed_precision_is_16_bytes_per_parameter_sharded() -> None:
    m = _mem("FULL_SHARD", 16)
    assert m.sharded_state == pytest.approx(16 * S70.n_params / 16, rel=1e-4)
    pure = memory(
        S70,
        layout("FULL_SHARD", 16, 8),
        PRECISIONS["pure_bf16"],
        batch=3,
        seq=4096,
        ac=1.0,
        a=DEFAULT,
    )
    assert pure.sharded_state * 2 == pytest.approx(m.sharded_state, rel=1e-4)


def test_selective_ac_keeps_attention_and_every_other_matmul() -> None:
    """Op-level SAC (training's --ac_mode selective) lies between full AC and none; per layer it
    keeps its input plus q, v, gate, down and SDPA's output and log-sum-exp (Llama-2-70B, GQA:
    k/v at 1024 wide), and the layer in backward recomputes only the rest of what it saves
    without AC."""
    from planner.memory import activation_model

    full = _mem("FULL_SHARD", 16, 1.0)
    off = _mem("FULL_SHARD", 16, 0.0)
    lay = layout("FULL_SHARD", 16, 8)
    sac = memory(S70, lay, MIXED, batch=3, seq=4096, ac=1.0, ac_mode="selective", a=DEFAULT)
    assert full.activations < sac.activations < off.activations
    h, i, q, kv, c = 8192, 28672, 8192, 1024, 2
    act = activation_model(S70, MIXED)
    assert act.selective == h * c + (2 * q + kv + i + h) * c + 4 * 64
    tokens = 3 * 4096
    # Same gathered parameters and loss chunks: the difference is the saved activations alone,
    # and the layer in backward holds its down output too (checkpoint's early stop).
    expected = tokens * 80 * (act.selective - h * c) - tokens * (act.selective - h * c)
    expected += tokens * h * c
    assert sac.activations - full.activations == expected
    assert sac.activations_ac == full.activations  # the JSON's "with AC" figure stays full AC
    with pytest.raises(ValueError, match="ac_mode 'layer'"):
        memory(S70, lay, MIXED, batch=3, seq=4096, ac=1.0, ac_mode="layer", a=DEFAULT)


def test_ac_reduces_activations_and_partial_ac_lies_between() -> None:
    on, off, half = (
        _mem("FULL_SHARD", 16, 1.0),
        _mem("FULL_SHARD", 16, 0.0),
        _mem("FULL_SHARD", 16, 0.5),
    )
    assert on.activations < half.activations < off.activations
    assert off.activations == off.activations_no_ac and on.activations == on.activations_ac
    # Without AC, 80 layers x 12,288 tokens x ~400 KB: hundreds of GiB for 70B.
    assert off.activations > 300 * 2**30 > 30 * 2**30 > on.activations


def test_activations_scale_with_micro_batch() -> None:
    """Saved activations scale with the tokens; the chunked loss adds a constant once its fp32
    chunks reach their 256 MiB cap (true at 3 and 4 x 4096 tokens with a 32k vocabulary)."""
    from planner.memory import loss_chunk_bytes

    loss = loss_chunk_bytes(S70.vocab_size, 3 * 4096, 2, DEFAULT.loss_chunk_bytes)
    assert loss == loss_chunk_bytes(S70.vocab_size, 4 * 4096, 2, DEFAULT.loss_chunk_bytes)
    assert loss == 2 * (DEFAULT.loss_chunk_bytes // (4 * S70.vocab_size)) * S70.vocab_size * 4
    assert (_mem("FULL_SHARD", 16, batch=3).activations - loss) * 4 == pytest.approx(
        (_mem("FULL_SHARD", 16, batch=4).activations - loss) * 3, rel=1e-6
    )


def test_hybrid_shards_over_its_group_only() -> None:
    hsdp = _mem("HYBRID_SHARD", 32, group=8)
    assert hsdp.sharded_state == _mem("FULL_SHARD", 8).sharded_state
    assert _mem("HYBRID_SHARD", 32, group=16).sharded_state == _mem("FULL_SHARD", 16).sharded_state


def test_shard_grad_op_keeps_the_whole_model_gathered() -> None:
    sgo, full = _mem("SHARD_GRAD_OP", 16), _mem("FULL_SHARD", 16)
    assert sgo.sharded_state == full.sharded_state
    assert sgo.gathered_peak - full.gathered_peak > 0.9 * S70.n_params * 2


def test_no_shard_holds_everything() -> None:
    assert _mem("NO_SHARD", 16).sharded_state == 16 * S70.n_params


def test_gathered_unit_is_the_largest_fsdp_unit() -> None:
    assert _mem("FULL_SHARD", 16).gathered_unit_name == "decoder layer"
    assert _mem("FULL_SHARD", 16).gathered_unit == S70.layer_params * 2
    l3 = memory(
        BUILTIN["llama3-8b"],
        layout("FULL_SHARD", 8, 8),
        MIXED,
        batch=1,
        seq=8192,
        ac=1.0,
        a=DEFAULT,
    )
    # [norm, lm_head]: 128256 x 4096 + 4096 > one layer (218 M) and > the embedding
    assert l3.gathered_unit_name == "norm, lm_head"
    assert l3.gathered_unit == (128256 * 4096 + 4096) * 2


def test_rank_shards_sum_to_the_model_and_rank0_is_largest() -> None:
    shapes = BUILTIN["llama3-8b"].param_shapes()
    for world in (1, 3, 8, 128):
        per_rank = [rank_shard_elements(shapes, world, r) for r in range(world)]
        assert sum(per_rank) == BUILTIN["llama3-8b"].n_params
        assert max(per_rank) == per_rank[0] == shard_elements(shapes, world)


def test_seventy_b_on_two_p4de_full_shard_does_not_fit() -> None:
    inp = PlanInput(shape=S70, instance=lookup("p4de.24xlarge"), precision=MIXED)
    two = predict(inp, 2)
    assert not two.fits
    assert two.memory.sharded_state / 2**30 == pytest.approx(64.2, abs=0.1)  # 16 B x 69 B / 16
    assert predict(inp, 4).fits
    from planner.recommend import recommend

    rec = recommend(inp, 2)
    assert rec is not None and rec["precision"] == "pure_bf16"


def test_overhead_counts_context_nccl_and_fragmentation() -> None:
    """Fragmentation falls on the transient memory (gathered units, the recomputed layer, the
    head and loss), not on the layers' saved inputs, which repeat their sizes every step."""
    m = _mem("FULL_SHARD", 16)
    s = S70
    kept = 3 * 4096 * s.num_layers * s.hidden_size * 2  # full AC: each layer's bf16 input
    transient = m.activations - kept + m.gathered_peak
    assert m.overhead == DEFAULT.cuda_context_bytes + DEFAULT.nccl_buffer_bytes + int(
        DEFAULT.fragmentation * transient
    )


def test_only_the_head_unit_stays_gathered_between_forward_and_backward() -> None:
    """training.parallelize reshards the embedding after forward like every layer and keeps
    [norm, lm_head] (reshard_after_forward=False): the peak holds the head, two layers and the
    largest unit's gradient (bf16 + its fp32 reduce copy) beyond what the head's backward has
    freed (its logits and loss state), not the embedding."""
    s = BUILTIN["llama3-8b"]
    m = memory(s, layout("FULL_SHARD", 8, 8), MIXED, batch=1, seq=8192, ac=1.0, a=DEFAULT)
    head = 128256 * 4096 + 4096
    freed = 8192 * activation_model(s, MIXED).head
    assert m.grad_at_peak == int(head * (2 + 4) - freed) > 0
    assert m.gathered_peak == head * 2 + 2 * s.layer_params * 2 + m.grad_at_peak
