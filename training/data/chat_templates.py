"""Which chat template renders the training chats: the model's, TRL's training variant, or a file.

A template that renders each assistant turn inside `{% generation %}` / `{% endgeneration %}`
marks the assistant's tokens itself: transformers' `apply_chat_template(...,
return_assistant_tokens_mask=True)` returns them as `assistant_masks` (`apply_chat_template`
in transformers 5.23's tokenization_utils_base.py), which is how TRL's SFTTrainer learns only the assistant turns
(`assistant_only_loss=True`, trl/trainer/sft_trainer.py at v1.16.0). Most models' own templates
carry no such markers; for those `training.data.chat` finds each turn by prefix rendering, which needs
a template that renders a conversation turn by turn. Qwen3's does not (it drops the `<think>`
block of assistant turns before the last user message, so adding a turn rewrites the earlier
ones); TRL then swaps in its training variant of the template (`get_training_chat_template` in
trl/chat_template_utils.py at v1.16.0: an exact match of the tokenizer's template against the
original it ships). This module does the same with the copies in training/assets/chat_templates
(their README says where they come from). Any other template can be replaced with
`--chat_template PATH` (a Jinja file), as TRL's `chat_template_path` does: the tokenizer then
carries it, also into the export.

A leaf (no torch, no transformers); `ChatTemplateError` is one line.
"""

from __future__ import annotations

import re
from pathlib import Path

__all__ = [
    "TEMPLATES",
    "ChatTemplateError",
    "has_generation_markers",
    "read_template",
    "training_template",
]

TEMPLATES = Path(__file__).resolve().parents[1] / "assets" / "chat_templates"
"""The bundled templates: (model's original, TRL's training variant) pairs."""
_PAIRS = (("qwen3.jinja", "qwen3_training.jinja"),)
_GENERATION = re.compile(r"\{%-?\s*generation\s*-?%\}")  # TRL's has_generation_markers


class ChatTemplateError(ValueError):
    """A --chat_template file that cannot be used; one line naming the flag."""


def _default(template: str | dict[str, str]) -> str:
    """A template shipped as named variants is a dict; its `default` is the one used (TRL)."""
    return template.get("default", "") if isinstance(template, dict) else template


def has_generation_markers(template: str | dict[str, str]) -> bool:
    """Whether the template marks assistant output with `{% generation %}` (any trim form)."""
    return _GENERATION.search(_default(template)) is not None


def training_template(template: str | dict[str, str]) -> str | None:
    """The training variant of a model template this package knows (byte for byte, as TRL
    compares them), or None: the template is used as it is."""
    template = _default(template)
    if has_generation_markers(template):
        return None
    for original, variant in _PAIRS:
        if template == (TEMPLATES / original).read_text(encoding="utf-8"):
            return (TEMPLATES / variant).read_text(encoding="utf-8")
    return None


def read_template(path: str) -> str:
    """`--chat_template PATH`: the Jinja text, or ChatTemplateError naming the flag."""
    try:
        text = Path(path).read_text(encoding="utf-8")
    except OSError as e:
        raise ChatTemplateError(f"--chat_template {path}: cannot read: {e.strerror or e}") from e
    except UnicodeDecodeError as e:
        raise ChatTemplateError(f"--chat_template {path}: not UTF-8 text ({e.reason})") from e
    if not text.strip():
        raise ChatTemplateError(f"--chat_template {path}: the file is empty")
    return text
