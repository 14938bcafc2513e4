"""What llama-cookbook's step-counting flags mean there, and what the run says when ours differ.

If this fails, `--max_train_step` / `--flop_counter_start` with gradient accumulation no longer
say in the log that they count optimizer steps here while llama-cookbook counts dataloader
batches (a job pasted from llama-cookbook with `--gradient_accumulation_steps 4
--max_train_step 100` runs 100 optimizer steps here, 25 there), or the pinned wheel's train loop
changed how it counts (read from the wheel's `llama_cookbook/utils/train_utils.py` with ast, not
imported), or `--checkpoint_type FULL_STATE_DICT --use_peft` is refused again although
llama-cookbook accepts it and saves the adapters.
"""

from __future__ import annotations

import ast
from types import SimpleNamespace

from tests.training.test_cookbook_wheel import _source
from training import cookbook
from training.config import parse_args
from training.cookbook_run import save_full_state


def _train_loop() -> ast.For:
    """The `for step, batch in enumerate(train_dataloader)` loop of the wheel's `train`."""
    tree = ast.parse(_source("llama_cookbook/utils/train_utils.py"))
    train = next(n for n in ast.walk(tree) if isinstance(n, ast.FunctionDef) and n.name == "train")
    for node in ast.walk(train):
        if (
            isinstance(node, ast.For)
            and isinstance(node.iter, ast.Call)
            and ast.unparse(node.iter) == "enumerate(train_dataloader)"
        ):
            return node
    raise AssertionError("no batch loop in llama_cookbook's train")


def _cookbook_optimizer_steps(max_train_step: int, accum: int, batches: int) -> int:
    """The wheel's loop, run on counters: what it counts per batch and when it steps."""
    loop = _train_loop()
    first = ast.unparse(loop.body[0])
    assert first == "total_train_steps += 1"  # every batch, before the accumulation test
    stop = ast.unparse(loop.body[1].test)
    assert stop == (
        "train_config.max_train_step > 0 and total_train_steps > train_config.max_train_step"
    )
    assert "(step + 1) % gradient_accumulation_steps == 0" in ast.unparse(loop)
    total = steps = 0
    for step in range(batches):
        total += 1  # noqa: SIM113 (the wheel's own counter, as it is written there)
        if max_train_step > 0 and total > max_train_step:
            break
        if (step + 1) % accum == 0 or step == batches - 1:
            steps += 1
    return steps


def test_max_train_step_counts_batches_there_optimizer_steps_here() -> None:
    there = _cookbook_optimizer_steps(100, 4, batches=10_000)
    assert there == 25
    cfg = parse_args(["--max_train_step=100", "--gradient_accumulation_steps=4"])
    lines = cookbook.step_unit_notes(cfg)
    assert lines == [
        "--max_train_step 100: counts optimizer steps here (400 micro-batches with "
        f"--gradient_accumulation_steps 4); llama-cookbook counts micro-batches and would stop "
        f"after {there} optimizer steps"
    ]
    assert lines[0] in cookbook.notes(cfg)
    # without accumulation the two count the same thing: no line
    assert _cookbook_optimizer_steps(100, 1, batches=10_000) == 100
    assert cookbook.step_unit_notes(parse_args(["--max_train_step=100"])) == []


def test_flop_counter_start_says_its_unit_with_accumulation() -> None:
    cfg = parse_args(["--flop_counter", "--gradient_accumulation_steps=2"])
    assert cookbook.step_unit_notes(cfg) == [
        "--flop_counter_start 3: counts optimizer steps here (2 micro-batches each); "
        "llama-cookbook counts micro-batches"
    ]


def test_full_state_dict_with_peft_saves_the_adapters_as_there() -> None:
    """llama-cookbook's `train` tests use_peft before checkpoint_type: the adapters are saved."""
    loop_fn = ast.unparse(
        next(
            n
            for n in ast.walk(ast.parse(_source("llama_cookbook/utils/train_utils.py")))
            if isinstance(n, ast.FunctionDef) and n.name == "train"
        )
    )
    assert loop_fn.index("if train_config.use_peft:") < loop_fn.index(
        "fsdp_config.checkpoint_type == StateDictType.FULL_STATE_DICT"
    )
    cfg = parse_args(["--use_peft", "--checkpoint_type", "FULL_STATE_DICT", "--save_model"])
    assert cfg.checkpoint_type == "FULL_STATE_DICT"
    assert any(
        line.startswith("--checkpoint_type FULL_STATE_DICT with --use_peft: the adapters")
        for line in cookbook.notes(cfg)
    )
    # no full state dict is gathered: returns before touching the model
    assert save_full_state(SimpleNamespace(cfg=cfg), epoch=0) is None
