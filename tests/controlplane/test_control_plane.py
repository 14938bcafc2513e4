"""The local control plane itself: what it runs, where it listens, how it stops.

If this fails, the control plane the other tests use is not what they assume: the binaries
are not the pinned, version-stamped builds (kwok and Kueue read ``/version``), a component
listens beyond 127.0.0.1, the API server would dial a node's kubelet by a name rather than at
127.0.0.1, a component inherits the developer's environment, the fake nodes lack their GPUs,
or ``eks-fsdp controlplane up`` leaves processes behind after Ctrl-C (however it was
started: ``.ci/run`` runs that test again with SIGINT ignored) or dials off loopback.
"""

from __future__ import annotations

import os
import re
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path
from types import SimpleNamespace

import pytest

from controlplane import loopback, nodes, procs
from controlplane.client import ApiError
from controlplane.cluster import KUBELET_ADDRESS_TYPES, ControlPlane
from controlplane.nodes import NODE_HOSTNAME, NODE_IP
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


def test_nodes_are_reached_at_127_0_0_1_only(control_plane: ControlPlane) -> None:
    """Every Node's ``InternalIP`` is kwok's ``--node-ip``, and the API server reaches a kubelet
    at that address only (``--kubelet-preferred-address-types=InternalIP``)."""
    assert loopback.node_address_problems(control_plane.client) == []
    for node in control_plane.client.items("v1", "Node"):
        assert node["status"]["addresses"] == [
            {"type": "InternalIP", "address": NODE_IP},
            {"type": "Hostname", "address": NODE_HOSTNAME},
        ], node["metadata"]["name"]
    (apiserver,) = [p for p in control_plane.procs if p.name == "kube-apiserver"]
    assert f"--kubelet-preferred-address-types={KUBELET_ADDRESS_TYPES}" in apiserver.argv
    assert KUBELET_ADDRESS_TYPES == "InternalIP"


def test_pod_logs_dial_the_node_ip_not_its_hostname(control_plane: ControlPlane) -> None:
    """pods/log makes the API server dial the pod's node. A node (not kwok's) whose first
    address is ``Hostname: localhost`` (a name ``/etc/hosts`` resolves: no DNS query even if
    the flag were lost) and whose ``InternalIP`` is 127.0.0.1: the request must go to
    127.0.0.1:10250, where no kubelet listens, and the error says so. With the API server's
    default address order it would go to ``localhost:10250``."""
    with socket.socket() as s:
        if s.connect_ex(("127.0.0.1", 10250)) == 0:
            pytest.skip("something listens on 127.0.0.1:10250 (a kubelet?) on this machine")
    client = control_plane.client
    node = {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {"name": "kubelet-address-probe"},
        "status": {
            "addresses": [
                {"type": "Hostname", "address": "localhost"},
                {"type": "InternalIP", "address": NODE_IP},
            ]
        },
    }
    pod = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "kubelet-address-probe", "namespace": "default"},
        "spec": {
            "nodeName": node["metadata"]["name"],
            "containers": [{"name": "c", "image": "registry.k8s.io/pause:3.10"}],
        },
    }
    try:
        created = client.create(node)
        if not created.get("status", {}).get("addresses"):
            client.replace_status({**created, "status": node["status"]})
        client.create(pod)
        with pytest.raises(ApiError) as err:
            client.get(f"{client.path(pod)}/log")
        message = str(err.value)
        assert f"{NODE_IP}:10250" in message, message
        assert "localhost" not in message, message
    finally:
        client.request("DELETE", client.path(pod), query={"gracePeriodSeconds": "0"})
        client.delete(node)


def test_components_get_a_minimal_environment(control_plane: ControlPlane) -> None:
    """No variable of the parent's environment but PATH reaches a component (a developer's
    ``KUBEFLOW_NAMESPACE`` would narrow the operator to one namespace)."""
    extra = {"training-operator": {"KUBECONFIG", "MY_POD_NAMESPACE"}, "kueue": {"KUBECONFIG"}}
    for p in control_plane.procs:
        raw = Path(f"/proc/{p.pid}/environ").read_bytes().split(b"\0")
        env = dict(v.decode().split("=", 1) for v in raw if v)
        assert set(env) == {"PATH", "HOME", "TMPDIR", *extra.get(p.name, ())}, (p.name, env)
        assert env["PATH"] == os.environ["PATH"]
        assert Path(env["HOME"]).is_relative_to(control_plane.state), (p.name, env)


def test_kubeconfig_is_usable(control_plane: ControlPlane) -> None:
    import yaml

    cfg = yaml.safe_load(control_plane.kubeconfig.read_text())
    assert cfg["clusters"][0]["cluster"]["server"] == control_plane.server
    assert control_plane.server.startswith("https://127.0.0.1:")


def test_up_prints_the_kubeconfig_and_ctrl_c_stops_everything(
    built: object, tmp_path: Path
) -> None:
    """``eks-fsdp controlplane up`` as a developer runs it: SIGINT leaves nothing running."""
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
    components = [
        SimpleNamespace(name=m.group(1), pid=int(m.group(2)))
        for m in re.finditer(r"^\s+(\S+)\s+pid (\d+)", out, re.MULTILINE)
    ]
    # etcd, apiserver, controller-manager, scheduler, kwok
    assert len(components) == 5, out
    watch = procs.LoopbackWatch(components).start()
    time.sleep(2)  # a few samples of the running components
    proc.send_signal(signal.SIGINT)
    rest, _ = proc.communicate(timeout=60)
    violations = watch.stop()
    assert proc.returncode == 0, out + rest
    for c in components:
        with pytest.raises(ProcessLookupError):
            os.kill(c.pid, 0)
    assert watch.samples > 0
    assert not violations, violations
    # a folder named with --state is the user's: kept, and said where
    assert f"controlplane: state kept in {tmp_path} (--state named it;" in rest, rest
    logs = sorted((tmp_path / "logs").glob("*.log"))
    assert len(logs) == 5, logs
    assert loopback.log_violations(logs) == []
