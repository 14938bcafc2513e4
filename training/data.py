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
  template, only the assistant turns learned; training.chat). Blank lines are skipped; the last
  10% of rows (at least one) are the validation split.
- `chat_sample`: the bundled samsum sample as two-exchange chats (training.chat
  `samsum_conversation`), rendered like `messages` rows; the last 10% are the validation split.
- `hf_dataset`: a Hugging Face dataset (--hf_dataset: hub name, save_to_disk folder or data
  file; training.hf_data) whose rows, columns renamed by --hf_columns, take the `custom`
  shapes; --hf_eval_split, or else the last 10% of --hf_split, is the validation split.

Malformed rows raise DataError "FILE:LINE: what is wrong", a single line. A chat longer than
--context_length is left out, never cut, and counted in a line the trainer prints (`notes`);
packing chats, that line also counts the tail tokens dropped.

Batching (`--batching_strategy`): `packing` concatenates all examples of a split and cuts them into
chunks of exactly context_length tokens, dropping the incomplete tail (llama-recipes'
ConcatDataset); `padding` keeps one example per row, truncated to context_length, and `collate`
right-pads.

`DistributedBatches` fixes the global sample order from (seed, epoch) alone, so runs with
different world sizes, micro-batch sizes and accumulation steps see the same global batch per
optimizer step, and a resumed run continues with the very batches an uninterrupted run would have
seen. Every sample is trained exactly once per epoch: the last global batch is completed with
fully masked filler rows (`steps_per_epoch` is the one rule for how many steps that makes).
"""

from __future__ import annotations

import importlib.util
import json
import math
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import torch

from training.chat import (
    ChatError,
    Conversation,
    parse_messages,
    samsum_conversation,
    tokenize_chats,
)
from training.hf_data import HFDataError, hub_samsum, load_rows, parse_columns

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
]

IGNORE_INDEX = -100
"""Label of tokens that carry no loss (prompt and padding), as torch's cross_entropy ignores."""

ASSETS = Path(__file__).resolve().parent / "assets"
SAMSUM_SAMPLE = ASSETS / "samsum_sample.jsonl"
TOKENIZER_DIR = ASSETS / "tokenizer"
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

Example = dict[str, list[int]]
"""One tokenized example: input_ids, labels, attention_mask (equal lengths)."""


class DataError(ValueError):
    """Bad data or tokenizer. str(err) is one line: "FILE:LINE: what is wrong" for a bad row."""


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


def load_tokenizer(model_name: str) -> PreTrainedTokenizerBase:
    """The tokenizer for `model_name`, with bos, eos and pad tokens set.

    Tiny presets get the bundled byte-level BPE in training/assets/tokenizer (no network);
    len(tokenizer) is the vocabulary size the presets are built with. Anything else is loaded
    with AutoTokenizer.from_pretrained (local folder or hub name); a missing pad token becomes
    eos, as llama-recipes does (padding carries IGNORE_INDEX labels, so it is never learned).
    """
    from transformers import AutoTokenizer

    source = str(TOKENIZER_DIR) if is_tiny_preset(model_name) else model_name
    try:
        tok = AutoTokenizer.from_pretrained(source)
    except Exception as e:  # OSError, ValueError, HTTP errors: all mean "cannot load it"
        first = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
        raise DataError(f"--model_name {model_name}: cannot load its tokenizer: {first}") from e
    if tok.eos_token_id is None:
        raise DataError(f"--model_name {model_name}: tokenizer has no eos token")
    if tok.bos_token_id is None:
        raise DataError(f"--model_name {model_name}: tokenizer has no bos token")
    if tok.pad_token_id is None:
        tok.pad_token = tok.eos_token
    return tok


# ------------------------------------------------------------------------------------------------
# prompts and tokenization


def samsum_prompt(dialogue: str) -> str:
    """llama-recipes' samsum prompt."""
    return f"Summarize this dialog:\n{dialogue}\n---\nSummary:\n"


def alpaca_prompt(instruction: str, input_text: str = "") -> str:
    """llama-recipes' alpaca prompt (the no-input form when input is empty)."""
    if input_text == "":
        return ALPACA_PROMPT_NO_INPUT.format(instruction=instruction)
    return ALPACA_PROMPT_INPUT.format(instruction=instruction, input=input_text)


@dataclass(frozen=True)
class _Pair:
    """A (prompt, answer) text pair before tokenization; an empty prompt means "learn it all"."""

    prompt: str
    answer: str


def tokenize_pair(tokenizer: PreTrainedTokenizerBase, prompt: str, answer: str) -> Example:
    """bos + prompt (labels IGNORE_INDEX), then answer + eos (labels = ids), as llama-recipes."""
    return _tokenize(tokenizer, [_Pair(prompt, answer)])[0]


def _tokenize(tokenizer: PreTrainedTokenizerBase, pairs: Sequence[_Pair]) -> list[Example]:
    if not pairs:
        return []
    bos, eos = tokenizer.bos_token_id, tokenizer.eos_token_id
    prompts = tokenizer([p.prompt for p in pairs], add_special_tokens=False)["input_ids"]
    answers = tokenizer([p.answer for p in pairs], add_special_tokens=False)["input_ids"]
    out = []
    for p_ids, a_ids in zip(prompts, answers, strict=True):
        prompt = [bos, *p_ids]
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
    pairs = _tokenize(tokenizer, [r for r in rows if isinstance(r, _Pair)])
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


# ------------------------------------------------------------------------------------------------
# reading files


def _str_field(row: dict[str, Any], key: str, where: str, *, allow_empty: bool = False) -> str:
    if key not in row:
        raise DataError(f"{where}: missing field {key!r}")
    value = row[key]
    if not isinstance(value, str):
        raise DataError(f"{where}: field {key!r} must be a string, got {type(value).__name__}")
    if not allow_empty and not value.strip():
        raise DataError(f"{where}: field {key!r} is empty")
    return value


Row = _Pair | Conversation
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
        return _Pair(
            samsum_prompt(_str_field(row, "dialogue", where)), _str_field(row, "summary", where)
        )
    if "prompt" in row or "completion" in row:
        return _Pair(_str_field(row, "prompt", where), _str_field(row, "completion", where))
    if "text" in row:
        return _Pair("", _str_field(row, "text", where))
    keys = ", ".join(sorted(row)) or "none"
    raise DataError(
        f"{where}: expected fields dialogue+summary, prompt+completion, text or messages; "
        f"got {keys}"
    )


def _json_lines(path: Path) -> Iterator[tuple[str, Any]]:
    """(FILE:LINE, parsed object) of every non-blank line of a JSONL file."""
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as e:
        raise DataError(f"{path}: cannot read: {e.strerror or e}") from e
    except UnicodeDecodeError as e:
        raise DataError(f"{path}: not UTF-8 text ({e.reason} at byte {e.start})") from e
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
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as e:
        raise DataError(f"{path}: cannot read: {e.strerror or e}") from e
    except UnicodeDecodeError as e:
        raise DataError(f"{path}: not UTF-8 text ({e.reason} at byte {e.start})") from e
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


def _read_alpaca(path: Path) -> list[_Pair]:
    pairs = []
    for lineno, row in _json_array_with_lines(path):
        where = f"{path}:{lineno}"
        if not isinstance(row, dict):
            raise DataError(f"{where}: expected a JSON object, got {type(row).__name__}")
        instruction = _str_field(row, "instruction", where)
        input_text = _str_field(row, "input", where, allow_empty=True) if "input" in row else ""
        output = _str_field(row, "output", where)
        pairs.append(_Pair(alpaca_prompt(instruction, input_text), output))
    if not pairs:
        raise DataError(f"{path}: empty list")
    return pairs


def _hub_samsum(split: str) -> list[_Pair]:
    try:
        rows = hub_samsum(split)
    except HFDataError as e:
        raise DataError(str(e)) from None
    return [_Pair(samsum_prompt(dialogue), summary) for dialogue, summary in rows]


def _hf_rows(cfg: TrainConfig, split: str) -> list[Row]:
    """--dataset hf_dataset: its --hf_split (the last 10% for validation), or --hf_eval_split."""
    columns = parse_columns(cfg.hf_columns)
    name = cfg.hf_eval_split if cfg.hf_eval_split and split == "validation" else cfg.hf_split
    try:
        rows = [_custom_row(row, where) for where, row in load_rows(cfg.hf_dataset, name, columns)]
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


def _pairs(cfg: TrainConfig, split: str) -> list[Row]:
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
        return list(_hub_samsum(split))
    raise DataError(f"--dataset: unknown dataset {cfg.dataset!r}")


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
    with packing also the tokens of the incomplete tail it drops.
    """
    if split not in ("train", "validation"):
        raise ValueError(f"split must be 'train' or 'validation', got {split!r}")
    rows = _pairs(cfg, split)
    if split == "train" and cfg.max_train_samples:
        rows = rows[: cfg.max_train_samples]
    examples = _tokenize_rows(tokenizer, rows, cfg.model_name)
    examples, said = _drop_long_chats(rows, examples, cfg, split)
    n = cfg.context_length
    if cfg.batching_strategy == "packing":
        out = pack(examples, n)
        if said is not None:  # chats: packing cuts through them and loses the incomplete tail
            tail = sum(len(ex["input_ids"]) for ex in examples) - len(out) * n
            said.append(
                f"packing splits conversations across rows of {n} tokens and drops the last "
                f"{tail} (--batching_strategy padding keeps each whole)"
            )
    else:
        out = [{k: v[:n] for k, v in ex.items()} for ex in examples]
    if said and notes is not None:
        notes.append(f"data {cfg.dataset} ({split}): " + "; ".join(said))
    return out


def collate(examples: Sequence[Example], pad_id: int) -> dict[str, torch.Tensor]:
    """Right-pad to the longest example: input_ids with pad_id, labels IGNORE_INDEX, mask 0.

    Returns int64 tensors of shape [len(examples), longest].
    """
    if not examples:
        raise ValueError("collate: no examples")
    width = max(len(ex["input_ids"]) for ex in examples)
    fill = {"input_ids": pad_id, "labels": IGNORE_INDEX, "attention_mask": 0}
    return {
        k: torch.tensor([ex[k] + [v] * (width - len(ex[k])) for ex in examples], dtype=torch.long)
        for k, v in fill.items()
    }


def to_device(t: torch.Tensor, device: torch.device) -> torch.Tensor:
    """Copy a host batch tensor to `device` without making the host wait for the device.

    On CUDA a host tensor is copied from pinned memory: an async copy from pageable memory is
    staged by the driver, which "may synchronize with the stream" first (CUDA driver API,
    "API synchronization behavior"), i.e. wait for the previous step's queued kernels. The
    pinned copy returns at once; torch's caching host allocator records the copy's stream
    event and reuses the block only after it (aten/src/ATen/native/cuda/Copy.cu). The extra
    host copy of a batch (kilobytes of token ids) is cheap. Anything else moves as it is.
    """
    if device.type == "cuda" and t.device.type == "cpu":
        t = t.pin_memory()
    return t.to(device, non_blocking=True)


# ------------------------------------------------------------------------------------------------
# distributed batch order

FILLER = -1
"""Sample id of a filler row (a fully masked copy of sample 0) in `DistributedBatches.rank_ids`."""


def steps_per_epoch(num_samples: int, global_batch: int) -> int:
    """Optimizer steps of one epoch: ceil(num_samples / global_batch).

    The one rule (the planner mirrors it): every sample is trained exactly once per epoch, so
    the last global batch holds the `num_samples % global_batch` remaining samples and is
    completed with fully masked filler rows. Those carry no label token; with the loss
    normalised by the global label-token count they change neither the loss nor the gradient,
    whatever the world size. `global_batch` is B x W x A (micro-batch, world size,
    accumulation); 0 samples make 0 steps.
    """
    if global_batch < 1:
        raise ValueError(f"global_batch must be >= 1, got {global_batch}")
    if num_samples < 0:
        raise ValueError(f"num_samples must be >= 0, got {num_samples}")
    return -(-num_samples // global_batch)


class DistributedBatches:
    """This rank's micro-batches, step by step, in an order independent of the world size.

    Global layout: perm = a permutation of range(len(dataset)) from a torch.Generator seeded with
    seed + epoch (the identity without shuffle). With B = micro_batch_size, W = world_size,
    A = grad_accum and G = B*W*A, optimizer step s of an epoch uses perm[s*G:(s+1)*G]; its
    micro-step a uses perm[s*G + a*B*W : s*G + (a+1)*B*W], of which rank r takes [r*B:(r+1)*B].
    So W=1, B=4; W=2, B=2; and W=1, B=2, A=2 all see the same global batch per step. The last
    step of an epoch takes the len(dataset) % G remaining samples and fills the rest of its G
    positions with fully masked copies of sample 0 (`FILLER`): every sample is trained exactly
    once per epoch at any world size, in `steps_per_epoch(len(dataset), G)` steps.

    The position is the number of samples of the current epoch already consumed. It advances
    when a step's micro-batches are handed out (before the yield), so a state_dict() taken after
    the optimizer step for them resumes at the next step. `state_dict()` is rank independent.
    At the end of an epoch the position stays (epoch, everything consumed) and iterating yields
    nothing until set_epoch(epoch + 1); a loop that checkpoints after its end-of-epoch work
    (validation, scheduler step) should call set_epoch(epoch + 1) before saving, so that a resume
    starts the next epoch instead of redoing that work.

    Resuming with a different G (another world size, batch or accumulation): the position is
    carried over in samples (`consumed_samples`). If it is a multiple of the new G, the run
    continues on the new layout's step boundaries as if it had run with the new G from the start
    of the epoch. If not, the rest of that epoch continues from exactly that sample in batches of
    the new G (no sample skipped or repeated; the epoch's final partial batch is dropped), and
    later epochs use the standard layout.
    """

    def __init__(
        self,
        dataset: Sequence[Example],
        *,
        micro_batch_size: int,
        grad_accum: int,
        rank: int,
        world_size: int,
        seed: int,
        shuffle: bool,
        pad_id: int,
    ) -> None:
        if micro_batch_size < 1:
            raise ValueError(f"micro_batch_size must be >= 1, got {micro_batch_size}")
        if grad_accum < 1:
            raise ValueError(f"grad_accum must be >= 1, got {grad_accum}")
        if world_size < 1 or not 0 <= rank < world_size:
            raise ValueError(f"need 0 <= rank < world_size, got rank {rank}, world {world_size}")
        self.dataset = dataset
        self.micro_batch_size = micro_batch_size
        self.grad_accum = grad_accum
        self.rank = rank
        self.world_size = world_size
        self.seed = seed
        self.shuffle = shuffle
        self.pad_id = pad_id
        self.global_batch_size = micro_batch_size * world_size * grad_accum
        if len(dataset) < self.global_batch_size:
            raise DataError(
                f"the training split has {len(dataset)} examples, fewer than one global batch of "
                f"{self.global_batch_size} (--batch_size_training {micro_batch_size} x world size "
                f"{world_size} x --gradient_accumulation_steps {grad_accum}); use a smaller batch "
                "or --context_length, or more data"
            )
        self.epoch = 0
        self.consumed_samples = 0
        self._step_counts = (0, 0)
        self._perm: tuple[int, torch.Tensor] | None = None
        first = dataset[0]
        self._filler: Example = {**first, "labels": [IGNORE_INDEX] * len(first["labels"])}

    # -- positions ------------------------------------------------------------------------------
    def steps_per_epoch(self) -> int:
        """Optimizer steps in a full epoch: `steps_per_epoch(len(dataset), B*W*A)` (ceil)."""
        return steps_per_epoch(len(self.dataset), self.global_batch_size)

    @property
    def step_in_epoch(self) -> int:
        """Optimizer steps of the current epoch already handed out (in units of this G)."""
        return -(-self.consumed_samples // self.global_batch_size)

    def remaining_steps(self) -> int:
        """Optimizer steps left in the current epoch."""
        return steps_per_epoch(len(self.dataset) - self.consumed_samples, self.global_batch_size)

    def set_epoch(self, epoch: int) -> None:
        """Move to the start of `epoch`; a no-op if already in it (so a resumed position holds)."""
        if epoch < 0:
            raise ValueError(f"epoch must be >= 0, got {epoch}")
        if epoch != self.epoch:
            self.epoch = epoch
            self.consumed_samples = 0

    def permutation(self, epoch: int | None = None) -> torch.Tensor:
        """The global sample order of `epoch` (default: the current one)."""
        epoch = self.epoch if epoch is None else epoch
        if self._perm is not None and self._perm[0] == epoch:
            return self._perm[1]
        n = len(self.dataset)
        if self.shuffle:
            g = torch.Generator().manual_seed(self.seed + epoch)
            perm = torch.randperm(n, generator=g)
        else:
            perm = torch.arange(n)
        self._perm = (epoch, perm)
        return perm

    def global_indices(self, start: int) -> list[int]:
        """Sample ids of the global batch starting at epoch position `start` (all ranks), G of
        them: past the end of the epoch, `FILLER`."""
        from training.dist import host_only  # the order lives on the host: reading it syncs nothing

        ids = host_only(self.permutation()[start : start + self.global_batch_size]).tolist()
        return ids + [FILLER] * (self.global_batch_size - len(ids))

    def rank_ids(self, start: int) -> list[list[int]]:
        """This rank's sample ids per micro-batch of the step starting at position `start`."""
        B, W = self.micro_batch_size, self.world_size
        batch = self.global_indices(start)
        return [
            batch[a * B * W + self.rank * B : a * B * W + (self.rank + 1) * B]
            for a in range(self.grad_accum)
        ]

    # -- iteration ------------------------------------------------------------------------------
    def __iter__(self) -> Iterator[list[dict[str, torch.Tensor]]]:
        """For each remaining step of the current epoch, this rank's grad_accum micro-batches."""
        while self.consumed_samples < len(self.dataset):
            micro = [
                collate(
                    [self._filler if i == FILLER else self.dataset[i] for i in ids], self.pad_id
                )
                for ids in self.rank_ids(self.consumed_samples)
            ]
            self._step_counts = self._token_counts(self.global_indices(self.consumed_samples))
            self.consumed_samples = min(
                self.consumed_samples + self.global_batch_size, len(self.dataset)
            )
            yield micro

    def step_token_counts(self) -> tuple[int, int]:
        """(label tokens, input tokens) of the global batch last handed out, over ALL ranks.

        What an all-reduce of every rank's counts would give, computed (when the step's
        micro-batches are built) from the dataset order that every rank holds: label tokens are
        the scored ones (`labels[1:] != IGNORE_INDEX` per row, as the loss shifts them), input
        tokens the attention-mask ones (filler rows count their inputs, not their labels). No
        collective and no tensor read in the training step.
        """
        return self._step_counts

    def _token_counts(self, ids: list[int]) -> tuple[int, int]:
        labels = inputs = 0
        for i in ids:
            ex = self._filler if i == FILLER else self.dataset[i]
            row = ex["labels"]
            labels += len(row) - 1 - row[1:].count(IGNORE_INDEX) if row else 0
            inputs += sum(ex["attention_mask"])
        return labels, inputs

    # -- Stateful -------------------------------------------------------------------------------
    def state_dict(self) -> dict[str, int]:
        """{"epoch", "step_in_epoch", "consumed_samples" (in this epoch), "global_batch_size",
        "num_samples"}: the same on every rank."""
        return {
            "epoch": self.epoch,
            "step_in_epoch": self.step_in_epoch,
            "consumed_samples": self.consumed_samples,
            "global_batch_size": self.global_batch_size,
            "num_samples": len(self.dataset),
        }

    def load_state_dict(self, sd: dict[str, Any]) -> None:
        """Continue where `sd` stopped, also with another world size / batch / accumulation.

        Needs "epoch" and either "consumed_samples" or "step_in_epoch" (then in units of
        sd["global_batch_size"], default this G). A different dataset length is an error: the
        sample order would not be the same.
        """
        n = len(self.dataset)
        if "num_samples" in sd and int(sd["num_samples"]) != n:
            raise DataError(
                f"cannot resume: the checkpoint's training split had {int(sd['num_samples'])} "
                f"examples, this one has {n} (dataset, tokenizer or --context_length changed)"
            )
        epoch = int(sd["epoch"])
        if "consumed_samples" in sd:
            consumed = int(sd["consumed_samples"])
        else:
            consumed = int(sd["step_in_epoch"]) * int(
                sd.get("global_batch_size", self.global_batch_size)
            )
        if epoch < 0 or not 0 <= consumed <= n:
            raise DataError(f"cannot resume: bad data position epoch={epoch} consumed={consumed}")
        self.epoch = epoch
        self.consumed_samples = consumed


class EvalBatches:
    """This rank's validation batches, in dataset order, sharded like the training layout.

    Iterable any number of times; ``len()`` is the number of batches.

    Batch k covers dataset[k*B*W : (k+1)*B*W]; rank r takes its B-slice [r*B:(r+1)*B]. Every
    rank gets the same number of batches, ceil(len(dataset) / (B*W)), capped at max_steps (0 =
    no cap). The last batch is filled up with fully masked examples, which carry no label
    token, so a token-weighted loss covers every example exactly once, whatever the world size
    (a 128-GPU job can evaluate a split of 40 packed examples). An empty split raises DataError.
    """

    def __init__(
        self,
        dataset: Sequence[Example],
        *,
        batch_size: int,
        rank: int,
        world_size: int,
        pad_id: int,
        max_steps: int = 0,
    ) -> None:
        if batch_size < 1:
            raise ValueError(f"batch_size must be >= 1, got {batch_size}")
        if world_size < 1 or not 0 <= rank < world_size:
            raise ValueError(f"need 0 <= rank < world_size, got rank {rank}, world {world_size}")
        if max_steps < 0:
            raise ValueError(f"max_steps must be >= 0, got {max_steps}")
        if not dataset:
            raise DataError("the validation split is empty; use --run_validation False")
        per_step = batch_size * world_size
        self.dataset = dataset
        self.batch_size = batch_size
        self.rank = rank
        self.world_size = world_size
        self.pad_id = pad_id
        steps = -(-len(dataset) // per_step)  # ceil: every example is evaluated once
        self.steps = min(steps, max_steps) if max_steps else steps
        # Positions past the end of the split hold a copy of example 0 with every label masked:
        # every rank runs the same number of forward passes (FSDP collectives need it) and the
        # token-weighted eval loss is exactly that of the split.
        first = dataset[0]
        self._filler: Example = {**first, "labels": [IGNORE_INDEX] * len(first["labels"])}

    def __len__(self) -> int:
        return self.steps

    def __iter__(self) -> Iterator[dict[str, torch.Tensor]]:
        B, W = self.batch_size, self.world_size
        n = len(self.dataset)
        for k in range(self.steps):
            start = k * B * W + self.rank * B
            examples = [self.dataset[i] if i < n else self._filler for i in range(start, start + B)]
            yield collate(examples, self.pad_id)


eval_batches = EvalBatches
"""What callers use: ``eval_batches(dataset, batch_size=B, rank=r, world_size=W, ...)``."""
