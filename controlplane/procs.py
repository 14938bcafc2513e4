"""Processes of the control plane: start with a log file each, stop in order, watch sockets.

Every component runs in a session of its own (a Ctrl-C in the terminal reaches only the
Python parent, which stops the components in reverse order) and with ``PR_SET_PDEATHSIG`` set
to SIGKILL, so a parent that dies without cleaning up takes its components with it.

``LoopbackWatch`` samples the TCP and UDP sockets each component process holds (its
``/proc/<pid>/fd`` socket inodes looked up in ``/proc/<pid>/net/{tcp,tcp6,udp,udp6}``) and
records any peer address outside 127.0.0.0/8 (or ::1): a component that dialled a cluster IP,
a node or pod IP, or anything off the machine. It runs for the whole session, so a connection
attempt that lasts a fraction of a second may slip between two samples, and a DNS query
even more so; one that retries (as clients of an unreachable address do) does not.
``controlplane.loopback`` holds the checks that do not depend on timing.

Each component gets a minimal environment (``child_env``), not the parent's.
"""

from __future__ import annotations

import contextlib
import ctypes
import ipaddress
import os
import signal
import socket
import subprocess
import threading
import time
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Protocol

_PR_SET_PDEATHSIG = 1
STOP_TIMEOUT_S = 10.0
"""SIGTERM, then SIGKILL after this long."""


def free_port() -> int:
    """A TCP port free on 127.0.0.1 now (the kernel's pick)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _die_with_parent() -> None:  # runs in the child between fork and exec
    libc = ctypes.CDLL(None, use_errno=True)
    libc.prctl(_PR_SET_PDEATHSIG, signal.SIGKILL)


def child_env(home: Path, extra: dict[str, str] | None = None) -> dict[str, str]:
    """A component's whole environment: the parent's ``PATH``, ``HOME`` = ``home`` and
    ``TMPDIR`` = ``home/tmp`` (both created), then ``extra`` (what the component needs).

    Nothing else of the parent's environment reaches a component: a variable from a
    developer's shell (``KUBEFLOW_NAMESPACE`` narrows the training operator to one namespace,
    ``KUBECONFIG`` or ``KUBERNETES_SERVICE_HOST`` point a client elsewhere, ``HTTPS_PROXY`` makes
    a Go client dial a proxy) cannot change what runs here, and ``HOME`` keeps the
    developer's ``~/.kube`` and ``~/.kwok`` out of reach."""
    tmp = home / "tmp"
    tmp.mkdir(parents=True, exist_ok=True)
    env = {"PATH": os.environ.get("PATH") or os.defpath, "HOME": str(home), "TMPDIR": str(tmp)}
    env.update(extra or {})
    return env


@dataclass
class Process:
    """One running component."""

    name: str
    argv: list[str]
    log: Path
    popen: subprocess.Popen[bytes]

    @property
    def pid(self) -> int:
        return self.popen.pid

    def alive(self) -> bool:
        return self.popen.poll() is None

    def tail(self, lines: int = 30) -> str:
        try:
            text = self.log.read_text(errors="replace")
        except OSError:
            return ""
        return "\n".join(text.splitlines()[-lines:])


def start(
    name: str,
    argv: list[str],
    log: Path,
    *,
    env: dict[str, str] | None = None,
    home: Path | None = None,
    cwd: Path | None = None,
) -> Process:
    """Start ``argv`` with stdout and stderr to ``log``, in ``child_env(home, env)`` (``home``
    defaults to ``<log folder>/<name>.home``)."""
    log.parent.mkdir(parents=True, exist_ok=True)
    home = home if home is not None else log.parent / f"{name}.home"
    with log.open("ab") as fh:
        fh.write(f"$ {' '.join(argv)}\n".encode())
        fh.flush()
        popen = subprocess.Popen(
            argv,
            stdout=fh,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            env=child_env(home, env),
            cwd=cwd,
            start_new_session=True,
            preexec_fn=_die_with_parent,  # only prctl: no locks taken
        )
    return Process(name=name, argv=argv, log=log, popen=popen)


def stop(procs: Iterable[Process], timeout: float = STOP_TIMEOUT_S) -> dict[str, int | None]:
    """SIGTERM each (in the order given), SIGKILL what is left after ``timeout``; exit codes."""
    procs = list(procs)
    for p in procs:
        if p.alive():
            with contextlib.suppress(ProcessLookupError):
                os.killpg(p.pid, signal.SIGTERM)
            with contextlib.suppress(subprocess.TimeoutExpired):
                p.popen.wait(timeout=timeout)
    for p in procs:
        if p.alive():
            with contextlib.suppress(ProcessLookupError):
                os.killpg(p.pid, signal.SIGKILL)
            p.popen.wait(timeout=timeout)
    return {p.name: p.popen.returncode for p in procs}


# --- sockets ---------------------------------------------------------------------------------
_TCP_STATES = {"01": "ESTABLISHED", "02": "SYN_SENT", "03": "SYN_RECV", "0A": "LISTEN"}


def _decode(hex_addr: str) -> tuple[ipaddress.IPv4Address | ipaddress.IPv6Address, int]:
    host, port = hex_addr.split(":")
    raw = bytes.fromhex(host)
    if len(raw) == 4:
        return ipaddress.IPv4Address(raw[::-1]), int(port, 16)
    words = b"".join(raw[i : i + 4][::-1] for i in range(0, 16, 4))
    return ipaddress.IPv6Address(words), int(port, 16)


def is_loopback(addr: ipaddress.IPv4Address | ipaddress.IPv6Address) -> bool:
    if isinstance(addr, ipaddress.IPv6Address) and addr.ipv4_mapped is not None:
        addr = addr.ipv4_mapped
    return addr.is_loopback


@dataclass(frozen=True)
class Socket:
    """One socket of a process, from ``/proc/<pid>/net/*``."""

    proto: str
    local: str
    remote: str
    state: str
    remote_is_loopback: bool
    remote_unset: bool


def sockets(pid: int) -> list[Socket]:
    """The TCP/UDP sockets process ``pid`` holds (empty when it is gone)."""
    inodes = set()
    try:
        for fd in os.listdir(f"/proc/{pid}/fd"):
            try:
                target = os.readlink(f"/proc/{pid}/fd/{fd}")
            except OSError:
                continue
            if target.startswith("socket:["):
                inodes.add(target[8:-1])
    except OSError:
        return []
    out = []
    for proto in ("tcp", "tcp6", "udp", "udp6"):
        try:
            lines = Path(f"/proc/{pid}/net/{proto}").read_text().splitlines()[1:]
        except OSError:
            continue
        for line in lines:
            cols = line.split()
            if len(cols) < 10 or cols[9] not in inodes:
                continue
            (laddr, lport), (raddr, rport) = _decode(cols[1]), _decode(cols[2])
            out.append(
                Socket(
                    proto=proto,
                    local=f"{laddr}:{lport}",
                    remote=f"{raddr}:{rport}",
                    state=_TCP_STATES.get(cols[3], cols[3]) if proto.startswith("tcp") else "",
                    remote_is_loopback=is_loopback(raddr),
                    remote_unset=raddr.is_unspecified and rport == 0,
                )
            )
    return out


class Watched(Protocol):
    """What ``LoopbackWatch`` needs of a process: a name and a pid."""

    @property
    def name(self) -> str: ...
    @property
    def pid(self) -> int: ...


@dataclass
class LoopbackWatch:
    """Samples the sockets of ``procs`` (``Process``es, or anything with a name and a pid)
    every ``interval`` s; ``violations`` lists each peer outside loopback once, with the
    component that held it."""

    procs: Sequence[Watched]
    interval: float = 0.5
    violations: list[str] = field(default_factory=list)
    samples: int = 0
    _stop: threading.Event = field(default_factory=threading.Event)
    _thread: threading.Thread | None = None

    def sample(self) -> None:
        for p in list(self.procs):
            for s in sockets(p.pid):
                if s.remote_unset or s.remote_is_loopback:
                    continue
                line = f"{p.name} (pid {p.pid}): {s.proto} {s.local} -> {s.remote} {s.state}"
                if line not in self.violations:
                    self.violations.append(line)
        self.samples += 1

    def _run(self) -> None:
        while not self._stop.wait(self.interval):
            self.sample()

    def start(self) -> LoopbackWatch:
        self._thread = threading.Thread(target=self._run, name="loopback-watch", daemon=True)
        self._thread.start()
        return self

    def stop(self) -> list[str]:
        """Stop sampling (after one last sample); the violations seen."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=5)
        self.sample()
        return list(self.violations)


def wait_alive(p: Process, seconds: float) -> None:
    """Raise with the log's tail if ``p`` exited within ``seconds``."""
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if not p.alive():
            raise RuntimeError(f"{p.name} exited ({p.popen.returncode}):\n{p.tail()}")
        time.sleep(0.1)
