"""The loopback assertion itself: ``controlplane.procs.LoopbackWatch`` sees a process's peers.

The control-plane fixture relies on it to prove that no component dialled an address outside
127.0.0.0/8. If this fails, that assertion could pass while a component talks to a cluster IP
or the outside world. No packet leaves the machine here: the "outside" peer is set with a UDP
``connect()``, which only records the peer address in the socket (nothing is sent), to
192.0.2.1 (TEST-NET-1, reserved for documentation).
"""

from __future__ import annotations

import ipaddress
import socket
import subprocess
import sys
from pathlib import Path

import pytest

from controlplane import procs

CHILD = """
import socket, sys, time
s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM if sys.argv[1] == "udp" else socket.SOCK_STREAM)
s.connect((sys.argv[2], int(sys.argv[3])))
print("connected", flush=True)
time.sleep(30)
"""


def _child(tmp_path: Path, proto: str, host: str, port: int) -> procs.Process:
    log = tmp_path / f"{proto}-{host}.log"
    p = procs.start("child", [sys.executable, "-c", CHILD, proto, host, str(port)], log)
    for _ in range(100):
        if "connected" in log.read_text().splitlines() or not p.alive():
            break
        procs.wait_alive(p, 0.05)
    return p


def test_a_peer_outside_loopback_is_reported(tmp_path: Path) -> None:
    probe = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    try:
        probe.connect(("192.0.2.1", 9))  # a route lookup only: nothing is sent
    except OSError:
        pytest.skip("no route to 192.0.2.1 on this machine (no default route)")
    finally:
        probe.close()
    p = _child(tmp_path, "udp", "192.0.2.1", 9)
    try:
        watch = procs.LoopbackWatch([p])
        watch.sample()
        assert len(watch.violations) == 1, watch.violations
        assert "-> 192.0.2.1:9" in watch.violations[0]
    finally:
        procs.stop([p])


def test_loopback_peers_are_not_reported(tmp_path: Path) -> None:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as server:
        server.bind(("127.0.0.1", 0))
        server.listen()
        p = _child(tmp_path, "tcp", "127.0.0.1", server.getsockname()[1])
        try:
            conn, _ = server.accept()
            conn.close()
            socks = procs.sockets(p.pid)
            assert any(s.proto == "tcp" and s.remote_is_loopback for s in socks), socks
            watch = procs.LoopbackWatch([p])
            watch.sample()
            assert watch.violations == []
        finally:
            procs.stop([p])


def test_ipv6_addresses_decode() -> None:
    addr, port = procs._decode("00000000000000000000000001000000:1F90")
    assert (str(addr), port) == ("::1", 8080)
    assert procs.is_loopback(addr)
    mapped, _ = procs._decode("0000000000000000FFFF00000100007F:0050")
    assert mapped == ipaddress.IPv6Address("::ffff:127.0.0.1") and procs.is_loopback(mapped)
    outside, _ = procs._decode("0100000A:0050")
    assert str(outside) == "10.0.0.1" and not procs.is_loopback(outside)


def test_stop_leaves_nothing_running(tmp_path: Path) -> None:
    p = procs.start("sleeper", ["sleep", "60"], tmp_path / "sleep.log")
    codes = procs.stop([p], timeout=5)
    assert codes == {"sleeper": -15}
    assert subprocess.run(["kill", "-0", str(p.pid)], capture_output=True).returncode != 0
