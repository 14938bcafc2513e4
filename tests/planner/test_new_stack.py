"""``eks-fsdp new-stack`` and the job estimate that render and submit print.

If this fails: a shipped job example (every file in jobs/examples/) no longer trains for at
least 50 optimizer steps, no longer checkpoints at least twice, or is no longer at the planner's
recommended layout (regenerate the new-stack ones with ``eks-fsdp new-stack
--examples``; a ``device: cpu`` job is exempt from the GPU layout only); new-stack writes
files that ``pulumi up`` or ``jobs submit`` would refuse, overwrites files without ``--force``,
or accepts a malformed reservation; or the estimate stops warning about a layout off the
recommendation or a checkpoint interval the job never reaches. Nothing is mocked: the planner, the stack loader and
the job-file loader run as they are.
"""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from jobs.schema import load
from planner.cli import main
from planner.estimate import CPU_LINE, LAYOUT_MARGIN, describe, estimate, plan_input
from planner.newstack import CHECKPOINTS_PER_JOB, EXAMPLES, example_text
from planner.recommend import recommend

ROOT = Path(__file__).resolve().parents[2]
SHIPPED = ("p5-16", "p4de-odcr")
"""The examples ``new-stack`` generates (``planner.newstack.EXAMPLES``)."""
EXAMPLE_FILES = sorted((ROOT / "jobs" / "examples").glob("*.yaml"))
"""Every shipped job example: a new file cannot escape the bar below."""


def test_every_shipped_example_is_checked() -> None:
    names = {p.stem for p in EXAMPLE_FILES}
    assert names >= {*SHIPPED, "dev"}, names
    assert not [p for p in (ROOT / "jobs" / "examples").iterdir() if p.suffix != ".yaml"]


@pytest.mark.parametrize("path", EXAMPLE_FILES, ids=lambda p: p.stem)
def test_shipped_example_is_long_enough_and_at_the_recommended_layout(path: Path) -> None:
    """At least 50 optimizer steps over the whole job (maxTrainStep included), a checkpoint
    that fires at least twice, no warning; a GPU job at the planner's recommended layout, a
    ``device: cpu`` job told that the GPU recommendation does not apply."""
    job = load(path)
    est = estimate(job)
    assert est.steps is not None and est.steps >= 50, est.steps
    assert est.checkpoints is not None and est.checkpoints >= 2, est.checkpoints
    lines = describe(est, str(path))
    assert not [ln for ln in lines if ln.startswith("warning:")], lines
    if job.device == "cpu":
        assert est.recommendation is None and CPU_LINE in lines
        return
    rec = recommend(est.inp, est.nodes, min_nodes=job.min_workers)  # elastic: its groups
    assert rec is not None and est.recommendation == rec
    inp = est.inp
    assert (inp.strategy, inp.ac > 0, inp.batch, inp.precision.name) == (
        rec["sharding"],
        rec["activation_checkpointing"],
        rec["micro_batch"],
        rec["precision"],
    )
    assert inp.hsdp_group in (None, rec["hsdp_group"]) or rec["hsdp_group"] == inp.instance.gpus
    if path.stem in SHIPPED:
        assert est.nodes * inp.instance.gpus == {"p5-16": 128, "p4de-odcr": 16}[path.stem]


@pytest.mark.parametrize("stack", SHIPPED)
def test_shipped_example_keys_are_what_new_stack_generates(stack: str) -> None:
    shipped = yaml.safe_load((ROOT / "jobs" / "examples" / f"{stack}.yaml").read_text())
    assert shipped == yaml.safe_load(example_text(stack))
    assert shipped["name"] == EXAMPLES[stack]["name"]


def test_the_old_p5_job_is_warned_about(tmp_path: Path) -> None:
    """The p5-16 job as it shipped before (FULL_SHARD, AC, micro-batch 3 on samsum,
    checkpointEvery 200): 2 steps, a checkpoint that never fires, 23% below the recommendation."""
    path = tmp_path / "old.yaml"
    path.write_text(
        "name: old\nstack: p5-16\nmodel: meta-llama/Llama-2-7b-hf\ndataset: samsum_dataset\n"
        "workers: 16\nbatchSize: 3\ncontextLength: 4096\nshardingStrategy: FULL_SHARD\n"
        "rdzvBackend: c10d\ncheckpointEvery: 200\n"
    )
    est = estimate(load(path, root=ROOT))
    assert est.layout_gap > LAYOUT_MARGIN
    warnings = [ln for ln in describe(est, str(path)) if ln.startswith("warning:")]
    assert len(warnings) == 2
    assert "below the planner's " in warnings[0]
    assert f"checkpointEvery 200 never fires: the job runs {est.steps} steps" in warnings[1]
    assert est.steps is not None and est.steps < 200


def _new_stack(tmp_path: Path, *extra: str) -> int:
    return main(
        [
            "new-stack",
            "p5-try",
            "--instance",
            "p5.48xlarge",
            "--nodes",
            "16",
            "--reservation",
            "cr-0123456789abcdef0",
            "--capacity-type",
            "capacity-block",
            "--region",
            "us-east-2",
            "--dir",
            str(tmp_path),
            *extra,
        ]
    )


def test_new_stack_writes_files_that_load(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from infra.config import load_stack_file

    (tmp_path / "Pulumi.yaml").write_text((ROOT / "Pulumi.yaml").read_text())
    assert _new_stack(tmp_path) == 0
    stack = load_stack_file("p5-try", tmp_path)
    (group,) = stack.gpu_node_groups
    assert (group.instance_type, group.max_size, group.capacity_reservation_id) == (
        "p5.48xlarge",
        16,
        "cr-0123456789abcdef0",
    )
    job = load(tmp_path / "jobs" / "p5-try.yaml", root=tmp_path)
    est = estimate(job)
    assert est.steps is not None and est.checkpoints == CHECKPOINTS_PER_JOB
    rec = recommend(est.inp, 16)
    assert rec is not None and est.tokens_per_s_per_gpu == pytest.approx(
        rec["tokens_per_s_per_gpu"]
    )
    text = (tmp_path / "Pulumi.p5-try.yaml").read_text()
    assert f"${est.usd_per_hour:,.2f}/h" in text and "per epoch" in text
    out = capsys.readouterr().out
    assert f"wrote {tmp_path / 'Pulumi.p5-try.yaml'}" in out
    # a second run keeps what is there
    assert _new_stack(tmp_path) == 2
    assert "exists (pass --force to overwrite)" in capsys.readouterr().err
    assert _new_stack(tmp_path, "--force") == 0


@pytest.mark.parametrize(
    ("flag", "value", "message"),
    [
        ("--reservation", "cr-0fedcba98765432", "--reservation cr-0fedcba98765432: expected cr-"),
        ("--zone", "us-west-2a", "--zone us-west-2a: not a zone of us-east-2"),
        ("--model", "llama2-70b", "--model llama2-70b: does not fit 1 x g5.xlarge in any layout"),
    ],
)
def test_new_stack_refuses_bad_input(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], flag: str, value: str, message: str
) -> None:
    extra = [flag, value] + (
        ["--nodes", "1", "--instance", "g5.xlarge"] if flag == "--model" else []
    )
    code = _new_stack(tmp_path, *extra)
    err = capsys.readouterr().err
    assert code == 2 and message in err, err
    assert not list(tmp_path.glob("Pulumi.*.yaml"))


def test_plan_job_prints_the_estimate(capsys: pytest.CaptureFixture[str]) -> None:
    path = ROOT / "jobs" / "examples" / "p5-16.yaml"
    assert main(["--job", str(path)]) == 0
    out = capsys.readouterr().out
    est = estimate(load(path))
    assert f"plan: {est.steps} optimizer steps" in out
    assert f"a checkpoint every {est.checkpoint_every} steps ({est.checkpoints} in all)" in out
    inp, nodes = plan_input(load(path))
    assert nodes == 16 and inp.dataset_tokens > 0
