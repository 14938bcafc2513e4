"""Tiny random checkpoints of current decoder-only families, built with transformers' own config
classes (no download), each saved with the tiny presets' tokenizer (and its chat template).

Each keeps what sets its family apart from Llama 2: Llama 3.x's llama3 RoPE scaling, 4:1 grouped
query attention and (3.2 1B / 3B) tied embeddings; Mistral's sliding-window attention (a window
shorter than the test context, so the mask matters); Qwen2's biased q/k/v projections; Qwen3's
per-head q/k RMSNorm and a head_dim that is not hidden_size / heads.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

FAMILIES: dict[str, tuple[str, dict[str, Any]]] = {
    "llama3": (
        "LlamaConfig",
        {
            "num_key_value_heads": 1,
            "tie_word_embeddings": True,
            "rope_parameters": {
                "rope_type": "llama3",
                "rope_theta": 500000.0,
                "factor": 4.0,
                "low_freq_factor": 1.0,
                "high_freq_factor": 4.0,
                "original_max_position_embeddings": 128,
            },
        },
    ),
    "mistral": ("MistralConfig", {"num_key_value_heads": 2, "sliding_window": 16}),
    "qwen2": ("Qwen2Config", {"num_key_value_heads": 2, "tie_word_embeddings": True}),
    "qwen3": ("Qwen3Config", {"num_key_value_heads": 2, "head_dim": 32}),
}
"""family -> (transformers config class, what differs from the shared tiny shape)."""

SHAPE = {
    "hidden_size": 64,
    "intermediate_size": 176,
    "num_hidden_layers": 2,
    "num_attention_heads": 4,
    "max_position_embeddings": 512,
}


def build(root: Path) -> dict[str, Path]:
    """Save every family's tiny random checkpoint under `root`; {family: folder}."""
    import torch
    import transformers
    from transformers import AutoModelForCausalLM
    from transformers.utils import logging as hf_logging

    from training.data import load_tokenizer

    hf_logging.disable_progress_bar()
    tok = load_tokenizer("tiny-llama-2l")
    out = {}
    for i, (family, (config_class, extra)) in enumerate(FAMILIES.items()):
        config = getattr(transformers, config_class)(vocab_size=len(tok), **SHAPE, **extra)
        torch.manual_seed(100 + i)
        model = AutoModelForCausalLM.from_config(config, dtype=torch.float32)
        path = root / f"family_{family}"
        model.save_pretrained(path)
        tok.save_pretrained(path)
        out[family] = path
    return out
