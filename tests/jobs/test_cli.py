"""The job CLI's surface: every verb's ``--help`` shows an example that parses, and the local
runner's settings are the ones ``eks-fsdp local`` runs for the same job.

If these fail, a user reading ``--help`` would copy an example the CLI refuses, or ``make demo``
through the job CLI would train a different job than the local runner did.
"""

from __future__ import annotations

import shlex

import pytest

from jobs import cli

VERBS = ("submit", "list", "status", "logs", "cancel", "resume")


@pytest.mark.parametrize("verb", VERBS)
def test_help_of_each_verb_shows_examples_that_parse(
    verb: str, capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(SystemExit) as done:
        cli.main([verb, "--help"])
    assert done.value.code == 0
    out = capsys.readouterr().out
    examples = [
        line.strip().split("   (")[0]
        for line in out.splitlines()
        if line.strip().startswith(f"eks-fsdp jobs {verb}")
    ]
    assert examples, out
    parser = cli._parser()
    for example in examples:
        argv = shlex.split(example.replace("<", "").replace(">", ""))[2:]
        args = parser.parse_args(argv)
        assert args.verb == verb


def test_the_top_level_help_names_every_verb(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit):
        cli.main(["--help"])
    out = capsys.readouterr().out
    assert all(v in out for v in VERBS)


def test_no_verb_is_a_usage_error(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as done:
        cli.main([])
    assert done.value.code == 2


def test_a_local_job_is_the_job_python_m_localrun_runs(tmp_path: pytest.TempPathFactory) -> None:
    """``make demo`` moved from ``eks-fsdp local`` to ``submit --local``: the same pods,
    flags and losses (only the rendezvous id is fresh per submission)."""
    from pathlib import Path

    from jobs.build import load_example
    from jobs.local.backend import local_settings
    from jobs.schema import load
    from localrun.job import local_job_settings, localize
    from localrun.options import LocalOptions

    dev = Path(__file__).resolve().parents[2] / "jobs" / "examples" / "dev.yaml"
    shared = Path(str(tmp_path))
    job, device = local_settings(load(dev), generation=1, rdzv_id="fresh")
    _, w = load_example("dev")  # what `eks-fsdp local` runs: the stack's example job
    their_device = w.device
    theirs = local_job_settings(LocalOptions(stack="dev"), shared, w.job, w.device)
    assert device == their_device == "cpu"
    mine = localize(job, device, shared)
    assert mine.rdzv_id == "fresh"
    assert mine.replace(rdzv_id="") == theirs.replace(rdzv_id="")
