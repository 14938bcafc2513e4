"""LoRA on a model with tied embeddings (Llama 3.2 1B/3B, small Qwen): lm_head is refused as a
target, and the export never drops an adapter silently.

If this fails, `--lora_target_modules lm_head` on a tied model trains an adapter that the merged
export then loses without a word (the tied weight is written once, under the embedding's name,
and the lm_head adapter's delta with it), or a run starts with a target that cannot be exported.
peft's "all-linear" leaves the output embedding out (`_maybe_include_all_linear_layers`,
peft/tuners/tuners_utils.py at v0.21.2); that is checked too.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import torch

from training.model import ModelError


def _tiny(tied: bool) -> Any:
    from transformers import LlamaConfig, LlamaForCausalLM

    config = LlamaConfig(
        vocab_size=96,
        hidden_size=32,
        intermediate_size=64,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        tie_word_embeddings=tied,
    )
    torch.manual_seed(0)
    return LlamaForCausalLM(config).eval()


def test_lm_head_on_tied_embeddings_is_refused_in_one_line() -> None:
    from training.config import TrainConfig
    from training.lora import apply_lora

    cfg = TrainConfig(use_peft=True, lora_target_modules="q_proj,lm_head")
    with pytest.raises(ModelError) as err:
        apply_lora(_tiny(tied=True), cfg, empty=False)
    assert str(err.value) == (
        "--lora_target_modules: lm_head shares its weight with embed_tokens "
        "(tie_word_embeddings); leave it out"
    )
    # untied, lm_head is an ordinary linear layer: adapted
    peft_model = apply_lora(_tiny(tied=False), cfg, empty=False)
    names = [n for n, _ in peft_model.named_parameters() if "lm_head.lora_A" in n]
    assert len(names) == 1


def test_all_linear_leaves_the_tied_output_embedding_alone() -> None:
    from training.config import TrainConfig
    from training.lora import apply_lora

    cfg = TrainConfig(use_peft=True, lora_target_modules="all-linear")
    model = _tiny(tied=True)
    peft_model = apply_lora(model, cfg, empty=False)
    adapted = {n.split(".lora_A")[0].rsplit(".", 1)[-1] for n, _ in peft_model.named_parameters()}
    adapted = {n for n in adapted if not n.endswith("weight")}
    assert "lm_head" not in adapted
    assert model.get_output_embeddings().weight is model.get_input_embeddings().weight


@pytest.mark.filterwarnings("ignore::UserWarning", "ignore::FutureWarning")  # peft's own warning
def test_merged_export_refuses_an_adapter_on_a_tied_weight(tmp_path: Path) -> None:
    """Past the flag check (peft called directly), the export raises instead of writing the
    tied tensor once without the lm_head adapter's delta."""
    from peft import LoraConfig, get_peft_model

    from training.data import load_tokenizer
    from training.export import export_model

    model = _tiny(tied=True)
    config = LoraConfig(r=2, target_modules=["lm_head"], init_lora_weights=False)
    get_peft_model(model, config)
    with pytest.raises(ValueError, match=r"lm_head\.base_layer\.weight: adapted, and tied to"):
        export_model(
            model,
            model.config,
            load_tokenizer("tiny-llama-2l"),
            tmp_path,
            dtype=torch.float32,
            max_shard_bytes=10**9,
            merge_adapters=True,
        )
    assert not list(tmp_path.glob("*.safetensors"))
