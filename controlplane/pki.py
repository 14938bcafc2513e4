"""Certificates and keys of the local control plane, made with the ``openssl`` command (3.x).

EC P-256 keys (a key takes milliseconds), RSA where a reader insists. What is made:

- the cluster CA, the API server's serving certificate (IP SAN 127.0.0.1, as envtest's) and an
  admin client certificate in ``system:masters`` that every component and the tests use;
- the service-account signing key pair (``--service-account-*-key-file``);
- one webhook CA and serving certificate per operator, shaped as the operators' cert rotators
  check them (``ValidCert`` in open-policy-agent/cert-controller ``pkg/rotator/rotator.go``): the
  CA valid for the DNS name ``<caName>``, the serving certificate signed by it, valid for
  ``<service>.<namespace>.svc`` (and 127.0.0.1, the address the API server dials) with the
  ``serverAuth`` usage, beyond the rotator's 90-day look-ahead. A rotator that finds them valid
  keeps them, so the CA the webhook configurations carry stays the one that signed the files.
"""

from __future__ import annotations

import base64
import subprocess
from dataclasses import dataclass
from pathlib import Path

CA_DAYS = 3650
"""The rotators' own CA lifetime (cert-controller ``defaultCaCertValidityDuration``)."""
SERVER_DAYS = 365
"""The rotators' own serving-certificate lifetime; above their 90-day look-ahead."""


def _openssl(*args: str) -> None:
    proc = subprocess.run(["openssl", *args], capture_output=True, text=True, check=False)
    if proc.returncode != 0:
        raise RuntimeError(f"openssl {args[0]} failed: {proc.stderr.strip()}")


def new_key(path: Path, *, rsa: bool = False) -> Path:
    """An EC P-256 private key (PKCS#8 PEM), or with ``rsa`` an RSA 2048 key in PKCS#1 PEM
    (``RSA PRIVATE KEY``); readable by its owner only."""
    if rsa:
        _openssl("genrsa", "-traditional", "-out", str(path), "2048")
    else:
        _openssl(
            "genpkey", "-algorithm", "EC", "-pkeyopt", "ec_paramgen_curve:P-256", "-out", str(path)
        )
    path.chmod(0o600)
    return path


@dataclass(frozen=True)
class KeyPair:
    """A certificate and its key, as PEM files."""

    cert: Path
    key: Path

    def cert_pem(self) -> bytes:
        return self.cert.read_bytes()

    def key_pem(self) -> bytes:
        return self.key.read_bytes()

    def cert_b64(self) -> str:
        """The certificate for a ``caBundle`` or a kubeconfig ``*-data`` field."""
        return base64.b64encode(self.cert_pem()).decode()


def new_ca(
    folder: Path, name: str, *, organization: str | None = None, rsa: bool = False
) -> KeyPair:
    """A self-signed CA whose subject CN and DNS SAN are ``name``."""
    folder.mkdir(parents=True, exist_ok=True)
    pair = KeyPair(folder / f"{name}.crt", new_key(folder / f"{name}.key", rsa=rsa))
    subject = f"/O={organization}/CN={name}" if organization else f"/CN={name}"
    _openssl(
        "req",
        "-x509",
        "-new",
        "-key",
        str(pair.key),
        "-out",
        str(pair.cert),
        "-days",
        str(CA_DAYS),
        "-subj",
        subject,
        "-addext",
        f"subjectAltName=DNS:{name}",
        "-addext",
        "basicConstraints=critical,CA:TRUE",
        "-addext",
        "keyUsage=critical,digitalSignature,keyEncipherment,keyCertSign",
    )
    return pair


def new_cert(
    ca: KeyPair,
    folder: Path,
    name: str,
    *,
    common_name: str,
    organization: str | None = None,
    dns: tuple[str, ...] = (),
    ips: tuple[str, ...] = (),
    usage: str = "serverAuth",
    rsa: bool = False,
) -> KeyPair:
    """A certificate signed by ``ca`` (``usage``: ``serverAuth`` or ``clientAuth``)."""
    folder.mkdir(parents=True, exist_ok=True)
    pair = KeyPair(folder / f"{name}.crt", new_key(folder / f"{name}.key", rsa=rsa))
    subject = f"/O={organization}/CN={common_name}" if organization else f"/CN={common_name}"
    args = [
        "req",
        "-x509",
        "-new",
        "-key",
        str(pair.key),
        "-out",
        str(pair.cert),
        "-CA",
        str(ca.cert),
        "-CAkey",
        str(ca.key),
        "-days",
        str(SERVER_DAYS),
        "-subj",
        subject,
        "-addext",
        "basicConstraints=critical,CA:FALSE",
        "-addext",
        "keyUsage=critical,digitalSignature,keyEncipherment",
        "-addext",
        f"extendedKeyUsage={usage}",
    ]
    sans = [f"DNS:{d}" for d in dns] + [f"IP:{ip}" for ip in ips]
    if sans:
        args += ["-addext", "subjectAltName=" + ",".join(sans)]
    _openssl(*args)
    return pair


@dataclass(frozen=True)
class ClusterPki:
    """Everything the API server and its clients need."""

    ca: KeyPair
    serving: KeyPair
    admin: KeyPair
    sa_key: Path
    """Service-account signing key (private)."""
    sa_pub: Path
    """Service-account verification key (public)."""


def cluster_pki(folder: Path) -> ClusterPki:
    """The cluster CA, the API server's serving cert, an admin client cert, the SA keys."""
    ca = new_ca(folder, "ca")
    serving = new_cert(
        ca,
        folder,
        "apiserver",
        common_name="kube-apiserver",
        dns=("localhost", "kubernetes", "kubernetes.default", "kubernetes.default.svc"),
        ips=("127.0.0.1",),
    )
    admin = new_cert(
        ca, folder, "admin", common_name="admin", organization="system:masters", usage="clientAuth"
    )
    sa_key = new_key(folder / "sa.key")
    sa_pub = folder / "sa.pub"
    _openssl("pkey", "-in", str(sa_key), "-pubout", "-out", str(sa_pub))
    return ClusterPki(ca=ca, serving=serving, admin=admin, sa_key=sa_key, sa_pub=sa_pub)


@dataclass(frozen=True)
class WebhookPki:
    """A webhook server's CA and serving certificate, as its cert rotator expects them."""

    ca: KeyPair
    serving: KeyPair

    def secret_data(self) -> dict[str, str]:
        """The rotator's Secret keys (``ca.crt``, ``ca.key``, ``tls.crt``, ``tls.key``), base64."""
        raw = {
            "ca.crt": self.ca.cert_pem(),
            "ca.key": self.ca.key_pem(),
            "tls.crt": self.serving.cert_pem(),
            "tls.key": self.serving.key_pem(),
        }
        return {k: base64.b64encode(v).decode() for k, v in raw.items()}

    def write_serving_folder(self, folder: Path) -> Path:
        """``tls.crt``/``tls.key`` where a kubelet would mount the Secret."""
        folder.mkdir(parents=True, exist_ok=True)
        (folder / "tls.crt").write_bytes(self.serving.cert_pem())
        key = folder / "tls.key"
        key.write_bytes(self.serving.key_pem())
        key.chmod(0o600)
        return folder


def webhook_pki(
    folder: Path, *, ca_name: str, organization: str, service: str, namespace: str
) -> WebhookPki:
    """CA ``ca_name`` and a serving cert for ``<service>.<namespace>.svc`` and 127.0.0.1.

    RSA keys in PKCS#1: the rotator parses the Secret's ``ca.key`` with
    ``x509.ParsePKCS1PrivateKey`` (``buildArtifactsFromSecret``) and refuses anything else."""
    ca = new_ca(folder, ca_name, organization=organization, rsa=True)
    serving = new_cert(
        ca,
        folder,
        "tls",
        common_name=f"{service}.{namespace}.svc",
        dns=(f"{service}.{namespace}.svc",),
        ips=("127.0.0.1",),
        rsa=True,
    )
    return WebhookPki(ca=ca, serving=serving)
