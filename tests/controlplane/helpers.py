"""Rendered stack objects, moved into namespaces of their own, for the control-plane tests.

Every stack renders its objects into ``default`` (and ``monitoring``), and two stacks both
render a PersistentVolume ``default-fsx-checkpoints`` and a claim ``fsx-checkpoints``: applied
side by side they would overwrite each other. ``relocate`` moves one stack's objects under a
prefix (namespaces, the PersistentVolume's name and its claim reference); nothing else
changes.
"""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import yaml

from controlplane.client import Client, wait_for

IMAGE = "123456789012.dkr.ecr.us-east-2.amazonaws.com/eks-fsdp:controlplane-test"
"""An image with a registry (a GPU stack's job refuses one without); never pulled here."""
KIND_ORDER = ("Namespace", "PriorityClass", "PersistentVolume", "PersistentVolumeClaim")


def rendered_objects(stack: str, out: Path) -> list[dict[str, Any]]:
    """What ``eks-fsdp render --stack <stack>`` writes as Kubernetes objects (the
    operator's kustomization and the charts' values are not objects), Namespaces first."""
    from workloads.render import render

    written = render(stack, out, image=IMAGE)
    objs: list[dict[str, Any]] = []
    for path in written:
        if path.parent == out and path.suffix == ".yaml":
            objs.extend(d for d in yaml.safe_load_all(path.read_text()) if d)
    rank = {k: i for i, k in enumerate(KIND_ORDER)}
    return sorted(objs, key=lambda o: rank.get(o["kind"], len(rank)))


def relocate(objs: list[dict[str, Any]], prefix: str) -> list[dict[str, Any]]:
    """``objs`` with every namespace ``N`` renamed ``<prefix>-N`` (Namespace objects too) and
    PersistentVolumes renamed ``<prefix>-<name>`` with their claim references."""
    out = []
    for obj in copy.deepcopy(objs):
        meta = obj["metadata"]
        if obj["kind"] == "PyTorchJob":
            # render labels the job as submit does (its pool's LocalQueue, a Kueue priority
            # class); a relocated job runs outside the stack's queues, whose path has its own
            # tests (test_kueue_quota, test_jobs_queue): without this Kueue would hold it
            for label in ("kueue.x-k8s.io/queue-name", "kueue.x-k8s.io/priority-class"):
                meta.get("labels", {}).pop(label, None)
        if obj["kind"] == "Namespace":
            meta["name"] = f"{prefix}-{meta['name']}"
        elif "namespace" in meta:
            meta["namespace"] = f"{prefix}-{meta['namespace']}"
        if obj["kind"] == "PersistentVolume":
            meta["name"] = f"{prefix}-{meta['name']}"
            ref = obj["spec"].get("claimRef")
            if ref:
                ref["namespace"] = f"{prefix}-{ref['namespace']}"
        if obj["kind"] == "PersistentVolumeClaim" and obj["spec"].get("volumeName"):
            obj["spec"]["volumeName"] = f"{prefix}-{obj['spec']['volumeName']}"
        out.append(obj)
    return out


def namespaces_of(objs: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """A Namespace object for every namespace ``objs`` use (those they do not create)."""
    names = {o["metadata"]["namespace"] for o in objs if "namespace" in o["metadata"]}
    names -= {o["metadata"]["name"] for o in objs if o["kind"] == "Namespace"}
    return [
        {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": n}} for n in sorted(names)
    ]


def delete_and_wait(client: Client, objs: list[dict[str, Any]], timeout: float = 120) -> None:
    """Delete the Namespaces and cluster-scoped objects of ``objs`` (a namespace takes its
    contents with it) and wait until the namespaces are gone."""
    namespaces = [o for o in objs if o["kind"] == "Namespace"]
    for obj in objs:
        if obj["kind"] == "Namespace" or "namespace" not in obj["metadata"]:
            client.delete(obj)

    def gone() -> bool:
        return all(
            client.find("v1", "Namespace", o["metadata"]["name"]) is None for o in namespaces
        )

    wait_for("namespaces deleted", gone, timeout=timeout, interval=0.5)


_SUFFIXES = {
    "Ki": 2**10,
    "Mi": 2**20,
    "Gi": 2**30,
    "Ti": 2**40,
    "Pi": 2**50,
    "k": 10**3,
    "M": 10**6,
    "G": 10**9,
    "T": 10**12,
    "m": 10**-3,
}


def quantity(value: object) -> float | None:
    """A Kubernetes quantity (``2048Gi``, ``163``, ``500m``) as a number; None if it is not one
    (the API server stores ``2048Gi`` as ``2Ti``)."""
    text = str(value)
    for suffix, factor in sorted(_SUFFIXES.items(), key=lambda kv: -len(kv[0])):
        if text.endswith(suffix):
            text, scale = text[: -len(suffix)], factor
            break
    else:
        scale = 1
    try:
        return float(text) * scale
    except ValueError:
        return None


def condition(obj: dict[str, Any], kind: str) -> str | None:
    """The status of condition ``kind`` of ``obj`` (None when absent)."""
    for c in obj.get("status", {}).get("conditions", []) or []:
        if c["type"] == kind:
            return str(c["status"])
    return None


def job_quota(job: dict[str, Any]) -> dict[str, str]:
    """The job's total requests (what one admitted job uses), as quantities Kueue reads:
    whole numbers where the total is whole, millis (``1500m``) otherwise."""
    worker = job["spec"]["pytorchReplicaSpecs"]["Worker"]
    (c,) = [c for c in worker["template"]["spec"]["containers"] if c["name"] == "pytorch"]
    total = {}
    for res, qty in c["resources"]["requests"].items():
        value = quantity(qty)
        assert value is not None, f"{res}: {qty!r} is not a quantity"
        milli = round(value * worker["replicas"] * 1000)
        total[res] = str(milli // 1000) if milli % 1000 == 0 else f"{milli}m"
    return total


def member_access(plane: Any, folder: Path, *, user: str, group: str) -> tuple[Client, Path]:
    """A client and a kubeconfig that authenticate as ``user`` in ``group`` only: a client
    certificate with ``CN=<user>``, ``O=<group>`` signed by the control plane's CA, which the
    API server's x509 authenticator maps to that user name and group (Kubernetes docs,
    "Authenticating": X509 client certificates, "the common name of the subject is used as the
    user name ... the certificate's organization fields indicate a user's group
    memberships"). On EKS an access entry's ``kubernetesGroups`` reach RBAC the same way, as
    the groups of the authenticated user (EKS API reference, ``CreateAccessEntry``
    ``kubernetesGroups``: the name of a ``kind: Group`` subject of a RoleBinding)."""
    from controlplane import pki

    ca = pki.KeyPair(plane.state / "pki" / "ca.crt", plane.state / "pki" / "ca.key")
    pair = pki.new_cert(ca, folder, user, common_name=user, organization=group, usage="clientAuth")
    kubeconfig = folder / f"{user}.kubeconfig"
    config = {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [
            {
                "name": "local",
                "cluster": {"server": plane.server, "certificate-authority": str(ca.cert)},
            }
        ],
        "users": [
            {
                "name": user,
                "user": {"client-certificate": str(pair.cert), "client-key": str(pair.key)},
            }
        ],
        "contexts": [{"name": "local", "context": {"cluster": "local", "user": user}}],
        "current-context": "local",
    }
    kubeconfig.write_text(yaml.safe_dump(config, sort_keys=False))
    kubeconfig.chmod(0o600)
    return Client(plane.server, ca.cert, pair.cert, pair.key), kubeconfig


def prefix_queues(obj: dict[str, Any], prefix: str) -> dict[str, Any]:
    """A copy of a Kueue object whose cluster-scoped names (Topology, ResourceFlavor,
    ClusterQueue, the cohort, and the Topology, flavors and ClusterQueue they name) carry
    ``prefix``, so that it does not meet the stack's own queues other tests apply."""
    obj = copy.deepcopy(obj)
    kind, spec = obj["kind"], obj.get("spec", {})
    if kind in ("Topology", "ResourceFlavor", "ClusterQueue"):
        obj["metadata"]["name"] = prefix + obj["metadata"]["name"]
    if kind == "ResourceFlavor" and "topologyName" in spec:
        spec["topologyName"] = prefix + spec["topologyName"]
    if kind == "ClusterQueue":
        spec["cohortName"] = prefix + spec["cohortName"]
        for group in spec["resourceGroups"]:
            for flavor in group["flavors"]:
                flavor["name"] = prefix + flavor["name"]
    if kind == "LocalQueue":
        spec["clusterQueue"] = prefix + spec["clusterQueue"]
    return obj
