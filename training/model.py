"""Models: built-in tiny Llama presets and any Hugging Face causal LM, built without weights.

The model file knows nothing of FSDP. Loading is three steps so that no rank but rank 0 ever
holds the full model:

1. `build_empty(spec)` on every rank: parameters on the meta device, buffers real (so rotary
   `inv_freq`, which is not in the state dict, is computed correctly and kept aside);
2. the caller shards the empty model (`training.parallelize`);
3. `materialize(model, ...)`: allocate the local shards (`to_empty`), broadcast the full state
   dict that only rank 0 built (`full_state_dict`: random init with the seed for presets,
   safetensors for checkpoints) and put the non-persistent buffers back.

A preset's random init depends only on the seed, so every world size and sharding starts from
exactly the weights a 1-process run gets.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch
from torch import nn

PRESETS: dict[str, dict[str, Any]] = {
    # 3.8 M parameters (3,804,928) with the bundled 1,763-token tokenizer: the demo's model.
    "tiny-llama": {
        "hidden_size": 256,
        "intermediate_size": 688,
        "num_hidden_layers": 4,
        "num_attention_heads": 8,
        "num_key_value_heads": 4,
        "max_position_embeddings": 4096,
    },
    # 0.32 M parameters (318,144) with the same 1,763-token tokenizer: fast multi-process tests.
    "tiny-llama-2l": {
        "hidden_size": 64,
        "intermediate_size": 176,
        "num_hidden_layers": 2,
        "num_attention_heads": 4,
        "num_key_value_heads": 2,
        "max_position_embeddings": 4096,
    },
}
"""Tiny `LlamaForCausalLM` shapes that need no download; vocab_size comes from the tokenizer."""


class ModelError(ValueError):
    """A model that cannot be built: the message names --model_name or --context_length."""


@dataclass
class ModelSpec:
    """What every rank knows about the model before any weight exists."""

    name: str
    """--model_name: a preset name, a local folder or a hub id."""
    config: Any
    """The transformers `PretrainedConfig`."""
    is_preset: bool
    """True for the built-in random-init presets."""
    dtype: torch.dtype = torch.float32
    """Dtype the parameters are kept in (bf16 with --pure_bf16)."""
    buffers: dict[str, torch.Tensor] = field(default_factory=dict)
    """Non-persistent buffers (rotary inv_freq) computed at build time, put back after to_empty."""
    revision: str | None = None
    """Hub revision (commit, branch or tag) the config and the weights are read at; None: the
    repository's default branch. A commit pins restarts and reruns to the same weights."""


def model_spec(
    name: str,
    vocab_size: int,
    context_length: int,
    dtype: torch.dtype = torch.float32,
    revision: str | None = None,
) -> ModelSpec:
    """Resolve --model_name to a config without loading any weight (at ``revision`` for a hub
    id; transformers ignores it for a local folder)."""
    from transformers import AutoConfig, LlamaConfig

    if name in PRESETS:
        config = LlamaConfig(
            vocab_size=vocab_size,
            rms_norm_eps=1e-5,
            tie_word_embeddings=False,
            attention_dropout=0.0,
            **PRESETS[name],
        )
        preset = True
    else:
        try:
            config = AutoConfig.from_pretrained(name, revision=revision)
        except (OSError, ValueError) as e:
            first = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
            raise ModelError(
                f"--model_name {name}: not a preset ({', '.join(PRESETS)}), "
                f"nor a loadable Hugging Face model ({first})"
            ) from None
        preset = False
    max_pos = getattr(config, "max_position_embeddings", None)
    if max_pos is not None and context_length > max_pos:
        raise ModelError(
            f"--context_length {context_length} exceeds the model's "
            f"max_position_embeddings {max_pos} (--model_name {name})"
        )
    return ModelSpec(name=name, config=config, is_preset=preset, dtype=dtype, revision=revision)


def build_empty(spec: ModelSpec) -> nn.Module:
    """The model with parameters on the meta device and real buffers (kept in spec.buffers).

    The model gets its own copy of the config with `use_cache=False`: transformers builds a KV
    cache in train mode too whenever use_cache is on (the config default), which training
    never reads and activation checkpointing's replay would fill twice; every caller (the
    trainer, validation, the benchmarks, exports' logits) is then safe without passing
    use_cache=False. `spec.config` (what the export writes) keeps the user's setting.
    """
    import copy

    from accelerate import init_empty_weights
    from transformers import AutoModelForCausalLM

    config = copy.deepcopy(spec.config)
    config.use_cache = False
    with init_empty_weights(include_buffers=False):
        model = AutoModelForCausalLM.from_config(config, dtype=torch.float32)
    # init_empty_weights re-creates every registered parameter, which unties tied embeddings.
    model.tie_weights()
    use_maskless_causal_sdpa(model)
    spec.buffers = {
        name: buf.detach().clone()
        for name, buf in _non_persistent_buffers(model)
        if buf.device.type != "meta"
    }
    if spec.dtype != torch.float32:
        model.to(spec.dtype)
        keep_buffers_fp32(model, spec.buffers)
    return model


def keep_buffers_fp32(model: nn.Module, saved: dict[str, torch.Tensor]) -> None:
    """Put the non-persistent buffers (rotary `inv_freq`) back in fp32 after a cast.

    `--pure_bf16` casts the model; a bf16 `inv_freq` has a 0.4% relative error, which the rotary
    forward multiplies by the position: several radians of phase at position 4,095. The rotary
    forward computes `position * inv_freq` in fp32 and casts only cos/sin to the activation
    dtype, so the fp32 values computed at build time (`saved`) keep the phases exact.
    """
    for mod_name, mod in model.named_modules():
        for buf_name in mod._non_persistent_buffers_set:
            full = f"{mod_name}.{buf_name}" if mod_name else buf_name
            if full in saved and saved[full].is_floating_point():
                mod._buffers[buf_name] = saved[full].detach().clone()


def full_state_dict(
    spec: ModelSpec, seed: int, adapt: Callable[[nn.Module], Any] | None = None
) -> dict[str, torch.Tensor]:
    """The complete weights on CPU (call on rank 0 only): seeded random init or the checkpoint.

    `adapt(model)` changes the built model in place before its state dict is taken (LoRA
    adapters, `training.lora`), drawing its random numbers from the same seeded stream."""
    from transformers import AutoModelForCausalLM
    from transformers.utils import logging as hf_logging

    hf_logging.disable_progress_bar()  # one bar per rank-0 load only clutters job logs
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        if spec.is_preset:
            model = AutoModelForCausalLM.from_config(spec.config, dtype=torch.float32)
        else:
            model = AutoModelForCausalLM.from_pretrained(
                spec.name, revision=spec.revision, dtype=torch.float32
            )
        if adapt is not None:
            adapt(model)
    return {k: v.to(spec.dtype) for k, v in model.state_dict().items()}


def materialize(
    model: nn.Module,
    spec: ModelSpec,
    device: torch.device,
    full_sd: dict[str, torch.Tensor] | None,
) -> None:
    """Allocate `model` (sharded or not) on `device` and fill it from rank 0's `full_sd`.

    Every rank calls this; only rank 0 passes the weights, the others pass None.
    """
    from torch.distributed.checkpoint.state_dict import StateDictOptions, set_model_state_dict

    # Swap tensors in place so that shared (tied) parameters stay one object: a plain
    # to_empty would give the input embedding and the LM head separate storage.
    swap = torch.__future__.get_swap_module_params_on_conversion()
    torch.__future__.set_swap_module_params_on_conversion(True)
    try:
        model.to_empty(device=device)
    finally:
        torch.__future__.set_swap_module_params_on_conversion(swap)
    options = StateDictOptions(full_state_dict=True, broadcast_from_rank0=True)
    set_model_state_dict(model, dict(full_sd or {}), options=options)  # type: ignore[arg-type]
    restore_buffers(model, spec)


def restore_buffers(model: nn.Module, spec: ModelSpec) -> None:
    """Put back the non-persistent buffers (rotary inv_freq) that to_empty left as garbage."""
    for name, buf in _non_persistent_buffers(model):
        saved = spec.buffers.get(name)
        if saved is not None:
            buf.copy_(saved.to(device=buf.device, dtype=buf.dtype))


def _non_persistent_buffers(model: nn.Module) -> list[tuple[str, torch.Tensor]]:
    out = []
    for mod_name, mod in model.named_modules():
        for buf_name in mod._non_persistent_buffers_set:
            buf = mod._buffers.get(buf_name)
            if buf is not None:
                out.append((f"{mod_name}.{buf_name}" if mod_name else buf_name, buf))
    return out


CAUSAL_SDPA = "eksfsdp_causal_sdpa"
"""Attention implementation registered by `use_maskless_causal_sdpa`."""


def _causal_sdpa(
    module: nn.Module, query: Any, key: Any, value: Any, attention_mask: Any, **kw: Any
) -> Any:
    from transformers.integrations.sdpa_attention import sdpa_attention_forward

    return sdpa_attention_forward(module, query, key, value, None, **kw)


def use_maskless_causal_sdpa(model: nn.Module) -> bool:
    """Run SDPA's causal kernel without building a mask, so a forward makes no host sync.

    With HF's "sdpa", every forward inspects the mask (or, without one, the position ids for
    packed sequences: `find_packed_sequence_indices`) with a tensor -> bool on the host, a GPU
    sync per step. Every batch of this package is either packed (no padding) or padded on the
    right with ignored labels, so for a causal model the mask changes no scored position: an
    attention implementation that HF's mask interface does not know gets no mask at all
    (`masking_utils._preprocess_mask_arguments`) and calls SDPA with `is_causal=True`.
    Kept to plain causal "sdpa" models (no sliding window, which needs the mask); the name is
    not saved in config.json, so exported models load anywhere. Returns True when switched.
    """
    config = model.config  # type: ignore[union-attr]
    # Qwen2-style configs may keep a sliding_window value with use_sliding_window=False: off.
    window = getattr(config, "sliding_window", None)
    if getattr(config, "use_sliding_window", True) is False:
        window = None
    if (
        getattr(config, "_attn_implementation", None) != "sdpa"
        or window
        or "sliding_attention" in (getattr(config, "layer_types", None) or ())
        or not getattr(config, "is_causal", True)
    ):
        return False
    from transformers import AttentionInterface

    AttentionInterface.register(CAUSAL_SDPA, _causal_sdpa)
    model.set_attn_implementation(CAUSAL_SDPA)  # type: ignore[operator]
    return True


_NATIVE_FLAGS: dict[torch.dtype, tuple[str, ...]] = {
    # x86: AVX-512 BF16 (Cooper Lake, Zen 4+) or AMX (Sapphire Rapids+); aarch64: the BF16 extension.
    torch.bfloat16: ("avx512_bf16", "amx_bf16", "bf16"),
    # x86: AVX-512 FP16 (Sapphire Rapids+) or AMX-FP16; aarch64: half-precision arithmetic.
    torch.float16: ("avx512_fp16", "amx_fp16", "fphp", "asimdhp"),
}


def cpu_flags(cpuinfo: str = "/proc/cpuinfo") -> set[str]:
    """The CPU feature flags the kernel reports ("flags" on x86, "Features" on aarch64); empty elsewhere."""
    try:
        text = Path(cpuinfo).read_text(encoding="utf-8", errors="replace")
    except OSError:
        return set()
    for line in text.splitlines():
        key, _, value = line.partition(":")
        if key.strip() in ("flags", "Features"):
            return set(value.split())
    return set()


_TORCH_CAPABILITIES: dict[torch.dtype, tuple[str, ...]] = {
    # keys of torch.cpu.get_capabilities() (cpuinfo): x86, then aarch64 NEON and SVE
    torch.bfloat16: ("avx512_bf16", "amx_bf16", "bf16", "sve_bf16"),
    torch.float16: ("avx512_fp16", "amx_fp16", "fp16_arith"),
}


def native_from(dtype: torch.dtype, capabilities: dict[str, Any], flags: set[str]) -> bool:
    """Whether torch's CPU capabilities or the kernel's CPU flags name a native `dtype` unit."""
    if any(capabilities.get(k) is True for k in _TORCH_CAPABILITIES.get(dtype, ())):
        return True
    return bool(flags & set(_NATIVE_FLAGS.get(dtype, ())))


def native_low_precision(device: torch.device, dtype: torch.dtype) -> bool:
    """Whether `device` computes in `dtype` (bf16 / fp16) natively, not by emulation through fp32.

    CUDA: always True (nothing changes there). CPU: True when torch's own CPU feature probe
    (`torch.cpu.get_capabilities()`, cpuinfo: AVX-512 BF16 / FP16, AMX, aarch64 BF16 / FP16
    arithmetic) or /proc/cpuinfo lists a native unit for `dtype`. (The dispatch level of
    `torch.backends.cpu.get_cpu_capability()` cannot tell: it is only DEFAULT, VSX, Z VECTOR,
    NO AVX, AVX2, AVX512 or SVE256.) An AVX2-only CPU emulates bf16 matmuls and runs a step ~10x
    slower than in fp32. When neither source answers, the answer is False: fp32 is safe.
    """
    if device.type != "cpu":
        return True
    try:
        capabilities = dict(torch.cpu.get_capabilities())
    except (AttributeError, RuntimeError):  # a torch without the probe
        capabilities = {}
    return native_from(dtype, capabilities, cpu_flags())


def decoder_layers(model: nn.Module) -> list[nn.Module]:
    """The transformer blocks, found by the model's own `_no_split_modules` class names."""
    names = set(getattr(model, "_no_split_modules", None) or [])
    return [m for m in model.modules() if type(m).__name__ in names]


def num_params(model: nn.Module) -> int:
    """Parameter count of the whole (unsharded) model."""
    return sum(p.numel() for p in model.parameters())


def flops_per_token(config: Any, seq_len: int, lora_params: int | None = None) -> float:
    """MFU FLOPs per token (PaLM's convention): 6 N_matmul + 12 L (a x head_dim) S.

    N_matmul: every weight multiplied per token (the layers' projections and lm_head, tied or
    not; the embedding lookup is free, 1-D biases and norms are not matmuls); attention: QK^T
    and AV, forward and backward, over the query width a x head_dim (which is not the hidden
    size for Qwen3 or Llama 3.2 3B), without causal savings. With LoRA (``lora_params``: the
    trainable adapter parameters) a frozen weight gets no weight gradient, only the input
    gradient: 4 N_matmul + 6 N_adapters + the same attention. The planner's
    ``model_flops_per_token`` is the same formula (tests/training/test_mfu_formula.py).
    """
    d = config.hidden_size
    layers = config.num_hidden_layers
    inter = config.intermediate_size
    heads = config.num_attention_heads
    kv = getattr(config, "num_key_value_heads", heads) or heads
    head_dim = getattr(config, "head_dim", None) or d // heads
    q_size = heads * head_dim
    attn = d * q_size + 2 * d * kv * head_dim + q_size * d
    mlp = 3 * d * inter
    dense = layers * (attn + mlp) + config.vocab_size * d  # lm_head; embedding lookup is free
    attention = 12.0 * layers * q_size * seq_len
    if lora_params is not None:
        return 4.0 * dense + 6.0 * lora_params + attention
    return 6.0 * dense + attention
