"""The Kubeflow training operator and Kueue on the local control plane: CRDs, webhooks, certs.

Both operators serve admission webhooks (and Kueue CRD conversion) and both run
open-policy-agent/cert-controller's rotator (``pkg/rotator/rotator.go``), which in a cluster
creates a CA and a serving certificate in a Secret, waits for the kubelet to mount that
Secret as files, and injects the CA into the webhook configurations. Here no kubelet mounts
anything, so ``prepare_*`` pre-seeds what the rotator checks:

- the Secret (``ca.crt``, ``ca.key``, ``tls.crt``, ``tls.key``) must exist before the rotator
  starts: its first refresh ``Get``s it and the manager exits if it is missing;
- the serving files: the rotator only ``stat``s ``<CertDir>/tls.crt``, once, at start
  (``ensureCertsMounted``, exponential back-off over about 17 minutes, then it gives up and
  the operator never becomes ready); controller-runtime's webhook server reads
  ``tls.crt``/``tls.key`` from its own ``CertDir``;
- the configurations the rotator injects into exist before it starts, each with a
  ``clientConfig`` (for a CRD, ``spec.conversion.webhook.clientConfig``). A missing one is
  only logged (``Webhook not found. Unable to update certificate.``, ``ensureCerts``) and
  skipped, so it would later be served with no CA of ours; one present without a
  ``clientConfig`` fails the injection, and ``ensureReady`` then never completes.

The certificates are valid for the DNS name the rotator checks *and* 127.0.0.1, so the rotator
keeps them and the caBundle stays the CA that signed the files.

**Loopback only.** Upstream's webhook configurations name a Service; the API server would
dial its cluster IP, which does not exist here and must never be tried. Every ``clientConfig``
becomes ``url: https://127.0.0.1:<port><path>``.

Training operator (kubeflow/training-operator ``cmd/training-operator.v1/main.go`` and
``pkg/cert/cert.go`` at the pin): Secret ``training-operator-webhook-cert`` in
``$MY_POD_NAMESPACE`` (``kubeflow``), CA ``training-operator-ca``, DNS name
``training-operator.kubeflow.svc``, configuration ``validator.training-operator.kubeflow.org``;
its rotator's ``CertDir`` is a constant (``certDir``, ``RUNTIME_CERT_DIR`` here) while its
webhook server (no ``CertDir`` option) reads ``$TMPDIR/k8s-webhook-server/serving-certs``
(``os.TempDir()``, controller-runtime ``pkg/webhook/server.go``). The process gets a
``TMPDIR`` of its own holding the real files; the constant path, in the world-shared temp
folder, only needs a ``tls.crt`` to exist until the operator is ready (``runtime_cert``: the
certificate alone, never the key). Its webhook server takes only ``--webhook-server-port``
and so listens on every interface (``webhook.Options{Port: …}``); nothing dials it but the
API server over loopback.

Kueue (sigs.k8s.io/kueue ``pkg/util/cert/cert.go``, ``apis/config/v1beta2/defaults.go`` at the
pin): Secret ``kueue-webhook-server-cert`` in ``kueue-system``, CA ``kueue-ca``, DNS name
``kueue-webhook-service.kueue-system.svc``, configurations
``kueue-{validating,mutating}-webhook-configuration`` (``config/default`` ``namePrefix:
kueue-``) and the conversion webhooks of five CRDs (``config/components/crd/kustomization.yaml``
patches). Its Configuration file sets the webhook host, port and ``certDir`` (its default is
the same constant folder as the operator's, hence a folder of its own).
"""

from __future__ import annotations

import contextlib
import copy
import fcntl
import os
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from controlplane import pki
from infra import versions

RUNTIME_CERT_DIR = Path("/tmp/k8s-webhook-server/serving-certs")
"""The training operator's rotator ``CertDir`` (a constant in its ``pkg/cert/cert.go``)."""


@contextlib.contextmanager
def runtime_cert(cert_pem: bytes, lock: Path, folder: Path = RUNTIME_CERT_DIR) -> Iterator[bool]:
    """``<folder>/tls.crt`` exists while the block runs; yields whether it was written here.

    The training operator's rotator ``stat``s that file once, at start, and its ``/readyz``
    answers only after the rotator is ready (``setupProbeEndpoints`` in its
    ``cmd/training-operator.v1/main.go``), so a block that waits for ``/readyz`` needs the
    file no longer. Written only when absent (``O_EXCL``; a file already there is someone
    else's and stays as it is), only the certificate (nothing reads a key there), removed
    afterwards with the folders made for it. ``lock`` (an ``flock``) holds off a second
    control plane until the first one's operator is ready, so neither removes the file
    while the other's rotator still looks for it."""
    lock.parent.mkdir(parents=True, exist_ok=True)
    with lock.open("a") as fh:
        fcntl.flock(fh, fcntl.LOCK_EX)
        made = []
        for path in reversed((folder, *folder.parents)):
            if not path.exists():
                path.mkdir()
                made.append(path)
        cert = folder / "tls.crt"
        try:
            fd = os.open(cert, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o644)
        except FileExistsError:
            fd = -1
        if fd >= 0:
            with os.fdopen(fd, "wb") as out:
                out.write(cert_pem)
        try:
            yield fd >= 0
        finally:
            if fd >= 0:
                cert.unlink(missing_ok=True)
            for path in reversed(made):
                with contextlib.suppress(OSError):
                    path.rmdir()  # only when empty


@dataclass(frozen=True, kw_only=True)
class WebhookServer:
    """What one operator's cert rotator and webhook server expect."""

    namespace: str
    secret: str
    ca_name: str
    organization: str
    service: str
    validating: str | None = None
    """ValidatingWebhookConfiguration name."""
    mutating: str | None = None
    """MutatingWebhookConfiguration name."""
    conversion_crds: tuple[str, ...] = ()
    """CRDs whose conversion webhook the rotator injects."""


TRAINING_OPERATOR = WebhookServer(
    namespace=versions.TRAINING_OPERATOR_NAMESPACE,
    secret="training-operator-webhook-cert",
    ca_name="training-operator-ca",
    organization="training-operator",
    service="training-operator",
    validating="validator.training-operator.kubeflow.org",
)
KUEUE = WebhookServer(
    namespace="kueue-system",
    secret="kueue-webhook-server-cert",
    ca_name="kueue-ca",
    organization="kueue",
    service="kueue-webhook-service",
    validating="kueue-validating-webhook-configuration",
    mutating="kueue-mutating-webhook-configuration",
    conversion_crds=tuple(
        f"{r}.kueue.x-k8s.io"
        for r in ("localqueues", "clusterqueues", "cohorts", "workloads", "multikueueclusters")
    ),
)
KUEUE_TEST_FRAMEWORKS = ("batch/job",)
"""Kueue integrations enabled here besides the stack's (``workloads.specs.kueue.FRAMEWORKS``):
plain Jobs, which the control-plane tests use as the smallest queued workload."""


def load_docs(paths: Iterable[Path]) -> list[dict[str, Any]]:
    """Every YAML document of ``paths``, in order, empty ones dropped."""
    docs: list[dict[str, Any]] = []
    for path in paths:
        docs.extend(d for d in yaml.safe_load_all(path.read_text()) if d)
    return docs


def loopback_client_config(client_config: dict[str, Any], port: int, ca_b64: str) -> dict:
    """``clientConfig`` with its ``service`` replaced by ``url: https://127.0.0.1:port<path>``."""
    path = client_config.get("service", {}).get("path", "")
    return {"url": f"https://127.0.0.1:{port}{path}", "caBundle": ca_b64}


def webhook_configurations(
    manifest_docs: list[dict[str, Any]], server: WebhookServer, port: int, ca_b64: str
) -> list[dict[str, Any]]:
    """Upstream's webhook configurations, renamed as its kustomization does, every
    ``clientConfig`` on loopback. Kueue's namespace-selector patches are kept as upstream's
    ``config/components/webhook/kustomization.yaml`` sets them."""
    out = []
    for doc in manifest_docs:
        kind = doc.get("kind")
        if kind not in ("ValidatingWebhookConfiguration", "MutatingWebhookConfiguration"):
            continue
        obj = copy.deepcopy(doc)
        name = server.validating if kind.startswith("Validating") else server.mutating
        if name is None:
            continue
        obj["metadata"] = {"name": name}
        for hook in obj.get("webhooks", []):
            hook["clientConfig"] = loopback_client_config(hook["clientConfig"], port, ca_b64)
            if server is KUEUE and hook["name"] in _KUEUE_SYSTEM_EXCLUDED:
                hook["namespaceSelector"] = {
                    "matchExpressions": [
                        {
                            "key": "kubernetes.io/metadata.name",
                            "operator": "NotIn",
                            "values": ["kube-system", KUEUE.namespace],
                        }
                    ]
                }
        out.append(obj)
    return out


_KUEUE_SYSTEM_EXCLUDED = frozenset(
    f"{p}{k}.kb.io" for p in ("m", "v") for k in ("pod", "deployment", "statefulset")
)


def with_conversion_webhook(
    crd: dict[str, Any], server: WebhookServer, port: int, ca_b64: str
) -> dict[str, Any]:
    """``crd`` with the conversion webhook upstream's kustomize patch adds, on loopback."""
    if crd["metadata"]["name"] not in server.conversion_crds:
        return crd
    crd = copy.deepcopy(crd)
    crd["spec"]["conversion"] = {
        "strategy": "Webhook",
        "webhook": {
            "clientConfig": {"url": f"https://127.0.0.1:{port}/convert", "caBundle": ca_b64},
            "conversionReviewVersions": ["v1"],
        },
    }
    return crd


def namespace(name: str) -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name}}


def cert_secret(server: WebhookServer, certs: pki.WebhookPki) -> dict[str, Any]:
    """The Secret the rotator reads first (the four keys it checks)."""
    return {
        "apiVersion": "v1",
        "kind": "Secret",
        "metadata": {"name": server.secret, "namespace": server.namespace},
        "type": "Opaque",
        "data": certs.secret_data(),
    }


def make_certs(server: WebhookServer, folder: Path) -> pki.WebhookPki:
    return pki.webhook_pki(
        folder,
        ca_name=server.ca_name,
        organization=server.organization,
        service=server.service,
        namespace=server.namespace,
    )


def kueue_configuration(*, webhook_port: int, health_port: int, cert_dir: Path) -> dict[str, Any]:
    """Kueue's ``--config`` (``config.kueue.x-k8s.io/v1beta2`` ``Configuration``): the
    cluster stack's own (``workloads.specs.kueue.configuration``: ``waitForPodsReady`` with
    ``blockAdmission`` and requeuing, the PyTorchJob and TrainJob integrations) with every
    listener on 127.0.0.1, metrics off, no leader election, internal cert management on (the
    pre-seeded Secret), and plain Jobs integrated too (``KUEUE_TEST_FRAMEWORKS``)."""
    from workloads.specs import kueue

    cfg = kueue.configuration()
    frameworks = list(cfg["integrations"]["frameworks"])
    return {
        **cfg,
        "namespace": KUEUE.namespace,
        "health": {"healthProbeBindAddress": f"127.0.0.1:{health_port}"},
        "metrics": {"bindAddress": "0"},
        "webhook": {"host": "127.0.0.1", "port": webhook_port, "certDir": str(cert_dir)},
        "leaderElection": {"leaderElect": False},
        "internalCertManagement": {
            "enable": True,
            "webhookServiceName": KUEUE.service,
            "webhookSecretName": KUEUE.secret,
        },
        "integrations": {
            "frameworks": [
                *KUEUE_TEST_FRAMEWORKS,
                *(f for f in frameworks if f not in KUEUE_TEST_FRAMEWORKS),
            ]
        },
    }
