"""The Kubeflow training operator install, as a kustomization pinned to a release.

The operator's CRDs, RBAC and Deployment are upstream's (hundreds of lines of generated CRD
schema), so the project does not copy them: it declares a kustomization whose only resource is
the upstream standalone overlay at a pinned tag, with the operator image pinned again through
kustomize's ``images:`` under the name the release's base Deployment uses
(``ghcr.io/kubeflow/training-v1/training-operator``; an entry under any other name matches
nothing and changes nothing) and the tag the release's overlay ships. The Pulumi component applies exactly this directory
(``workloads/manifests/training-operator``, written from this function and checked by a test);
``kubectl apply --server-side -k`` applies the rendered copy.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from workloads.specs.settings import OperatorSettings

KUSTOMIZATION_FILE = "kustomization.yaml"


def kustomization(s: OperatorSettings) -> dict[str, Any]:
    """The ``kustomization.yaml`` of the operator install (not a Kubernetes object)."""
    return {
        "apiVersion": "kustomize.config.k8s.io/v1beta1",
        "kind": "Kustomization",
        "resources": [s.kustomize_url],
        "images": [{"name": s.image_name, "newTag": s.image_tag}],
        "labels": [
            {
                "pairs": {"app.kubernetes.io/part-of": "eks-fsdp"},
                "includeSelectors": False,
            }
        ],
    }


# --- offline check of the image pin ---------------------------------------------------------
# kustomize's ``images:`` transformer rewrites a container image only when the image's name
# (without tag or digest) equals the entry's ``name``; an entry that matches nothing is silently
# ignored and the base's image ships. These helpers resolve the images a kustomization
# produces from local files, so a test can prove the pin names an image the overlay really uses.

_WORKLOAD_KINDS = ("Deployment", "StatefulSet", "DaemonSet", "Job", "CronJob", "Pod")


def _split_image(image: str) -> tuple[str, str, str]:
    """``name[:tag][@digest]`` -> (name, tag, digest); a registry port is not a tag."""
    name, _, digest = image.partition("@")
    slash = name.rfind("/")
    colon = name.rfind(":")
    if colon > slash:
        return name[:colon], name[colon + 1 :], digest
    return name, "", digest


def _containers(obj: dict[str, Any]) -> list[dict[str, Any]]:
    spec = obj.get("spec") or {}
    if obj.get("kind") == "CronJob":
        spec = ((spec.get("jobTemplate") or {}).get("spec")) or {}
    pod = (spec.get("template") or {}).get("spec") if obj.get("kind") != "Pod" else spec
    pod = pod or {}
    return [*(pod.get("containers") or []), *(pod.get("initContainers") or [])]


def apply_image_overrides(objs: list[dict[str, Any]], images: list[dict[str, str]]) -> None:
    """kustomize's images transformer, in place: exact-name matches only."""
    for obj in objs:
        if obj.get("kind") not in _WORKLOAD_KINDS:
            continue
        for container in _containers(obj):
            name, tag, digest = _split_image(container["image"])
            for entry in images:
                if entry.get("name") != name:
                    continue
                new_name = entry.get("newName", name)
                if entry.get("digest"):
                    container["image"] = f"{new_name}@{entry['digest']}"
                elif entry.get("newTag"):
                    container["image"] = f"{new_name}:{entry['newTag']}"
                else:
                    suffix = f"@{digest}" if digest else (f":{tag}" if tag else "")
                    container["image"] = new_name + suffix


def build_objects(directory: Path, remotes: dict[str, Path] | None = None) -> list[dict[str, Any]]:
    """The objects a kustomization directory yields, with every level's ``images:`` applied.

    ``remotes`` maps a remote resource URL (``...?ref=<tag>``) to a local checkout of that
    directory. Patches, generators and name prefixes are not applied (they do not touch images).
    """
    import yaml

    kust = yaml.safe_load((directory / KUSTOMIZATION_FILE).read_text()) or {}
    objs: list[dict[str, Any]] = []
    for resource in kust.get("resources") or []:
        if "://" in resource:
            if not remotes or resource not in remotes:
                raise ValueError(f"resources: no local checkout given for {resource}")
            objs += build_objects(remotes[resource], remotes)
            continue
        path = (directory / resource).resolve()
        if path.is_dir():
            objs += build_objects(path, remotes)
        else:
            objs += [d for d in yaml.safe_load_all(path.read_text()) if d]
    apply_image_overrides(objs, kust.get("images") or [])
    return objs


def workload_images(objs: list[dict[str, Any]]) -> set[str]:
    """Every container image of the workload objects."""
    return {c["image"] for o in objs if o.get("kind") in _WORKLOAD_KINDS for c in _containers(o)}
