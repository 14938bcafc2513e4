"""The planner's LoRA memory (``planner.lora``) and its presets against the real thing.

If this fails, ``planner.lora`` no longer describes what a LoRA step keeps (the frozen base's
shard without gradient or AdamW state, peft's adapter tensors, the activations autograd saves
once the base is frozen), or a preset's shape no longer gives its checkpoint's parameter count:
the planner's "fits" for a LoRA (and so the smallest fleet it reports) would be wrong.

Measured on CPU, nothing mocked: peft's adapters on the tiny preset (parameter and state bytes
after one AdamW step: exact; the bytes autograd saves in one decoder layer, recorded with
``saved_tensors_hooks`` as tests/planner/test_activations_vs_autograd.py does: within 2%, the
share of the per-sequence cos/sin tables the formula leaves out, as there).
"""

from __future__ import annotations

from typing import Any

import pytest

from planner.assumptions import DEFAULT
from planner.catalog import lookup
from planner.lora import (
    LINEAR,
    LoraSpec,
    adapter_params,
    adapter_shapes,
    lora_activations,
    lora_memory,
    smallest_fleet,
)
from planner.memory import PRECISIONS, activation_model, layout, memory
from planner.shapes import BUILTIN, from_config_dict, resolve

# peft reads transformers' deprecated `is_gradient_checkpointing` while wrapping a model
pytestmark = pytest.mark.filterwarnings("ignore:`is_gradient_checkpointing`:FutureWarning")

B, S = 2, 128
SPECS = {
    "qv_dropout": LoraSpec(),
    "all_linear_r16": LoraSpec(r=16, targets=LINEAR, dropout=False),
    "mlp_down": LoraSpec(r=4, targets=("down_proj",), dropout=True),
}

# Parameters of each checkpoint (the sum of its safetensors index' tensors).
PUBLISHED = {
    "llama3.1-8b": 8_030_261_248,
    "llama3.1-70b": 70_553_706_496,
    "llama3.2-1b": 1_235_814_400,
    "llama3.2-3b": 3_212_749_824,
    "qwen2.5-7b": 7_615_616_512,
    "qwen2.5-72b": 72_706_203_648,
    "qwen3-8b": 8_190_735_360,
    "qwen3-32b": 32_762_123_264,
}


@pytest.mark.parametrize("name", list(PUBLISHED))
def test_presets_have_their_checkpoints_parameter_count(name: str) -> None:
    assert BUILTIN[name].n_params == PUBLISHED[name]


def test_qwen_configs_carry_their_biases_and_norms() -> None:
    base = {
        "vocab_size": 100,
        "hidden_size": 64,
        "intermediate_size": 128,
        "num_hidden_layers": 2,
        "num_attention_heads": 4,
        "num_key_value_heads": 2,
    }
    qwen2 = from_config_dict({**base, "model_type": "qwen2"}, "q2")
    qwen3 = from_config_dict({**base, "model_type": "qwen3", "head_dim": 32}, "q3")
    llama = from_config_dict({**base, "model_type": "llama"}, "l")
    assert (qwen2.qkv_bias, qwen2.qk_norm, qwen3.qkv_bias, qwen3.qk_norm) == (
        True,
        False,
        False,
        True,
    )
    assert qwen2.n_params - llama.n_params == 2 * (64 + 32 + 32)
    assert qwen3.head_dim == 32 and not llama.qkv_bias


def _tiny_lora(spec: LoraSpec, dtype_name: str = "float32") -> Any:
    import torch
    from peft import LoraConfig, get_peft_model
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(0)
    shape = resolve("tiny-llama")
    cfg = LlamaConfig(
        vocab_size=shape.vocab_size,
        hidden_size=shape.hidden_size,
        intermediate_size=shape.intermediate_size,
        num_hidden_layers=shape.num_layers,
        num_attention_heads=shape.num_heads,
        num_key_value_heads=shape.num_kv_heads,
        max_position_embeddings=4096,
        attention_dropout=0.0,
    )
    model = LlamaForCausalLM(cfg).to(getattr(torch, dtype_name))
    lora = LoraConfig(
        r=spec.r,
        lora_alpha=32,
        lora_dropout=0.05 if spec.dropout else 0.0,
        target_modules=list(spec.targets),
        task_type="CAUSAL_LM",
    )
    peft_model = get_peft_model(model, lora)
    model.train()
    return peft_model, model


@pytest.mark.parametrize("spec", list(SPECS))
def test_adapter_tensors_are_peft_s(spec: str) -> None:
    _, model = _tiny_lora(SPECS[spec])
    shape = resolve("tiny-llama")
    trainable = [tuple(p.shape) for p in model.parameters() if p.requires_grad]
    assert sorted(trainable) == sorted(adapter_shapes(shape, SPECS[spec]))
    assert sum(p.numel() for p in model.parameters() if p.requires_grad) == adapter_params(
        shape, SPECS[spec]
    )


def test_one_step_holds_the_predicted_state_bytes() -> None:
    """Frozen base: no gradient, no AdamW moments; the adapters: both (one process, fp32)."""
    import torch

    spec = SPECS["qv_dropout"]
    peft_model, model = _tiny_lora(spec)
    shape = resolve("tiny-llama")
    opt = torch.optim.AdamW([p for p in model.parameters() if p.requires_grad], lr=1e-3)
    ids = torch.randint(0, shape.vocab_size, (B, 32))
    peft_model(input_ids=ids, labels=ids).loss.backward()
    grads = sum(p.grad.numel() * 4 for p in model.parameters() if p.grad is not None)
    opt.step()
    moments = sum(
        v.numel() * v.element_size()
        for st in opt.state.values()
        for k, v in st.items()
        if k in ("exp_avg", "exp_avg_sq")
    )
    params = sum(p.numel() * p.element_size() for p in model.parameters())
    predicted = lora_memory(
        shape,
        layout("FULL_SHARD", 1, 1),
        PRECISIONS["fp32"],
        spec,
        batch=B,
        seq=32,
        ac=0.0,
        a=DEFAULT,
    )
    assert (params, grads, moments) == (predicted.params, predicted.grads, predicted.optimizer)


def _layer_saved_bytes(spec: LoraSpec, dtype_name: str) -> int:
    """Bytes autograd saves in decoder layer 1 (parameters excluded, storages counted once)."""
    import torch

    peft_model, model = _tiny_lora(spec, dtype_name)
    shape = resolve("tiny-llama")
    params = {p.untyped_storage().data_ptr() for p in model.parameters()}
    storages: dict[int, int] = {}
    recording = [False]

    def pack(t: torch.Tensor) -> torch.Tensor:
        if recording[0]:
            s = t.untyped_storage()
            if s.data_ptr() not in params:
                storages[s.data_ptr()] = s.nbytes()
        return t

    layer = model.model.layers[1]
    layer.register_forward_pre_hook(lambda m, a: recording.__setitem__(0, True))
    layer.register_forward_hook(lambda m, a, o: recording.__setitem__(0, False))
    ids = torch.randint(0, shape.vocab_size, (B, S))
    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        peft_model(input_ids=ids)
    return sum(storages.values())


@pytest.mark.parametrize(("dtype", "precision"), [("float32", "fp32"), ("bfloat16", "pure_bf16")])
@pytest.mark.parametrize("spec", list(SPECS))
def test_one_lora_layer_saves_what_the_formula_says(spec: str, dtype: str, precision: str) -> None:
    shape = resolve("tiny-llama")
    measured = _layer_saved_bytes(SPECS[spec], dtype)
    p = PRECISIONS[precision]
    # on a CPU a dropout mask is a noise tensor of its input's dtype (a bool on GPUs)
    predicted = B * S * lora_activations(shape, p, SPECS[spec], on_cpu=True).per_layer
    assert measured == pytest.approx(predicted, rel=0.02)
    if precision == "fp32":  # a frozen base saves less than full fine-tuning, adapters and all;
        # with pure bf16 peft's fp32 adapters keep fp32 copies of their inputs: more
        assert measured < B * S * activation_model(shape, p).per_layer


def test_lora_needs_fewer_nodes_than_full_fine_tuning() -> None:
    """The planner's answer to "how many p5 nodes": 70B and 72B models (seq 4096, micro-batch
    1, FULL_SHARD, full AC, bf16 compute with fp32 master weights)."""
    p5 = lookup("p5.48xlarge")
    mixed = PRECISIONS["mixed"]

    def fleet(model: str, spec: LoraSpec | None) -> int | None:
        return smallest_fleet(
            BUILTIN[model], p5.gpus, p5.gpu_memory_bytes, mixed, spec, seq=4096, a=DEFAULT
        )

    assert fleet("llama3.1-70b", None) == 3 and fleet("llama3.1-70b", LoraSpec()) == 1
    assert fleet("qwen2.5-72b", None) == 3 and fleet("qwen2.5-72b", LoraSpec()) == 1
    assert fleet("llama3.1-8b", None) == 1 == fleet("llama3.1-8b", LoraSpec())
    one_node = layout("FULL_SHARD", 8, 8)
    shape = BUILTIN["llama3.1-70b"]
    lora = lora_memory(shape, one_node, mixed, LoraSpec(), batch=1, seq=4096, ac=1.0, a=DEFAULT)
    full = memory(shape, one_node, mixed, batch=1, seq=4096, ac=1.0, a=DEFAULT)
    # the fp32 base shard stays; its gradient and AdamW moments (3/4 of the state) go
    assert lora.params == pytest.approx(full.params, rel=1e-3)
    assert lora.grads + lora.optimizer < 1e-3 * (full.grads + full.optimizer)
    assert lora.total < p5.gpu_memory_bytes < full.total


def test_bad_specs() -> None:
    with pytest.raises(ValueError, match="--lora-targets qkv_proj: each one of q_proj"):
        LoraSpec(targets=("qkv_proj",))
    with pytest.raises(ValueError, match="--lora-r 0: must be >= 1"):
        LoraSpec(r=0)


@pytest.mark.parametrize("spec", [*SPECS, "full"])
def test_step_gemm_flops_are_what_autograd_runs(spec: str) -> None:
    """The matmul FLOPs of one forward and backward (no AC) that ``planner.timing`` charges,
    against ``torch.utils.flop_counter.FlopCounterMode`` on the tiny preset: exact. With LoRA
    the frozen base has no weight gradient (4 N_matmul + 6 N_adapters) and the first layer's
    attention input no gradient at all (``first_layer_skipped_flops``)."""
    import torch
    from torch.utils.flop_counter import FlopCounterMode

    from planner.lora import first_layer_skipped_flops
    from planner.timing import executed_flops_per_token

    shape = resolve("tiny-llama")
    lora = SPECS.get(spec)
    if lora is None:  # the same base model without adapters, every weight trained
        from transformers import LlamaForCausalLM

        _, with_adapters = _tiny_lora(SPECS["qv_dropout"])
        peft_model = LlamaForCausalLM(with_adapters.config)
    else:
        peft_model, _ = _tiny_lora(lora)
    ids = torch.randint(0, shape.vocab_size, (B, 32))
    with FlopCounterMode(display=False) as counter:
        peft_model(input_ids=ids, labels=ids).loss.backward()
    counts = {str(k): v for k, v in counter.get_flop_counts()["Global"].items()}
    assert set(counts) == {"aten.mm"}  # SDPA's math kernel on CPU is not counted as attention
    predicted = executed_flops_per_token(
        shape,
        32,
        0.0,
        lora_params=adapter_params(shape, lora) if lora else None,
        lora_skipped=first_layer_skipped_flops(shape, lora) if lora else 0,
    )
    assert counts["aten.mm"] == predicted.gemm * B * 32
