"""`--method dpo` runs: 2-process FSDP2 equals 1 process, and a resumed run the uninterrupted one.

If this fails, a preference run's numbers depend on the world size (a loss normalised per rank
instead of by the global batch's pair count, filler pairs counted, a reference copy sharded or
filled differently from the policy, precomputed reference log-probs dealt to the wrong pairs),
or a resume does not continue the run it resumes (the precomputed reference log-probs not
restored from the checkpoint but recomputed from the trained weights, the data position or the
optimizer state lost). Each of the three reference kinds runs: a frozen FSDP2-sharded copy (full
fine-tuning), LoRA with its adapters disabled, and log-probs precomputed before step 1; the
metrics compared are the loss, the gradient norm and TRL's rewards, step by step, within 1e-4.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from tests.training.helpers import ckpt_dir, launch, max_diff, merge, metrics, run_dirs

pytestmark = pytest.mark.slow

STEPS = 6
RESUME_AT = 3
TOL = 1e-4
DPO = [
    "--method=dpo",
    "--dataset=preference_sample",
    "--model_name=tiny-llama-2l",
    "--max_train_samples=48",
    "--context_length=128",  # cuts some pairs: the rule runs too
    "--lr=1e-3",
    "--beta=0.2",
    f"--max_train_step={STEPS}",
    f"--checkpoint_every={RESUME_AT}",
    "--mixed_precision=False",
    "--max_eval_step=2",  # batches per rank of 4 // world pairs: the same 8 pairs at any world
    "--save_model=False",
    "--progress=False",
    "--plot_metrics=False",
]
KINDS = {
    "copy": [],
    "precomputed": ["--precompute_ref_log_probs"],
    "lora": ["--use_peft", "--lora_dropout=0"],
}
FIGURES = ("loss", "grad_norm", "rewards/chosen", "rewards/rejected", "rewards/margins")


def _train(base: Path, name: str, world: int, extra: list[str]) -> dict[str, Any]:
    fsdp = ["--enable_fsdp"] if world > 1 else []
    per_rank = [f"--batch_size_training={4 // world}", f"--val_batch_size={4 // world}"]
    argv = merge(DPO, [*per_rank, *fsdp], run_dirs(base, name), extra)
    return {"kind": "train", "name": name, "argv": argv, "stdout": True}


@pytest.fixture(scope="module")
def runs(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict[str, Any]]:
    base = tmp_path_factory.mktemp("dpo")
    one = launch(1, [_train(base, f"{k}-1", 1, extra) for k, extra in KINDS.items()], base / "w1")
    jobs = [_train(base, f"{k}-2", 2, extra) for k, extra in KINDS.items()]
    for kind in ("copy", "precomputed"):  # 1 -> 2 processes, from the step-3 checkpoint
        jobs.append(
            {
                "kind": "copy_checkpoint",
                "src": str(ckpt_dir(base, f"{kind}-1")),
                "dst": str(ckpt_dir(base, f"{kind}-resumed")),
                "step": RESUME_AT,
            }
        )
        jobs.append(_train(base, f"{kind}-resumed", 2, [*KINDS[kind], "--resume"]))
    two = launch(2, jobs, base / "w2")
    return base, {**one, **two}


@pytest.mark.parametrize("kind", list(KINDS))
def test_two_processes_match_one(runs: tuple[Path, dict[str, Any]], kind: str) -> None:
    base, results = runs
    for name in (f"{kind}-1", f"{kind}-2"):
        assert results[name]["rc"] == [0] * len(results[name]["rc"]), results[name]["stderr"]
    ref, got = metrics(base, f"{kind}-1"), metrics(base, f"{kind}-2")
    assert [r["step"] for r in got] == list(range(1, STEPS + 1))
    assert all(r["pairs"] == 4 and r["world_size"] == 2 for r in got)
    for key in FIGURES:
        diff = max_diff(got, ref, key)
        print(f"{kind}: 2 vs 1 process, max |diff| of {key}: {diff:.2e}")
        assert diff < TOL, key
    assert ref[-1]["loss"] < ref[0]["loss"]  # it learns
    assert ref[-1]["rewards/margins"] > 0
    one = json.loads((base / f"{kind}-1" / "out" / "summary.json").read_text())
    two = json.loads((base / f"{kind}-2" / "out" / "summary.json").read_text())
    assert abs(one["eval_rewards/accuracies"] - two["eval_rewards/accuracies"]) < TOL
    assert abs(one["avg_eval_loss"] - two["avg_eval_loss"]) < TOL


@pytest.mark.parametrize("kind", ["copy", "precomputed"])
def test_resumed_run_equals_the_uninterrupted_one(
    runs: tuple[Path, dict[str, Any]], kind: str
) -> None:
    base, results = runs
    name = f"{kind}-resumed"
    assert results[name]["rc"] == [0, 0], results[name]["stderr"]
    got, ref = metrics(base, name), metrics(base, f"{kind}-1")
    assert [r["step"] for r in got] == list(range(RESUME_AT + 1, STEPS + 1))
    for key in FIGURES:
        assert max_diff(got, ref, key) < TOL, key
    if kind == "precomputed":  # read back from the checkpoint, not computed again
        assert not any("reference log-probs" in out for out in results[name]["stdout"])
