"""Current model families train and export like Llama 2: Llama 3.x, Mistral, Qwen2, Qwen3.

If these fail, a family's 2-process FSDP2 run no longer follows its 1-process run (a decoder
layer class not found, rotary buffers with llama3 scaling lost when the model is materialized,
tied embeddings untied, a sliding window or q/k norm mishandled), its export does not load with
`AutoModelForCausalLM` as the trained model (config features dropped: rope scaling, tying,
window, head_dim), or LoRA on every linear layer of a Qwen3 model differs across world sizes.
The checkpoints are tiny random ones built with transformers' config classes
(tests/training/families.py).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from tests.training.conftest import STEPS
from tests.training.families import FAMILIES
from tests.training.helpers import max_diff, metrics

pytestmark = pytest.mark.slow

TOL = 1e-4
CLASSES = {
    "llama3": "LlamaForCausalLM",
    "mistral": "MistralForCausalLM",
    "qwen2": "Qwen2ForCausalLM",
    "qwen3": "Qwen3ForCausalLM",
}


@pytest.mark.parametrize("family", [*FAMILIES, "qwen3_lora"])
def test_two_processes_match_one(
    world1: tuple[Path, dict[str, Any]], world2: tuple[Path, dict[str, Any]], family: str
) -> None:
    (b1, r1), (b2, _) = world1, world2
    name = f"fam_{family}"
    assert r1[name]["rc"] == [0], r1[name]["stderr"]
    ref, sharded = metrics(b1, name), metrics(b2, name)
    assert [r["step"] for r in sharded] == list(range(1, STEPS + 1))
    assert max_diff(sharded, ref, "loss") < TOL
    assert max_diff(sharded, ref, "grad_norm") < TOL
    assert ref[-1]["loss"] < ref[0]["loss"]


@pytest.mark.parametrize("family", list(FAMILIES))
def test_export_loads_as_the_trained_model(
    world2: tuple[Path, dict[str, Any]], families: dict[str, Path], family: str
) -> None:
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    base, results = world2
    assert results[f"fam_{family}"]["rc"] == 0
    folder = base / f"fam_{family}" / "out" / "hf"
    model = AutoModelForCausalLM.from_pretrained(folder, dtype=torch.float32)
    assert type(model).__name__ == CLASSES[family]
    exported = json.loads((folder / "config.json").read_text())
    original = json.loads((families[family] / "config.json").read_text())
    for key in ("rope_parameters", "tie_word_embeddings", "sliding_window", "head_dim"):
        assert exported.get(key) == original.get(key), key
    if original.get("tie_word_embeddings"):
        assert model.lm_head.weight is model.get_input_embeddings().weight
    saved = torch.load(base / f"fam_{family}" / "logits.pt")
    model.eval()
    with torch.no_grad():
        logits = model(input_ids=saved["input_ids"]).logits
    assert torch.allclose(logits, saved["logits"], atol=1e-5, rtol=0)
    trained = AutoModelForCausalLM.from_pretrained(families[family], dtype=torch.float32)
    with torch.no_grad():
        before = trained(input_ids=saved["input_ids"]).logits
    assert (before - logits).abs().max() > 1e-3  # it was trained, not copied
    assert AutoTokenizer.from_pretrained(folder).chat_template  # served with its template
