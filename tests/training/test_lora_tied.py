"""LoRA on a model with tied embeddings (Llama 3.2 1B/3B, small Qwen): lm_head is refused as a
target, the export never drops an adapter silently, and checkpoints hold the adapters only.

If this fails, `--lora_target_modules lm_head` on a tied model trains an adapter that the merged
export then loses without a word (the tied weight is written once, under the embedding's name,
and the lm_head adapter's delta with it), or a run starts with a target that cannot be exported.
peft's "all-linear" leaves the output embedding out (`_maybe_include_all_linear_layers`,
peft/tuners/tuners_utils.py at v0.21.2); that is checked too. Or a LoRA checkpoint of a tied
family stores the frozen `lm_head.weight` (the tied alias that `ignore_frozen_params` misses:
about 1 GB fp32 per checkpoint of Llama-3.2-1B against ~10 MB of adapters), or no longer
resumes exactly without it.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import pytest
import torch

from tests.training.families import FAMILIES
from training.model import ModelError

TIED = [f for f, (_, extra) in FAMILIES.items() if extra.get("tie_word_embeddings")]


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


@pytest.mark.slow
def test_checkpoints_of_tied_families_hold_the_adapters_only_and_resume_exactly(
    tmp_path: Path, families: dict[str, Path]
) -> None:
    """LoRA (r 8 on q_proj, v_proj) on each tied family, one process under torchrun: 6 steps
    with a checkpoint every 3, and a run resumed from step 3. The checkpoint's tensors are the
    adapters and their two AdamW moments, nothing else (before: plus the 1,763 x 64 tied
    lm_head.weight, 451,264 bytes of the checkpoint's ~500 KB); steps 4-6 resumed give the
    uninterrupted run's losses."""
    import torch.distributed.checkpoint as dcp

    from tests.training.helpers import TINY, ckpt_dir, launch, merge, metrics, run_dirs
    from training.checkpoint import latest_complete

    assert TIED == ["llama3", "qwen2"]
    jobs: list[dict[str, Any]] = []
    for family in TIED:
        argv = merge(
            TINY,
            [
                f"--model_name={families[family]}",
                "--use_peft",
                "--lora_dropout=0",
                "--batch_size_training=4",
                "--max_train_step=6",
                "--checkpoint_every=3",
            ],
        )
        ref, resumed = f"{family}_ref", f"{family}_resumed"
        jobs += [
            {"kind": "train", "name": ref, "argv": merge(argv, run_dirs(tmp_path, ref))},
            {
                "kind": "copy_checkpoint",
                "src": str(ckpt_dir(tmp_path, ref)),
                "dst": str(ckpt_dir(tmp_path, resumed)),
                "step": 3,
            },
            {
                "kind": "train",
                "name": resumed,
                "argv": merge(argv, run_dirs(tmp_path, resumed), ["--resume"]),
            },
        ]
    results = launch(1, jobs, tmp_path)
    for family in TIED:
        for name in (f"{family}_ref", f"{family}_resumed"):
            assert results[name]["rc"] == [0], results[name]["stderr"]
        latest = latest_complete(ckpt_dir(tmp_path, f"{family}_ref"))
        assert latest is not None and latest.name == "step-000006"
        tensors = {
            k: v
            for k, v in dcp.FileSystemReader(str(latest))
            .read_metadata()
            .state_dict_metadata.items()
            if hasattr(v, "size") and len(v.size) > 0
        }
        assert tensors and all(".lora_A." in k or ".lora_B." in k for k in tensors), sorted(
            k for k in tensors if ".lora_" not in k
        )
        shape = FAMILIES[family][1]
        hidden, heads = 64, 4
        kv_dim = hidden // heads * shape["num_key_value_heads"]
        adapter_params = 2 * (8 * hidden + hidden * 8 + 8 * hidden + kv_dim * 8)  # 2 layers
        model_keys = [k for k in tensors if k.startswith("app.model.")]
        assert len(model_keys) == 8  # A and B of q_proj and v_proj in 2 layers
        numel = sum(math.prod(v.size) for v in tensors.values())
        assert numel == 3 * adapter_params  # the adapters, AdamW's exp_avg and exp_avg_sq
        ref_steps = metrics(tmp_path, f"{family}_ref")
        resumed_steps = metrics(tmp_path, f"{family}_resumed")
        assert [r["step"] for r in resumed_steps] == [4, 5, 6]
        assert [r["loss"] for r in resumed_steps] == [r["loss"] for r in ref_steps[3:]]
        assert [r["grad_norm"] for r in resumed_steps] == [r["grad_norm"] for r in ref_steps[3:]]
