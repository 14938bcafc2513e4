"""Preference data: rows read, refused and fitted to the context as `training.data.preference` says.

If this fails, a bad preference row (missing field, empty completion, chosen equal to rejected,
mixed formats) no longer stops the run with one line naming FILE:LINE; pairs longer than
--context_length are emptied or silently dropped instead of cut (keep start) or left out and
counted; a Hugging Face dataset's columns are not mapped to prompt/chosen/rejected; the batches
no longer put chosen and rejected in one 2B-row batch with the completion tokens alone labelled,
or filler pairs carry weight; the bundled sample is not its generator's output; or the SFT and
DPO flags mix without a one-line refusal.
"""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path
from typing import Any

import pytest

from training.config import ConfigError, TrainConfig, parse_args
from training.data import IGNORE_INDEX, DataError, load_tokenizer
from training.data.batches import FILLER
from training.data.preference import (
    PREFERENCE_SAMPLE,
    PreferenceBatches,
    build_pairs,
    collate_pairs,
    preference_row,
)

ROW = {"prompt": "Say yes.\n", "chosen": "Yes.", "rejected": "No."}


@pytest.fixture(scope="module")
def tok() -> Any:
    return load_tokenizer("tiny-llama")


def _cfg(path: Path, **kw: Any) -> TrainConfig:
    return TrainConfig(method="dpo", dataset="custom", data_path=str(path), **kw)


def _write(path: Path, rows: list[Any]) -> Path:
    path.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    return path


@pytest.mark.parametrize(
    ("bad", "message"),
    [
        ({"prompt": "p", "chosen": "a"}, "missing field 'rejected'"),
        ({**ROW, "chosen": "  "}, "field 'chosen' is empty: nothing to prefer"),
        ({**ROW, "rejected": ROW["chosen"]}, "chosen and rejected are the same"),
        ({**ROW, "chosen": [{"role": "assistant", "content": "x"}]}, "must all be strings"),
        (
            {
                "prompt": [{"role": "user", "content": "q"}],
                "chosen": [{"role": "user", "content": "a"}],
                "rejected": [{"role": "assistant", "content": "b"}],
            },
            "chosen message 1 has role 'user'; expected assistant",
        ),
        ([1, 2], "expected a JSON object"),
    ],
)
def test_bad_rows_stop_with_one_line_naming_file_and_line(
    tmp_path: Path, tok: Any, bad: Any, message: str
) -> None:
    path = _write(tmp_path / "pairs.jsonl", [ROW, ROW, bad, ROW])
    with pytest.raises(DataError) as e:
        build_pairs(_cfg(path), tok, "train")
    assert str(e.value).startswith(f"{path}:3: ") and message in str(e.value)
    assert "\n" not in str(e.value)


def test_long_pairs_are_cut_keep_start_and_prompt_only_rows_left_out(
    tmp_path: Path, tok: Any
) -> None:
    long = {"prompt": "Q:", "chosen": "yes " * 40, "rejected": "no " * 40}
    huge_prompt = {**ROW, "prompt": "word " * 60}
    path = _write(tmp_path / "pairs.jsonl", [ROW, long, huge_prompt, ROW, ROW])
    notes: list[str] = []
    pairs = build_pairs(_cfg(path, context_length=32), tok, "train", notes)
    assert len(pairs) == 3  # 4 train rows, the huge prompt left out (not emptied)
    for p in pairs:
        assert len(p["prompt_ids"]) + len(p["chosen_ids"]) <= 32
        assert p["chosen_ids"] and p["rejected_ids"]
    cut = pairs[1]
    assert len(cut["prompt_ids"]) + len(cut["chosen_ids"]) == 32  # cut at the end, start kept
    (note,) = notes
    assert "1 of 4 pairs have a prompt of 32 tokens or more and are left out" in note
    assert f"{path}:3" in note and "1 of 4 pairs are longer than --context_length 32" in note
    only_long = _write(tmp_path / "long.jsonl", [huge_prompt] * 3)
    with pytest.raises(DataError, match="every prompt of the train split fills it"):
        build_pairs(_cfg(only_long, context_length=32), tok, "train")


def test_hf_dataset_columns_are_mapped(tmp_path: Path, tok: Any) -> None:
    rows = [{"question": f"Q{i}?\n", "good": f"A{i}.", "bad": f"B{i}."} for i in range(10)]
    path = _write(tmp_path / "pairs.jsonl", rows)
    cfg = TrainConfig(
        method="dpo",
        dataset="hf_dataset",
        hf_dataset=str(path),
        hf_columns="prompt=question,chosen=good,rejected=bad",
    )
    train, val = build_pairs(cfg, tok, "train"), build_pairs(cfg, tok, "validation")
    assert (len(train), len(val)) == (9, 1)
    assert tok.decode(val[0]["chosen_ids"]) == "A9.</s>"
    assert tok.decode(val[0]["rejected_ids"]) == "B9.</s>"


def test_batches_hold_chosen_then_rejected_and_filler_pairs_weigh_nothing(
    tmp_path: Path, tok: Any
) -> None:
    path = _write(tmp_path / "pairs.jsonl", [ROW] * 6)
    pairs = build_pairs(_cfg(path), tok, "train")  # 5 pairs
    b = collate_pairs(pairs[:2], [1.0, 0.0], tok.pad_token_id)
    assert b["input_ids"].shape[0] == 4 and b["weight"].tolist() == [1.0, 0.0]
    p = pairs[0]
    n = len(p["prompt_ids"])
    assert (
        b["input_ids"][0, : n + len(p["chosen_ids"])].tolist() == p["prompt_ids"] + p["chosen_ids"]
    )
    assert (
        b["input_ids"][2, : n + len(p["rejected_ids"])].tolist()
        == p["prompt_ids"] + p["rejected_ids"]
    )
    assert (b["labels"][:, :n] == IGNORE_INDEX).all()
    assert b["labels"][2, n : n + len(p["rejected_ids"])].tolist() == p["rejected_ids"]
    batches = PreferenceBatches(
        pairs,
        micro_batch_size=2,
        grad_accum=1,
        rank=0,
        world_size=2,
        seed=0,
        shuffle=True,
        pad_id=0,
    )
    steps = list(batches)
    assert len(steps) == 2 and batches.step_pairs == 1  # 5 pairs, global batch 4: 1 + 3 fillers
    assert steps[-1][0]["weight"].tolist() == [1.0, 0.0]
    assert batches.rank_ids(4)[0][1] == FILLER


def test_bundled_sample_is_the_generators_output(tok: Any) -> None:
    spec = importlib.util.spec_from_file_location(
        "make_preference_sample", Path(__file__).parents[2] / "scripts/make_preference_sample.py"
    )
    assert spec is not None and spec.loader is not None
    gen = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(gen)
    rows = gen.make_rows()
    assert PREFERENCE_SAMPLE.read_text(encoding="utf-8") == gen.render(rows)
    assert len(rows) == 1200 and all(r["chosen"] != r["rejected"] for r in rows)
    negated = sum(" not " in r["rejected"] or "cannot" in r["rejected"] for r in rows)
    assert 0.3 * len(rows) < negated < 0.7 * len(rows)  # both kinds of wrong answers
    for i, r in enumerate(rows[:50]):
        preference_row(r, f"row {i}")


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--beta=0.2"], "--beta: only used with --method dpo"),
        (["--dataset=preference_sample"], "use it with --method dpo"),
        (["--method=dpo"], "--dataset: samsum_dataset holds no preference pairs"),
        (["--method=ppo"], "--method: must be one of sft, dpo"),
        (["--method=dpo", "--dataset=preference_sample", "--beta=0"], "--beta: must be"),
        (
            [
                "--method=dpo",
                "--dataset=preference_sample",
                "--loss_type=simpo",
                "--precompute_ref_log_probs",
            ],
            "uses no reference model",
        ),
        (
            ["--method=dpo", "--dataset=preference_sample", "--simpo_gamma=1"],
            "only used with --loss_type simpo",
        ),
        (
            [
                "--method=dpo",
                "--dataset=preference_sample",
                "--loss_type=ipo",
                "--label_smoothing=0.1",
            ],
            "no meaning",
        ),
        (["--method=dpo", "--dataset=preference_sample", "--label_smoothing=0.5"], "[0, 0.5)"),
    ],
)
def test_flags_refused_with_one_line(argv: list[str], message: str) -> None:
    with pytest.raises(ConfigError) as e:
        parse_args(argv)
    assert message in str(e.value) and "\n" not in str(e.value)


def test_dpo_from_an_adapter_needs_precomputed_reference(tmp_path: Path) -> None:
    config = {"peft_type": "LORA", "r": 8, "lora_alpha": 32, "target_modules": ["q_proj", "v_proj"]}
    (tmp_path / "adapter_config.json").write_text(json.dumps(config), encoding="utf-8")
    argv = ["--method=dpo", "--dataset=preference_sample", "--use_peft"]
    with pytest.raises(ConfigError, match="--from_peft_checkpoint: with --method dpo"):
        parse_args([*argv, f"--from_peft_checkpoint={tmp_path}"])
    parse_args([*argv, f"--from_peft_checkpoint={tmp_path}", "--precompute_ref_log_probs"])


def test_job_file_arguments_set_the_method() -> None:
    cfg = TrainConfig(method="dpo", dataset="preference_sample", beta=0.1)
    assert cfg.method == "dpo" and parse_args(["--method", "dpo", "--dataset", "preference_sample"])
