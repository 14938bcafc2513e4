"""docs/recipes.md's sample LoRA output is what its laptop command prints.

If this fails, the recipes page shows a trainable-parameter line that the command beside it does
not print (another preset's figures, or peft's count changed): a reader checking their run
against the page would think the adapters are wrong. The model is built empty (meta device), as
every rank builds it, and the line is `training.lora.describe`'s, which the run prints.
"""

from __future__ import annotations

import re
from pathlib import Path

PAGE = Path(__file__).resolve().parents[2] / "docs" / "recipes.md"


def test_sample_trainable_line_matches_the_laptop_command() -> None:
    from training.config import TrainConfig
    from training.data import load_tokenizer
    from training.lora import apply_lora, describe
    from training.model import build_empty, model_spec

    text = PAGE.read_text(encoding="utf-8")
    laptop = text[text.index("# the same on a laptop") :]
    model = re.search(r"--model_name (\S+)", laptop)
    context = re.search(r"--context_length (\d+)", laptop)
    assert model is not None and context is not None and "--use_peft" in laptop
    sample = re.search(r"^peft lora r=.*$", text, re.MULTILINE)
    assert sample is not None
    name = model.group(1)
    spec = model_spec(name, len(load_tokenizer(name)), int(context.group(1)))
    empty = build_empty(spec)
    cfg = TrainConfig(model_name=name, use_peft=True)
    apply_lora(empty, cfg, empty=True)
    assert sample.group(0) == describe(cfg, empty)
