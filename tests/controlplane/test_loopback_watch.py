"""The loopback assertion itself: ``controlplane.procs.LoopbackWatch`` sees a process's peers.

The control-plane fixture relies on it to prove that no component dialled an address outside
127.0.0.0/8. If this fails, that assertion could pass while a component talks to a cluster IP
or the outside world. No packet leaves the machine here: the "outside" peer is set with a UDP
``connect()``, which only records the peer address in the socket (nothing is sent), to
192.0.2.1 (TEST-NET-1, reserved for documentation).
"""

from __future__ import annotations

import ipaddress
import json
import os
import socket
import subprocess
import sys
from pathlib import Path

import pytest

from controlplane import loopback, procs

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


# --- the checks that do not depend on timing (controlplane.loopback) --------------------------
@pytest.mark.parametrize(
    ("line", "found"),
    [
        ('E0101 dial tcp 127.0.0.1:10250: connect: connection refused"', []),
        ("dial tcp [::1]:443: connect: connection refused", []),
        ("dial tcp localhost:6443: i/o timeout", []),
        ('{"error":"dial tcp 10.96.0.1:443: i/o timeout"}', ["dial 10.96.0.1"]),
        ("dial udp 192.0.2.1:53: connect: network is unreachable", ["dial 192.0.2.1"]),
        ("dial tcp [2001:db8::1]:443: connect: refused", ["dial [2001:db8::1]"]),
        (
            'Get "https://p5-block-3:10250/containerLogs": dial tcp: lookup p5-block-3 on '
            "127.0.0.53:53: no such host",
            ["lookup p5-block-3"],
        ),
        (
            "lookup kueue-webhook-service.kueue-system.svc: no such host",
            ["lookup kueue-webhook-service.kueue-system.svc"],
        ),
        ("lookup localhost on 10.0.0.2:53: no such host", []),
        ("Starting workers (lookup table ready)", []),
    ],
)
def test_log_lines_that_leave_loopback_are_found(line: str, found: list[str]) -> None:
    assert loopback.log_line_violations(line) == found


def test_log_violations_name_the_file_and_line(tmp_path: Path) -> None:
    log = tmp_path / "kube-apiserver.log"
    log.write_text("ok\ndial tcp 127.0.0.1:1: refused\nW dial tcp 10.96.0.1:443: i/o timeout\n")
    (got,) = loopback.log_violations([log, tmp_path / "missing.log"])
    assert got.startswith("kube-apiserver.log:3: dial 10.96.0.1 | W dial tcp 10.96.0.1:443")


class _Api:
    """The lists ``loopback.service_references`` and ``node_address_problems`` read."""

    def __init__(self, lists: dict[str, list[dict]]) -> None:
        self.lists = lists

    def items(self, api_version: str, kind: str) -> list[dict]:
        return self.lists.get(kind, [])


def test_service_references_are_found() -> None:
    ok = {"url": "https://127.0.0.1:9443/validate", "caBundle": "x"}
    api = _Api(
        {
            "ValidatingWebhookConfiguration": [
                {"metadata": {"name": "v"}, "webhooks": [{"name": "a", "clientConfig": ok}]}
            ],
            "MutatingWebhookConfiguration": [
                {
                    "metadata": {"name": "m"},
                    "webhooks": [
                        {"name": "b", "clientConfig": {"service": {"name": "s", "namespace": "n"}}},
                        {"name": "c", "clientConfig": {"url": "https://10.0.0.1:443/x"}},
                    ],
                }
            ],
            "CustomResourceDefinition": [
                {"metadata": {"name": "plain"}, "spec": {"conversion": {"strategy": "None"}}},
                {
                    "metadata": {"name": "conv"},
                    "spec": {
                        "conversion": {
                            "strategy": "Webhook",
                            "webhook": {"clientConfig": {"service": {"name": "s"}}},
                        }
                    },
                },
            ],
            "APIService": [
                {"metadata": {"name": "v1."}, "spec": {"service": None}},
                {"metadata": {"name": "v1beta1.visibility"}, "spec": {"service": {"name": "s"}}},
            ],
        }
    )
    got = loopback.service_references(api)  # type: ignore[arg-type]
    assert [g.split(":")[0] for g in got] == [
        "MutatingWebhookConfiguration m webhook b",
        "MutatingWebhookConfiguration m webhook c",
        "CustomResourceDefinition conv conversion webhook",
        "APIService v1beta1.visibility",
    ]


def test_node_addresses_other_than_127_0_0_1_are_found() -> None:
    def node(name: str, *addresses: tuple[str, str]) -> dict:
        return {
            "metadata": {"name": name},
            "status": {"addresses": [{"type": t, "address": a} for t, a in addresses]},
        }

    api = _Api(
        {
            "Node": [
                node("ok", ("InternalIP", "127.0.0.1"), ("Hostname", "ok")),
                node("far", ("InternalIP", "10.0.0.5")),
                node("ext", ("InternalIP", "127.0.0.1"), ("ExternalIP", "203.0.113.9")),
                node("none", ("Hostname", "none")),
            ]
        }
    )
    assert loopback.node_address_problems(api) == [  # type: ignore[arg-type]
        "Node far: InternalIP 10.0.0.5",
        "Node ext: ExternalIP 203.0.113.9",
        "Node none: no InternalIP address",
    ]


def test_components_do_not_inherit_the_parent_environment(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("KUBEFLOW_NAMESPACE", "someone-elses")
    monkeypatch.setenv("HTTPS_PROXY", "http://192.0.2.1:3128")
    log = tmp_path / "env.log"
    code = "import json, os; print(json.dumps(dict(os.environ)))"
    p = procs.start("env", [sys.executable, "-c", code], log, env={"KUBECONFIG": "k"})
    p.popen.wait(timeout=30)
    env = json.loads(log.read_text().splitlines()[-1])
    env.pop("LC_CTYPE", None)  # set by the Python child itself (PEP 538 locale coercion)
    home = tmp_path / "env.home"
    assert env == {
        "PATH": os.environ["PATH"],
        "HOME": str(home),
        "TMPDIR": str(home / "tmp"),
        "KUBECONFIG": "k",
    }
    assert (home / "tmp").is_dir()
