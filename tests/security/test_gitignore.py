"""``.gitignore`` keeps cluster credentials and secrets out of commits.

If this fails, a ``git add .`` after docs/deploy.md's ``pulumi stack output kubeconfig >
kubeconfig.yaml`` (or a kubeconfig saved in a subfolder, or a ``.env`` holding ``HF_TOKEN``
or AWS keys) stages a credential, and a push publishes it; or the ignore rules grew so wide
that they hide a source file.

Nothing is created: ``git check-ignore --no-index`` asks git's own matcher about each path
(git-check-ignore(1): ``--no-index`` also tests paths that are tracked or do not exist).
"""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]

SECRETS = (
    "kubeconfig",
    "kubeconfig.yaml",
    "kubeconfig.yml",
    "kubeconfig-my-p5",
    "my-p5.kubeconfig",
    "clusters/my-p5/kubeconfig",
    "clusters/my-p5/kubeconfig.yaml",
    "out/p5/kubeconfig-p5-16",
    ".env",
    ".env.local",
    "jobs/.env",
)
"""Where people put kubeconfigs and environment files (the repository root and subfolders)."""
SOURCES = (
    "docs/deploy.md",
    "controlplane/client.py",
    "tests/controlplane/conftest.py",
    "jobs/examples/p5-16.yaml",
    "Pulumi.p5-16.yaml",
    ".envrc.example",
)
"""Files that must stay visible to git."""


def _ignored(path: str) -> bool:
    done = subprocess.run(
        ["git", "check-ignore", "--no-index", "-q", path], cwd=ROOT, check=False, timeout=30
    )
    assert done.returncode in (0, 1), f"git check-ignore {path}: exit {done.returncode}"
    return done.returncode == 0


@pytest.mark.parametrize("path", SECRETS)
def test_credentials_are_ignored(path: str) -> None:
    assert _ignored(path), f"{path} would be committed: add it to .gitignore"


@pytest.mark.parametrize("path", SOURCES)
def test_sources_are_not_ignored(path: str) -> None:
    assert not _ignored(path), f"{path} is hidden by .gitignore"
