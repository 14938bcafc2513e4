"""The documents say what the code and each other say, and render as written.

If this fails, a reader is told something false: ``docs/cli.md`` lists fewer ``jobs`` verbs
than ``eks-fsdp jobs --help`` shows; ``policy/requirements.txt`` says ``pulumi preview
--policy-pack`` makes the pack's virtualenv where ``docs/deploy.md`` (rightly) says it does not,
so a reader skips ``pulumi install`` and the preview fails; or a code fence closes on a line
that carries text, so the renderer runs the fence into the next paragraph.

Nothing is mocked: the files are read as they are, the ``jobs`` verbs from the parser
``eks-fsdp jobs`` builds.
"""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
MARKDOWN = sorted([ROOT / "README.md", *(ROOT / "docs").rglob("*.md")])
_FENCE_LINE = re.compile(r"^\s*(```|~~~)[\w+-]*\s*$")


def test_code_fences_stand_on_lines_of_their_own() -> None:
    """CommonMark (spec 0.31, "Fenced code blocks"): a closing fence is the fence characters
    alone, optionally indented and followed by spaces; text after it keeps the block open."""
    bad = [
        f"{path.relative_to(ROOT)}:{n}: {line.strip()}"
        for path in MARKDOWN
        for n, line in enumerate(path.read_text().splitlines(), 1)
        if ("```" in line or line.lstrip().startswith("~~~"))
        and not _FENCE_LINE.match(line)
        and line.lstrip().startswith(("```", "~~~"))
    ]
    assert not bad, "\n".join(bad)


def test_cli_md_lists_every_jobs_verb() -> None:
    import argparse

    from jobs.cli import _parser

    (sub,) = [a for a in _parser()._actions if isinstance(a, argparse._SubParsersAction)]
    verbs = list(sub.choices)
    (row,) = [
        ln
        for ln in (ROOT / "docs" / "cli.md").read_text().splitlines()
        if "`eks-fsdp jobs VERB`" in ln
    ]
    listed = re.findall(r"`(\w+)`", row.split("|")[2])
    assert sorted(listed) == sorted(verbs), (listed, verbs)


def test_who_makes_the_policy_pack_virtualenv_is_said_one_way() -> None:
    """pulumi/pulumi installs a policy pack's dependencies for the packs Pulumi Cloud hands
    out (``pkg/backend/httpstate/policypack.go`` ``installRequiredPolicy``, PR 19570), not for
    a local ``--policy-pack`` folder, which must be "present on disk" (Pulumi docs, Policies
    FAQ): ``pulumi install`` in ``policy/`` makes ``policy/venv`` (PR 16438)."""
    claims = re.compile(
        r"preview[^\n]*\bcreates? (the )?policy/venv|policy/venv[^\n]*created by[^\n]*preview"
    )
    files = [ROOT / "policy" / "requirements.txt", ROOT / "policy" / "PulumiPolicy.yaml", *MARKDOWN]
    wrong = [str(p.relative_to(ROOT)) for p in files if claims.search(p.read_text())]
    assert not wrong, wrong
    assert "pulumi install" in (ROOT / "policy" / "requirements.txt").read_text()
    assert "does not create it on `preview`/`up`" in (ROOT / "docs" / "deploy.md").read_text()
