"""`--flop_counter`: FLOPs measured by torch's FlopCounterMode against the planner's formula.

If these fail, the FLOPs a run reports (flops.json, the printed line, the tracker) no longer
match what the tiny model executes, or the planner's FLOP formula (`planner.timing`) and the
training package's MFU formula (`training.model.flops_per_token`) drifted apart, or a rank's
count is lost from the global figure (two processes each count their own micro-batches; the
sum must equal the whole global batch's work).

Expected counts, derived from the planner's shape of `tiny-llama-2l` and torch's own formulas
(torch/utils/flop_counter.py at 2.13): matrix products 6 N_matmul per token (forward 2 N,
backward 4 N); attention per layer and token 4 h_q S forward (QK^T and AV, the full S x S, "NB:
We aren't accounting for causal attention here") and 10 h_q S backward (five products: the
scores recomputed, then dV, dP, dQ, dK), 14 L h_q S against the formula's 12 L h_q S. Full
activation checkpointing runs each layer's forward again, except the MLP's down projection:
torch's non-reentrant checkpoint stops recomputing once every tensor backward needs is back
(`set_checkpoint_early_stop`, torch/utils/checkpoint.py), and the down projection's output is
not one of them. The planner's `executed_flops_per_token` leaves that projection out of the
recomputation (`planner.timing.full_ac_recomputed_params`): measured and planned agree exactly.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from planner.shapes import resolve
from planner.timing import executed_flops_per_token, model_flops_per_token
from tests.training.helpers import TINY, launch, merge, run_dirs

MODEL = "tiny-llama-2l"
CONTEXT = 64  # helpers.TINY's --context_length
START = 2  # --flop_counter_start: step 3 is counted


def _launch(base: Path) -> dict[str, Any]:
    common = merge(
        TINY,
        [
            "--enable_fsdp",
            "--batch_size_training=2",
            "--max_train_step=3",
            "--flop_counter",
            f"--flop_counter_start={START}",
        ],
    )
    jobs = [
        {"kind": "train", "name": "ac", "argv": merge(common, run_dirs(base, "ac"))},
        {
            "kind": "train",
            "name": "no_ac",
            "argv": merge(
                common, run_dirs(base, "no_ac"), ["--fsdp_activation_checkpointing=False"]
            ),
            "stdout": True,
        },
    ]
    results = launch(2, jobs, base)
    reports = {
        name: json.loads((base / name / "out" / "flops.json").read_text(encoding="utf-8"))
        for name in ("ac", "no_ac")
    }
    return {"results": results, "reports": reports}


@pytest.fixture(scope="module")
def counted(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    from tests.shared import once

    return once(tmp_path_factory, "flops", _launch)


@pytest.mark.slow
def test_measured_flops_match_the_planners_formula(counted: dict[str, Any]) -> None:
    shape = resolve(MODEL)
    report = counted["reports"]["no_ac"]
    tokens = report["tokens"]
    assert tokens == 4 * CONTEXT  # global batch 4 packed rows: every position is a token
    assert report["step"] == START + 1
    layers, q = shape.num_layers, shape.q_size
    # the formula the run reports is the planner's (6 N + 12 L h_q S)
    assert report["formula"] == model_flops_per_token(shape, CONTEXT) * tokens
    assert report["measured_matmul"] == 6 * shape.matmul_params * tokens
    assert report["measured_attention"] == 14 * layers * q * CONTEXT * tokens
    attention_formula = 12 * layers * q * CONTEXT * tokens
    assert report["measured"] - report["formula"] == pytest.approx(
        report["measured_attention"] - attention_formula, rel=1e-12
    )
    assert 1.0 < report["ratio"] < 1.05  # matmuls dominate even at S = 64


@pytest.mark.slow
def test_activation_checkpointing_adds_one_forward_but_the_down_projection(
    counted: dict[str, Any],
) -> None:
    shape = resolve(MODEL)
    ac, no_ac = counted["reports"]["ac"], counted["reports"]["no_ac"]
    tokens = ac["tokens"]
    layers, h, i = shape.num_layers, shape.hidden_size, shape.intermediate_size
    planner_gemm = executed_flops_per_token(shape, CONTEXT, ac=1.0).gemm * tokens
    assert ac["measured_matmul"] == planner_gemm  # exact
    down_projection = 2 * layers * h * i * tokens  # its forward, not run again
    assert ac["measured_matmul"] - no_ac["measured_matmul"] == (
        2 * (shape.layer_matmul_params * layers) * tokens - down_projection
    )
    # attention's forward (4 L h_q S per token) runs again too
    assert ac["measured_attention"] - no_ac["measured_attention"] == (
        4 * layers * shape.q_size * CONTEXT * tokens
    )


@pytest.mark.slow
def test_the_report_is_printed_once_by_rank_0(counted: dict[str, Any]) -> None:
    job = counted["results"]["no_ac"]
    assert job["rc"] == [0, 0]
    report = counted["reports"]["no_ac"]
    lines = [ln for ln in job["stdout"][0].splitlines() if ln.startswith("flop counter")]
    assert len(lines) == 1
    assert f"step {START + 1}: measured {report['measured']:.4g} FLOPs" in lines[0]
    assert f"measured/formula {report['ratio']:.3f}" in lines[0]
    assert not any(ln.startswith("flop counter") for ln in job["stdout"][1].splitlines())


def test_flop_counter_flags_are_checked_before_any_work() -> None:
    """One line naming the flag (training.config), as llama-cookbook's own checks
    (`profile` in llama_cookbook/utils/train_utils.py at 0.0.5.post1)."""
    from training.config import ConfigError, parse_args

    cases = {
        ("--flop_counter", "--use_profiler"): "--flop_counter: cannot be combined",
        ("--flop_counter", "--max_train_step=3"): "--flop_counter: counts step 4",
        ("--flop_counter", "--flop_counter_start=-1"): "--flop_counter_start: must be >= 0",
    }
    for argv, message in cases.items():
        with pytest.raises(ConfigError) as err:
            parse_args(list(argv))
        assert str(err.value).startswith(message), str(err.value)
        assert "\n" not in str(err.value)
