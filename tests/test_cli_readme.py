"""Every command of the README's ``bash`` blocks that needs no AWS runs here as spelt (issue 34,
"done when": every command in the README and docs/deploy.md that needs no AWS runs in the
suite; docs/deploy.md's are tests/infra/test_deploy_doc.py).

If this fails, the README shows a command that no longer runs (a renamed flag, a module that
moved, a stack or job file that is gone), or a new kind of command appeared that nobody
classified as runnable here or not.

Nothing is mocked: the README is read as it is; the planner lines (``new-stack`` writes files)
run as subprocesses in a copy of the checkout's packages and stack files. Not run here, each
for a stated reason (``ELSEWHERE``): the installs (``make``) and the virtualenv's activation
(``source``), Pulumi (a backend and AWS), the cluster's jobs (a cluster), ``torchrun`` with 8
GPUs, the doctor line (the deploy guide's same line runs against moto's EC2 on loopback), and
the local demo (``make demo``'s command, slow: its own test below). ``eks-fsdp X`` is the
console script ``make setup`` installs (``eks_fsdp_cli.main:entry``), run here as
``python -m eks_fsdp_cli X`` as tests/infra/test_deploy_doc.py runs the guide's.
"""

from __future__ import annotations

import os
import re
import shlex
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
README = (ROOT / "README.md").read_text()
DEPLOY_DOC = (ROOT / "docs" / "deploy.md").read_text()
ELSEWHERE = {
    "make ": "installs (make setup / demo / test): the suite runs in what they made",
    "source ": "the virtualenv make setup made, activated: the suite runs in it already",
    "(cd policy && pulumi install)": "the policy pack's environment: Pulumi's own install",
    "pulumi ": "a Pulumi backend and AWS",
    "torchrun ": "eight GPU processes (training itself: tests/training)",
    "python -m doctor ": "the AWS account: the deploy guide's same line runs against moto",
    "eks-fsdp doctor ": "the AWS account: the deploy guide's same line runs against moto",
    "eks-fsdp jobs submit --local ": "the demo: test_the_local_demo_line_runs (slow)",
    "eks-fsdp jobs ": "a cluster (tests/controlplane runs submit, list, logs, resume)",
    "python -m jobs submit --local ": "the demo: test_the_local_demo_line_runs (slow)",
    "python -m jobs ": "a cluster (tests/controlplane runs submit, list, logs, resume)",
}
"""Command prefixes not run by ``test_every_readme_command_that_needs_no_aws_runs``."""
COPIED = ("infra", "jobs", "planner", "training", "workloads", "doctor", "eks_fsdp_cli")


def commands(text: str) -> list[str]:
    """The command lines of the ```bash blocks: continuations joined, comments dropped, ``&&``
    chains split into their commands (a parenthesised ``(cd ... && ...)`` kept whole)."""
    out: list[str] = []
    for block in re.findall(r"```bash\n(.*?)```", text, flags=re.S):
        for line in block.replace("\\\n", " ").splitlines():
            line = line.split("  #", 1)[0].split(" # ", 1)[0].strip()
            if not line or line.startswith("#"):
                continue
            parts = re.split(r" && (?![^(]*\))", line)
            out += [" ".join(p.split()) for p in parts if p.strip()]
    return out


def _elsewhere(command: str) -> bool:
    return command.startswith(tuple(ELSEWHERE))


def _argv(command: str) -> list[str]:
    """A README line as this interpreter runs it: ``python -m M ...`` or ``eks-fsdp X ...``
    (``python -m eks_fsdp_cli X ...``)."""
    argv = shlex.split(command)
    if argv[0] == "eks-fsdp":
        return [sys.executable, "-m", "eks_fsdp_cli", *argv[1:]]
    assert argv[:2] == ["python", "-m"], f"unclassified command in the README: {command}"
    return [sys.executable, *argv[1:]]


@pytest.fixture(scope="module")
def checkout(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A copy of the checkout's Python packages and stack files: ``new-stack`` writes there."""
    root = tmp_path_factory.mktemp("readme")
    ignore = shutil.ignore_patterns("__pycache__", "venv", "*.pyc")
    for name in COPIED:
        shutil.copytree(ROOT / name, root / name, ignore=ignore)
    for path in ROOT.glob("Pulumi*.yaml"):
        shutil.copy(path, root / path.name)
    return root


def test_the_readme_commands_are_all_classified() -> None:
    """Each command either runs below or is one of ``ELSEWHERE``'s, and the README still holds
    the ones the issue names (new-stack, doctor, submit)."""
    found = commands(README)
    ours = [c for c in found if not _elsewhere(c)]
    assert ours and all(
        c.startswith(("python -m planner", "eks-fsdp plan ", "eks-fsdp new-stack")) for c in ours
    )
    assert any(c.startswith("eks-fsdp new-stack ") for c in found)
    assert any(c.startswith("eks-fsdp jobs submit ") for c in found)
    # the console script is on PATH only once the virtualenv is active: that line comes first
    first = next(i for i, c in enumerate(found) if c.startswith("eks-fsdp "))
    assert "source .venv/bin/activate" in found[:first], found[:first]
    doctor = [c for c in found if c.startswith(("python -m doctor ", "eks-fsdp doctor "))]
    # the deploy guide's same line; its test runs it against moto
    assert doctor and all(
        c.replace("python -m doctor", "eks-fsdp doctor") in commands(DEPLOY_DOC) for c in doctor
    ), doctor


def test_every_readme_command_that_needs_no_aws_runs(checkout: Path) -> None:
    env = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONPATH": str(checkout)}
    ran = []
    for command in (c for c in commands(README) if not _elsewhere(c)):
        done = subprocess.run(
            _argv(command),
            cwd=checkout,
            env=env,
            capture_output=True,
            text=True,
            timeout=300,
        )
        assert done.returncode == 0, f"{command}\n{done.stdout}{done.stderr}"
        ran.append(command)
    assert len(ran) >= 3, ran  # new-stack and the two fleet plans
    assert (checkout / "Pulumi.my-p5.yaml").is_file()
    assert (checkout / "jobs" / "my-p5.yaml").is_file()


@pytest.mark.slow
def test_the_local_demo_line_runs(tmp_path: Path) -> None:
    """``eks-fsdp jobs submit --local jobs/examples/dev.yaml --follow``, as spelt, in a jobs
    folder of its own (``EKS_FSDP_JOBS_DIR``): the demo trains to the end and exits 0."""
    local = ("eks-fsdp jobs submit --local ", "python -m jobs submit --local ")
    (line,) = [c for c in commands(README) if c.startswith(local)]
    env = {
        **os.environ,
        "OMP_NUM_THREADS": "1",
        "EKS_FSDP_JOBS_DIR": str(tmp_path / "jobs"),
        "HF_HUB_OFFLINE": "1",
    }
    done = subprocess.run(
        _argv(line),
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=900,
    )
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    assert (tmp_path / "jobs" / "llama-finetune-dev" / "job.yaml").is_file()
