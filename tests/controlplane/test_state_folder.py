"""``eks-fsdp controlplane up`` removes its state folder after a clean stop.

If this fails, every Ctrl-C of ``controlplane up`` leaves a ~75 MB folder in the temporary
directory, private keys included, and repeated runs pile them up; or a folder the user named
with ``--state`` (or asked to keep with ``--keep-state``, or one whose logs explain a failed
stop) is removed, or kept without a word about where it is.

Nothing is mocked: ``finish_state`` works on real folders; the control-plane test (marked
``controlplane``: it needs the binaries ``make controlplane`` builds) runs ``python -m
controlplane up`` and stops it with SIGINT as a developer does.
"""

from __future__ import annotations

import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from controlplane.__main__ import finish_state

REPO = Path(__file__).resolve().parents[2]


def _state(tmp_path: Path) -> Path:
    """A state folder as ``up`` leaves one: a private key, logs."""
    state = tmp_path / "eks-fsdp-cluster-x"
    (state / "pki").mkdir(parents=True)
    (state / "pki" / "ca.key").write_text("-----BEGIN PRIVATE KEY-----\n")
    (state / "logs").mkdir()
    (state / "logs" / "etcd.log").write_text("ok\n")
    return state


def test_a_clean_stop_removes_the_folder_it_made(tmp_path: Path) -> None:
    state = _state(tmp_path)
    assert finish_state(state, created=True, keep=False, clean=True) is None
    assert not state.exists()


@pytest.mark.parametrize(
    ("created", "keep", "clean", "why"),
    [
        (False, False, True, "--state named it"),
        (True, True, True, "--keep-state"),
        (True, False, False, "the stop was not clean: its logs say why"),
    ],
)
def test_otherwise_it_is_kept_and_said_where(
    tmp_path: Path, created: bool, keep: bool, clean: bool, why: str
) -> None:
    state = _state(tmp_path)
    said = finish_state(state, created=created, keep=keep, clean=clean)
    assert said == (
        f"controlplane: state kept in {state} ({why}; certificates, private keys, logs)"
    )
    assert (state / "pki" / "ca.key").is_file()


@pytest.mark.controlplane
def test_ctrl_c_removes_the_temporary_state(built: object) -> None:
    """``up`` without ``--state``: after Ctrl-C the folder it printed is gone."""
    cmd = [sys.executable, "-m", "controlplane", "up", "--stack", "dev", "--no-kueue"]
    proc = subprocess.Popen(
        [*cmd, "--no-operator"],
        cwd=REPO,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    lines = []
    deadline = time.monotonic() + 180
    assert proc.stdout is not None
    for line in proc.stdout:
        lines.append(line)
        if line.startswith("export KUBECONFIG=") or time.monotonic() > deadline:
            break
    out = "".join(lines)
    m = re.search(r"^export KUBECONFIG=(.+)/kubeconfig$", out, re.M)
    assert m, out
    state = Path(m.group(1))
    assert state.is_dir()
    proc.send_signal(signal.SIGINT)
    rest, _ = proc.communicate(timeout=60)
    assert proc.returncode == 0, out + rest
    assert not state.exists(), out + rest
    assert "state kept" not in rest
