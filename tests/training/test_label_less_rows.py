"""Rows without a label token never become training steps (training/data/dataset.py).

If these fail, a prompt/answer row longer than --context_length trains on nothing and reports a
wrong loss: under the default (wrapped) packing its prompt becomes dozens of packed rows whose
every label is masked, whole steps log `loss 0.0000 | grad_norm 0.000` (while AdamW's momentum
still moves the weights and the schedule advances), and the summary's train loss averages those
zeros in; or the over-long row goes by without the one line that says it was split or cut.
"""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

import pytest
from transformers import PreTrainedTokenizerBase

from training.config import TrainConfig
from training.data import (
    IGNORE_INDEX,
    DataError,
    build_dataset,
    load_tokenizer,
    pack,
    tokenize_pair,
)

LIMIT = 64
WORDS = [
    "alpha",
    "beta",
    "gamma",
    "delta",
    "epsilon",
    "zeta",
    "eta",
    "theta",
    "iota",
    "kappa",
    "lambda",
    "mu",
]


def _scored(ex: dict[str, list[int]]) -> int:
    """Label tokens the loss scores in a row (it shifts labels by one)."""
    return sum(x != IGNORE_INDEX for x in ex["labels"][1:])


def _rows(long_words: int) -> list[dict[str, str]]:
    """Forty short prompt/answer rows; the fourth has a prompt of `long_words` words."""
    rows = [
        {
            "prompt": f"Question {i}: what is {WORDS[i % 12]} plus {WORDS[i * 5 % 12]}?",
            "completion": f"It is {WORDS[i * 7 % 12]} and {WORDS[i * 3 % 12]}, said plainly.",
        }
        for i in range(40)
    ]
    rows[3] = {
        "prompt": " ".join(WORDS[i * 7 % 11] for i in range(long_words)),
        "completion": "A short answer.",
    }
    return rows


def _write(tmp_path: Path, rows: list[dict[str, str]]) -> Path:
    path = tmp_path / "long.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    return path


@pytest.fixture(scope="module")
def tok() -> PreTrainedTokenizerBase:
    return load_tokenizer("tiny-llama")


def test_an_over_long_row_is_said_and_its_label_less_rows_are_left_out(
    tmp_path: Path, tok: PreTrainedTokenizerBase
) -> None:
    """One 1,182-token row among 36 short ones (the train split), context 64: wrapped
    packing splits it across rows and leaves out the rows without a label token; padding and
    bfd cut it to 64 tokens of prompt and leave it out. Every kept row scores a token, no
    scored token is lost, and one line per split says how many rows were split or cut and how
    many were left out."""
    rows = _rows(300)
    cfg = TrainConfig(dataset="custom", data_path=str(_write(tmp_path, rows)), context_length=LIMIT)
    lengths = [len(tokenize_pair(tok, r["prompt"], r["completion"])["input_ids"]) for r in rows]
    train_lengths = lengths[:36]  # the last 10% of the 40 rows are the validation split
    assert [n > LIMIT for n in lengths].count(True) == 1 and lengths[3] > 15 * LIMIT
    whole = build_dataset(
        replace(cfg, batching_strategy="padding", context_length=10**6), tok, "train"
    )
    wrapped_all = pack(whole, LIMIT)
    empty = [ex for ex in wrapped_all if _scored(ex) == 0]
    assert len(empty) >= lengths[3] // LIMIT - 2  # the prompt alone fills that many rows

    notes: list[str] = []
    wrapped = build_dataset(cfg, tok, "train", notes)
    assert wrapped == [ex for ex in wrapped_all if _scored(ex)]
    assert sum(map(_scored, wrapped)) == sum(map(_scored, wrapped_all))  # no label token lost
    assert notes == [
        f"data custom (train): 1 of 36 prompt/answer rows are longer than --context_length "
        f"{LIMIT} tokens (up to {lengths[3]}) and are split across packed rows; {len(empty)} of "
        f"{len(wrapped_all)} packed rows hold no label token and are left out"
    ]

    for strategy in ("padding", "bfd"):
        notes = []
        cut_cfg = (
            replace(cfg, batching_strategy="padding")
            if strategy == "padding"
            else replace(cfg, packing_strategy="bfd")
        )
        out = build_dataset(cut_cfg, tok, "train", notes)
        assert all(_scored(ex) for ex in out), strategy
        kept = sum(len(ex["input_ids"]) for ex in out)
        assert kept == sum(n for n in train_lengths if n <= LIMIT), strategy  # the cut row is out
        assert notes == [
            f"data custom (train): 1 of 36 prompt/answer rows are longer than --context_length "
            f"{LIMIT} tokens (up to {lengths[3]}) and are cut to it; 1 of 36 rows hold no "
            "label token and are left out"
        ], strategy


def test_a_split_with_no_label_token_left_is_one_error_line(
    tmp_path: Path, tok: PreTrainedTokenizerBase
) -> None:
    """Every row's prompt is longer than the context: the run stops with one line naming the
    flag, not with an empty training split further on."""
    rows = [{"prompt": "Why? " * 40, "completion": "Because."}] * 4
    cfg = TrainConfig(
        dataset="custom",
        data_path=str(_write(tmp_path, rows)),
        context_length=16,
        batching_strategy="padding",
    )
    with pytest.raises(DataError, match=r"^--context_length 16: no row of the train split holds"):
        build_dataset(cfg, tok, "train")


def test_a_run_with_an_over_long_row_logs_no_empty_step(tmp_path: Path) -> None:
    """The issue's run, smaller: the tiny preset, default packing, context 64, one row of about
    2,122 tokens. Before, 32 of 55 packed rows held no label token, one of 14 steps logged
    loss 0 and `train loss (avg)` said 5.21 where the other steps averaged 5.61. Now every step
    scores tokens, the summary's train loss is the mean of the logged step losses, and the note
    is printed and kept in summary.json."""
    from tests.training.helpers import TINY, finetune_cmd, merge, metrics, run, run_dirs

    data = _write(tmp_path, _rows(540))
    argv = merge(
        TINY,
        [
            "--model_name=tiny-llama",
            "--dataset=custom",
            f"--data_path={data}",
            "--batch_size_training=4",
            "--num_epochs=1",
        ],
        run_dirs(tmp_path, "long"),
    )
    proc = run(finetune_cmd(0, argv))
    assert proc.returncode == 0, proc.stderr[-3000:]
    steps = [r for r in metrics(tmp_path, "long") if "loss" in r]
    assert len(steps) >= 5
    assert min(r["label_tokens"] for r in steps) > 0
    assert min(r["loss"] for r in steps) > 1.0  # a random tiny model starts near ln(1763) = 7.5
    summary = json.loads((tmp_path / "long" / "out" / "summary.json").read_text(encoding="utf-8"))
    mean = sum(r["loss"] for r in steps) / len(steps)
    assert summary["avg_train_loss"] == pytest.approx(mean, rel=1e-6)
    said = [ln for ln in proc.stdout.splitlines() if "hold no label token" in ln]
    assert len(said) == 1 and said == summary["data_notes"]
    assert "are split across packed rows" in said[0]
