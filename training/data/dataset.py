"""Data: tokenizer loading, datasets and prompt formats, packing, and the distributed batch order.

Datasets (`--dataset`), each tokenized as llama-recipes does (bos + prompt, then answer + eos;
prompt tokens get label IGNORE_INDEX so only the answer is learned):

- `samsum_sample`: the samsum-shaped file bundled in training/assets (made by
  scripts/make_samsum_sample.py); the last 10% of its rows are the validation split.
- `samsum_dataset`: samsum from the Hugging Face hub (`knkarthick/samsum`, then `samsum`) with the
  `datasets` library, when installed and reachable; rows with an empty dialogue or summary (the hub
  copy has a few) are skipped.
- `alpaca_dataset`: a JSON list of {"instruction", "input", "output"} (--data_path), with
  llama-recipes' alpaca prompts; the first 5% of entries (at least one) are the validation split,
  as in llama-recipes.
- `custom`: a JSONL file (--data_path), one object per line, each in one of four shapes:
  {"dialogue": str, "summary": str} (samsum prompt), {"prompt": str, "completion": str} (the
  prompt is masked), {"text": str} (every token is learned), or {"messages": [{"role",
  "content"}, ...]} (a chat: system/user/assistant turns rendered with the tokenizer's chat
  template, only the assistant turns learned; training.data.chat). Blank lines are skipped; the last
  10% of rows (at least one) are the validation split.
- `chat_sample`: the bundled samsum sample as two-exchange chats (training.data.chat
  `samsum_conversation`), rendered like `messages` rows; the last 10% are the validation split.
- `hf_dataset`: a Hugging Face dataset (--hf_dataset: hub name, save_to_disk folder or data
  file; training.data.hf_data) whose rows, columns renamed by --hf_columns, take the `custom`
  shapes; --hf_eval_split, or else the last 10% of --hf_split, is the validation split.

Malformed rows raise DataError "FILE:LINE: what is wrong", a single line. A chat longer than
--context_length is left out, never cut, and counted in a line the trainer prints and writes to
summary.json (`notes`); packing chats, that line also counts the tail tokens dropped. A
prompt/answer row longer than --context_length is cut to it (padding, bfd packing) or split
across packed rows (wrapped packing), and counted in that line too, with the longest row's
length and which of the two. A row, packed or cut, left without a label token (a prompt longer
than the context) is left out and counted there: it would make steps of loss 0 that still move
the weights; a split with no label token left is a DataError naming --context_length.

Batching (`--batching_strategy`): `packing` concatenates all examples of a split and cuts them into
chunks of exactly context_length tokens, dropping the incomplete tail (llama-recipes'
ConcatDataset; `--packing_strategy wrapped`), or with `--packing_strategy bfd` places whole
examples in rows of at most context_length tokens, best fit decreasing (TRL's default;
training.data.packing); `padding` keeps one example per row, truncated to context_length, and
`collate` right-pads.

Where each part lives (all of it re-exported here, the package's one data API):
`training.data.rows` reads the files into rows (prompts, validation splits, "FILE:LINE" errors),
this module tokenizes and packs them, `training.data.batches` cuts examples into batches
(`collate`, `DistributedBatches`: a global order fixed by (seed, epoch) alone, the same global
batch per step at any world size, every sample once per epoch), and `training.data.examples` holds
what they share (`Example`, `IGNORE_INDEX`, `DataError`).
"""

from __future__ import annotations

import importlib.util
from collections.abc import Sequence
from typing import TYPE_CHECKING

from training.data.batches import (
    FILLER,
    DistributedBatches,
    EvalBatches,
    collate,
    eval_batches,
    steps_per_epoch,
    to_device,
)
from training.data.chat import ChatError, Conversation, stop_token_warning, tokenize_chats
from training.data.chat_templates import ChatTemplateError, read_template
from training.data.examples import IGNORE_INDEX, DataError, Example
from training.data.packing import fill_ratio, pack_bfd
from training.data.rows import (
    ALPACA_PROMPT_INPUT,
    ALPACA_PROMPT_NO_INPUT,
    ASSETS,
    SAMSUM_SAMPLE,
    Pair,
    Row,
    read_rows,
    samsum_prompt,
)

if TYPE_CHECKING:
    from transformers import PreTrainedTokenizerBase

    from training.config import TrainConfig

__all__ = [
    "ALPACA_PROMPT_INPUT",
    "ALPACA_PROMPT_NO_INPUT",
    "ASSETS",
    "FILLER",
    "IGNORE_INDEX",
    "SAMSUM_SAMPLE",
    "TOKENIZER_DIR",
    "DataError",
    "DistributedBatches",
    "EvalBatches",
    "Example",
    "build_dataset",
    "collate",
    "eval_batches",
    "is_tiny_preset",
    "load_tokenizer",
    "pack",
    "samsum_prompt",
    "steps_per_epoch",
    "to_device",
    "tokenize_pair",
    "use_chat_template",
]

TOKENIZER_DIR = ASSETS / "tokenizer"


# ------------------------------------------------------------------------------------------------
# tokenizer


def is_tiny_preset(model_name: str) -> bool:
    """Whether `model_name` is one of training.model's built-in tiny presets.

    Until training.model exists, any name starting with "tiny-" counts as a preset.
    """
    if importlib.util.find_spec("training.model") is None:
        return model_name.startswith("tiny-")
    from training.model import PRESETS  # lazy: the model module imports transformers models

    return model_name in PRESETS


def load_tokenizer(model_name: str, revision: str | None = None) -> PreTrainedTokenizerBase:
    """The tokenizer for `model_name` (at hub `revision`, the model's), with eos and pad set.

    Tiny presets get the bundled byte-level BPE in training/assets/tokenizer (no network);
    len(tokenizer) is the vocabulary size the presets are built with. Anything else is loaded
    with AutoTokenizer.from_pretrained (local folder or hub name); a missing pad token becomes
    eos, as llama-recipes does (padding carries IGNORE_INDEX labels, so it is never learned).
    A tokenizer without a bos token is fine: Qwen's have none (`"bos_token": null` in
    Qwen/Qwen3-*'s tokenizer_config.json), and prompt/answer rows then start with the prompt.
    """
    from transformers import AutoTokenizer

    source = str(TOKENIZER_DIR) if is_tiny_preset(model_name) else model_name
    try:
        tok = AutoTokenizer.from_pretrained(source, revision=revision)
    except Exception as e:  # OSError, ValueError, HTTP errors: all mean "cannot load it"
        first = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
        raise DataError(f"--model_name {model_name}: cannot load its tokenizer: {first}") from e
    if tok.eos_token_id is None:
        raise DataError(f"--model_name {model_name}: tokenizer has no eos token")
    if tok.pad_token_id is None:
        tok.pad_token = tok.eos_token
    return tok


def use_chat_template(tokenizer: PreTrainedTokenizerBase, path: str) -> None:
    """`--chat_template PATH`: the Jinja file becomes the tokenizer's chat template, for the chat
    rows and the export (TRL's `chat_template_path` with a .jinja file does the same); "" keeps
    the tokenizer's own. DataError naming the flag when the file cannot be read."""
    if not path:
        return
    try:
        tokenizer.chat_template = read_template(path)
    except ChatTemplateError as e:
        raise DataError(str(e)) from None


def tokenize_pair(tokenizer: PreTrainedTokenizerBase, prompt: str, answer: str) -> Example:
    """bos + prompt (labels IGNORE_INDEX), then answer + eos (labels = ids), as llama-recipes;
    no bos for a tokenizer that has none."""
    return _tokenize(tokenizer, [Pair(prompt, answer)])[0]


def _tokenize(tokenizer: PreTrainedTokenizerBase, pairs: Sequence[Pair]) -> list[Example]:
    if not pairs:
        return []
    bos, eos = tokenizer.bos_token_id, tokenizer.eos_token_id
    prompts = tokenizer([p.prompt for p in pairs], add_special_tokens=False)["input_ids"]
    answers = tokenizer([p.answer for p in pairs], add_special_tokens=False)["input_ids"]
    out = []
    for p_ids, a_ids in zip(prompts, answers, strict=True):
        prompt = [bos, *p_ids] if bos is not None else list(p_ids)
        answer = [*a_ids, eos]
        out.append(
            {
                "input_ids": prompt + answer,
                "labels": [IGNORE_INDEX] * len(prompt) + answer,
                "attention_mask": [1] * (len(prompt) + len(answer)),
            }
        )
    return out


def _tokenize_rows(
    tokenizer: PreTrainedTokenizerBase, rows: Sequence[Row], model_name: str
) -> list[Example]:
    """Pairs as `_tokenize` does, chats with the chat template; the rows' order kept."""
    chats = [r for r in rows if isinstance(r, Conversation)]
    if not chats:
        return _tokenize(tokenizer, rows)  # type: ignore[arg-type]
    pairs = _tokenize(tokenizer, [r for r in rows if isinstance(r, Pair)])
    try:
        rendered = tokenize_chats(tokenizer, chats, model_name, IGNORE_INDEX)
    except ChatError as e:
        raise DataError(str(e)) from None
    it_pairs, it_chats = iter(pairs), iter(rendered)
    return [next(it_chats) if isinstance(r, Conversation) else next(it_pairs) for r in rows]


def _drop_long_chats(
    rows: Sequence[Row], examples: list[Example], cfg: TrainConfig, split: str
) -> tuple[list[Example], list[str] | None]:
    """Leave out the chats longer than --context_length (never cut a conversation short); the
    kept examples and what to say about that (None without chats); all too long is an error."""
    limit = cfg.context_length
    chats = [i for i, r in enumerate(rows) if isinstance(r, Conversation)]
    long = {i for i in chats if len(examples[i]["input_ids"]) > limit}
    if not long:
        return examples, ([] if chats else None)
    longest = max(len(examples[i]["input_ids"]) for i in long)
    if len(long) == len(examples):
        raise DataError(
            f"--context_length {limit}: every conversation of the {split} split is longer "
            f"(up to {longest} tokens); raise --context_length"
        )
    said = (
        f"{len(long)} of {len(chats)} conversations are longer than --context_length {limit} "
        f"tokens (up to {longest}) and are left out, not cut"
    )
    return [ex for i, ex in enumerate(examples) if i not in long], [said]


def _cut_long_pairs(rows: Sequence[Row], examples: list[Example], cfg: TrainConfig) -> str | None:
    """What to say about the prompt/answer rows longer than --context_length: padding and bfd
    packing cut them to it (their tail, the end of the answer and its eos, is not learned),
    wrapped packing splits them across rows; None when there are none.

    They stay, cut (left out only when the cut leaves no label token: `_drop_label_less`):
    llama-cookbook 0.0.5.post1 reads context_length only to pack
    (finetuning.py, ConcatDataset) and pads whole rows, which the model's positions may not
    cover; TRL's SFTTrainer cuts each row to `max_length` ("Sequences longer than `max_length`
    are truncated", its collator's doc in trl/trainer/sft_trainer.py at v1.16.0) and its bfd
    packing too (`pack_dataset`, trl/data_utils.py). Chats are left out instead
    (`_drop_long_chats`).
    """
    limit = cfg.context_length
    pairs = [i for i, r in enumerate(rows) if isinstance(r, Pair)]
    long = [len(examples[i]["input_ids"]) for i in pairs if len(examples[i]["input_ids"]) > limit]
    if not long:
        return None
    wrapped = cfg.batching_strategy == "packing" and cfg.packing_strategy != "bfd"
    return (
        f"{len(long)} of {len(pairs)} prompt/answer rows are longer than --context_length "
        f"{limit} tokens (up to {max(long)}) and are "
        + ("split across packed rows" if wrapped else "cut to it")
    )


def _scored(ex: Example) -> bool:
    """Whether the loss scores a label token of `ex` (labels[1:]: the loss shifts them)."""
    return any(x != IGNORE_INDEX for x in ex["labels"][1:])


def _drop_label_less(
    rows: list[Example], what: str, cfg: TrainConfig, split: str
) -> tuple[list[Example], str | None]:
    """Leave out the `rows` without a label token the loss scores: a prompt longer than the
    context fills whole packed rows, or all of a cut row, with masked labels. As steps they
    would log loss 0 (while AdamW's momentum still moved the weights) and pull the averaged
    train loss down. The kept rows and what to say (None when none is left out); a split left
    with none is an error."""
    kept = [ex for ex in rows if _scored(ex)]
    if len(kept) == len(rows):
        return rows, None
    if not kept:
        raise DataError(
            f"--context_length {cfg.context_length}: no row of the {split} split holds a label "
            "token within it (every answer starts past it); raise --context_length"
        )
    return kept, (
        f"{len(rows) - len(kept)} of {len(rows)} {what} hold no label token and are left out"
    )


# ------------------------------------------------------------------------------------------------
# datasets


def pack(examples: Sequence[Example], chunk: int) -> list[Example]:
    """Concatenate the examples and cut exactly `chunk`-token pieces; drop the incomplete tail.

    llama-recipes' ConcatDataset: labels keep their IGNORE_INDEX prompt masking across chunks.
    """
    keys = ("input_ids", "labels", "attention_mask")
    flat: dict[str, list[int]] = {k: [] for k in keys}
    for ex in examples:
        for k in keys:
            flat[k].extend(ex[k])
    n = len(flat["input_ids"]) // chunk
    return [{k: flat[k][i * chunk : (i + 1) * chunk] for k in keys} for i in range(n)]


def build_dataset(
    cfg: TrainConfig,
    tokenizer: PreTrainedTokenizerBase,
    split: str,
    notes: list[str] | None = None,
) -> list[Example]:
    """The tokenized `split` ("train" or "validation") of cfg.dataset, packed or truncated.

    Deterministic: the same config, tokenizer and files give the same list. With
    ``--max_train_samples N`` the training split is its first N rows (every row is still read and
    checked; only those N are tokenized), as the Hugging Face example scripts'
    ``--max_train_samples`` selects before preprocessing; the validation split stays whole.
    Chats longer than --context_length are left out and counted in a line appended to `notes`,
    with packing also the tokens of the incomplete tail it drops; prompt/answer rows longer
    than it are counted there too when padding or bfd packing cut them.
    """
    if split not in ("train", "validation"):
        raise ValueError(f"split must be 'train' or 'validation', got {split!r}")
    split_rows = read_rows(cfg, split)
    if split == "train" and cfg.max_train_samples:
        split_rows = split_rows[: cfg.max_train_samples]
    examples = _tokenize_rows(tokenizer, split_rows, cfg.model_name)
    cut = _cut_long_pairs(split_rows, examples, cfg)
    examples, said = _drop_long_chats(split_rows, examples, cfg, split)
    n = cfg.context_length
    empty = None
    if cfg.batching_strategy == "padding" or cfg.packing_strategy == "bfd":  # each cut to n
        examples = [{k: v[:n] for k, v in ex.items()} for ex in examples]
        examples, empty = _drop_label_less(examples, "rows", cfg, split)
    if cfg.batching_strategy == "packing" and cfg.packing_strategy == "bfd":
        out = pack_bfd(examples, n)
        if said is not None:
            said.append(
                f"packing keeps each conversation whole: {len(examples)} examples in "
                f"{len(out)} rows of up to {n} tokens, {fill_ratio(out, n):.0%} filled"
            )
    elif cfg.batching_strategy == "packing":
        out = pack(examples, n)
        if said is not None:  # chats: packing cuts through them and loses the incomplete tail
            tail = sum(len(ex["input_ids"]) for ex in examples) - len(out) * n
            said.append(
                f"packing splits conversations across rows of {n} tokens and drops the last "
                f"{tail} (--batching_strategy padding keeps each whole)"
            )
        out, empty = _drop_label_less(out, "packed rows", cfg, split)
    else:
        out = examples
    said = [*(said or []), *(x for x in (cut, empty) if x)]
    if said and notes is not None:
        notes.append(f"data {cfg.dataset} ({split}): " + "; ".join(said))
    if (
        split == "train"
        and notes is not None
        and any(isinstance(r, Conversation) for r in split_rows)
    ):
        warning = stop_token_warning(tokenizer)  # TRL's check of {% generation %} templates
        if warning:
            notes.append(warning)
    return out
