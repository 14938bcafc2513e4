"""Dataset files into rows: prompt/answer pairs (llama-recipes' prompts) and chats.

Each `--dataset` (see `training.data` for the list) is read here into `Row`s, one per file row,
before any tokenization: `Pair` (prompt, answer) or `training.data.chat.Conversation`. Malformed rows
raise DataError "FILE:LINE: what is wrong"; the validation split is cut here (`read_rows`).
"""

from __future__ import annotations

import json
import math
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from training.data.chat import ChatError, Conversation, parse_messages, samsum_conversation
from training.data.examples import DataError
from training.data.hf_data import HFDataError, hub_samsum, load_rows, parse_columns

if TYPE_CHECKING:
    from training.config import TrainConfig

__all__ = [
    "ALPACA_PROMPT_INPUT",
    "ALPACA_PROMPT_NO_INPUT",
    "ASSETS",
    "SAMSUM_SAMPLE",
    "Pair",
    "Row",
    "alpaca_prompt",
    "read_rows",
    "samsum_prompt",
]

ASSETS = Path(__file__).resolve().parents[1] / "assets"
SAMSUM_SAMPLE = ASSETS / "samsum_sample.jsonl"
VALIDATION_FRACTION = 0.1  # samsum_sample and custom: the last 10% of rows
ALPACA_EVAL_FRACTION = 0.05  # alpaca: the first 5% of entries, as llama-recipes

ALPACA_PROMPT_INPUT = (
    "Below is an instruction that describes a task, paired with an input that provides further "
    "context. Write a response that appropriately completes the request.\n\n"
    "### Instruction:\n{instruction}\n\n### Input:\n{input}\n\n### Response:"
)
ALPACA_PROMPT_NO_INPUT = (
    "Below is an instruction that describes a task. Write a response that appropriately "
    "completes the request.\n\n### Instruction:\n{instruction}\n\n### Response:"
)


def samsum_prompt(dialogue: str) -> str:
    """llama-recipes' samsum prompt."""
    return f"Summarize this dialog:\n{dialogue}\n---\nSummary:\n"


def alpaca_prompt(instruction: str, input_text: str = "") -> str:
    """llama-recipes' alpaca prompt (the no-input form when input is empty)."""
    if input_text == "":
        return ALPACA_PROMPT_NO_INPUT.format(instruction=instruction)
    return ALPACA_PROMPT_INPUT.format(instruction=instruction, input=input_text)


@dataclass(frozen=True)
class Pair:
    """A (prompt, answer) text pair before tokenization; an empty prompt means "learn it all"."""

    prompt: str
    answer: str


def _str_field(row: dict[str, Any], key: str, where: str, *, allow_empty: bool = False) -> str:
    if key not in row:
        raise DataError(f"{where}: missing field {key!r}")
    value = row[key]
    if not isinstance(value, str):
        raise DataError(f"{where}: field {key!r} must be a string, got {type(value).__name__}")
    if not allow_empty and not value.strip():
        raise DataError(f"{where}: field {key!r} is empty")
    return value


Row = Pair | Conversation
"""A row before tokenization: a prompt/answer pair or a chat."""


def _custom_row(row: Any, where: str) -> Row:
    if not isinstance(row, dict):
        raise DataError(f"{where}: expected a JSON object, got {type(row).__name__}")
    if "messages" in row:
        try:
            return parse_messages(row["messages"], where)
        except ChatError as e:
            raise DataError(str(e)) from None
    if "dialogue" in row or "summary" in row:
        return Pair(
            samsum_prompt(_str_field(row, "dialogue", where)), _str_field(row, "summary", where)
        )
    if "prompt" in row or "completion" in row:
        return Pair(_str_field(row, "prompt", where), _str_field(row, "completion", where))
    if "text" in row:
        return Pair("", _str_field(row, "text", where))
    keys = ", ".join(sorted(row)) or "none"
    raise DataError(
        f"{where}: expected fields dialogue+summary, prompt+completion, text or messages; "
        f"got {keys}"
    )


def _read_text(path: Path) -> str:
    """A dataset file's text, or one ``DataError`` line naming the file."""
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as e:
        raise DataError(f"{path}: cannot read: {e.strerror or e}") from e
    except UnicodeDecodeError as e:
        raise DataError(f"{path}: not UTF-8 text ({e.reason} at byte {e.start})") from e
    return text


def _json_lines(path: Path) -> Iterator[tuple[str, Any]]:
    """(FILE:LINE, parsed object) of every non-blank line of a JSONL file."""
    text = _read_text(path)
    for lineno, line in enumerate(text.splitlines(), start=1):
        if not line.strip():
            continue
        where = f"{path}:{lineno}"
        try:
            yield where, json.loads(line)
        except json.JSONDecodeError as e:
            raise DataError(f"{where}: bad JSON: {e.msg} (column {e.colno})") from e


def _read_jsonl(path: Path) -> list[Row]:
    """Every non-blank line of a JSONL file as a row, or DataError "FILE:LINE: ..."."""
    rows = [_custom_row(row, where) for where, row in _json_lines(path)]
    if not rows:
        raise DataError(f"{path}: no rows")
    return rows


def _chat_sample() -> list[Row]:
    """The bundled samsum sample as chats (the `chat_sample` dataset)."""
    return [
        samsum_conversation(row["dialogue"], row["summary"], where)
        for where, row in _json_lines(SAMSUM_SAMPLE)
    ]


def _json_array_with_lines(path: Path) -> list[tuple[int, Any]]:
    """A JSON file holding a list, as (line of the element's start, element) pairs."""
    text = _read_text(path)
    try:
        json.loads(text)  # report document-level syntax errors with their line first
    except json.JSONDecodeError as e:
        raise DataError(f"{path}:{e.lineno}: bad JSON: {e.msg} (column {e.colno})") from e
    decoder = json.JSONDecoder()
    ws = " \t\r\n"
    pos = len(text) - len(text.lstrip(ws))
    if not text.startswith("[", pos):
        raise DataError(f"{path}:{text.count(chr(10), 0, pos) + 1}: expected a JSON list")
    pos += 1
    out: list[tuple[int, Any]] = []
    while True:
        while pos < len(text) and text[pos] in ws:
            pos += 1
        if text.startswith("]", pos):
            break
        value, end = decoder.raw_decode(text, pos)
        out.append((text.count("\n", 0, pos) + 1, value))
        pos = end
        while pos < len(text) and text[pos] in ws:
            pos += 1
        if text.startswith(",", pos):
            pos += 1
    return out


def _read_alpaca(path: Path) -> list[Pair]:
    pairs = []
    for lineno, row in _json_array_with_lines(path):
        where = f"{path}:{lineno}"
        if not isinstance(row, dict):
            raise DataError(f"{where}: expected a JSON object, got {type(row).__name__}")
        instruction = _str_field(row, "instruction", where)
        input_text = _str_field(row, "input", where, allow_empty=True) if "input" in row else ""
        output = _str_field(row, "output", where)
        pairs.append(Pair(alpaca_prompt(instruction, input_text), output))
    if not pairs:
        raise DataError(f"{path}: empty list")
    return pairs


def _hub_samsum(split: str, revision: str | None) -> list[Pair]:
    try:
        rows = hub_samsum(split, revision)
    except HFDataError as e:
        raise DataError(str(e)) from None
    return [Pair(samsum_prompt(dialogue), summary) for dialogue, summary in rows]


def _hf_rows(cfg: TrainConfig, split: str) -> list[Row]:
    """--dataset hf_dataset: its --hf_split (the last 10% for validation), or --hf_eval_split."""
    columns = parse_columns(cfg.hf_columns)
    name = cfg.hf_eval_split if cfg.hf_eval_split and split == "validation" else cfg.hf_split
    try:
        found = load_rows(cfg.hf_dataset, name, columns, cfg.dataset_revision or None)
        rows = [_custom_row(row, where) for where, row in found]
    except HFDataError as e:
        raise DataError(str(e)) from None
    if not rows:
        raise DataError(f"--hf_dataset {cfg.hf_dataset} [{name}]: no rows")
    return rows if cfg.hf_eval_split else _tail_split(rows, split, VALIDATION_FRACTION)


def _tail_split(pairs: Sequence[Row], split: str, fraction: float) -> list[Row]:
    """Last `fraction` of the rows (at least one) is validation, the rest train."""
    n_val = max(1, math.floor(len(pairs) * fraction)) if len(pairs) > 1 else 0
    rows = list(pairs)
    return rows[len(rows) - n_val :] if split == "validation" else rows[: len(rows) - n_val]


def read_rows(cfg: TrainConfig, split: str) -> list[Row]:
    if cfg.dataset == "samsum_sample":
        return _tail_split(_read_jsonl(SAMSUM_SAMPLE), split, VALIDATION_FRACTION)
    if cfg.dataset == "chat_sample":
        return _tail_split(_chat_sample(), split, VALIDATION_FRACTION)
    if cfg.dataset == "hf_dataset":
        return _hf_rows(cfg, split)
    if cfg.dataset == "custom":
        assert cfg.data_path is not None  # TrainConfig validates it
        return _tail_split(_read_jsonl(Path(cfg.data_path)), split, VALIDATION_FRACTION)
    if cfg.dataset == "alpaca_dataset":
        assert cfg.data_path is not None
        pairs: list[Row] = list(_read_alpaca(Path(cfg.data_path)))
        n_eval = max(1, int(len(pairs) * ALPACA_EVAL_FRACTION)) if len(pairs) > 1 else 0
        return pairs[:n_eval] if split == "validation" else pairs[n_eval:]
    if cfg.dataset == "samsum_dataset":
        return list(_hub_samsum(split, cfg.dataset_revision or None))
    raise DataError(f"--dataset: unknown dataset {cfg.dataset!r}")
