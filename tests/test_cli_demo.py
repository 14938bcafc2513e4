"""``make demo`` installs what the demo runs and nothing else: one virtualenv (.venv), the
training environment, the job's Kubernetes spec builders and etcd; no root, no Pulumi, no
security-tools or deploy virtualenv, no system packages (Prometheus is optional: a note).

If this fails, a new machine's first command again builds three virtualenvs (about 3 GB) and
asks for root (``scripts/system_deps.sh``), or the demo imports a package its install leaves
out. Read from ``make -n -B demo`` (the commands make would run, none run) and from the
installed packages' own metadata (``importlib.metadata``), so neither can drift from the
Makefile.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from importlib import metadata
from pathlib import Path

from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

ROOT = Path(__file__).resolve().parents[1]


def _dry_run() -> list[str]:
    # run as a user would, also when the suite itself runs under make (`make test`): no
    # inherited MAKEFLAGS, no "Entering/Leaving directory" lines
    env = {k: v for k, v in os.environ.items() if k not in ("MAKEFLAGS", "MFLAGS", "MAKELEVEL")}
    done = subprocess.run(
        ["make", "--no-print-directory", "-n", "-B", "demo"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=60,
        env=env,
    )
    assert done.returncode == 0, done.stderr
    return done.stdout.splitlines()


def test_demo_builds_one_venv_and_needs_no_root() -> None:
    lines = _dry_run()
    text = "\n".join(lines)
    for absent in (".venv-tools", ".venv-deploy", "system_deps.sh", "requirements-tools.txt"):
        assert absent not in text, absent
    commands = [ln for ln in lines if not ln.startswith(("echo", "command -v"))]
    assert not [c for c in commands if re.match(r"(sudo|apt-get)\b", c)]
    venvs = {m.group(1) for c in commands for m in re.finditer(r"-m venv (\S+)", c)}
    assert venvs == {".venv"}
    assert any("-r training/requirements.txt" in c for c in commands)
    assert lines[-1].endswith(
        "eks-fsdp jobs submit --local jobs/examples/dev.yaml --replace --follow"
    )


def _demo_distributions() -> tuple[set[str], set[str]]:
    """What the demo's pip line installs: its requirement files and the pins its grep picks
    (run as make prints it), each with its dependencies, from the installed metadata; and the
    optional dependencies (extras) of those, which a package imports only when present."""
    (line,) = [ln for ln in _dry_run() if "-r training/requirements.txt" in ln]
    words = subprocess.run(
        ["bash", "-c", "printf '%s\\n' " + line.split(" install --quiet ", 1)[1]],
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=True,
    ).stdout.split()
    wanted: list[str] = []
    it = iter(words)
    for word in it:
        if word == "-r":
            wanted += [
                ln.split("#")[0].strip()
                for ln in (ROOT / next(it)).read_text().splitlines()
                if ln.split("#")[0].strip() and not ln.startswith("-")
            ]
        else:
            wanted.append(word)
    seen: set[str] = set()
    optional: set[str] = set()
    todo = [Requirement(w).name for w in wanted]
    while todo:
        name = canonicalize_name(todo.pop())
        if name in seen:
            continue
        seen.add(name)
        for spec in metadata.requires(name) or []:
            req = Requirement(spec)
            if req.marker is None or req.marker.evaluate({"extra": ""}):
                todo.append(req.name)
            else:
                optional.add(canonicalize_name(req.name))
    return seen, optional


def test_demo_install_covers_what_the_demo_imports() -> None:
    """The local submit path (CLI, job file, the job's objects, the local runner, etcd) imported
    in a fresh interpreter: every third-party module it loads comes from a distribution the
    demo installs. Pulumi is not among them."""
    code = (
        "import sys\n"
        "before = set(sys.modules)\n"
        "import eks_fsdp_cli.main, jobs.cli, jobs.local.backend, jobs.local.worker, localrun.runner\n"
        "import localrun.etcd_server\n"
        "from jobs.schema import load\n"
        "from jobs.build import build\n"
        "build(load('jobs/examples/dev.yaml'))\n"
        "print(' '.join(sorted({m.split('.')[0] for m in set(sys.modules) - before})))\n"
    )
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    done = subprocess.run(
        [sys.executable, "-c", code], cwd=ROOT, env=env, capture_output=True, text=True
    )
    assert done.returncode == 0, done.stderr
    modules = done.stdout.split()
    owners = metadata.packages_distributions()
    installed, optional = _demo_distributions()
    assert "pulumi" not in installed and "pulumi" not in modules
    own = {"eks-fsdp"}  # this checkout's own packages (the editable install of the CLI)
    missing = {
        m: owners[m]
        for m in modules
        if m in owners
        and not {canonicalize_name(d) for d in owners[m]} & (installed | optional | own)
    }
    assert not missing, missing
