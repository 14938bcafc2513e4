"""The `--save_model` export is a Hugging Face model that gives the trained model's logits.

If this fails, the consolidated folder written from the sharded (FSDP2, 2-process) model is not
loadable by `AutoModelForCausalLM.from_pretrained`, misses the tokenizer or config, or holds
different weights than the ones trained (a shard lost or misplaced when gathering to rank 0).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

pytestmark = pytest.mark.slow


def test_export_round_trip(world2: tuple[Path, dict[str, Any]]) -> None:
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    base, results = world2
    assert results["export"]["rc"] == 0
    folder = base / "export" / "out" / "hf"
    names = {p.name for p in folder.iterdir()}
    assert {"config.json", "model.safetensors", "tokenizer.json"} <= names
    saved = torch.load(base / "export" / "logits.pt")
    model = AutoModelForCausalLM.from_pretrained(folder, dtype=torch.float32)
    model.eval()
    with torch.no_grad():
        logits = model(input_ids=saved["input_ids"]).logits
    assert logits.shape == saved["logits"].shape
    assert torch.allclose(logits, saved["logits"], atol=1e-5, rtol=0)
    assert len(AutoTokenizer.from_pretrained(folder)) == model.config.vocab_size
