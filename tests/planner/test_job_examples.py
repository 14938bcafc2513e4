"""What the planner says of the demo job (device cpu, the bundled samsum sample) and of the
migration page's job file.

If this fails: the planner's token count of training/assets/samsum_sample.jsonl is no longer
what the training package's own tokenization and packing make of it (so ``planner --job
jobs/examples/dev.yaml`` counts other steps than ``make demo`` runs); its step count ignores
maxTrainStep or its checkpoint count is not training's ``step % checkpoint_every`` rule; a
``device: cpu`` job gets GPU figures or a GPU layout warning; or docs/migrating.md shows
planner lines that the planner no longer prints. Nothing is mocked: the training package's
tokenizer (the bundled one, no network), its data pipeline, the job-file loader and the
planner run as they are.
"""

from __future__ import annotations

import re
import shlex
from pathlib import Path

import pytest

from jobs.schema import load
from planner.args import UsageError, parser, resolve_args
from planner.assumptions import DATASETS, SAMSUM_SAMPLE_TRAIN_TOKENS
from planner.cli import main
from planner.estimate import CPU_LINE, describe, estimate

ROOT = Path(__file__).resolve().parents[2]
DEV = ROOT / "jobs" / "examples" / "dev.yaml"
COOKBOOK = ROOT / "docs" / "examples" / "llama-cookbook.yaml"
MIGRATING = ROOT / "docs" / "migrating.md"


def _training_split(context_length: int) -> tuple[int, int]:
    """(tokens of samsum_sample's training split, packed samples at ``context_length``) as
    ``training.data`` makes them for the tiny preset."""
    from training.config import parse_args
    from training.data import _tokenize_rows, build_dataset, load_tokenizer
    from training.data.rows import read_rows

    cfg = parse_args(
        ["--model_name=tiny-llama", "--dataset=samsum_sample", f"--context_length={context_length}"]
    )
    tokenizer = load_tokenizer(cfg.model_name)
    rows = read_rows(cfg, "train")
    tokens = sum(len(ex["input_ids"]) for ex in _tokenize_rows(tokenizer, rows, cfg.model_name))
    return tokens, len(build_dataset(cfg, tokenizer, "train"))


def test_bundled_sample_tokens_are_what_training_tokenizes() -> None:
    """The table entry is the count of the file's training split, re-derived here; wrapped
    packing makes tokens // context_length samples of it at any context length (the planner's
    ``samples = dataset_tokens // seq``)."""
    for context_length in (128, 256):
        tokens, samples = _training_split(context_length)
        assert tokens == SAMSUM_SAMPLE_TRAIN_TOKENS
        assert samples == SAMSUM_SAMPLE_TRAIN_TOKENS // context_length


def test_dev_job_counts_the_steps_and_checkpoints_training_runs() -> None:
    """training.finetune: min(steps per epoch x epochs, max_train_step) steps
    (``_planned_steps``), a checkpoint at each step with ``step % checkpoint_every == 0``
    (``_checkpoint_due``); steps per epoch from ``training.data.batches.steps_per_epoch``."""
    from training.data.batches import steps_per_epoch

    job_file = load(DEV)
    job = job_file
    _, samples = _training_split(job.context_length)
    per_epoch = steps_per_epoch(samples, job.batch_size * job.workers)
    steps = min(per_epoch * job.num_epochs, job.max_train_step)
    est = estimate(job_file)
    assert (est.epoch_steps, est.steps) == (per_epoch, steps)
    assert per_epoch * job.num_epochs > job.max_train_step  # maxTrainStep is what stops it
    fired = [s for s in range(1, steps + 1) if s % job.checkpoint_every == 0]
    assert est.checkpoints == len(fired) >= 2 and est.steps >= 50


def test_cpu_job_gets_no_gpu_figures_and_no_layout_warning(
    capsys: pytest.CaptureFixture[str],
) -> None:
    est = estimate(load(DEV))
    assert est.device == "cpu"
    assert est.recommendation is None and est.layout_gap == 0.0
    assert est.eta_s is None and est.cost_usd is None and est.cost_per_epoch_usd is None
    out = describe(est, str(DEV))
    assert out[-1] == CPU_LINE and len(out) == 3
    assert out[1].startswith(f"plan: {est.steps} optimizer steps (maxTrainStep; ")
    assert not [ln for ln in out if "tok/s" in ln or "GiB" in ln or "$" in ln]
    assert main(["--job", str(DEV)]) == 0
    printed = capsys.readouterr().out
    assert printed.splitlines() == out  # the GPU table of the stack's instance is not printed


def test_cpu_job_planned_on_gpus_when_asked(capsys: pytest.CaptureFixture[str]) -> None:
    """Node counts (``--nodes 1,2``) or an ``--instance`` named on the command line ask for
    GPU figures: the table is printed, and with ``--instance`` the GPU estimate too."""
    assert main(["--stack", "dev", "--nodes", "1,2"]) == 0
    out = capsys.readouterr().out
    assert "recommend @ 2 nodes:" in out and CPU_LINE not in out
    assert main(["--job", str(DEV), "--instance", "g5.xlarge"]) == 0
    out = capsys.readouterr().out
    assert "recommend @ 2 nodes:" in out and CPU_LINE not in out
    assert "plan: tiny-llama on 2 x g5.xlarge (2 GPUs)" in out


def test_cpu_job_with_a_checkpoint_it_never_reaches_is_warned_about(tmp_path: Path) -> None:
    path = tmp_path / "dev.yaml"
    path.write_text(DEV.read_text().replace("checkpointEvery: 50", "checkpointEvery: 500"))
    est = estimate(load(path, root=ROOT))
    assert est.steps is not None and est.steps < 500 and est.checkpoints == 0
    assert describe(est)[-1] == (
        f"warning: checkpointEvery 500 never fires: the job runs {est.steps} steps "
        f"(set checkpointEvery <= {est.steps // 3})"
    )


def test_bundled_sample_is_unknown_for_another_tokenizer() -> None:
    """Another model tokenizes the sample with its own tokenizer: the table does not hold
    that count, and ``--dataset samsum_sample`` says so instead of guessing."""

    def tokens(model: str) -> int:
        argv = ["--model", model, "--instance", "p5.48xlarge", "--nodes", "1"]
        return resolve_args(
            parser().parse_args([*argv, "--dataset", "samsum_sample"])
        ).inp.dataset_tokens

    with pytest.raises(UsageError, match="--dataset samsum_sample: counted with the tiny"):
        tokens("llama2-7b")
    assert tokens("tiny-llama") == SAMSUM_SAMPLE_TRAIN_TOKENS


def _blocks(text: str) -> list[tuple[str, str]]:
    """(info string, body) of each fenced block."""
    return re.findall(r"^```(\w*)\n(.*?)^```$", text, flags=re.S | re.M)


def _sets(command: str) -> list[str]:
    words = shlex.split(command.replace("\\\n", " "))
    return [words[i + 1] for i, w in enumerate(words) if w == "--set"]


def test_migrating_page_shows_what_the_planner_prints() -> None:
    """docs/migrating.md: the translated job's estimate as written (2 steps, the layout
    warning), then the same file with the page's ``--set`` fix (no warning, >= 50 steps, a
    checkpoint that fires at least twice)."""
    blocks = _blocks(MIGRATING.read_text())
    plain = [b for info, b in blocks if not info and b.startswith("plan: ")]
    assert len(plain) == 2
    as_written = describe(estimate(load(COOKBOOK)), "docs/examples/llama-cookbook.yaml")
    assert plain[0].splitlines() == as_written
    assert any(ln.startswith("warning: layout") for ln in as_written)
    (fix,) = [b for info, b in blocks if info == "bash" and "--set checkpointEvery" in b]
    fixed = estimate(load(COOKBOOK, sets=_sets(fix)))
    assert plain[1].splitlines() == describe(fixed)
    assert fixed.steps is not None and fixed.steps >= 50
    assert fixed.checkpoints is not None and fixed.checkpoints >= 2
    assert fixed.layout_gap == 0.0
    # the page's arithmetic: samsum's packed samples and the seed's samples per step
    page = MIGRATING.read_text()
    assert f"{DATASETS['samsum'] // 4096} packed samples" in page
    assert f"take {128 * 3} of them a step" in page


def test_planner_page_shows_the_demo_estimate() -> None:
    """docs/planner.md: the demo's estimate as ``planner --job`` prints it, and the figures
    its prose states."""
    page = (ROOT / "docs" / "planner.md").read_text()
    est = estimate(load(DEV))
    shown = [b for info, b in _blocks(page) if not info and CPU_LINE in b]
    assert [b.splitlines() for b in shown] == [describe(est)]
    prose = " ".join(page.split())
    assert f"{SAMSUM_SAMPLE_TRAIN_TOKENS:,} tokens" in prose
    assert f"{est.steps} steps, `maxTrainStep`, of the {est.epoch_steps} an epoch" in prose
    assert f"a checkpoint every {est.checkpoint_every} steps, {est.checkpoints} in all" in prose
