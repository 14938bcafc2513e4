"""Chat data: `messages` rows rendered with the model's own chat template, loss on assistant turns.

A conversation is a list of {"role", "content"} messages: an optional system message first,
then user and assistant messages, at least one assistant message (what is learned). It is
rendered with `tokenizer.apply_chat_template` (the template in the tokenizer's config, as TRL's
SFTTrainer does), and each assistant turn's text is located as TRL and torchtune locate it for
templates without `{% generation %}` markers: the conversation rendered up to the turn with the
generation prompt is a prefix of the conversation rendered with it, and the difference is that
turn (its content and the template's end-of-turn text, so the model learns to stop). The spans
are character ranges of the full text; `training.data` tokenizes the text once and labels the
tokens that start inside a span. A template that does not render a conversation turn by turn
(one that rewrites earlier turns, say) is refused for that row with a one-line error.

A template with `{% generation %}` markers (TRL's training variants, e.g. Qwen3's, which
`training.data.chat_templates` swaps in for the model's own, or a `--chat_template` file) marks the
assistant's tokens itself: they are taken from `apply_chat_template(...,
return_assistant_tokens_mask=True)`, as TRL's SFTTrainer takes them, and no prefix rendering is
needed.

This module is a leaf (no torch, no transformers import; `training.data` calls it):
`ChatError` is one line, "FILE:LINE: what is wrong" for a bad row.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from training.data.chat_templates import has_generation_markers, training_template

ROLES = ("system", "user", "assistant")
SYSTEM_PROMPT = "You are a helpful assistant who summarizes dialogs."
"""The system message of the `chat_sample` conversations."""
_SPEAKER = re.compile(r"^([^:\n]{1,40}):")


class ChatError(ValueError):
    """A chat row or tokenizer that cannot be used; one line ("FILE:LINE: ..." for a row)."""


@dataclass(frozen=True)
class Conversation:
    """One chat row: its messages (role, content) and where it came from (FILE:LINE)."""

    messages: tuple[tuple[str, str], ...]
    where: str

    def as_dicts(self) -> list[dict[str, str]]:
        return [{"role": r, "content": c} for r, c in self.messages]


def parse_messages(value: Any, where: str) -> Conversation:
    """A row's `messages` value as a Conversation, or ChatError "WHERE: message N ..."."""
    try:
        return Conversation(_messages(value), where)
    except ChatError as e:
        raise ChatError(f"{where}: {e}") from None


def _messages(value: Any) -> tuple[tuple[str, str], ...]:
    if not isinstance(value, list) or not value:
        raise ChatError("field 'messages' must be a non-empty list of {role, content} objects")
    out: list[tuple[str, str]] = []
    for i, msg in enumerate(value, start=1):
        if not isinstance(msg, dict):
            raise ChatError(f"message {i} must be an object, got {type(msg).__name__}")
        role, content = msg.get("role"), msg.get("content")
        if role not in ROLES:
            raise ChatError(f"message {i} has role {role!r}; expected one of {', '.join(ROLES)}")
        if not isinstance(content, str):
            kind = "missing" if content is None else type(content).__name__
            raise ChatError(f"message {i} ({role}): content must be a string, got {kind}")
        if role == "system" and i != 1:
            raise ChatError(f"message {i}: a system message must come first")
        if role == "assistant" and not content.strip():
            raise ChatError(f"message {i} (assistant) is empty: nothing to learn")
        out.append((role, content))
    if not any(role == "assistant" for role, _ in out):
        raise ChatError("no assistant message: nothing to learn")
    return tuple(out)


def has_chat_template(tokenizer: Any) -> bool:
    return bool(getattr(tokenizer, "chat_template", None))


def tokenize_chats(
    tokenizer: Any, chats: Sequence[Conversation], model_name: str, ignore_index: int
) -> list[dict[str, list[int]]]:
    """Render each chat with the tokenizer's template (or its training variant,
    `training.data.chat_templates`) and tokenize it once; labels are the ids of the assistant turns'
    tokens and `ignore_index` elsewhere (input_ids, labels, attention_mask)."""
    if not has_chat_template(tokenizer):
        raise ChatError(
            f"--model_name {model_name}: its tokenizer has no chat template, which chat rows "
            f"need ({chats[0].where} is one); use a chat model's tokenizer"
        )
    if not getattr(tokenizer, "is_fast", False):
        raise ChatError(f"--model_name {model_name}: chat rows need a fast tokenizer (offsets)")
    own = tokenizer.chat_template
    template = training_template(own) or own
    if has_generation_markers(template):
        marked = template.get("default", "") if isinstance(template, dict) else template
        return _tokenize_marked(tokenizer, chats, marked, ignore_index)
    texts, spans = [], []
    for conv in chats:
        try:
            text, turn_spans = render(tokenizer, conv)
        except ChatError as e:
            raise ChatError(f"{conv.where}: {e}") from None
        texts.append(text)
        spans.append(turn_spans)
    enc = tokenizer(texts, add_special_tokens=False, return_offsets_mapping=True)
    out = []
    for ids, offsets, turn_spans in zip(
        enc["input_ids"], enc["offset_mapping"], spans, strict=True
    ):
        learned = token_labels(offsets, turn_spans)
        out.append(
            {
                "input_ids": list(ids),
                "labels": [
                    t if keep else ignore_index for t, keep in zip(ids, learned, strict=True)
                ],
                "attention_mask": [1] * len(ids),
            }
        )
    return out


def _tokenize_marked(
    tokenizer: Any, chats: Sequence[Conversation], template: str, ignore_index: int
) -> list[dict[str, list[int]]]:
    """Chats under a template with `{% generation %}` markers: the tokens transformers marks in
    `assistant_masks` are learned (TRL's `assistant_only_loss`); a row with none is an error."""
    out = []
    for conv in chats:
        try:
            enc = tokenizer.apply_chat_template(
                conv.as_dicts(),
                chat_template=template,
                tokenize=True,
                return_dict=True,
                return_assistant_tokens_mask=True,
            )
        except Exception as e:  # jinja2's TemplateError and whatever a template raises
            raise ChatError(f"{conv.where}: {_refusal(e)}") from e
        ids, mask = list(enc["input_ids"]), list(enc["assistant_masks"])
        if not any(mask):
            raise ChatError(
                f"{conv.where}: the chat template's {{% generation %}} blocks mark no token of "
                "this conversation; nothing to learn"
            )
        out.append(
            {
                "input_ids": ids,
                "labels": [t if m else ignore_index for t, m in zip(ids, mask, strict=True)],
                "attention_mask": [1] * len(ids),
            }
        )
    return out


def stop_token_warning(tokenizer: Any) -> str | None:
    """One line when the chat template's `{% generation %}` blocks leave the assistant's
    end-of-turn token out of the learned tokens (the model would never learn to stop), else
    None; templates without markers are not concerned (their turns' spans hold the end-of-turn
    text, `render`).

    TRL's check, `is_chat_template_stop_token_trained` (trl/chat_template_utils.py at v1.16.0,
    warned about by SFTTrainer with `assistant_only_loss`): render a user turn, an assistant
    turn and a user turn with `return_assistant_tokens_mask=True`; the last marked token that
    is not blank must be one of the tokenizer's added tokens (an end-of-turn token is added
    vocabulary, not a merge); a template that cannot render that conversation fails the check.
    """
    own = getattr(tokenizer, "chat_template", None)
    if not own:
        return None
    template = training_template(own) or own
    if not has_generation_markers(template):
        return None
    marked = template.get("default", "") if isinstance(template, dict) else template
    probe = [{"role": r, "content": "dummy"} for r in ("user", "assistant", "user")]
    trained = False
    try:
        enc = tokenizer.apply_chat_template(
            probe,
            chat_template=marked,
            tokenize=True,
            return_dict=True,
            return_assistant_tokens_mask=True,
        )
    except Exception:  # jinja2's TemplateError and whatever a template raises (TRL: False)
        enc = None
    if enc is not None:
        added = set(tokenizer.get_added_vocab().values())
        masked = [t for t, m in zip(enc["input_ids"], enc["assistant_masks"], strict=False) if m]
        last = next((t for t in reversed(masked) if tokenizer.decode([t]).strip()), None)
        trained = last is not None and last in added
    if trained:
        return None
    return (
        "warning: the chat template's {% generation %} blocks leave the assistant's "
        "end-of-turn token out of the loss, so the model may not learn to stop; put it inside "
        "{% generation %}...{% endgeneration %} (--chat_template FILE)"
    )


def _refusal(e: Exception) -> str:
    first = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
    return f"the chat template refuses this conversation: {first}"


def render(tokenizer: Any, conv: Conversation) -> tuple[str, list[tuple[int, int]]]:
    """(the conversation's text, the character spans of its assistant turns).

    ChatError when the template refuses the conversation (a Jinja `raise_exception`, e.g.
    roles that do not alternate) or does not render it turn by turn.
    """
    messages = conv.as_dicts()

    def text(upto: int, generation_prompt: bool) -> str:
        try:
            out = tokenizer.apply_chat_template(
                messages[:upto], tokenize=False, add_generation_prompt=generation_prompt
            )
        except Exception as e:  # jinja2's TemplateError and whatever a template raises
            raise ChatError(_refusal(e)) from e
        return str(out)

    full = text(len(messages), False)
    spans = []
    for i, (role, _) in enumerate(conv.messages):
        if role != "assistant":
            continue
        before, upto = text(i, True), text(i + 1, False)
        if not (upto.startswith(before) and full.startswith(upto)):
            raise ChatError(
                f"the chat template does not render message {i + 1} (assistant) as an "
                "addition to the turns before it; cannot tell its tokens apart (give "
                "--chat_template a template with {% generation %} markers)"
            )
        spans.append((len(before), len(upto)))
    return full, spans


def token_labels(
    offsets: Sequence[tuple[int, int]], spans: Sequence[tuple[int, int]]
) -> list[bool]:
    """Per token (its character offsets in the text): whether it starts inside an assistant span.

    A token that begins in a span is the assistant's; one that only ends in it (a merge across the
    boundary, which byte-level BPE can make) belongs to the prompt side. Special tokens with empty
    offsets count by their start too.
    """
    out = []
    j = 0
    for start, _ in offsets:
        while j < len(spans) and spans[j][1] <= start:
            j += 1
        out.append(j < len(spans) and spans[j][0] <= start < spans[j][1])
    return out


def speakers(dialogue: str) -> list[str]:
    """The names that speak in a samsum dialog ("Name: text" lines), in order of appearance."""
    names: list[str] = []
    for line in dialogue.splitlines():
        m = _SPEAKER.match(line.strip())
        if m and m.group(1).strip() not in names:
            names.append(m.group(1).strip())
    return names


def samsum_conversation(dialogue: str, summary: str, where: str) -> Conversation:
    """A samsum row as a two-exchange chat (the `chat_sample` dataset): the summary asked for
    and given, then who took part."""
    names = speakers(dialogue) or ["nobody named"]
    who = names[0] if len(names) == 1 else ", ".join(names[:-1]) + " and " + names[-1]
    return Conversation(
        (
            ("system", SYSTEM_PROMPT),
            ("user", f"Summarize this dialog:\n{dialogue}"),
            ("assistant", summary),
            ("user", "Who took part in it?"),
            ("assistant", f"{who}."),
        ),
        where,
    )
