"""``eks-fsdp``, the console script: installed by the Makefile's own recipe, it lists every
command, and every command (also as ``python -m MODULE``) answers bad input with one line
``eks-fsdp <command>: error: ...`` and exit status 2, with "did you mean" for flags, verbs,
stacks and models.

If this fails, ``make setup`` no longer installs the command, a command prints argparse's
usage block or its own prefix again, a misspelt ``--stak`` reads as a missing ``--stack``, or
``--model meta-llama/Llama-2-7b-hf`` (the id ``--stack p5-16`` maps) is unknown to the planner.

The script is installed into a fresh virtualenv (``python -m venv --without-pip``) that sees the
project's environment through a ``.pth`` file, by ``make`` running the ``.cli-installed``
recipe with ``VENV`` pointing there: the same ``pip install --no-deps --no-build-isolation
--no-index -e .`` that ``make setup`` runs, offline. Only ``--help`` and bad-input paths run:
no training, no cluster, no AWS.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import sysconfig
from pathlib import Path

import pytest

from eks_fsdp_cli.errors import stacks
from eks_fsdp_cli.main import COMMANDS

ROOT = Path(__file__).resolve().parents[1]
ENV = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONDONTWRITEBYTECODE": "1"}


@pytest.fixture(scope="module")
def script(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """``eks-fsdp`` as the Makefile installs it, in a virtualenv of its own."""
    venv = tmp_path_factory.mktemp("cli") / "venv"
    base = getattr(sys, "_base_executable", sys.executable)
    subprocess.run([base, "-m", "venv", "--without-pip", str(venv)], check=True)
    purelib = Path(sysconfig.get_paths(vars={"base": str(venv)})["purelib"])
    (purelib / "_project_env.pth").write_text(sysconfig.get_paths()["purelib"] + "\n")
    stamp = venv / ".cli-installed"
    done = subprocess.run(
        ["make", "-s", "-B", str(stamp), f"VENV={venv}"],
        cwd=ROOT,
        env=ENV,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    path = venv / "bin" / "eks-fsdp"
    assert path.is_file() and os.access(path, os.X_OK)
    return path


def _run(argv: list[str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(argv, cwd=ROOT, env=ENV, capture_output=True, text=True, timeout=120)


def _one_error(done: subprocess.CompletedProcess[str], command: str | None) -> str:
    """The single stderr line of a usage error, checked for the format and exit status 2."""
    lines = done.stderr.splitlines()
    prefix = f"eks-fsdp {command}: error: " if command else "eks-fsdp: error: "
    assert done.returncode == 2 and len(lines) == 1, (done.returncode, done.stderr)
    assert lines[0].startswith(prefix), lines[0]
    return lines[0]


def test_setup_runs_the_install_recipe() -> None:
    """``make setup`` reaches the recipe the fixture runs (a dry run prints it)."""
    dry = _run(["make", "-n", "-B", "setup"])
    assert "pip install --quiet --no-deps --no-build-isolation --no-index -e ." in dry.stdout


def test_help_lists_every_command(script: Path) -> None:
    done = _run([str(script), "--help"])
    assert done.returncode == 0, done.stderr
    listed = [line.split()[0] for line in done.stdout.splitlines() if line.startswith("  ")]
    assert listed == list(COMMANDS)


@pytest.mark.parametrize("command", list(COMMANDS))
def test_a_bad_flag_is_one_line_and_exit_2(script: Path, command: str) -> None:
    """Through the console script and through ``python -m``: the same line, naming the
    command and the flag. ``python -m training.finetune`` (what torchrun starts in the pods)
    prints it through ``training.errors``, the format ``eks_fsdp_cli.errors`` takes."""
    via_script = _one_error(_run([str(script), command, "--bogusflag"]), command)
    assert "--bogusflag" in via_script
    module = COMMANDS[command].module.split()  # the module, then any leading arguments
    via_module = _one_error(_run([sys.executable, "-m", *module, "--bogusflag"]), command)
    assert via_module == via_script


@pytest.mark.parametrize(
    ("argv", "command", "expected"),
    [
        (["plan", "--stak", "p5-16"], "plan", "unrecognized arguments: --stak p5-16"),
        (["render", "--stak", "dev", "--out", "x"], "render", "unrecognized arguments: --stak"),
        (["doctor", "--stak", "p5-16"], "doctor", "unrecognized arguments: --stak"),
        (
            ["new-stack", "x", "--instance", "p5.48xlarge", "--nodes", "2", "--regoin", "a"],
            "new-stack",
            "unrecognized arguments: --regoin (did you mean --region",
        ),
        (
            ["train", "--enable_fdsp"],
            "train",
            "unknown flag --enable_fdsp (did you mean --enable_fsdp",
        ),
    ],
)
def test_a_misspelt_flag_is_named_with_the_flag_meant(
    script: Path, argv: list[str], command: str, expected: str
) -> None:
    """argparse alone would report ``--stak`` as a missing ``--stack`` where it is required
    (and ``--regoin`` as a missing ``--region``)."""
    line = _one_error(_run([str(script), *argv]), command)
    meant = "" if "did you mean" in expected else " (did you mean --stack"
    assert line.endswith(f"{expected}{meant}?)")


def test_a_misspelt_verb_and_command(script: Path) -> None:
    line = _one_error(_run([str(script), "jobs", "sbmit", "x.yaml"]), "jobs")
    assert "invalid choice: 'sbmit'" in line and line.endswith("(did you mean submit?)")
    line = _one_error(_run([str(script), "plna"]), None)
    assert line.startswith("eks-fsdp: error: unknown command 'plna' (did you mean plan?)")


@pytest.mark.parametrize(
    ("command", "typo", "meant"), [("plan", "p5", "p5-16"), ("render", "de", "dev")]
)
def test_an_unknown_stack_lists_the_stacks(
    script: Path, command: str, typo: str, meant: str
) -> None:
    """The missing stack file's message (infra.config) with the stack meant and the list."""
    names = stacks(ROOT)
    assert meant in names
    argv = [str(script), command, "--stack", typo]
    line = _one_error(_run(argv + (["--out", "unused"] if command == "render" else [])), command)
    assert f"Pulumi.{typo}.yaml" in line
    assert line.endswith(f"(did you mean {meant}? stacks: {', '.join(names)})")


def test_a_model_by_its_hugging_face_id(script: Path) -> None:
    """The id ``--stack p5-16`` maps (``planner.args.builtin_for_hub_id``) plans as the
    built-in it stands for: the same figures, row by row."""
    flags = ["--instance", "p5.48xlarge", "--nodes", "1,2", "--json"]
    by_id = _run([str(script), "plan", "--model", "meta-llama/Llama-2-7b-hf", *flags])
    by_key = _run([str(script), "plan", "--model", "llama2-7b", *flags])
    assert by_id.returncode == 0 and by_key.returncode == 0, by_id.stderr + by_key.stderr
    rows_id, rows_key = json.loads(by_id.stdout), json.loads(by_key.stdout)
    assert len(rows_id) == 2 and rows_id == rows_key


def test_an_unknown_model_gets_the_closest_name(script: Path) -> None:
    argv = [str(script), "plan", "--model", "llama2-7", "--instance", "p5.48xlarge"]
    line = _one_error(_run([*argv, "--nodes", "1"]), "plan")
    assert "--model llama2-7: unknown (did you mean llama2-7b?)" in line


def test_jobs_imports_neither_torch_nor_pulumi() -> None:
    """``eks-fsdp jobs`` on a deploy laptop: the dispatcher imports only the command it runs."""
    code = (
        "import sys\n"
        "from eks_fsdp_cli.main import main\n"
        "assert main(['jobs', '--help']) == 0\n"
        "print(sorted(m for m in ('torch', 'pulumi', 'pulumi_aws') if m in sys.modules))\n"
    )
    done = _run([sys.executable, "-c", code])
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines()[-1] == "[]"


def test_flags_are_matched_without_their_dashes() -> None:
    """Every flag starts with ``--``: compared with them, ``--bogus`` came out as close to
    ``--out`` (difflib's ratio 0.67 >= 0.6); without them it is close to nothing."""
    from eks_fsdp_cli.errors import Parser, hint

    p = Parser(command="x")
    p.add_argument("--out")
    p.add_argument("--stack")
    assert hint("unrecognized arguments: --bogus", p) == "unrecognized arguments: --bogus"
    assert hint("unrecognized arguments: --stak=a", p).endswith("(did you mean --stack?)")
    assert hint("unrecognized arguments: --ou", p).endswith("(did you mean --out?)")


HELP_PAGES = [
    *([name] for name in COMMANDS),
    ["controlplane", "build"],
    ["controlplane", "up"],
    ["jobs", "submit"],
    ["jobs", "data"],
    ["plan", "calibrate"],
]
"""Every command's ``--help`` and the verbs whose help is built from a module docstring."""
_MARKUP = re.compile(r"``|:(?:func|class|mod|meth|attr|data):`|^\.\. \w+::", re.M)
"""reStructuredText a terminal shows as it is: inline literals, roles, directives."""


@pytest.mark.parametrize("argv", HELP_PAGES, ids=" ".join)
def test_help_shows_no_restructuredtext(argv: list[str], capsys: pytest.CaptureFixture) -> None:
    """``eks-fsdp controlplane --help`` printed its module docstring's first line as it was
    (````eks-fsdp controlplane {build,up}````): help text is for a terminal, not Sphinx."""
    from eks_fsdp_cli.main import main

    assert main([*argv, "--help"]) == 0
    out = capsys.readouterr().out
    assert out.strip(), argv
    assert not _MARKUP.findall(out), out
