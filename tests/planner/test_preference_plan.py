"""The planner's DPO step: what the reference forward adds, each way the reference is had.

With LoRA the reference is the same model run again with its adapters off (``training.dpo``):
no second copy of the weights, but its logits and log-sum-exp of the 2B rows are alive next to
the policy's saved activations, exactly as with a frozen copy; and either way the forward
gathers every unit again. If this failed, ``plan --job`` of a LoRA DPO job would say it fits
on GPUs it overflows by the reference's logits (1.2 GB a GPU over the policy's peak for Llama 3 8B at 4,096
tokens), or a multi-node DPO step would be planned without the reference's all-gathers.
"""

from __future__ import annotations

from dataclasses import replace

from planner.args import parser, resolve_args
from planner.lora import LINEAR, LoraSpec
from planner.predict import predict
from planner.preference import PreferenceSpec


def _inp(nodes: int = 1):  # type: ignore[no-untyped-def]
    args = parser().parse_args(
        ["--model", "llama3-8b", "--instance", "p5.48xlarge", "--nodes", str(nodes), "--batch", "1"]
    )
    inp = resolve_args(args).inp
    return replace(inp, lora=LoraSpec(r=16, targets=LINEAR, dropout=False))


def test_a_lora_reference_adds_its_logits_but_no_weights() -> None:
    inp = _inp()
    pre = predict(replace(inp, preference=PreferenceSpec("precomputed")), 1).memory
    lora = predict(replace(inp, preference=PreferenceSpec("adapters")), 1).memory
    copy = predict(replace(inp, preference=PreferenceSpec("copy")), 1).memory
    logits = 2 * inp.seq * (inp.shape.vocab_size * inp.precision.compute + 4)  # 2 rows a pair
    assert lora.params == pre.params  # no second copy of the weights
    # at the reference forward: the policy's activations, the reference's logits (2.1 GB for
    # Llama 3's 128,256-token vocabulary) and one gathered unit, over the policy's own peak
    assert lora.total - pre.total == logits + pre.gathered_unit - pre.gathered_peak
    assert lora.total - pre.total > 1e9
    assert copy.params > lora.params  # a frozen copy holds its shard too


def test_the_reference_forward_is_at_least_its_all_gathers() -> None:
    inp = _inp(4)
    pre = predict(replace(inp, preference=PreferenceSpec("precomputed")), 4)
    lora = predict(replace(inp, preference=PreferenceSpec("adapters")), 4)
    from planner.timing import ring_link, ring_time

    lay, it = lora.layout, inp.instance
    link = ring_link(lay.shard, min(lay.shard, it.gpus), it, inp.assumptions)
    gather = ring_time(inp.shape.n_params * inp.precision.compute, lay.shard, link)
    assert lora.step_time_s - pre.step_time_s >= gather * inp.grad_accum * 0.999
