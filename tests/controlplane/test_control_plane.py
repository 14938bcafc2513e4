"""The local control plane itself: what it runs, where it listens, how it stops.

If this fails, the control plane the other tests use is not what they assume: the binaries
are not the pinned, version-stamped builds (kwok and Kueue read ``/version``), a component
listens beyond 127.0.0.1, the fake nodes lack their GPUs, or ``python -m controlplane up``
leaves processes behind after Ctrl-C.
"""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from controlplane import nodes, procs
from controlplane.cluster import ControlPlane
from infra import versions
from tests.controlplane.helpers import quantity

pytestmark = pytest.mark.controlplane
REPO = Path(__file__).resolve().parents[2]


def test_api_server_reports_the_pinned_version(control_plane: ControlPlane) -> None:
    v = control_plane.version()
    assert v["gitVersion"] == versions.CONTROL_PLANE_KUBERNETES_VERSION
    assert (v["major"], v["minor"]) == tuple(versions.KUBERNETES_VERSION.split("."))


def test_fake_gpu_nodes_are_ready_with_their_devices(control_plane: ControlPlane) -> None:
    by_name = {n["metadata"]["name"]: n for n in control_plane.client.items("v1", "Node")}
    for shape in control_plane.shapes:
        for name in shape.node_names():
            node = by_name[name]
            got = node["status"]["allocatable"]
            assert {k: quantity(v) for k, v in got.items()} == {
                k: quantity(v) for k, v in shape.capacity.items()
            }
            ready = [c for c in node["status"]["conditions"] if c["type"] == "Ready"]
            assert ready and ready[0]["status"] == "True"
    p5 = by_name["p5-block-0"]["status"]["allocatable"]
    assert (p5[nodes.GPU_RESOURCE], p5[nodes.EFA_RESOURCE]) == ("8", "32")


def test_components_listen_on_loopback_only(control_plane: ControlPlane) -> None:
    """Every listener is on 127.0.0.1, except the training operator's webhook server, whose
    main.go sets only a port (webhook.Options{Port}): it listens on every interface, and only
    the API server dials it, over loopback."""
    allowed = {
        f"0.0.0.0:{control_plane.ports['training-operator-webhook']}",
        f":::{control_plane.ports['training-operator-webhook']}",
    }
    listeners: dict[str, list[str]] = {}
    for p in control_plane.procs:
        assert p.alive(), f"{p.name} exited:\n{p.tail()}"
        for s in procs.sockets(p.pid):
            if s.state == "LISTEN":
                listeners.setdefault(p.name, []).append(s.local)
    assert {"etcd", "kube-apiserver", "kube-controller-manager", "kube-scheduler"} <= set(listeners)
    wide = [
        f"{name} {addr}"
        for name, addrs in listeners.items()
        for addr in addrs
        if not addr.startswith("127.") and addr not in allowed
    ]
    assert not wide, wide


def test_kubeconfig_is_usable(control_plane: ControlPlane) -> None:
    import yaml

    cfg = yaml.safe_load(control_plane.kubeconfig.read_text())
    assert cfg["clusters"][0]["cluster"]["server"] == control_plane.server
    assert control_plane.server.startswith("https://127.0.0.1:")


def test_up_prints_the_kubeconfig_and_ctrl_c_stops_everything(
    built: object, tmp_path: Path
) -> None:
    """``python -m controlplane up`` as a developer runs it: SIGINT leaves nothing running."""
    cmd = [
        sys.executable,
        "-m",
        "controlplane",
        "up",
        "--stack",
        "dev",
        "--no-kueue",
        "--no-operator",
        "--state",
        str(tmp_path),
    ]
    proc = subprocess.Popen(
        cmd, cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True
    )
    lines = []
    deadline = time.monotonic() + 180
    assert proc.stdout is not None
    for line in proc.stdout:
        lines.append(line)
        if line.startswith("export KUBECONFIG=") or time.monotonic() > deadline:
            break
    out = "".join(lines)
    assert f"export KUBECONFIG={tmp_path / 'kubeconfig'}" in out, out
    pids = [int(m) for m in re.findall(r"pid (\d+)", out)]
    assert len(pids) == 5, out  # etcd, apiserver, controller-manager, scheduler, kwok
    proc.send_signal(signal.SIGINT)
    rest, _ = proc.communicate(timeout=60)
    assert proc.returncode == 0, out + rest
    for pid in pids:
        with pytest.raises(ProcessLookupError):
            os.kill(pid, 0)
