"""Chat data (`messages` rows, `--dataset chat_sample`): rendered with the tokenizer's chat
template, loss on the assistant turns only (training/data/chat.py, training/data/dataset.py).

If these fail, a chat model learns its users' and system prompts' text (labels not masked to the
assistant turns), stops learning where a turn ends (the end-of-turn token not labelled), packing
shifts the masks, a conversation longer than the context is silently cut, or a bad row / a
tokenizer without a chat template gives a stack trace instead of one line. The Qwen3 tests: a
multi-turn Qwen3 chat is refused (its template rewrites earlier turns) or learns the wrong tokens
instead of TRL's training template's `{% generation %}` spans, `--chat_template` no longer
replaces the template, or a tokenizer without a bos token (Qwen's) cannot be loaded.
"""

from __future__ import annotations

import copy
import json
from pathlib import Path

import pytest
from transformers import PreTrainedTokenizerBase

from training.config import ConfigError, TrainConfig, parse_args
from training.data import (
    IGNORE_INDEX,
    SAMSUM_SAMPLE,
    DataError,
    build_dataset,
    load_tokenizer,
    pack,
    use_chat_template,
)
from training.data.chat import ChatError, parse_messages, render, speakers
from training.data.chat_templates import TEMPLATES, has_generation_markers, training_template
from training.data.packing import fill_ratio, pack_bfd

CHAT = [
    {"role": "system", "content": "Be brief."},
    {"role": "user", "content": "Hi there"},
    {"role": "assistant", "content": "Hello!"},
    {"role": "user", "content": "Who are you?"},
    {"role": "assistant", "content": "A tiny model."},
]
LLAMA3_TEMPLATE = (  # Meta-Llama-3-8B-Instruct's chat template
    "{% set loop_messages = messages %}{% for message in loop_messages %}"
    "{% set content = '<|start_header_id|>' + message['role'] + '<|end_header_id|>\\n\\n'"
    "+ message['content'] | trim + '<|eot_id|>' %}{% if loop.index0 == 0 %}"
    "{% set content = bos_token + content %}{% endif %}{{ content }}{% endfor %}"
    "{% if add_generation_prompt %}{{ '<|start_header_id|>assistant<|end_header_id|>\\n\\n' }}"
    "{% endif %}"
)


@pytest.fixture(scope="module")
def tok() -> PreTrainedTokenizerBase:
    return load_tokenizer("tiny-llama")


def _file(tmp_path: Path, rows: list[object], name: str = "chat.jsonl") -> Path:
    path = tmp_path / name
    path.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    return path


def _build(tok: PreTrainedTokenizerBase, path: Path, **kw: object) -> list[dict[str, list[int]]]:
    cfg = TrainConfig(dataset="custom", data_path=str(path), batching_strategy="padding", **kw)  # type: ignore[arg-type]
    return build_dataset(cfg, tok, "train")


def _ids(tok: PreTrainedTokenizerBase, messages: list[dict[str, str]]) -> list[int]:
    text = tok.apply_chat_template(messages, tokenize=False)
    return list(tok(text, add_special_tokens=False)["input_ids"])


def _expected_mask(tok: PreTrainedTokenizerBase, text: str, turns: list[str]) -> list[bool]:
    """Per token: inside one of `turns` (each an assistant turn's exact text, found in order)."""
    spans, pos = [], 0
    for turn in turns:
        start = text.index(turn, pos)
        spans.append((start, start + len(turn)))
        pos = start + len(turn)
    offsets = tok(text, add_special_tokens=False, return_offsets_mapping=True)["offset_mapping"]
    return [any(a <= s < b for a, b in spans) for s, _ in offsets]


@pytest.mark.parametrize("template", ["bundled", "llama3"])
def test_only_assistant_turns_are_learned_token_by_token(
    tmp_path: Path, tok: PreTrainedTokenizerBase, template: str
) -> None:
    tok = copy.deepcopy(tok)
    if template == "llama3":
        tok.chat_template = LLAMA3_TEMPLATE
        end, header = "<|eot_id|>", "<|start_header_id|>assistant<|end_header_id|>\n\n"
    else:
        end, header = "</s>", "<|assistant|>\n"
    ex = _build(tok, _file(tmp_path, [{"messages": CHAT}] * 2), context_length=4096)[0]
    text = tok.apply_chat_template(CHAT, tokenize=False)
    assert tok.decode(ex["input_ids"]) == text
    assert ex["input_ids"] == tok(text, add_special_tokens=False)["input_ids"]
    turns = ["Hello!" + end, "A tiny model." + end]
    want = _expected_mask(tok, text, turns)
    got = [label != IGNORE_INDEX for label in ex["labels"]]
    assert got == want
    for label, tid, learned in zip(ex["labels"], ex["input_ids"], got, strict=True):
        assert label == (tid if learned else IGNORE_INDEX)
    # the learned runs are exactly the two turns, each right after the assistant header
    runs, cur = [], []
    for tid, learned in zip(ex["input_ids"], got, strict=True):
        if learned:
            cur.append(tid)
        elif cur:
            runs, cur = [*runs, cur], []
    runs += [cur] if cur else []
    assert [tok.decode(r) for r in runs] == turns
    assert text.count(header) == 2
    assert tok.decode(ex["input_ids"]).startswith(tok.bos_token)  # the template's own bos, once
    assert tok.decode(ex["input_ids"]).count(tok.bos_token) == 1


def test_packing_keeps_each_turns_mask(tmp_path: Path, tok: PreTrainedTokenizerBase) -> None:
    path = _file(tmp_path, [{"messages": CHAT}] * 9)
    rows = _build(tok, path, context_length=4096)
    packed = pack(rows, 100)  # a 75-token chat per row: chunks cut through conversations
    assert len(packed) == 6 and len(rows[0]["input_ids"]) == 75
    flat_labels = [x for ex in rows for x in ex["labels"]]
    flat_ids = [x for ex in rows for x in ex["input_ids"]]
    assert [x for ex in packed for x in ex["labels"]] == flat_labels[:600]
    assert [x for ex in packed for x in ex["input_ids"]] == flat_ids[:600]
    cfg = TrainConfig(dataset="custom", data_path=str(path), context_length=100)
    assert build_dataset(cfg, tok, "train") == packed  # the packing strategy does the same


def test_long_conversations_are_counted_and_left_out(
    tmp_path: Path, tok: PreTrainedTokenizerBase
) -> None:
    long = [{"role": "user", "content": "word " * 80}, {"role": "assistant", "content": "ok"}]
    c, g = {"messages": CHAT}, {"messages": long}
    path = _file(tmp_path, [c, g, c, g, g, c, c])
    n_long, n_short = (len(_ids(tok, x)) for x in (long, CHAT))
    assert n_short < 100 < n_long
    notes: list[str] = []
    cfg = TrainConfig(dataset="custom", data_path=str(path), context_length=100)
    packed = build_dataset(cfg, tok, "train", notes)  # 6 train rows, 3 of them long
    tail = 3 * n_short % 100  # the kept chats' tokens that fill no whole row
    assert tail > 0
    assert notes == [
        f"data custom (train): 3 of 6 conversations are longer than --context_length 100 tokens "
        f"(up to {n_long}) and are left out, not cut; packing splits conversations across rows "
        f"of 100 tokens and drops the last {tail} (--batching_strategy padding keeps each whole)"
    ]
    assert len(packed) == (3 * n_short) // 100
    assert sum(len(ex["input_ids"]) for ex in packed) + tail == 3 * n_short
    notes = []  # padding keeps each conversation whole: only the long ones are mentioned
    cfg = TrainConfig(**{**cfg.__dict__, "batching_strategy": "padding"})
    assert len(build_dataset(cfg, tok, "train", notes)) == 3
    assert notes[0].endswith("and are left out, not cut")
    notes = []  # nothing too long: the packing note alone
    short = _file(tmp_path, [c] * 5, "s.jsonl")  # 4 train rows
    cfg = TrainConfig(dataset="custom", data_path=str(short), context_length=100)
    build_dataset(cfg, tok, "train", notes)
    assert notes == [
        f"data custom (train): packing splits conversations across rows of 100 tokens and drops "
        f"the last {4 * n_short % 100} (--batching_strategy padding keeps each whole)"
    ]
    cfg = TrainConfig(dataset="custom", data_path=str(_file(tmp_path, [g] * 3, "l.jsonl")))
    with pytest.raises(DataError) as err:
        build_dataset(TrainConfig(**{**cfg.__dict__, "context_length": 100}), tok, "train")
    assert str(err.value) == (
        f"--context_length 100: every conversation of the train split is longer (up to {n_long} "
        "tokens); raise --context_length"
    )


def test_pairs_and_chats_mix_in_file_order(tmp_path: Path, tok: PreTrainedTokenizerBase) -> None:
    rows: list[object] = [{"prompt": "2+2=", "completion": "4"}, {"messages": CHAT}]
    rows += [{"text": "learned"}, {"messages": CHAT[1:3]}]
    out = _build(tok, _file(tmp_path, [rows[0], rows[1], rows[2], rows[3], rows[0]]))
    assert tok.decode(out[0]["input_ids"]) == "<s>2+2=4</s>"
    assert tok.decode(out[1]["input_ids"]) == tok.apply_chat_template(CHAT, tokenize=False)
    assert tok.decode(out[2]["input_ids"]) == "<s>learned</s>"
    assert tok.decode([t for t in out[3]["labels"] if t != IGNORE_INDEX]) == "Hello!</s>"


def _messages(*msgs: object) -> dict[str, object]:
    return {"messages": list(msgs)}


U, A = {"role": "user", "content": "q"}, {"role": "assistant", "content": "a"}
BAD_ROWS = [
    (_messages(U, {"role": "bot", "content": "a"}), "message 2 has role 'bot'; expected one of system, user, assistant"),
    (_messages(U), "no assistant message: nothing to learn"),
    (_messages(U, A, {"role": "system", "content": "s"}), "message 3: a system message must come first"),
    (_messages(U, {"role": "assistant", "content": 3}), "message 2 (assistant): content must be a string, got int"),
    (_messages(U, {"role": "assistant"}), "message 2 (assistant): content must be a string, got missing"),
    (_messages(U, {"role": "assistant", "content": "  "}), "message 2 (assistant) is empty: nothing to learn"),
    ({"messages": "hi"}, "field 'messages' must be a non-empty list of {role, content} objects"),
    (_messages(U, "a"), "message 2 must be an object, got str"),
]  # fmt: skip


@pytest.mark.parametrize(("row", "what"), BAD_ROWS)
def test_bad_chat_rows_name_file_and_line(
    tmp_path: Path, tok: PreTrainedTokenizerBase, row: object, what: str
) -> None:
    path = _file(tmp_path, [{"messages": CHAT}, row])
    with pytest.raises(DataError) as err:
        _build(tok, path)
    assert str(err.value) == f"{path}:2: {what}"


def test_templates_that_cannot_be_used_are_one_line(
    tmp_path: Path, tok: PreTrainedTokenizerBase
) -> None:
    path = _file(tmp_path, [{"text": "plain"}, {"messages": CHAT}, {"text": "plain"}])
    bare = copy.deepcopy(tok)
    bare.chat_template = None
    with pytest.raises(DataError) as err:
        _build(bare, path, model_name="tiny-llama")
    assert str(err.value) == (
        "--model_name tiny-llama: its tokenizer has no chat template, which chat rows need "
        f"({path}:2 is one); use a chat model's tokenizer"
    )
    strict = copy.deepcopy(tok)  # Mistral-style: refuses a system message
    strict.chat_template = (
        "{% for m in messages %}{% if (m['role'] == 'user') != (loop.index0 % 2 == 0) %}"
        "{{ raise_exception('Conversation roles must alternate user/assistant') }}{% endif %}"
        "{{ m['content'] }}{% endfor %}"
    )
    with pytest.raises(DataError) as err:
        _build(strict, path)
    assert str(err.value) == (
        f"{path}:2: the chat template refuses this conversation: Conversation roles must "
        "alternate user/assistant"
    )
    rewriting = copy.deepcopy(tok)  # renders the number of messages first
    rewriting.chat_template = (
        "{{ messages | length }}{% for m in messages %}{{ m['content'] }}{% endfor %}"
    )
    with pytest.raises(DataError) as err:
        _build(rewriting, path)
    assert str(err.value) == (
        f"{path}:2: the chat template does not render message 3 (assistant) as an addition "
        "to the turns before it; cannot tell its tokens apart (give --chat_template a template "
        "with {% generation %} markers)"
    )


def test_chat_sample_is_the_samsum_sample_as_two_exchanges(tok: PreTrainedTokenizerBase) -> None:
    first = json.loads(SAMSUM_SAMPLE.read_text(encoding="utf-8").splitlines()[0])
    cfg = TrainConfig(dataset="chat_sample", batching_strategy="padding", max_train_samples=4)
    ex = build_dataset(cfg, tok, "train")[0]
    learned = tok.decode([t for t in ex["labels"] if t != IGNORE_INDEX])
    names = speakers(first["dialogue"])
    assert len(names) >= 2
    who = ", ".join(names[:-1]) + " and " + names[-1]
    assert learned == f"{first['summary']}</s>{who}.</s>"
    text = tok.decode(ex["input_ids"])
    assert text.startswith("<s><|system|>\n") and first["dialogue"] in text
    val = build_dataset(cfg, tok, "validation")
    assert len(val) == 240  # the last tenth of the 2,400 rows, whole


def test_speakers_in_order_of_appearance() -> None:
    assert speakers("Anna: hi\r\nBob: hey\nAnna: bye\n no speaker here") == ["Anna", "Bob"]


# ------------------------------------------------------------------------------------------------
# Qwen3 and --chat_template: templates with {% generation %} markers

QWEN3_CHAT = [
    {"role": "system", "content": "Be brief."},
    {"role": "user", "content": "Hi there"},
    {"role": "assistant", "content": "<think>A greeting.</think>Hello!"},
    {"role": "user", "content": "Who are you?"},
    {"role": "assistant", "content": "A tiny model."},
    {"role": "user", "content": "Bye"},
    {"role": "assistant", "content": "Bye!"},
]


@pytest.fixture(scope="module")
def qwen3_dir(tmp_path_factory: pytest.TempPathFactory, tok: PreTrainedTokenizerBase) -> Path:
    """A tiny tokenizer laid out as Qwen/Qwen3-*'s (tokenizer_config.json there): the ChatML
    tokens special, <think> and </think> added as plain tokens, eos <|im_end|>, pad
    <|endoftext|>, no bos, and Qwen3's own chat template (TRL 1.16's copy, bundled)."""
    qwen = copy.deepcopy(tok)
    qwen.add_special_tokens(
        {"additional_special_tokens": ["<|im_start|>", "<|im_end|>", "<|endoftext|>"]}
    )
    qwen.add_tokens(["<think>", "</think>"])
    qwen.eos_token, qwen.pad_token, qwen.bos_token = "<|im_end|>", "<|endoftext|>", None
    qwen.chat_template = (TEMPLATES / "qwen3.jinja").read_text(encoding="utf-8")
    path = tmp_path_factory.mktemp("qwen3-tokenizer")
    qwen.save_pretrained(str(path))
    return path


def test_qwen3s_own_template_is_not_rendered_turn_by_turn(qwen3_dir: Path) -> None:
    """Why the training variant is needed: Qwen3's template drops an earlier turn's <think>
    block once a later user message exists, so prefix rendering cannot find that turn."""
    qwen = load_tokenizer(str(qwen3_dir))
    first = qwen.apply_chat_template(QWEN3_CHAT[:3], tokenize=False)
    full = qwen.apply_chat_template(QWEN3_CHAT, tokenize=False)
    assert "<think>\nA greeting.\n</think>\n\nHello!" in first
    assert "A greeting." not in full and not full.startswith(first)
    with pytest.raises(ChatError, match=r"does not render message 3 \(assistant\) as an addition"):
        render(qwen, parse_messages(QWEN3_CHAT, "test:1"))


def test_qwen3_multi_turn_learns_only_the_assistant_turns_token_by_token(
    tmp_path: Path, qwen3_dir: Path
) -> None:
    """Every assistant turn, <think> block and <|im_end|>\\n included, as TRL's
    qwen3_training.jinja wraps it in {% generation %}; nothing else."""
    qwen = load_tokenizer(str(qwen3_dir))
    assert qwen.bos_token_id is None and qwen.eos_token == "<|im_end|>"
    variant = training_template(qwen.chat_template)
    assert variant is not None and has_generation_markers(variant)
    assert variant == (TEMPLATES / "qwen3_training.jinja").read_text(encoding="utf-8")
    assert training_template({"default": qwen.chat_template}) == variant  # named variants
    own = qwen.chat_template
    path = _file(tmp_path, [{"messages": QWEN3_CHAT}] * 2)
    ex = _build(qwen, path, model_name=str(qwen3_dir), context_length=4096)[0]
    assert qwen.chat_template == own  # the export keeps the model's own template
    text = qwen.apply_chat_template(QWEN3_CHAT, tokenize=False, chat_template=variant)
    assert ex["input_ids"] == qwen(text, add_special_tokens=False)["input_ids"]
    turns = [
        "<think>\nA greeting.\n</think>\n\nHello!<|im_end|>\n",
        "<think>\n\n</think>\n\nA tiny model.<|im_end|>\n",
        "<think>\n\n</think>\n\nBye!<|im_end|>\n",
    ]
    want = _expected_mask(qwen, text, turns)
    got = [label != IGNORE_INDEX for label in ex["labels"]]
    assert len(got) == len(want) and got == want
    for label, tid, learned in zip(ex["labels"], ex["input_ids"], got, strict=True):
        assert label == (tid if learned else IGNORE_INDEX)
    runs, cur = [], []
    for tid, learned in zip(ex["input_ids"], got, strict=True):
        if learned:
            cur.append(tid)
        elif cur:
            runs, cur = [*runs, cur], []
    runs += [cur] if cur else []
    assert [qwen.decode(r) for r in runs] == turns
    assert text.count("<|im_start|>assistant\n") == 3  # the headers are prompt, not learned
    im_end = qwen.convert_tokens_to_ids("<|im_end|>")
    assert sum(1 for t in ex["labels"] if t == im_end) == 3  # learns to stop, each turn


def test_chat_template_flag_replaces_a_template_that_cannot_be_used(
    tmp_path: Path, tok: PreTrainedTokenizerBase
) -> None:
    """A template that rewrites earlier turns is refused; --chat_template with {% generation %}
    markers trains the same rows, and the tokenizer (so the export) carries the file's text."""
    rows = [{"messages": CHAT}] * 2
    path = _file(tmp_path, rows)
    marked = tmp_path / "marked.jinja"
    marked.write_text(
        "{% for m in messages %}{% if m['role'] == 'assistant' %}<A>{% generation %}"
        "{{ m['content'] }}{{ eos_token }}{% endgeneration %}{% else %}<{{ m['role'] }}>"
        "{{ m['content'] }}{% endif %}{% endfor %}",
        encoding="utf-8",
    )
    cfg = parse_args(
        ["--dataset", "custom", "--data_path", str(path), "--chat_template", str(marked)]
    )
    assert cfg.chat_template == str(marked)
    tuned = load_tokenizer("tiny-llama")
    use_chat_template(tuned, cfg.chat_template)
    assert tuned.chat_template == marked.read_text(encoding="utf-8")
    ex = _build(tuned, path)[0]
    learned = [t for t in ex["labels"] if t != IGNORE_INDEX]
    assert tuned.decode(learned) == "Hello!</s>A tiny model.</s>"
    text = tuned.decode(ex["input_ids"])
    assert (
        text == "<system>Be brief.<user>Hi there<A>Hello!</s><user>Who are you?<A>A tiny model.</s>"
    )
    empty = tmp_path / "empty-marks.jinja"  # markers around nothing: nothing to learn
    empty.write_text(
        "{% for m in messages %}{{ m['content'] }}{% generation %}{% endgeneration %}{% endfor %}",
        encoding="utf-8",
    )
    with pytest.raises(DataError) as err:
        use_chat_template(tuned, str(empty))
        _build(tuned, path)
    assert str(err.value) == (
        f"{path}:1: the chat template's {{% generation %}} blocks mark no token of this "
        "conversation; nothing to learn"
    )
    with pytest.raises(DataError) as err:
        use_chat_template(tuned, str(tmp_path))  # a folder, not a file
    assert str(err.value).startswith(f"--chat_template {tmp_path}: cannot read")
    with pytest.raises(ConfigError) as cerr:
        parse_args(["--chat_template", str(tmp_path / "missing.jinja")])
    assert "\n" not in str(cerr.value) and "missing.jinja" in str(cerr.value)
    assert str(cerr.value).startswith("--chat_template")


def test_pairs_without_a_bos_token_start_with_the_prompt(tmp_path: Path, qwen3_dir: Path) -> None:
    qwen = load_tokenizer(str(qwen3_dir))
    path = _file(tmp_path, [{"prompt": "2+2=", "completion": "4"}] * 2)
    ex = _build(qwen, path)[0]
    assert qwen.decode(ex["input_ids"]) == "2+2=4<|im_end|>"
    assert qwen.decode([t for t in ex["labels"] if t != IGNORE_INDEX]) == "4<|im_end|>"


# ------------------------------------------------------------------------------------------------
# --packing_strategy bfd: whole conversations, best fit decreasing


def _ex(ids: list[int]) -> dict[str, list[int]]:
    return {"input_ids": ids, "labels": [-i for i in ids], "attention_mask": [1] * len(ids)}


def test_bfd_packs_as_trls_pack_dataset_documents() -> None:
    """trl/data_utils.py (v1.16.0) `pack_dataset` docstring, strategy "bfd", seq_length 4:
    [[1..5], [6, 7], [8, 9, 10], [11]] -> [1, 2, 3, 4], [8, 9, 10, 11], [6, 7] (the overflow
    of the first cut, each other sequence whole); labels and masks travel with their tokens."""
    rows = pack_bfd([_ex([1, 2, 3, 4, 5]), _ex([6, 7]), _ex([8, 9, 10]), _ex([11])], 4)
    assert [r["input_ids"] for r in rows] == [[1, 2, 3, 4], [8, 9, 10, 11], [6, 7]]
    assert [r["labels"] for r in rows] == [[-1, -2, -3, -4], [-8, -9, -10, -11], [-6, -7]]
    assert [sum(r["attention_mask"]) for r in rows] == [4, 4, 2]
    assert fill_ratio(rows, 4) == 10 / 12


def test_bfd_keeps_every_conversation_whole_with_its_masks(
    tmp_path: Path, tok: PreTrainedTokenizerBase
) -> None:
    long = [{"role": "user", "content": "word " * 40}, {"role": "assistant", "content": "ok"}]
    rows = [{"messages": CHAT}, {"messages": long}, {"messages": CHAT[:3]}] * 6 + [{"text": "x"}]
    path = _file(tmp_path, rows)  # 19 rows: the first 18 (all chats) train, the last validates
    padded = _build(tok, path, context_length=256)
    notes: list[str] = []
    cfg = TrainConfig(
        dataset="custom", data_path=str(path), context_length=256, packing_strategy="bfd"
    )
    packed = build_dataset(cfg, tok, "train", notes)
    assert all(len(r["input_ids"]) <= 256 for r in packed)
    # every example is one contiguous run of one row, labels and masks included
    pieces = sorted(
        tuple(tuple(ex[k]) for k in ("input_ids", "labels", "attention_mask")) for ex in padded
    )
    found = []
    for r in packed:
        at = 0
        while at < len(r["input_ids"]):
            match = [
                ex
                for ex in padded
                if r["input_ids"][at : at + len(ex["input_ids"])] == ex["input_ids"]
                and r["labels"][at : at + len(ex["labels"])] == ex["labels"]
            ]
            assert match, "a row holds a piece that is no whole example"
            ex = max(match, key=lambda e: len(e["input_ids"]))
            found.append(tuple(tuple(ex[k]) for k in ("input_ids", "labels", "attention_mask")))
            at += len(ex["input_ids"])
    assert sorted(found) == pieces
    total = sum(len(ex["input_ids"]) for ex in padded)
    assert -(-total // 256) <= len(packed) < len(padded)
    # the any-fit invariant: a row opened later never had room in an earlier one, so at most
    # one row is filled to half or less
    assert sum(1 for r in packed if len(r["input_ids"]) <= 128) <= 1
    assert notes == [
        f"data custom (train): packing keeps each conversation whole: {len(padded)} examples "
        f"in {len(packed)} rows of up to 256 tokens, {fill_ratio(packed, 256):.0%} filled"
    ]
    for argv, what in (
        (["--packing_strategy", "bfd", "--batching_strategy", "padding"], "only used with"),
        (["--packing_strategy", "first_fit"], "first_fit"),
    ):
        with pytest.raises(ConfigError) as err:
            parse_args(argv)
        assert str(err.value).startswith("--packing_strategy") and what in str(err.value)
        assert "\n" not in str(err.value)
