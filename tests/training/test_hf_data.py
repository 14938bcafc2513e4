"""A Hugging Face dataset as training data (`--dataset hf_dataset`, training/data/hf_data.py).

If these fail, a dataset saved with `save_to_disk` or a local data file read through `datasets`
no longer reaches the trainer with its columns renamed to the row fields (`--hf_columns`), its
chats lose their assistant-only labels, its splits are taken wrongly, or a missing column,
split or file stops the run with a stack trace instead of one line. Local data only: nothing
here asks the Hub.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from transformers import PreTrainedTokenizerBase

from training.config import ConfigError, TrainConfig, parse_args
from training.data import IGNORE_INDEX, DataError, build_dataset, load_tokenizer

CHAT = [
    {"role": "user", "content": "Hi there"},
    {"role": "assistant", "content": "Hello!"},
    {"role": "user", "content": "Bye"},
    {"role": "assistant", "content": "Goodbye."},
]


@pytest.fixture(scope="module")
def tok() -> PreTrainedTokenizerBase:
    return load_tokenizer("tiny-llama")


@pytest.fixture(autouse=True)
def offline(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """No Hub, and the Arrow cache of a loaded data file in this test's folder."""
    import datasets

    monkeypatch.setattr(datasets.config, "HF_HUB_OFFLINE", True)
    monkeypatch.setattr(datasets.config, "HF_DATASETS_CACHE", tmp_path / "cache")


def _saved(tmp_path: Path, splits: dict[str, list[dict[str, Any]]]) -> Path:
    import datasets

    folder = tmp_path / "ds"
    datasets.DatasetDict(
        {name: datasets.Dataset.from_list(rows) for name, rows in splits.items()}
    ).save_to_disk(str(folder))
    return folder


def _cfg(source: Path, **kw: Any) -> TrainConfig:
    return TrainConfig(
        dataset="hf_dataset",
        hf_dataset=str(source),
        batching_strategy="padding",
        **kw,
    )


def test_saved_dataset_chats_with_renamed_column_and_eval_split(
    tmp_path: Path, tok: PreTrainedTokenizerBase
) -> None:
    rows = [{"id": i, "conversations": CHAT} for i in range(5)]
    folder = _saved(tmp_path, {"train": rows, "test": rows[:2]})
    cfg = _cfg(folder, hf_columns="messages=conversations", hf_eval_split="test")
    train, val = build_dataset(cfg, tok, "train"), build_dataset(cfg, tok, "validation")
    assert (len(train), len(val)) == (5, 2)
    assert tok.decode(train[0]["input_ids"]) == tok.apply_chat_template(CHAT, tokenize=False)
    learned = [t for t in train[0]["labels"] if t != IGNORE_INDEX]
    assert tok.decode(learned) == "Hello!</s>Goodbye.</s>"


def test_data_file_pairs_and_the_tail_split(tmp_path: Path, tok: PreTrainedTokenizerBase) -> None:
    path = tmp_path / "qa.jsonl"
    path.write_text(
        "".join(
            json.dumps({"question": f"{i}+{i}=", "answer": str(2 * i)}) + "\n" for i in range(20)
        )
    )
    cfg = _cfg(path, hf_columns="prompt=question,completion=answer")
    train, val = build_dataset(cfg, tok, "train"), build_dataset(cfg, tok, "validation")
    assert (len(train), len(val)) == (18, 2)  # the last tenth validates
    assert tok.decode(train[3]["input_ids"]) == "<s>3+3=6</s>"
    assert tok.decode(val[-1]["input_ids"]) == "<s>19+19=38</s>"
    assert tok.decode([t for t in train[3]["labels"] if t != IGNORE_INDEX]) == "6</s>"


def test_bad_inputs_are_one_line(tmp_path: Path, tok: PreTrainedTokenizerBase) -> None:
    folder = _saved(tmp_path, {"train": [{"conversations": CHAT}, {"conversations": CHAT[:1]}]})
    cases = [
        (
            _cfg(folder, hf_columns="messages=turns"),
            f"--hf_columns: {folder} [train] has no column 'turns' (its columns: conversations)",
        ),
        (
            _cfg(folder, hf_columns="messages=conversations", hf_split="dev"),
            f"--hf_split dev: {folder} has the splits train",
        ),
        (
            _cfg(folder, hf_columns="messages=conversations"),
            f"{folder}[train]:1: no assistant message: nothing to learn",
        ),
        (
            _cfg(tmp_path / "missing.parquet"),
            f"--hf_dataset {tmp_path / 'missing.parquet'} [train]: cannot load it",
        ),
    ]
    for cfg, message in cases:
        with pytest.raises(DataError) as err:
            build_dataset(cfg, tok, "train")
        assert str(err.value).startswith(message), str(err.value)
        assert "\n" not in str(err.value)


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--dataset=hf_dataset"], "--hf_dataset: required with --dataset hf_dataset"),
        (["--hf_dataset=x"], "--hf_dataset: only used with --dataset hf_dataset, not samsum_dataset"),
        (["--hf_columns=messages=c"], "--hf_columns: only used with --dataset hf_dataset, not samsum_dataset"),
        (
            ["--dataset=hf_dataset", "--hf_dataset=x", "--hf_columns=messages"],
            "--hf_columns: expects ours=theirs pairs, got 'messages'",
        ),
        (
            ["--dataset=hf_dataset", "--hf_dataset=x", "--hf_columns=answer=a"],
            "--hf_columns: 'answer' is not a row field (messages, prompt, completion, text, "
            "dialogue, summary, chosen, rejected)",
        ),
    ],
)  # fmt: skip
def test_flags_are_checked_before_any_work(argv: list[str], message: str) -> None:
    with pytest.raises(ConfigError) as err:
        parse_args(argv)
    assert str(err.value) == message
