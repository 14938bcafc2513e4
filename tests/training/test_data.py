"""Datasets, prompts, packing and the distributed batch order (training/data/dataset.py), and the assets.

If these fail: the model learns from the wrong tokens (prompt not masked, llama-recipes' prompt
changed, packing losing or duplicating tokens); a malformed data file gives a stack trace instead
of "FILE:LINE"; runs with different world sizes / accumulation no longer see the same global batch
per step (so FSDP parity and resume-with-another-world-size tests become meaningless); a resumed
run sees different batches than an uninterrupted one; samples are dropped or repeated within an
epoch (the last global batch must be completed with masked filler); or the committed sample / tokenizer drifted
from the scripts that generate them.
"""

from __future__ import annotations

import importlib.util
import json
import sys
import types
from dataclasses import replace
from pathlib import Path

import pytest
import torch
from transformers import PreTrainedTokenizerBase

from training.config import TrainConfig
from training.data import (
    FILLER,
    IGNORE_INDEX,
    SAMSUM_SAMPLE,
    TOKENIZER_DIR,
    DataError,
    DistributedBatches,
    build_dataset,
    collate,
    eval_batches,
    load_tokenizer,
    pack,
    samsum_prompt,
    steps_per_epoch,
    tokenize_pair,
)

ROOT = Path(__file__).resolve().parents[2]


def _script(name: str) -> types.ModuleType:
    spec = importlib.util.spec_from_file_location(name, ROOT / "scripts" / f"{name}.py")
    assert spec and spec.loader
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


@pytest.fixture(scope="module")
def tok() -> PreTrainedTokenizerBase:
    return load_tokenizer("tiny-llama")


def _rows() -> list[dict[str, str]]:
    return [json.loads(line) for line in SAMSUM_SAMPLE.read_text(encoding="utf-8").splitlines()]


# ------------------------------------------------------------------------------------------------
# assets


def test_sample_is_the_generators_output_and_samsum_shaped() -> None:
    gen = _script("make_samsum_sample")
    text = SAMSUM_SAMPLE.read_text(encoding="utf-8")
    assert text == gen.render(gen.make_rows())
    rows = _rows()
    assert len(rows) == 2400
    assert SAMSUM_SAMPLE.stat().st_size < 2_000_000
    assert all(set(r) == {"id", "dialogue", "summary"} for r in rows)
    assert len({r["id"] for r in rows}) == len(rows)
    assert all(":" in line for r in rows for line in r["dialogue"].splitlines())
    crlf = sum("\r\n" in r["dialogue"] for r in rows)
    assert 0 < crlf < len(rows)  # both separators occur, as in samsum
    assert len({r["summary"] for r in rows}) > 0.95 * len(rows)  # varied, not a handful of strings


def test_tokenizer_is_a_fresh_build_and_round_trips(
    tmp_path: Path, tok: PreTrainedTokenizerBase
) -> None:
    _script("make_tiny_tokenizer").build(tmp_path / "tok")
    committed = sorted(p.name for p in TOKENIZER_DIR.iterdir())
    assert committed == sorted(p.name for p in (tmp_path / "tok").iterdir())
    for name in committed:
        assert (TOKENIZER_DIR / name).read_bytes() == (tmp_path / "tok" / name).read_bytes(), name
    assert len(tok) == 1763
    assert (tok.unk_token_id, tok.bos_token_id, tok.eos_token_id, tok.pad_token_id) == (0, 1, 2, 3)
    for text in [
        samsum_prompt(_rows()[0]["dialogue"]),
        "Zoë: ¿Qué tal? 😀\r\n\tTabs,   spaces and 1234567 digits.",
        "",
    ]:
        ids = tok.encode(text, add_special_tokens=False)
        assert tok.decode(ids) == text
    assert tok.encode("Hi", add_special_tokens=True)[0] == tok.bos_token_id  # like Llama's
    # trained on the sample: its text compresses well
    text = "".join(samsum_prompt(r["dialogue"]) + r["summary"] for r in _rows()[:200])
    assert len(tok.encode(text, add_special_tokens=False)) < len(text) / 3


def test_load_tokenizer_errors_are_one_line() -> None:
    with pytest.raises(DataError) as err:
        load_tokenizer("/nonexistent/folder/for/a/tokenizer")
    msg = str(err.value)
    assert msg.startswith(
        "--model_name /nonexistent/folder/for/a/tokenizer: cannot load its tokenizer"
    )
    assert "\n" not in msg


# ------------------------------------------------------------------------------------------------
# prompts, labels, packing, padding


def test_samsum_prompt_is_llama_recipes() -> None:
    assert (
        samsum_prompt("A: hi\r\nB: yo") == "Summarize this dialog:\nA: hi\r\nB: yo\n---\nSummary:\n"
    )


def test_labels_mask_the_prompt(tok: PreTrainedTokenizerBase) -> None:
    cfg = TrainConfig(dataset="samsum_sample", batching_strategy="padding")
    train = build_dataset(cfg, tok, "train")
    rows = _rows()
    assert len(train) == 2160 and len(build_dataset(cfg, tok, "validation")) == 240
    for ex, row in zip(train[:50], rows[:50], strict=True):
        ids, labels = ex["input_ids"], ex["labels"]
        assert len(ids) == len(labels) == len(ex["attention_mask"]) and all(ex["attention_mask"])
        assert ids[0] == tok.bos_token_id and ids[-1] == tok.eos_token_id
        n_prompt = labels.index(next(x for x in labels if x != IGNORE_INDEX))
        assert labels[:n_prompt] == [IGNORE_INDEX] * n_prompt
        assert labels[n_prompt:] == ids[n_prompt:]
        assert tok.decode(ids[1:n_prompt]) == samsum_prompt(row["dialogue"])
        assert tok.decode(ids[n_prompt:-1]) == row["summary"]


def test_validation_split_is_the_last_tenth(tok: PreTrainedTokenizerBase) -> None:
    cfg = TrainConfig(dataset="samsum_sample", batching_strategy="padding")
    val = build_dataset(cfg, tok, "validation")
    last = _rows()[-240]
    n_prompt = val[0]["labels"].count(IGNORE_INDEX)
    assert tok.decode(val[0]["input_ids"][n_prompt:-1]) == last["summary"]


@pytest.mark.parametrize("length", [256, 512, 1000])
def test_packing_exact_chunks_no_token_lost_or_duplicated(
    tok: PreTrainedTokenizerBase, length: int
) -> None:
    padded = build_dataset(
        TrainConfig(dataset="samsum_sample", batching_strategy="padding", context_length=10**6),
        tok,
        "train",
    )
    packed = build_dataset(
        TrainConfig(dataset="samsum_sample", context_length=length), tok, "train"
    )
    total = sum(len(ex["input_ids"]) for ex in padded)
    assert total == 167_644
    assert len(packed) == total // length
    assert {len(v) for ex in packed for v in ex.values()} == {length}
    for key in ("input_ids", "labels", "attention_mask"):
        flat = [t for ex in padded for t in ex[key]]
        assert [t for ex in packed for t in ex[key]] == flat[: len(packed) * length]
    assert total - len(packed) * length < length  # only the incomplete tail is dropped
    # every chunk has tokens to learn from (the loss of a chunk is never 0/0)
    assert all(any(x != IGNORE_INDEX for x in ex["labels"][1:]) for ex in packed)


def test_packed_counts_of_the_sample(tok: PreTrainedTokenizerBase) -> None:
    got = {
        (n, split): len(
            build_dataset(TrainConfig(dataset="samsum_sample", context_length=n), tok, split)
        )
        for n in (256, 512)
        for split in ("train", "validation")
    }
    assert got == {
        (256, "train"): 654,
        (256, "validation"): 72,
        (512, "train"): 327,
        (512, "validation"): 36,
    }


def test_pack_drops_only_the_tail() -> None:
    exs = [
        {"input_ids": list(range(k, k + 3)), "labels": [1, 2, 3], "attention_mask": [1] * 3}
        for k in (0, 10, 20)
    ]
    chunks = pack(exs, 4)
    assert [c["input_ids"] for c in chunks] == [[0, 1, 2, 10], [11, 12, 20, 21]]
    assert pack(exs, 9)[0]["input_ids"] == [0, 1, 2, 10, 11, 12, 20, 21, 22]
    assert pack(exs, 10) == []


def test_padding_truncates_and_collate_pads(tok: PreTrainedTokenizerBase) -> None:
    cfg = TrainConfig(dataset="samsum_sample", batching_strategy="padding", context_length=40)
    ds = build_dataset(cfg, tok, "train")
    assert max(len(ex["input_ids"]) for ex in ds) == 40
    full = build_dataset(
        TrainConfig(dataset="samsum_sample", batching_strategy="padding"), tok, "train"
    )
    scored = [f for f in full if any(x != IGNORE_INDEX for x in f["labels"][1:40])]
    assert len(scored) < len(full)  # samsum prompts longer than 40 tokens: those rows are out
    assert [ex["input_ids"] for ex in ds] == [f["input_ids"][:40] for f in scored]
    a = {"input_ids": [5, 6, 7], "labels": [-100, 6, 7], "attention_mask": [1, 1, 1]}
    b = {"input_ids": [8], "labels": [8], "attention_mask": [1]}
    batch = collate([a, b], pad_id=3)
    assert batch["input_ids"].tolist() == [[5, 6, 7], [8, 3, 3]]
    assert batch["labels"].tolist() == [[-100, 6, 7], [8, IGNORE_INDEX, IGNORE_INDEX]]
    assert batch["attention_mask"].tolist() == [[1, 1, 1], [1, 0, 0]]
    assert {t.dtype for t in batch.values()} == {torch.long}


def test_build_dataset_is_deterministic(tok: PreTrainedTokenizerBase) -> None:
    cfg = TrainConfig(dataset="samsum_sample", context_length=256)
    assert build_dataset(cfg, tok, "validation") == build_dataset(cfg, tok, "validation")


def test_max_train_samples_tokenizes_only_the_first_rows_of_the_train_split(
    tmp_path: Path, tok: PreTrainedTokenizerBase
) -> None:
    """``--max_train_samples N``: the train split is its first N rows (packed as usual), the
    validation split is untouched, more than there are means all, and a bad row past the first
    N still stops the run (every row is read and checked; only the N are tokenized)."""
    full = TrainConfig(dataset="samsum_sample", context_length=64)
    cut = replace(full, max_train_samples=50)

    def whole(cfg: TrainConfig) -> TrainConfig:  # one example per row
        return replace(cfg, batching_strategy="padding", context_length=10**6)

    rows_cut = build_dataset(whole(cut), tok, "train")
    rows_full = build_dataset(whole(full), tok, "train")
    assert len(rows_cut) == 50 and rows_cut == rows_full[:50]
    train = build_dataset(cut, tok, "train")
    assert train == [ex for ex in pack(rows_cut, 64) if set(ex["labels"][1:]) != {IGNORE_INDEX}]
    assert 0 < len(train) < len(build_dataset(full, tok, "train")) / 20
    assert build_dataset(cut, tok, "validation") == build_dataset(full, tok, "validation")
    more = replace(full, max_train_samples=10**6)
    assert build_dataset(more, tok, "train") == build_dataset(full, tok, "train")
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"text": "ok"}\n' * 20 + '{"text": "ok"\n', encoding="utf-8")
    cfg = TrainConfig(dataset="custom", data_path=str(bad), max_train_samples=2)
    with pytest.raises(DataError, match=r"bad\.jsonl:21: bad JSON"):
        build_dataset(cfg, tok, "train")


# ------------------------------------------------------------------------------------------------
# custom JSONL and alpaca


def test_custom_jsonl_three_shapes(tmp_path: Path, tok: PreTrainedTokenizerBase) -> None:
    path = tmp_path / "d.jsonl"
    rows = [{"dialogue": "A: hi\nB: hello", "summary": "They greet."}] * 4
    rows += [{"prompt": "2+2=", "completion": "4"}] * 4
    rows += [{"text": "All of this is learned."}] * 2
    path.write_text("\n".join(json.dumps(r) for r in rows) + "\n\n")
    cfg = TrainConfig(dataset="custom", data_path=str(path), batching_strategy="padding")
    train, val = build_dataset(cfg, tok, "train"), build_dataset(cfg, tok, "validation")
    assert (len(train), len(val)) == (9, 1)
    d, p, t = train[0], train[4], val[0]
    assert (
        tok.decode(d["input_ids"]) == "<s>" + samsum_prompt("A: hi\nB: hello") + "They greet.</s>"
    )
    assert tok.decode([x for x in d["labels"] if x != IGNORE_INDEX]) == "They greet.</s>"
    assert tok.decode([x for x in p["labels"] if x != IGNORE_INDEX]) == "4</s>"
    assert tok.decode(p["input_ids"]) == "<s>2+2=4</s>"
    assert (
        t["labels"][0] == IGNORE_INDEX and t["labels"][1:] == t["input_ids"][1:]
    )  # only bos masked


BAD_ROWS = [
    ('{"text": "ok"}\n{"text": "ok"\n', 2, "bad JSON: Expecting ',' delimiter (column 14)"),
    ('{"text": "ok"}\n\n{"dialogue": "A: x"}\n', 3, "missing field 'summary'"),
    ('{"prompt": "p", "completion": 4}\n', 1, "field 'completion' must be a string, got int"),
    ('{"text": "   "}\n', 1, "field 'text' is empty"),
    ('{"text": "a"}\n["text"]\n', 2, "expected a JSON object, got list"),
    (
        '{"question": "q", "answer": "a"}\n',
        1,
        "expected fields dialogue+summary, prompt+completion, text or messages; "
        "got answer, question",
    ),
    ('{"dialogue": "", "summary": "s"}\n', 1, "field 'dialogue' is empty"),
]


@pytest.mark.parametrize(("content", "line", "what"), BAD_ROWS)
def test_custom_malformed_rows_name_file_and_line(
    tmp_path: Path, tok: PreTrainedTokenizerBase, content: str, line: int, what: str
) -> None:
    path = tmp_path / "bad.jsonl"
    path.write_text(content)
    cfg = TrainConfig(dataset="custom", data_path=str(path))
    with pytest.raises(DataError) as err:
        build_dataset(cfg, tok, "train")
    assert str(err.value) == f"{path}:{line}: {what}"


def test_custom_empty_or_binary_file(tmp_path: Path, tok: PreTrainedTokenizerBase) -> None:
    empty, binary = tmp_path / "e.jsonl", tmp_path / "b.jsonl"
    empty.write_text("\n \n")
    binary.write_bytes(b'{"text": "\xff"}\n')
    with pytest.raises(DataError, match=r"e\.jsonl: no rows$"):
        build_dataset(TrainConfig(dataset="custom", data_path=str(empty)), tok, "train")
    with pytest.raises(
        DataError, match=r"b\.jsonl: not UTF-8 text \(invalid start byte at byte 10\)$"
    ):
        build_dataset(TrainConfig(dataset="custom", data_path=str(binary)), tok, "train")


def test_alpaca(tmp_path: Path, tok: PreTrainedTokenizerBase) -> None:
    entries = [{"instruction": f"Say {i}.", "input": "", "output": f"{i}"} for i in range(38)]
    entries += [{"instruction": "Add.", "input": "2 and 3", "output": "5"}] * 2
    path = tmp_path / "alpaca.json"
    path.write_text(json.dumps(entries, indent=2))
    cfg = TrainConfig(dataset="alpaca_dataset", data_path=str(path), batching_strategy="padding")
    train, val = build_dataset(cfg, tok, "train"), build_dataset(cfg, tok, "validation")
    assert (len(train), len(val)) == (38, 2)  # first 5% is validation, as llama-recipes
    no_input = (
        "<s>Below is an instruction that describes a task. Write a response that appropriately "
        "completes the request.\n\n### Instruction:\nSay 0.\n\n### Response:0</s>"
    )
    assert tok.decode(val[0]["input_ids"]) == no_input
    with_input = (
        "<s>Below is an instruction that describes a task, paired with an input that provides "
        "further context. Write a response that appropriately completes the request.\n\n"
        "### Instruction:\nAdd.\n\n### Input:\n2 and 3\n\n### Response:5</s>"
    )
    assert tok.decode(train[-1]["input_ids"]) == with_input
    assert tok.decode([x for x in train[-1]["labels"] if x != IGNORE_INDEX]) == "5</s>"


def test_alpaca_malformed(tmp_path: Path, tok: PreTrainedTokenizerBase) -> None:
    path = tmp_path / "a.json"
    path.write_text('[\n  {"instruction": "x", "output": "y"},\n  {"instruction": "x"}\n]\n')
    cfg = TrainConfig(dataset="alpaca_dataset", data_path=str(path))
    with pytest.raises(DataError) as err:
        build_dataset(cfg, tok, "train")
    assert str(err.value) == f"{path}:3: missing field 'output'"
    path.write_text('[\n  {"instruction": "x", "output": "y"},\n  {"instruction": "x",}\n]\n')
    with pytest.raises(DataError) as err:
        build_dataset(cfg, tok, "train")
    assert str(err.value).startswith(f"{path}:3: bad JSON: ")
    path.write_text('{"instruction": "x", "output": "y"}')
    with pytest.raises(DataError) as err:
        build_dataset(cfg, tok, "train")
    assert str(err.value) == f"{path}:1: expected a JSON list"


def test_samsum_dataset_without_datasets_package(
    monkeypatch: pytest.MonkeyPatch, tok: PreTrainedTokenizerBase
) -> None:
    monkeypatch.setitem(sys.modules, "datasets", None)  # makes `import datasets` fail
    with pytest.raises(DataError) as err:
        build_dataset(TrainConfig(), tok, "train")
    assert str(err.value) == (
        "--dataset samsum_dataset: the 'datasets' package is not installed; "
        "use --dataset samsum_sample for the bundled sample"
    )


# ------------------------------------------------------------------------------------------------
# DistributedBatches


def _toy(n: int) -> list[dict[str, list[int]]]:
    """Example i holds token i (and a length that varies, to exercise padding)."""
    return [
        {
            "input_ids": [i] * (1 + i % 3),
            "labels": [i] * (1 + i % 3),
            "attention_mask": [1] * (1 + i % 3),
        }
        for i in range(n)
    ]


def _ids(micro: dict[str, torch.Tensor]) -> list[int]:
    """Sample id of each row (toy sample i holds token i); FILLER for a fully masked row."""
    ids = micro["input_ids"][:, 0].tolist()
    masked = (micro["labels"] == IGNORE_INDEX).all(dim=1).tolist()
    return [FILLER if m else i for i, m in zip(ids, masked, strict=True)]


def _batches(
    ds: list[dict[str, list[int]]],
    *,
    B: int,
    W: int = 1,
    A: int = 1,
    rank: int = 0,
    seed: int = 7,
    shuffle: bool = True,
) -> DistributedBatches:
    """Rank ``rank``'s iterator: micro-batch B, world W, accumulation A."""
    return DistributedBatches(
        ds,
        micro_batch_size=B,
        grad_accum=A,
        rank=rank,
        world_size=W,
        seed=seed,
        shuffle=shuffle,
        pad_id=0,
    )


def _run(
    ds: list[dict[str, list[int]]],
    *,
    B: int,
    W: int,
    A: int = 1,
    epoch: int = 0,
    state: dict | None = None,
    steps: int | None = None,
) -> tuple[list[list[int]], list[dict]]:
    """Global batches (dataset indices per step, in rank/micro order) of one epoch, plus the
    state_dict of every rank after the run."""
    its = [_batches(ds, B=B, W=W, A=A, rank=r) for r in range(W)]
    for it in its:
        if state is not None:
            it.load_state_dict(state)
        it.set_epoch(epoch)
    gens = [iter(it) for it in its]
    out = []
    for step, per_rank in enumerate(zip(*gens, strict=True)):
        assert all(len(m) == A for m in per_rank)
        out.append([i for a in range(A) for r in range(W) for i in _ids(per_rank[r][a])])
        if steps is not None and step + 1 == steps:
            break
    return out, [it.state_dict() for it in its]


def test_world_sizes_and_accumulation_see_the_same_global_batches() -> None:
    ds = _toy(50)
    ref, _ = _run(ds, B=4, W=1)
    assert len(ref) == steps_per_epoch(50, 4) == 13
    for B, W, A in [(2, 2, 1), (1, 4, 1), (2, 1, 2), (1, 2, 2), (1, 1, 4)]:
        got, _ = _run(ds, B=B, W=W, A=A)
        assert got == ref, (B, W, A)
    # the per-rank tensors: rank r of world 2 holds the r-th half of world 1's batch
    one = next(iter(_batches(ds, B=4)))[0]
    halves = [next(iter(_batches(ds, B=2, W=2, rank=r)))[0] for r in range(2)]
    assert torch.equal(one["labels"][:, 0], torch.cat([h["labels"][:, 0] for h in halves]))
    assert one["attention_mask"].sum() == sum(h["attention_mask"].sum() for h in halves)


def test_epoch_layout_permutation_and_filler() -> None:
    ds = _toy(50)
    ep0, _ = _run(ds, B=4, W=1, epoch=0)
    ep1, _ = _run(ds, B=4, W=1, epoch=1)
    flat0 = [i for b in ep0 for i in b]
    perm = torch.randperm(50, generator=torch.Generator().manual_seed(7 + 0)).tolist()
    assert flat0 == [*perm, FILLER, FILLER]  # every sample once; the last batch is filled up
    assert ep0 != ep1 and ep1 == _run(ds, B=4, W=1, epoch=1)[0]  # reshuffled, deterministically
    it = _batches(ds, B=5, shuffle=False)
    assert it.steps_per_epoch() == 10
    assert [_ids(m[0]) for m in it] == [list(range(k, k + 5)) for k in range(0, 50, 5)]


def test_state_dict_is_rank_independent_and_counts_steps() -> None:
    _, states = _run(_toy(50), B=2, W=2, A=2, steps=3)
    assert (
        states[0]
        == states[1]
        == {
            "epoch": 0,
            "step_in_epoch": 3,
            "consumed_samples": 24,
            "global_batch_size": 8,
            "num_samples": 50,
        }
    )


@pytest.mark.parametrize(
    ("before", "after"),
    [
        ((2, 2, 1), (2, 2, 1)),
        ((2, 2, 1), (4, 1, 1)),
        ((1, 4, 1), (2, 1, 2)),
        ((4, 1, 1), (1, 2, 2)),
    ],
)
def test_resume_mid_epoch_continues_with_identical_batches(before: tuple, after: tuple) -> None:
    ds = _toy(70)
    B, W, A = before
    full, _ = _run(ds, B=B, W=W, A=A, epoch=2)
    head, states = _run(ds, B=B, W=W, A=A, epoch=2, steps=5)
    assert head == full[:5]
    B2, W2, A2 = after
    tail, _ = _run(ds, B=B2, W=W2, A=A2, epoch=2, state=states[0])
    assert [i for b in head + tail for i in b] == [i for b in full for i in b]


def test_resume_with_a_global_batch_that_does_not_divide_the_position() -> None:
    ds = _toy(70)
    perm = torch.randperm(70, generator=torch.Generator().manual_seed(7 + 1)).tolist()
    head, states = _run(ds, B=4, W=1, epoch=1, steps=3)  # consumed 12
    tail, after = _run(ds, B=4, W=2, epoch=1, state=states[0])  # G = 8: 12 is not a multiple
    assert [i for b in head for i in b] == perm[:12]
    want = [perm[k : k + 8] for k in range(12, 70, 8)]  # from sample 12 on, no gap
    want[-1] += [FILLER] * (8 - len(want[-1]))
    assert tail == want
    assert after[0]["consumed_samples"] == 70
    # the next epoch is the standard layout again
    it = _batches(ds, B=8)
    it.load_state_dict(after[0])
    it.set_epoch(2)
    assert it.state_dict()["consumed_samples"] == 0 and len(list(it)) == steps_per_epoch(70, 8)


@pytest.mark.parametrize("world", [1, 2, 3])
def test_every_sample_is_trained_exactly_once_per_epoch(world: int) -> None:
    """23 samples, B=2, A=2: G = 4, 8, 12 never divides 23. The multiset of sample ids trained
    in each epoch is the dataset, in the same global order for every world size."""
    ds = _toy(23)
    for epoch in (0, 1):
        steps, _ = _run(ds, B=2, W=world, A=2, epoch=epoch)
        assert len(steps) == steps_per_epoch(23, 2 * world * 2)
        trained = [i for step in steps for i in step if i != FILLER]
        assert sorted(trained) == list(range(23))  # each sample exactly once
        perm = torch.randperm(23, generator=torch.Generator().manual_seed(7 + epoch)).tolist()
        assert trained == perm
        # filler rows only in the last step, and they carry no label token
        assert all(FILLER not in step for step in steps[:-1])


def test_steps_per_epoch_rule() -> None:
    assert [steps_per_epoch(n, 4) for n in (0, 1, 4, 5, 8, 9)] == [0, 1, 1, 2, 2, 3]
    assert steps_per_epoch(683, 3 * 128) == 2  # the p5-16 job: 683 packed samples, B=3, W=128
    with pytest.raises(ValueError, match="global_batch"):
        steps_per_epoch(10, 0)


def test_set_epoch_keeps_a_resumed_position_and_resets_otherwise() -> None:
    it = _batches(_toy(40), B=4, seed=0)
    it.load_state_dict({"epoch": 1, "step_in_epoch": 3, "consumed_samples": 12})
    it.set_epoch(1)
    assert (it.epoch, it.step_in_epoch, it.remaining_steps()) == (1, 3, 7)
    it.set_epoch(2)
    assert (it.epoch, it.step_in_epoch, it.remaining_steps()) == (2, 0, 10)
    from torch.distributed.checkpoint.stateful import Stateful

    assert isinstance(it, Stateful)


def test_batches_bad_inputs() -> None:
    with pytest.raises(DataError) as err:
        _batches(_toy(10), B=4, W=2, A=2, seed=0)
    assert str(err.value).startswith(
        "the training split has 10 examples, fewer than one global batch of 16 "
        "(--batch_size_training 4 x world size 2 x --gradient_accumulation_steps 2)"
    )
    it = _batches(_toy(40), B=4, seed=0)
    with pytest.raises(
        DataError,
        match=r"^cannot resume: the checkpoint's training split had 41 examples, this one has 40",
    ):
        it.load_state_dict(
            {"epoch": 0, "step_in_epoch": 1, "consumed_samples": 4, "num_samples": 41}
        )
    with pytest.raises(ValueError, match=r"rank"):
        _batches(_toy(40), B=4, W=2, rank=2, seed=0)


# ------------------------------------------------------------------------------------------------
# eval_batches


def _label_tokens(batches: list[dict[str, torch.Tensor]]) -> int:
    return sum(int((b["labels"] != IGNORE_INDEX).sum()) for b in batches)


def test_eval_batches_shard_evenly_and_match_world_one() -> None:
    ds = _toy(11)
    one = list(eval_batches(ds, batch_size=2, rank=0, world_size=1, pad_id=0))
    # in order; the last batch is example 10 plus a masked filler (a copy of example 0)
    assert [_ids(b) for b in one] == [[0, 1], [2, 3], [4, 5], [6, 7], [8, 9], [10, FILLER]]
    assert set(one[-1]["labels"][1].tolist()) == {IGNORE_INDEX}  # the filler carries no label
    per_rank = [
        list(eval_batches(ds, batch_size=1, rank=r, world_size=2, pad_id=0)) for r in range(2)
    ]
    assert len(per_rank[0]) == len(per_rank[1]) == 6
    assert [_ids(a) + _ids(b) for a, b in zip(*per_rank, strict=True)] == [_ids(b) for b in one]
    capped = eval_batches(ds, batch_size=1, rank=1, world_size=2, pad_id=0, max_steps=2)
    assert len(capped) == 2 and [_ids(b) for b in capped] == [[1], [3]]
    assert [_ids(b) for b in capped] == [[1], [3]]  # iterable again


def test_eval_batches_cover_a_split_smaller_than_one_batch_exactly_once() -> None:
    """A 128-GPU job evaluates a 40-example split: label tokens equal those of the split."""
    ds = _toy(3)
    want = sum(len(e["labels"]) for e in ds)
    for world in (1, 2, 4, 8):
        got = 0
        counts = set()
        for r in range(world):
            batches = list(eval_batches(ds, batch_size=2, rank=r, world_size=world, pad_id=0))
            counts.add(len(batches))
            got += _label_tokens(batches)
        assert counts == {1 if world > 1 else 2}, world  # every rank runs the same passes
        assert got == want, world
    with pytest.raises(DataError, match=r"^the validation split is empty; use --run_validation"):
        eval_batches([], batch_size=1, rank=0, world_size=1, pad_id=0)


def test_prompt_answer_rows_longer_than_the_context_are_counted(
    tmp_path: Path, tok: PreTrainedTokenizerBase
) -> None:
    """Two of ten prompt/answer rows are longer than --context_length: padding and bfd packing
    cut them to it (the answer's end and its eos are not learned; here their prompts fill the
    context, so the cut rows score nothing and are left out) and say so in one line with the
    count and the longest row's length; wrapped packing splits them across chunks and says
    that."""
    limit = 32
    rows = [{"prompt": f"Q{i}: short?", "completion": f"A{i}."} for i in range(8)]
    rows[1] = {"prompt": "Why? " * 30, "completion": "Because. " * 10}
    rows[4] = {"prompt": "How? " * 12, "completion": "Thus. " * 6}
    data = tmp_path / "long.jsonl"
    data.write_text(
        "".join(json.dumps(r) + "\n" for r in [*rows, rows[0], rows[2]]), encoding="utf-8"
    )
    cfg = replace(
        TrainConfig(),
        dataset="custom",
        data_path=str(data),
        context_length=limit,
        batching_strategy="padding",
    )
    lengths = [len(tokenize_pair(tok, r["prompt"], r["completion"])["input_ids"]) for r in rows]
    long = sorted(n for n in lengths if n > limit)
    assert len(long) == 2  # the data holds exactly two over-long rows, both in the train split
    for strategy in (cfg, replace(cfg, batching_strategy="packing", packing_strategy="bfd")):
        notes: list[str] = []
        out = build_dataset(strategy, tok, "train", notes)
        assert notes == [
            f"data custom (train): 2 of 9 prompt/answer rows are longer than --context_length "
            f"{limit} tokens (up to {long[-1]}) and are cut to it; 2 of 9 rows hold no label "
            "token and are left out"
        ], strategy
        assert max(len(ex["input_ids"]) for ex in out) <= limit
        kept = sum(len(ex["input_ids"]) for ex in out)
        assert kept == sum(n for n in [*lengths, lengths[0]] if n <= limit)  # nothing else lost
        notes = []
        build_dataset(strategy, tok, "validation", notes)
        assert notes == []  # its one row is short
    notes = []
    build_dataset(replace(cfg, batching_strategy="packing"), tok, "train", notes)
    assert len(notes) == 1 and "are split across packed rows" in notes[0]


def test_a_run_reports_the_rows_it_cut_in_its_log_and_summary(tmp_path: Path) -> None:
    """One process, two steps on ten prompt/answer rows of which two are longer than
    --context_length: the count and the longest length are printed once at the start and kept
    in summary.json's `data_notes`."""
    from tests.training.helpers import TINY, launch, merge, run_dirs

    rows = [{"prompt": f"Q{i}: short?", "completion": f"A{i}."} for i in range(10)]
    rows[1] = {"prompt": "Why? " * 30, "completion": "Because. " * 10}
    rows[4] = {"prompt": "How? " * 12, "completion": "Thus. " * 6}
    data = tmp_path / "long.jsonl"
    data.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    argv = merge(
        TINY,
        [
            "--dataset=custom",
            f"--data_path={data}",
            "--batching_strategy=padding",
            "--context_length=32",
            "--batch_size_training=2",
            "--max_train_step=2",
        ],
        run_dirs(tmp_path, "cut"),
    )
    result = launch(1, [{"kind": "train", "name": "cut", "argv": argv, "stdout": True}], tmp_path)
    assert result["cut"]["rc"] == [0], result["cut"]["stderr"]
    lines = [ln for ln in result["cut"]["stdout"][0].splitlines() if "prompt/answer rows" in ln]
    assert len(lines) == 1
    assert lines[0].startswith("data custom (train): 2 of 9 prompt/answer rows are longer than")
    summary = json.loads((tmp_path / "cut" / "out" / "summary.json").read_text(encoding="utf-8"))
    assert summary["data_notes"] == lines


_MARKED = (
    "{{ bos_token }}{% for m in messages %}{% if m['role'] == 'assistant' %}"
    "{{ '<|assistant|>\\n' }}{% generation %}{{ m['content'] }}STOP{% endgeneration %}"
    "{% else %}{{ '<|' + m['role'] + '|>\\n' + m['content'] + eos_token }}{% endif %}"
    "{% endfor %}{% if add_generation_prompt %}{{ '<|assistant|>\\n' }}{% endif %}"
)
"""A chat template with {% generation %} blocks; STOP is replaced by where eos goes."""


def test_a_generation_template_without_the_end_of_turn_token_is_warned_about(
    tmp_path: Path,
) -> None:
    """TRL's check (trl/chat_template_utils.py `is_chat_template_stop_token_trained` at
    v1.16.0): a template whose {% generation %} block ends before the eos token (the model is
    never taught to stop) gets one warning line among the data notes, with the tokens the block
    marks learned as they are; with eos inside the block, no warning."""
    rows = [
        {
            "messages": [
                {"role": "user", "content": f"Hi {i}"},
                {"role": "assistant", "content": "Yo"},
            ]
        }
        for i in range(10)
    ]
    data = tmp_path / "chats.jsonl"
    data.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    cfg = replace(TrainConfig(), dataset="custom", data_path=str(data), batching_strategy="padding")
    inside = _MARKED.replace("STOP", "{{ eos_token }}")
    outside = _MARKED.replace("STOP{% endgeneration %}", "{% endgeneration %}{{ eos_token }}")
    said = {}
    for name, template in (("inside", inside), ("outside", outside)):
        tok = load_tokenizer("tiny-llama")
        tok.chat_template = template
        notes: list[str] = []
        out = build_dataset(cfg, tok, "train", notes)
        eos_learned = [ex["labels"][-1] == tok.eos_token_id for ex in out]
        said[name] = (notes, all(eos_learned), any(eos_learned))
    assert said["inside"] == ([], True, True)
    notes, _, any_eos = said["outside"]
    assert not any_eos
    assert len(notes) == 1 and "\n" not in notes[0]
    assert notes[0].startswith("warning: the chat template's {% generation %} blocks leave the")
    assert "may not learn to stop" in notes[0]
    notes = []  # the validation split is not checked again
    tok.chat_template = outside
    build_dataset(cfg, tok, "validation", notes)
    assert notes == []
