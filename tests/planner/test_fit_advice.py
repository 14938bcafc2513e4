"""A plan that does not fit exits non-zero and says what would fit, as one runnable
``eks-fsdp plan`` line (ADR 0018).

If this fails, ``eks-fsdp plan --batch 1000000`` prints "fits NO" and exits 0 again (a script
cannot tell), or a job file that does not fit points its user at the very command that just
refused it ("eks-fsdp plan --job FILE shows the layouts that fit") instead of a micro-batch,
an AC setting or a node count that fits.
"""

from __future__ import annotations

import shlex

import pytest

from infra.instances import lookup
from planner.cli import NO_FIT_EXIT, main
from planner.fit import fitting_change, plan_command, what_fits
from planner.memory import PRECISIONS
from planner.predict import PlanInput, predict
from planner.shapes import BUILTIN

P5 = lookup("p5.48xlarge")
MIXED = PRECISIONS["mixed"]


def _argv(line: str) -> list[str]:
    words = shlex.split(line)
    assert words[:2] == ["eks-fsdp", "plan"]
    return words[2:]


def test_a_plan_that_does_not_fit_exits_1_with_the_line_that_fits(
    capsys: pytest.CaptureFixture[str],
) -> None:
    argv = ["--model", "llama2-7b", "--instance", "p5.48xlarge", "--nodes", "1"]
    assert main([*argv, "--batch", "1000000", "--dataset", "none"]) == NO_FIT_EXIT == 1
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith("eks-fsdp plan: error: does not fit:")
    assert "python -m planner" not in err and "--job FILE" not in err
    fix = err[err.index("eks-fsdp plan --model") :].strip()
    assert "--batch 1000000" not in fix
    assert main(_argv(fix)) == 0  # the advice fits
    capsys.readouterr()


def test_the_advice_is_the_largest_micro_batch_then_ac_then_nodes() -> None:
    inp = PlanInput(shape=BUILTIN["llama2-7b"], instance=P5, precision=MIXED, batch=10**6)
    fit, nodes = fitting_change(inp, 1) or (None, 0)
    assert fit is not None and nodes == 1
    assert (
        predict(fit, 1).fits
        and not predict(PlanInput(**{**fit.__dict__, "batch": fit.batch + 1}), 1).fits
    )
    # AC off at micro-batch 1 does not fit one p5 for 70B; full AC on more nodes does
    big = PlanInput(
        shape=BUILTIN["llama2-70b"], instance=P5, precision=MIXED, ac=0.0, batch=1, seq=4096
    )
    fit, nodes = fitting_change(big, 1) or (None, 0)
    assert fit is not None and fit.ac == 1.0 and nodes > 1 and predict(fit, nodes).fits
    advice = what_fits(big, 1)
    assert "activation checkpointing on" in advice and f"{nodes} nodes" in advice
    assert advice.endswith(plan_command(fit, nodes)) and "--no-ac" not in advice


def test_a_scaling_table_that_fits_somewhere_exits_0(capsys: pytest.CaptureFixture[str]) -> None:
    """``make plan``'s table (70B on 1-16 p4de) does not fit the small counts but answers the
    question it asks; only a plan that fits at none of its node counts fails."""
    argv = ["--model", "llama2-70b", "--instance", "p4de.24xlarge", "--nodes", "1,4"]
    assert main([*argv, "--dataset", "none"]) == 0
    assert main([*argv[:-1], "1", "--dataset", "none"]) == 1
    capsys.readouterr()


def test_a_job_file_that_does_not_fit_names_a_micro_batch_that_does() -> None:
    from pathlib import Path

    from jobs import schema as jobfile

    example = Path(__file__).resolve().parents[2] / "jobs" / "examples" / "p5-16.yaml"
    with pytest.raises(jobfile.JobFileError) as err:
        jobfile.load(example, sets=["batchSize=1000000"])
    line = str(err.value)
    assert "does not fit" in line and "eks-fsdp plan --job" not in line
    fix = line[line.index("eks-fsdp plan --model") :]
    assert "--model llama2-7b --instance p5.48xlarge --nodes 16" in fix
    assert main([*_argv(fix), "--dataset", "none"]) == 0
