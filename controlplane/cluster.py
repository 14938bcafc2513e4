"""Start and stop the local control plane: etcd, kube-apiserver, kube-controller-manager,
kube-scheduler, kwok with fake nodes, the training operator and Kueue.

What runs where (docs/adr/0009): every component is a local process bound to 127.0.0.1 on a
free port, with its own log file under the state folder and an environment of its own
(``procs.child_env``). The API server is started as controller-runtime's envtest starts it
(``defaultArgs`` in ``pkg/internal/testing/controlplane/apiserver.go``: etcd, a serving cert for
127.0.0.1, a client CA, service-account keys, RBAC), plus two flags of ours, neither envtest's:

- ``--endpoint-reconciler-type=none``: the default (``lease``) reconciler writes the API
  server's advertise address into the ``kubernetes`` Service's endpoints, and 127.0.0.1 is an
  address endpoint validation refuses (``ValidateEndpointIP`` in k8s.io/kubernetes
  ``pkg/apis/core/validation/validation.go``); nothing here dials that Service;
- ``--kubelet-preferred-address-types=InternalIP`` (``KUBELET_ADDRESS_TYPES``): pods/log, exec,
  attach and port-forward dial a node's kubelet at the first address of the preferred types
  (``GetConnectionInfo`` in ``pkg/kubelet/client/kubelet_client.go``, ``GetPreferredNodeAddress``
  in ``pkg/util/node/node.go``), and the default list starts with ``Hostname``
  (``cmd/kube-apiserver/app/options/options.go``), a name the host's resolver would look up.
  Every fake node's ``InternalIP`` is 127.0.0.1 (``nodes.NODE_IP``, also kwok's ``--node-ip``)
  and its ``Hostname`` ``localhost``.

The controller-manager runs service accounts and their tokens, garbage collection, namespace
deletion and the PV binder; the scheduler places pods on the fake nodes by their labels, taints
and resources (a ``KubeSchedulerConfiguration`` file, as its deprecated ``--kubeconfig`` flag
asks); kwok then plays each node's kubelet. Every component authenticates with the admin
client certificate (``system:masters``): RBAC is enforced for nothing here but what the tests
impersonate.

``ControlPlane`` is what ``eks-fsdp controlplane up`` and the tests' session fixture use.
"""

from __future__ import annotations

import json
import time
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from controlplane import nodes, operators, pki, procs
from controlplane.build import Build
from controlplane.client import ApiError, Client, wait_for
from infra import versions

SERVICE_CIDR = "10.96.0.0/16"
"""``--service-cluster-ip-range``: addresses written into Services, never dialled here."""
START_TIMEOUT_S = 120.0
_DIRECT = urllib.request.build_opener(urllib.request.ProxyHandler({}))
"""An opener that never goes through an ``http_proxy`` (every URL here is on loopback)."""
FIELD_MANAGER = "eks-fsdp-controlplane"
KWOK_NODE_LEASE_S = 40
"""kwok renews each fake node's Lease (``kube-node-lease``) for this long, as a kubelet does."""
KUBELET_ADDRESS_TYPES = "InternalIP"
"""``--kubelet-preferred-address-types``: the API server dials a kubelet at 127.0.0.1 only."""


@dataclass
class ControlPlane:
    """One control plane under ``state`` (certificates, data, logs, kubeconfig)."""

    build: Build
    state: Path
    shapes: list[nodes.NodeShape] = field(default_factory=list)
    operator: bool = True
    kueue: bool = True
    scheduler: bool = True
    procs: list[procs.Process] = field(default_factory=list)
    ports: dict[str, int] = field(default_factory=dict)
    timings: dict[str, float] = field(default_factory=dict)
    """Seconds from the start until each component was ready."""
    _client: Client | None = None

    # --- paths -------------------------------------------------------------------------------
    @property
    def kubeconfig(self) -> Path:
        return self.state / "kubeconfig"

    @property
    def logs(self) -> Path:
        return self.state / "logs"

    @property
    def server(self) -> str:
        return f"https://127.0.0.1:{self.ports['kube-apiserver']}"

    @property
    def client(self) -> Client:
        if self._client is None:
            raise RuntimeError("control plane not started")
        return self._client

    def bin(self, name: str) -> str:
        return str(self.build.binaries[name])

    # --- lifecycle ---------------------------------------------------------------------------
    def start(self) -> ControlPlane:
        """Start everything; on any failure stop what started and raise."""
        t0 = time.monotonic()
        try:
            self._start(t0)
        except BaseException:
            self.stop()
            raise
        return self

    def _mark(self, name: str, t0: float) -> None:
        self.timings[name] = round(time.monotonic() - t0, 1)

    def _start(self, t0: float) -> None:
        self.state.mkdir(parents=True, exist_ok=True)
        for name in (
            "etcd",
            "etcd-peer",
            "kube-apiserver",
            "kube-controller-manager",
            "kube-scheduler",
        ):
            self.ports[name] = procs.free_port()
        certs = pki.cluster_pki(self.state / "pki")
        self._write_kubeconfig(certs)
        self._client = Client(self.server, certs.ca.cert, certs.admin.cert, certs.admin.key)

        self._start_etcd()
        self._wait_http("etcd", f"http://127.0.0.1:{self.ports['etcd']}/health", b'"true"')
        self._mark("etcd", t0)
        self._start_apiserver(certs)
        wait_for(
            "kube-apiserver /readyz", self._alive_and(self.client.ready), timeout=START_TIMEOUT_S
        )
        self._mark("kube-apiserver", t0)

        self._start_controller_manager(certs)
        if self.scheduler:
            self._start_scheduler()
        self._start_kwok()
        for shape in self.shapes:
            for node in nodes.node_objects(shape):
                self.client.apply(node, field_manager=FIELD_MANAGER, force=True)
        wait_for("fake nodes Ready", self._alive_and(self._nodes_ready), timeout=START_TIMEOUT_S)
        self._mark("kwok", t0)
        wait_for(
            "default ServiceAccount (kube-controller-manager)",
            self._alive_and(lambda: self.client.find("v1", "ServiceAccount", "default", "default")),
            timeout=START_TIMEOUT_S,
        )
        self._mark("kube-controller-manager", t0)

        if self.operator:
            self._start_training_operator()
            self._mark("training-operator", t0)
        if self.kueue:
            self._start_kueue()
            self._mark("kueue", t0)
        self.client.forget_discovery()

    def stop(self) -> dict[str, int | None]:
        """Stop every component (newest first); the exit codes. Idempotent."""
        return procs.stop(reversed(self.procs))

    def __enter__(self) -> ControlPlane:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def _alive_and(self, probe: Any) -> Any:
        def check() -> Any:
            for p in self.procs:
                if not p.alive():
                    raise RuntimeError(f"{p.name} exited ({p.popen.returncode}):\n{p.tail()}")
            return probe()

        return check

    def _spawn(
        self,
        name: str,
        argv: list[str],
        env: dict[str, str] | None = None,
        home: Path | None = None,
    ) -> None:
        """Start a component: log ``logs/<name>.log``, ``HOME`` = ``home`` (default
        ``home/<name>`` under the state folder), its environment ``procs.child_env``'s."""
        home = home if home is not None else self.state / "home" / name
        log = self.logs / f"{name}.log"
        self.procs.append(procs.start(name, argv, log, env=env, home=home))

    def _wait_http(self, name: str, url: str, expect: bytes = b"ok") -> None:
        def probe() -> bool:
            try:
                with _DIRECT.open(url, timeout=2) as resp:
                    return expect in resp.read()
            except OSError:
                return False

        wait_for(f"{name} {url}", self._alive_and(probe), timeout=START_TIMEOUT_S)

    # --- components --------------------------------------------------------------------------
    def _write_kubeconfig(self, certs: pki.ClusterPki) -> None:
        config = {
            "apiVersion": "v1",
            "kind": "Config",
            "clusters": [
                {
                    "name": "local",
                    "cluster": {"server": self.server, "certificate-authority": str(certs.ca.cert)},
                }
            ],
            "users": [
                {
                    "name": "admin",
                    "user": {
                        "client-certificate": str(certs.admin.cert),
                        "client-key": str(certs.admin.key),
                    },
                }
            ],
            "contexts": [{"name": "local", "context": {"cluster": "local", "user": "admin"}}],
            "current-context": "local",
        }
        self.kubeconfig.write_text(yaml.safe_dump(config, sort_keys=False))
        self.kubeconfig.chmod(0o600)

    def _start_etcd(self) -> None:
        client = f"http://127.0.0.1:{self.ports['etcd']}"
        peer = f"http://127.0.0.1:{self.ports['etcd-peer']}"
        self._spawn(
            "etcd",
            [
                self.bin("etcd"),
                "--name=local",
                f"--data-dir={self.state / 'etcd'}",
                f"--listen-client-urls={client}",
                f"--advertise-client-urls={client}",
                f"--listen-peer-urls={peer}",
                f"--initial-advertise-peer-urls={peer}",
                f"--initial-cluster=local={peer}",
                "--unsafe-no-fsync",
                "--log-level=warn",
            ],
        )

    def _start_apiserver(self, certs: pki.ClusterPki) -> None:
        port = self.ports["kube-apiserver"]
        self._spawn(
            "kube-apiserver",
            [
                self.bin("kube-apiserver"),
                f"--etcd-servers=http://127.0.0.1:{self.ports['etcd']}",
                "--bind-address=127.0.0.1",
                "--advertise-address=127.0.0.1",
                f"--secure-port={port}",
                f"--cert-dir={self.state / 'apiserver'}",
                f"--tls-cert-file={certs.serving.cert}",
                f"--tls-private-key-file={certs.serving.key}",
                f"--client-ca-file={certs.ca.cert}",
                "--service-account-issuer=https://kubernetes.default.svc.cluster.local",
                f"--service-account-key-file={certs.sa_pub}",
                f"--service-account-signing-key-file={certs.sa_key}",
                f"--service-cluster-ip-range={SERVICE_CIDR}",
                "--authorization-mode=RBAC",
                "--allow-privileged=true",
                "--endpoint-reconciler-type=none",
                f"--kubelet-preferred-address-types={KUBELET_ADDRESS_TYPES}",
            ],
        )

    def _component_auth(self) -> list[str]:
        """The serving flags both components take: loopback, the admin kubeconfig."""
        k = str(self.kubeconfig)
        return [
            f"--authentication-kubeconfig={k}",
            f"--authorization-kubeconfig={k}",
            "--bind-address=127.0.0.1",
        ]

    def _start_controller_manager(self, certs: pki.ClusterPki) -> None:
        self._spawn(
            "kube-controller-manager",
            [
                self.bin("kube-controller-manager"),
                f"--kubeconfig={self.kubeconfig}",
                "--leader-elect=false",
                *self._component_auth(),
                f"--secure-port={self.ports['kube-controller-manager']}",
                f"--service-account-private-key-file={certs.sa_key}",
                f"--root-ca-file={certs.ca.cert}",
                f"--cluster-signing-cert-file={certs.ca.cert}",
                f"--cluster-signing-key-file={certs.ca.key}",
                f"--service-cluster-ip-range={SERVICE_CIDR}",
            ],
        )

    def _start_scheduler(self) -> None:
        config = self.state / "kube-scheduler.yaml"
        config.write_text(yaml.safe_dump(scheduler_configuration(self.kubeconfig), sort_keys=False))
        self._spawn(
            "kube-scheduler",
            [
                self.bin("kube-scheduler"),
                f"--config={config}",
                *self._component_auth(),
                f"--secure-port={self.ports['kube-scheduler']}",
            ],
        )

    def _start_kwok(self) -> None:
        folder = self.state / "kwok"
        folder.mkdir(parents=True, exist_ok=True)
        config = folder / "kwok.yaml"
        config.write_text(nodes.kwok_config(self.build.manifest_files("kwok")))
        self._spawn(
            "kwok",
            [
                self.bin("kwok"),
                f"--kubeconfig={self.kubeconfig}",
                f"--config={config}",
                f"--manage-nodes-with-annotation-selector={nodes.KWOK_NODE_ANNOTATION}=fake",
                f"--node-ip={nodes.NODE_IP}",
                # kwok's default (40 s) does not survive a --config file here: without leases
                # the node-lifecycle controller found every node not Ready about once a minute.
                f"--node-lease-duration-seconds={KWOK_NODE_LEASE_S}",
            ],
            home=folder,  # kwok also reads ~/.kwok/kwok.yaml
        )

    def _nodes_ready(self) -> bool:
        want = {n for s in self.shapes for n in s.node_names()}
        ready = set()
        for node in self.client.items("v1", "Node"):
            for cond in node.get("status", {}).get("conditions", []):
                if cond["type"] == "Ready" and cond["status"] == "True":
                    ready.add(node["metadata"]["name"])
        return want <= ready

    # --- operators ---------------------------------------------------------------------------
    def apply_all(self, objs: list[dict[str, Any]]) -> None:
        for obj in objs:
            self.client.apply(obj, field_manager=FIELD_MANAGER, force=True)

    def _install_crds(self, crds: list[dict[str, Any]]) -> None:
        self.apply_all(crds)

        def established() -> bool:
            for crd in crds:
                got = self.client.read(crd)
                conds = {
                    c["type"]: c["status"]
                    for c in (got.get("status") or {}).get("conditions") or []
                }
                if conds.get("Established") != "True":
                    return False
            return True

        wait_for("CRDs Established", established, timeout=START_TIMEOUT_S)
        self.client.forget_discovery()

    def _seed_certs(self, server: operators.WebhookServer, folder: Path) -> Any:
        certs = operators.make_certs(server, folder / "pki")
        self.apply_all(
            [operators.namespace(server.namespace), operators.cert_secret(server, certs)]
        )
        return certs

    def _start_training_operator(self) -> None:
        folder = self.state / "training-operator"
        server = operators.TRAINING_OPERATOR
        docs = operators.load_docs(self.build.manifest_files("training-operator"))
        self._install_crds([d for d in docs if d["kind"] == "CustomResourceDefinition"])
        certs = self._seed_certs(server, folder)
        webhook, health, metrics = procs.free_port(), procs.free_port(), procs.free_port()
        self.ports.update(
            {"training-operator-webhook": webhook, "training-operator-health": health}
        )
        self.apply_all(operators.webhook_configurations(docs, server, webhook, certs.ca.cert_b64()))
        tmpdir = folder / "tmp"
        certs.write_serving_folder(tmpdir / "k8s-webhook-server" / "serving-certs")
        lock = self.build.root.parent / "runtime-cert.lock"
        # Its /readyz answers once the rotator found the certificate (operators.runtime_cert).
        with operators.runtime_cert(certs.serving.cert_pem(), lock):
            self._spawn(
                "training-operator",
                [
                    self.bin("training-operator"),
                    f"--metrics-bind-address=127.0.0.1:{metrics}",
                    f"--health-probe-bind-address=127.0.0.1:{health}",
                    f"--webhook-server-port={webhook}",
                ],
                env={
                    "KUBECONFIG": str(self.kubeconfig),
                    "TMPDIR": str(tmpdir),
                    "MY_POD_NAMESPACE": server.namespace,
                },
                home=folder,
            )
            self._wait_http("training-operator", f"http://127.0.0.1:{health}/readyz")

    def _start_kueue(self) -> None:
        folder = self.state / "kueue"
        server = operators.KUEUE
        webhook, health = procs.free_port(), procs.free_port()
        self.ports.update({"kueue-webhook": webhook, "kueue-health": health})
        certs = self._seed_certs(server, folder)
        ca = certs.ca.cert_b64()
        docs = operators.load_docs(self.build.manifest_files("kueue"))
        crds = [
            operators.with_conversion_webhook(d, server, webhook, ca)
            for d in docs
            if d["kind"] == "CustomResourceDefinition"
        ]
        self._install_crds(crds)
        self.apply_all(operators.webhook_configurations(docs, server, webhook, ca))
        cert_dir = certs.write_serving_folder(folder / "serving-certs")
        config = folder / "config.yaml"
        config.write_text(
            yaml.safe_dump(
                operators.kueue_configuration(
                    webhook_port=webhook, health_port=health, cert_dir=cert_dir
                ),
                sort_keys=False,
            )
        )
        self._spawn(
            "kueue",
            [
                self.bin("kueue"),
                f"--config={config}",
                # The visibility API server (an aggregated APIService named by a Service) is off.
                "--feature-gates=VisibilityOnDemand=false",
            ],
            env={"KUBECONFIG": str(self.kubeconfig)},
            home=folder,
        )
        self._wait_http("kueue", f"http://127.0.0.1:{health}/readyz")

    # --- reporting ---------------------------------------------------------------------------
    def summary(self) -> str:
        """What runs where, one line per component."""
        lines = [f"kubeconfig: {self.kubeconfig}", f"API server: {self.server}"]
        for p in self.procs:
            lines.append(f"  {p.name:<24} pid {p.pid:<8} log {p.log}")
        lines.append("ready after (s): " + json.dumps(self.timings))
        return "\n".join(lines)

    def version(self) -> dict[str, Any]:
        """The API server's ``/version`` (the stamped gitVersion)."""
        return dict(self.client.get("/version"))


def scheduler_configuration(kubeconfig: Path) -> dict[str, Any]:
    """kube-scheduler's ``--config`` (``kubescheduler.config.k8s.io/v1``): the admin
    kubeconfig, no leader election; every other field is the scheduler's default."""
    return {
        "apiVersion": "kubescheduler.config.k8s.io/v1",
        "kind": "KubeSchedulerConfiguration",
        "clientConnection": {"kubeconfig": str(kubeconfig)},
        "leaderElection": {"leaderElect": False},
    }


def expected_git_version() -> str:
    return versions.CONTROL_PLANE_KUBERNETES_VERSION


__all__ = ["ApiError", "ControlPlane", "expected_git_version"]
