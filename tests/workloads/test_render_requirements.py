"""``pip install -r requirements.txt`` alone is enough for ``eks-fsdp render``, and a bad
``--out`` is one line.

Nothing is mocked: the virtualenv ``make setup`` builds from requirements.txt alone
(``.venv-deploy``: no torch, none of requirements-dev.txt; the test checks it holds every pin)
renders a stack; its files must equal the ones the full development environment renders. If this fails, the README's deploy steps
crash with an ImportError (kubernetes-validate used to live only in requirements-dev.txt), or
an unwritable ``--out`` prints a traceback instead of naming the culprit.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from workloads import render

REPO = Path(__file__).resolve().parents[2]
IMAGE = "123456789012.dkr.ecr.us-east-2.amazonaws.com/eks-fsdp-p5-16-training:sha-0123456789ab"
"""A registry image as ``pulumi stack output trainingImage`` gives it (GPU jobs need one)."""


DEPLOY_ENV = REPO / ".venv-deploy"
"""``make setup`` builds it from requirements.txt alone, as a deploy machine would."""


def _pins(text: str) -> set[str]:
    return {
        line.split("#", 1)[0].strip().lower().replace("_", "-")
        for line in text.splitlines()
        if line.split("#", 1)[0].strip()
    }


@pytest.mark.slow
def test_render_runs_from_requirements_txt_alone(tmp_path: Path) -> None:
    python = DEPLOY_ENV / "bin" / "python"
    assert python.exists(), f"{DEPLOY_ENV} is missing: run `make setup`"
    # The environment holds exactly what requirements.txt pins (and their dependencies).
    freeze = subprocess.run(
        [str(python), "-m", "pip", "freeze", "--disable-pip-version-check"],
        capture_output=True, text=True, check=True,
    )  # fmt: skip
    missing = _pins((REPO / "requirements.txt").read_text()) - _pins(freeze.stdout)
    assert not missing, f"{DEPLOY_ENV} is stale (run `make setup`): {sorted(missing)}"
    no_torch = subprocess.run(
        [str(python), "-c", "import importlib.util as u; print(u.find_spec('torch') is None)"],
        capture_output=True, text=True, check=True,
    )  # fmt: skip
    assert no_torch.stdout.strip() == "True"
    fresh, full = tmp_path / "fresh", tmp_path / "full"
    out = subprocess.run(
        [str(python), "-m", "workloads.render", "--stack", "p5-16", "--image", IMAGE,
         "--out", str(fresh)],
        cwd=REPO, capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert out.returncode == 0, out.stderr
    subprocess.run(
        [sys.executable, "-m", "workloads.render", "--stack", "p5-16", "--image", IMAGE,
         "--out", str(full)],
        cwd=REPO, capture_output=True, text=True, timeout=300, check=True,
    )  # fmt: skip
    files = sorted(p.relative_to(fresh) for p in fresh.rglob("*.yaml"))
    assert files == sorted(p.relative_to(full) for p in full.rglob("*.yaml"))
    assert Path("pytorchjob.yaml") in files and Path("checkpoint-volume.yaml") in files
    for rel in files:
        assert (fresh / rel).read_text() == (full / rel).read_text(), rel


@pytest.mark.parametrize("kind", ["a-file", "under-a-file"])
def test_unwritable_out_is_one_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], kind: str
) -> None:
    blocker = tmp_path / "blocker"
    blocker.write_text("not a folder")
    out = blocker if kind == "a-file" else blocker / "sub"
    assert render.main(["--stack", "dev", "--out", str(out)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "Traceback" not in err
    assert err.startswith(f"eks-fsdp render: error: --out {out}: cannot write ")


def test_the_documented_apply_sequence_names_every_rendered_file(tmp_path: Path) -> None:
    """docs/deploy.md's kubectl sequence applies every file render writes for an FSx stack
    (checkpoint-volume.yaml was once missing, leaving the job Pending on its claim)."""
    import re

    argv = ["--stack", "p5-16", "--image", IMAGE, "--debug-tools", "--out", str(tmp_path)]
    assert render.main(argv) == 0
    rendered = {p.name for p in tmp_path.glob("*.yaml")} - {"observability.yaml"}
    doc = (REPO / "docs" / "deploy.md").read_text()
    section = doc.split("## Applying the rendered objects with kubectl", 1)[1].split("\n## ", 1)[0]
    applied = set(re.findall(r"kubectl apply -f out/p5-16/([\w.-]+\.yaml)", section))
    # p5-16 rendezvous through c10d; etcd.yaml is documented for the etcd backends
    assert rendered <= applied and applied - rendered <= {"etcd.yaml"}
    assert "kubectl apply --server-side -k out/p5-16/training-operator" in section
    order = [section.index(f"out/p5-16/{n}") for n in ("checkpoint-volume.yaml", "pytorchjob.yaml")]
    assert order == sorted(order)  # the claim exists before the job asks for it
