"""Whether a local job's runner is alive, right after it was started and long after.

If this fails, ``status`` right after ``submit`` or ``unsuspend`` (a loaded machine, the
runner's interpreter still starting) reports the job Failed ("the runner exited without a
result") while its runner runs, or a pid the kernel reused for another program long after
counts as the job's runner. A real child process stands in for the runner: ``sleep``, whose
command line is not the runner's.
"""

from __future__ import annotations

import os
import subprocess
import time
from pathlib import Path

from jobs.local.backend import PID, LocalBackend


def test_a_fresh_pid_counts_as_starting_and_an_old_foreign_one_does_not(tmp_path: Path) -> None:
    backend = LocalBackend(tmp_path)
    folder = backend.folder("j")
    folder.mkdir(parents=True)
    other = subprocess.Popen(["sleep", "30"])
    try:
        (folder / PID).write_text(str(other.pid))
        assert backend.alive("j")  # just written: a runner still starting
        old = time.time() - 60
        os.utime(folder / PID, (old, old))
        assert not backend.alive("j")  # a minute on, `sleep` is not a runner of this job
        other.kill()
        other.wait()
        (folder / PID).write_text(str(other.pid))
        assert not backend.alive("j")  # gone: not alive however fresh the file
    finally:
        other.kill()
