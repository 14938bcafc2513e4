"""Every command reads a job file or a stack file through one reader with one error line.

A file saved as UTF-16 by a Windows editor (or with a stray Latin-1 byte) used to end
``eks-fsdp jobs submit`` and ``eks-fsdp doctor`` in a 25-line traceback with exit 1
(``eks_fsdp_cli.errors.read_text`` now reads it, for the job schema and the stack config alike).
If this fails, a user gets a traceback again instead of one line naming the file and the fix.
"""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
DEV = ROOT / "jobs" / "examples" / "dev.yaml"


def _run(*argv: str, cwd: Path = ROOT) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "eks_fsdp_cli", *argv],
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=120,
        env={
            "PATH": "/usr/bin:/bin",
            "OMP_NUM_THREADS": "1",
            "HF_HUB_OFFLINE": "1",
            "PYTHONPATH": str(ROOT),
        },
    )


@pytest.mark.parametrize(
    ("encoding", "words"),
    [("utf-16", "is UTF-16 text, not UTF-8"), ("latin-1", "is not UTF-8 text (byte 0xe9")],
)
def test_a_job_file_in_another_encoding_is_one_line(
    tmp_path: Path, encoding: str, words: str
) -> None:
    bad = tmp_path / "job.yaml"
    bad.write_bytes(DEV.read_text().replace("# The dev", "# Thé dev").encode(encoding))
    for argv in (("jobs", "submit", "--local", str(bad), "--dry-run"), ("plan", "--job", str(bad))):
        done = _run(*argv)
        assert done.returncode == 2, done.stderr
        (line,) = done.stderr.strip().splitlines()
        assert str(bad) in line and words in line and "Traceback" not in done.stderr


def test_a_stack_file_in_utf16_is_one_line(tmp_path: Path) -> None:
    checkout = tmp_path / "checkout"
    checkout.mkdir()
    shutil.copy(ROOT / "Pulumi.yaml", checkout / "Pulumi.yaml")
    (checkout / "Pulumi.dev.yaml").write_bytes(
        (ROOT / "Pulumi.dev.yaml").read_text().encode("utf-16")
    )
    from infra.config import ConfigError, load_stack_file

    with pytest.raises(ConfigError) as err:
        load_stack_file("dev", checkout)
    assert str(err.value) == (
        "Pulumi.dev.yaml: is UTF-16 text, not UTF-8: save it as UTF-8 (or convert it with iconv)"
    )
