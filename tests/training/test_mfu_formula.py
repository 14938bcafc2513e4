"""The trainer's MFU formula is the planner's, with and without LoRA.

If this fails, `training.model.flops_per_token` (what a run's `perf/mfu`, the flop counter's
"formula" and the trackers report) and `planner.timing.model_flops_per_token` (what the planner
predicts MFU and step time with) count a different number of FLOPs per token: a LoRA run would
report MFU as if every frozen weight got a weight gradient (6 N instead of 4 N + 6 N_adapters:
1.45x too high on Llama-3.1-70B with q,v adapters), or a model whose query width (heads x
head_dim) is not its hidden size (Qwen3-32B: 8192 against 5120) would get the wrong attention
term. Training must not import the planner; this test imports both.
"""

from __future__ import annotations

from typing import Any

import pytest
import transformers

from planner.lora import LINEAR, LoraSpec, adapter_params
from planner.shapes import BUILTIN, ModelShape, resolve
from planner.timing import model_flops_per_token
from training.model import flops_per_token

SEQ = 4096


def _config(shape: ModelShape) -> Any:
    """The transformers config of a built-in shape, with the family's own config class (Qwen3:
    q/k norm; Qwen2: biased q/k/v; the rest Llama)."""
    cls = "Qwen3Config" if shape.qk_norm else "Qwen2Config" if shape.qkv_bias else "LlamaConfig"
    return getattr(transformers, cls)(
        vocab_size=shape.vocab_size,
        hidden_size=shape.hidden_size,
        intermediate_size=shape.intermediate_size,
        num_hidden_layers=shape.num_layers,
        num_attention_heads=shape.num_heads,
        num_key_value_heads=shape.num_kv_heads,
        head_dim=shape.head_dim,
        tie_word_embeddings=shape.tie_word_embeddings,
    )


@pytest.mark.parametrize("name", sorted(BUILTIN))
def test_full_fine_tune_formula_equals_the_planners(name: str) -> None:
    shape = BUILTIN[name]
    ours = flops_per_token(_config(shape), SEQ)
    assert ours == model_flops_per_token(shape, SEQ)
    # the attention term follows the query width, not the hidden size
    attention = 12.0 * shape.num_layers * shape.num_heads * shape.head_dim * SEQ
    assert ours - flops_per_token(_config(shape), 0) == attention


@pytest.mark.parametrize("name", sorted(BUILTIN))
@pytest.mark.parametrize("targets", [("q_proj", "v_proj"), LINEAR], ids=["qv", "all-linear"])
def test_lora_formula_equals_the_planners(name: str, targets: tuple[str, ...]) -> None:
    shape = BUILTIN[name]
    n_adapters = adapter_params(shape, LoraSpec(r=8, targets=targets))
    ours = flops_per_token(_config(shape), SEQ, n_adapters)
    assert ours == model_flops_per_token(shape, SEQ, n_adapters)
    full = flops_per_token(_config(shape), SEQ)
    assert ours < full  # no weight gradient for the frozen base


def test_qwen3_32b_and_llama_70b_lora_figures() -> None:
    """The two cases the old formula (6 N + 12 L hidden S for every run) got wrong, in numbers."""
    qwen = BUILTIN["qwen3-32b"]
    old_attention = 12.0 * qwen.num_layers * qwen.hidden_size * SEQ
    new_attention = 12.0 * qwen.num_layers * 8192 * SEQ  # 64 heads x 128
    full = flops_per_token(_config(qwen), SEQ)
    assert full - 6.0 * qwen.matmul_params == new_attention != old_attention
    llama = BUILTIN["llama3.1-70b"]
    n_adapters = adapter_params(llama, LoraSpec())
    old = 6.0 * llama.matmul_params + 12.0 * llama.num_layers * llama.hidden_size * SEQ
    lora = flops_per_token(_config(llama), SEQ, n_adapters)
    assert old / lora == pytest.approx(1.448, abs=1e-3)


def test_the_trainers_trainable_count_is_the_planners_adapter_count() -> None:
    """What the trainer passes as `lora_params` (`Trainer.n_trainable` with --use_peft: the
    peft model's parameters that require a gradient) is the planner's adapter count, here on
    the tiny preset built empty (meta device) as every rank builds it."""
    from training.config import TrainConfig
    from training.data import load_tokenizer
    from training.lora import apply_lora, trainable_counts
    from training.model import build_empty, model_spec

    name = "tiny-llama-2l"
    spec = model_spec(name, len(load_tokenizer(name)), 256)
    for targets in ("q_proj,v_proj", "all-linear"):
        cfg = TrainConfig(model_name=name, use_peft=True, lora_target_modules=targets)
        model = build_empty(spec)
        apply_lora(model, cfg, empty=True)
        trainable, _ = trainable_counts(model)
        wanted = LINEAR if targets == "all-linear" else ("q_proj", "v_proj")
        shape = resolve(name)
        assert trainable == adapter_params(shape, LoraSpec(r=cfg.lora_r, targets=wanted))
        assert flops_per_token(spec.config, 256, trainable) == model_flops_per_token(
            shape, 256, trainable
        )
