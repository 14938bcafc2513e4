"""``make setup``'s system packages (``scripts/system_deps.sh``) and the tests that need them.

If this fails, ``make setup`` as root kills a Prometheus the user runs (``pkill -x prometheus``
stopped every process of that name, not only the service Debian's package starts), or a
non-root user without Prometheus cannot run ``make setup`` at all although only the tests
marked ``prometheus`` need it; or those tests stop skipping with one line without it, or stop
failing when ``EKS_FSDP_REQUIRE_PROMETHEUS=1`` (CI: ``.ci/run``) demands them.

Nothing on this machine is installed, stopped or killed: the script runs with a PATH of
stand-ins for ``id``, ``apt-get``, ``systemctl``, ``invoke-rc.d``, ``update-rc.d``, ``pkill``
and ``killall`` that record their arguments (the real ``grep``, ``sort``, ``tr`` and
``dirname`` beside them). The marker's behaviour is checked by running pytest on one marked test
with a PATH that has no Prometheus.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
SCRIPT = ROOT / "scripts" / "system_deps.sh"
RECORDERS = ("apt-get", "systemctl", "invoke-rc.d", "update-rc.d", "pkill", "killall")
PROMETHEUS_TESTS = sorted(
    str(p.relative_to(ROOT))
    for p in (ROOT / "tests").rglob("test_*.py")
    if "mark.prometheus" in p.read_text()
)


def _bin(tmp_path: Path, *, uid: int, have: tuple[str, ...]) -> tuple[Path, Path]:
    """(PATH folder, call log): stand-ins that log ``name args``; ``apt-get install`` puts
    the packages' commands on the PATH as the real one would."""
    fake = tmp_path / "bin"
    fake.mkdir()
    log = tmp_path / "calls.log"
    log.touch()
    for tool in ("grep", "sort", "tr", "dirname"):
        real = shutil.which(tool)
        assert real is not None, tool
        (fake / tool).symlink_to(real)
    scripts = {name: f'echo "{name} $*" >> {log}' for name in RECORDERS}
    scripts["id"] = f'[ "$1" = -u ] && echo {uid}'
    scripts["apt-get"] += (
        f'\n[ "$1" = install ] && for p in "$@"; do case $p in prometheus|openssl) '
        f'printf "#!/bin/sh\\n" > {fake}/$p; chmod +x {fake}/$p;; esac; done; exit 0'
    )
    for name in have:
        scripts[name] = "exit 0"
    for name, body in scripts.items():
        (fake / name).write_text(f"#!/bin/sh\n{body}\n")
        (fake / name).chmod(0o755)
    return fake, log


def _run(tmp_path: Path, *, uid: int, have: tuple[str, ...]) -> tuple[int, str, list[str]]:
    fake, log = _bin(tmp_path, uid=uid, have=have)
    done = subprocess.run(
        ["/bin/bash", str(SCRIPT)],
        env={"PATH": str(fake), "HOME": str(tmp_path)},
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    return done.returncode, done.stderr, log.read_text().splitlines()


def test_as_root_only_the_packages_service_is_stopped(tmp_path: Path) -> None:
    """Both missing, as root: apt-get installs them, then the package's own service is
    stopped the way it was started (systemd, or its init script by pidfile); no pkill."""
    code, err, calls = _run(tmp_path, uid=0, have=())
    assert code == 0, err
    assert "apt-get install -y -qq --no-install-recommends prometheus openssl" in calls
    stops = [c for c in calls if not c.startswith("apt-get")]
    assert stops in (
        ["systemctl disable --now prometheus.service"],
        ["invoke-rc.d prometheus stop", "update-rc.d prometheus disable"],
    ), calls
    assert not [c for c in calls if c.startswith(("pkill", "killall"))]


def test_as_root_with_prometheus_present_nothing_is_stopped(tmp_path: Path) -> None:
    code, err, calls = _run(tmp_path, uid=0, have=("prometheus",))
    assert code == 0, err
    assert calls[-1] == "apt-get install -y -qq --no-install-recommends openssl"
    assert not [c for c in calls if not c.startswith("apt-get")]


def test_without_root_a_missing_prometheus_is_a_note_naming_the_tests(tmp_path: Path) -> None:
    """Not root, no Prometheus: exit 0 and one line naming the test files that skip."""
    code, err, calls = _run(tmp_path, uid=1000, have=("openssl",))
    assert code == 0 and calls == [], (err, calls)
    (line,) = err.splitlines()
    assert line.startswith("note: no prometheus on PATH: the tests that run it skip (")
    assert PROMETHEUS_TESTS and all(t in line for t in PROMETHEUS_TESTS), (line, PROMETHEUS_TESTS)
    assert "sudo apt-get install -y prometheus" in line


def test_without_root_a_missing_openssl_stops(tmp_path: Path) -> None:
    code, err, calls = _run(tmp_path, uid=1000, have=("prometheus",))
    assert code == 1 and calls == []
    assert "sudo apt-get install -y openssl" in err


def test_the_script_kills_nothing_by_name() -> None:
    text = "\n".join(
        ln for ln in SCRIPT.read_text().splitlines() if not ln.lstrip().startswith("#")
    )
    assert "pkill" not in text and "killall" not in text


@pytest.mark.parametrize(("require", "outcome"), [("", "1 skipped"), ("1", "1 error")])
def test_a_prometheus_test_skips_or_fails_without_it(
    tmp_path: Path, require: str, outcome: str
) -> None:
    """A marked test, run with a PATH without Prometheus: skipped with the install line, or
    an error at setup (exit 1) when ``EKS_FSDP_REQUIRE_PROMETHEUS=1``."""
    env = {
        **os.environ,
        "PATH": str(tmp_path),
        "EKS_FSDP_REQUIRE_PROMETHEUS": require,
        "PYTHONDONTWRITEBYTECODE": "1",
    }
    target = "tests/observability/test_prometheus_files.py::test_promtool_rule_unit_tests_pass"
    done = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-p", "no:xdist", target],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
        stdin=subprocess.DEVNULL,
    )
    out = done.stdout
    assert outcome in out, out + done.stderr
    assert "no prometheus or promtool on PATH: sudo apt-get install -y prometheus" in out, out
    assert done.returncode == (1 if require else 0), out
