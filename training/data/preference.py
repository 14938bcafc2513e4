"""Preference data (`--method dpo`): rows of (prompt, chosen, rejected), tokenized as TRL's DPOTrainer.

Rows come in TRL's two preference formats, from `--dataset custom` (JSONL, one object a line),
`--dataset hf_dataset` (columns renamed by `--hf_columns`, e.g. `chosen=response_a`) or the
bundled `preference_sample` (scripts/make_preference_sample.py):

- standard: {"prompt": str, "chosen": str, "rejected": str};
- conversational: {"prompt": [messages], "chosen": [assistant messages], "rejected": [...]},
  messages being {"role", "content"} objects, rendered with the model's chat template.

A bad row stops the run with one line "FILE:LINE: what is wrong": a missing field, a field of
the wrong type, an empty completion, or chosen equal to rejected (nothing to prefer).

Tokenization is TRL 1.16's (`DPOTrainer._prepare_dataset`, trl/trainer/dpo_trainer.py): a
standard row's completions get the eos token appended (unless they end with it) and `prompt`,
`prompt + chosen`, `prompt + rejected` are tokenized as text (with the tokenizer's special
tokens, bos included); a conversational row renders the prompt with the generation prompt and
the prompt followed by each completion. The completions start where the tokenized prompt and
both tokenized sequences stop agreeing (`common_prefix_length`), so a token merged across the
boundary belongs to the completion. The loss covers the completion tokens only.

Rule for rows longer than `--context_length` (TRL's `max_length` with its default
`truncation_mode="keep_start"`): prompt + completion is cut to the first `context_length`
tokens, so the end of a long completion is not scored; a row whose prompt alone leaves no room
for a completion token is left out, never emptied; both are counted in one line of the run's
notes (and summary.json), and a split left with no row is an error.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from training.data.batches import FILLER, DistributedBatches, EvalBatches
from training.data.chat import ROLES
from training.data.examples import DataError

if TYPE_CHECKING:
    from transformers import PreTrainedTokenizerBase

    from training.config import TrainConfig

__all__ = [
    "PREFERENCE_SAMPLE",
    "PreferenceBatches",
    "PreferenceEvalBatches",
    "PreferenceRow",
    "build_pairs",
    "collate_pairs",
    "preference_row",
    "tokenize_row",
]

PREFERENCE_SAMPLE = Path(__file__).resolve().parents[1] / "assets" / "preference_sample.jsonl"
FIELDS = ("prompt", "chosen", "rejected")

Messages = tuple[tuple[str, str], ...]


@dataclass(frozen=True)
class PreferenceRow:
    """One pair before tokenization: strings (standard) or message tuples (conversational)."""

    prompt: str | Messages
    chosen: str | Messages
    rejected: str | Messages
    where: str

    @property
    def conversational(self) -> bool:
        return not isinstance(self.chosen, str)


def _messages(value: Any, key: str, where: str, *, completion: bool) -> Messages:
    if not isinstance(value, list) or not value:
        raise DataError(f"{where}: field {key!r} must be a string or a non-empty list of messages")
    out = []
    for i, msg in enumerate(value, start=1):
        role = msg.get("role") if isinstance(msg, dict) else None
        content = msg.get("content") if isinstance(msg, dict) else None
        if role not in ROLES or not isinstance(content, str):
            raise DataError(
                f"{where}: {key} message {i} must be an object with a role "
                f"({', '.join(ROLES)}) and a string content"
            )
        if completion and role != "assistant":
            raise DataError(f"{where}: {key} message {i} has role {role!r}; expected assistant")
        out.append((role, content))
    if completion and not any(c.strip() for _, c in out):
        raise DataError(f"{where}: field {key!r} is empty: nothing to prefer")
    return tuple(out)


def preference_row(row: Any, where: str) -> PreferenceRow:
    """A file row as a PreferenceRow, or DataError "WHERE: what is wrong" (one line)."""
    if not isinstance(row, dict):
        raise DataError(f"{where}: expected a JSON object, got {type(row).__name__}")
    for key in FIELDS:
        if key not in row or row[key] is None:
            got = ", ".join(sorted(row)) or "none"
            raise DataError(f"{where}: missing field {key!r} (a preference row has prompt, "
                            f"chosen and rejected; got {got})")  # fmt: skip
    prompt, chosen, rejected = (row[k] for k in FIELDS)
    if isinstance(chosen, str) != isinstance(rejected, str) or isinstance(prompt, str) != (
        isinstance(chosen, str)
    ):
        raise DataError(
            f"{where}: prompt, chosen and rejected must all be strings (standard) or all "
            "message lists (conversational)"
        )
    if isinstance(chosen, str):
        for key, value in (("chosen", chosen), ("rejected", rejected)):
            if not value.strip():
                raise DataError(f"{where}: field {key!r} is empty: nothing to prefer")
        parsed = PreferenceRow(prompt, chosen, rejected, where)
    else:
        parsed = PreferenceRow(
            _messages(prompt, "prompt", where, completion=False),
            _messages(chosen, "chosen", where, completion=True),
            _messages(rejected, "rejected", where, completion=True),
            where,
        )
    if parsed.chosen == parsed.rejected:
        raise DataError(f"{where}: chosen and rejected are the same: nothing to prefer")
    return parsed


def _dicts(messages: Messages) -> list[dict[str, str]]:
    return [{"role": r, "content": c} for r, c in messages]


def common_prefix_length(a: Sequence[int], b: Sequence[int]) -> int:
    """Leading tokens `a` and `b` share (TRL's `common_prefix_length`, trl/data_utils.py)."""
    n = 0
    for x, y in zip(a, b, strict=False):
        if x != y:
            break
        n += 1
    return n


def tokenize_row(tokenizer: PreTrainedTokenizerBase, row: PreferenceRow) -> dict[str, list[int]]:
    """{"prompt_ids", "chosen_ids", "rejected_ids"} as TRL 1.16's `_prepare_dataset` makes them."""
    if row.conversational:

        def ids(messages: Messages, generation_prompt: bool = False) -> list[int]:
            try:
                enc = tokenizer.apply_chat_template(
                    _dicts(messages),
                    tokenize=True,
                    return_dict=True,
                    add_generation_prompt=generation_prompt,
                )
            except Exception as e:  # jinja2's TemplateError and whatever a template raises
                first = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
                raise DataError(f"{row.where}: the chat template refuses this row: {first}") from e
            return list(enc["input_ids"])

        assert not isinstance(row.prompt, str)
        assert not isinstance(row.chosen, str) and not isinstance(row.rejected, str)
        prompt = ids(row.prompt, True)
        with_chosen, with_rejected = ids(row.prompt + row.chosen), ids(row.prompt + row.rejected)
    else:
        eos = tokenizer.eos_token
        assert isinstance(row.prompt, str)
        assert isinstance(row.chosen, str) and isinstance(row.rejected, str)
        chosen = row.chosen if row.chosen.endswith(eos) else row.chosen + eos
        rejected = row.rejected if row.rejected.endswith(eos) else row.rejected + eos
        prompt = list(tokenizer(row.prompt)["input_ids"])
        with_chosen = list(tokenizer(row.prompt + chosen)["input_ids"])
        with_rejected = list(tokenizer(row.prompt + rejected)["input_ids"])
    n = min(common_prefix_length(prompt, with_chosen), common_prefix_length(prompt, with_rejected))
    return {
        "prompt_ids": prompt[:n],
        "chosen_ids": with_chosen[n:],
        "rejected_ids": with_rejected[n:],
    }


def _fit(ex: dict[str, list[int]], limit: int) -> tuple[dict[str, list[int]] | None, bool]:
    """(the pair cut to `limit` tokens per sequence, keep start; None when its prompt leaves no
    completion token), and whether anything was cut."""
    room = limit - len(ex["prompt_ids"])
    if room < 1:
        return None, True
    cut = len(ex["chosen_ids"]) > room or len(ex["rejected_ids"]) > room
    return {
        **ex,
        "chosen_ids": ex["chosen_ids"][:room],
        "rejected_ids": ex["rejected_ids"][:room],
    }, cut


def _read(cfg: TrainConfig, split: str) -> list[PreferenceRow]:
    """The split's rows: the last 10% of the file (or --hf_split) validate, as SFT data does."""
    from training.data import rows as sft_rows
    from training.data.hf_data import HFDataError, load_rows, parse_columns

    if cfg.dataset == "hf_dataset":
        name = cfg.hf_eval_split if cfg.hf_eval_split and split == "validation" else cfg.hf_split
        try:
            found = load_rows(
                cfg.hf_dataset, name, parse_columns(cfg.hf_columns), cfg.dataset_revision or None
            )
        except HFDataError as e:
            raise DataError(str(e)) from None
        rows = [preference_row(row, where) for where, row in found]
        if not rows:
            raise DataError(f"--hf_dataset {cfg.hf_dataset} [{name}]: no rows")
        if cfg.hf_eval_split:
            return rows
    else:
        path = (
            PREFERENCE_SAMPLE if cfg.dataset == "preference_sample" else Path(cfg.data_path or "")
        )
        rows = [preference_row(row, where) for where, row in sft_rows._json_lines(path)]
        if not rows:
            raise DataError(f"{path}: no rows")
    return sft_rows._tail_split(rows, split, sft_rows.VALIDATION_FRACTION)  # type: ignore[return-value]


def build_pairs(
    cfg: TrainConfig,
    tokenizer: PreTrainedTokenizerBase,
    split: str,
    notes: list[str] | None = None,
) -> list[dict[str, list[int]]]:
    """The tokenized pairs of `split` ("train" or "validation"), fitted to --context_length by
    the module's rule (what was cut or left out appended to `notes` as one line)."""
    rows = _read(cfg, split)
    if split == "train" and cfg.max_train_samples:
        rows = rows[: cfg.max_train_samples]
    out, cut, left_out = [], 0, []
    for row in rows:
        fitted, was_cut = _fit(tokenize_row(tokenizer, row), cfg.context_length)
        if fitted is None:
            left_out.append(row.where)
        else:
            out.append(fitted)
            cut += was_cut
    limit = cfg.context_length
    if not out:
        raise DataError(
            f"--context_length {limit}: every prompt of the {split} split fills it "
            f"({left_out[0]} is one); raise --context_length"
        )
    said = []
    if left_out:
        said.append(
            f"{len(left_out)} of {len(rows)} pairs have a prompt of {limit} tokens or more and "
            f"are left out (the first: {left_out[0]})"
        )
    if cut:
        said.append(
            f"{cut} of {len(rows)} pairs are longer than --context_length {limit} and are cut "
            "to it (keep start, as TRL's DPOTrainer)"
        )
    if said and notes is not None:
        notes.append(f"data {cfg.dataset} ({split}): " + "; ".join(said))
    return out


# ------------------------------------------------------------------------------------------------
# batches


def collate_pairs(
    pairs: Sequence[dict[str, Any]], weights: Sequence[float], pad_id: int
) -> dict[str, Any]:
    """B pairs as ONE batch of 2B rows, chosen then rejected (TRL's DataCollatorForPreference):
    `input_ids` prompt + completion right-padded with `pad_id`, `labels` the completion tokens
    (IGNORE_INDEX on the prompt and the padding), `weight` 1 per pair (0 for a filler pair that
    must count nowhere), and `ref_logps` (B x 2: chosen, rejected) when the pairs carry them."""
    import torch

    from training.data.examples import IGNORE_INDEX

    seqs, labels = [], []
    for side in ("chosen_ids", "rejected_ids"):
        for p in pairs:
            seqs.append(p["prompt_ids"] + p[side])
            labels.append([IGNORE_INDEX] * len(p["prompt_ids"]) + p[side])
    width = max(len(s) for s in seqs)
    out = {
        "input_ids": torch.tensor([s + [pad_id] * (width - len(s)) for s in seqs]),
        "labels": torch.tensor([x + [IGNORE_INDEX] * (width - len(x)) for x in labels]),
        "weight": torch.tensor(list(weights), dtype=torch.float32),
    }
    if all("ref_logps" in p for p in pairs):
        out["ref_logps"] = torch.tensor([p["ref_logps"] for p in pairs], dtype=torch.float64)
    return out


def pair_tokens(pair: dict[str, Any]) -> tuple[int, int]:
    """(completion tokens scored, input tokens) of one pair's two sequences."""
    completions = len(pair["chosen_ids"]) + len(pair["rejected_ids"])
    return completions, 2 * len(pair["prompt_ids"]) + completions


class PreferenceBatches(DistributedBatches):
    """`DistributedBatches` of pairs: the same global order and positions; a micro-batch is
    `collate_pairs` of its B pairs; `step_pairs` counts the real pairs of the global batch
    last handed out (the loss's normaliser: filler pairs weigh 0)."""

    step_pairs = 0

    def _filler_of(self, first: Any) -> Any:
        return first  # weighed 0 by collate_ids

    def collate_ids(self, ids: list[int]) -> dict[str, Any]:
        pairs = [self._filler if i == FILLER else self.dataset[i] for i in ids]
        return collate_pairs(pairs, [float(i != FILLER) for i in ids], self.pad_id)

    def _token_counts(self, ids: list[int]) -> tuple[int, int]:
        real = [self.dataset[i] for i in ids if i != FILLER]
        self.step_pairs = len(real)
        counts = [pair_tokens(p) for p in real]
        filler_inputs = (len(ids) - len(real)) * pair_tokens(self._filler)[1]
        return sum(c for c, _ in counts), sum(n for _, n in counts) + filler_inputs


class PreferenceEvalBatches(EvalBatches):
    """`EvalBatches` of pairs: every rank the same number of batches, each pair once."""

    def _filler_of(self, first: Any) -> Any:
        return first

    def __iter__(self) -> Any:
        B, W, n = self.batch_size, self.world_size, len(self.dataset)
        for k in range(self.steps):
            ids = range(k * B * W + self.rank * B, k * B * W + (self.rank + 1) * B)
            pairs = [self.dataset[i] if i < n else self._filler for i in ids]
            yield collate_pairs(pairs, [float(i < n) for i in ids], self.pad_id)
