"""The Kubeflow training operator install, as a kustomization pinned to a release.

The operator's CRDs, RBAC and Deployment are upstream's (hundreds of lines of generated CRD
schema), so the project does not copy them: it declares a kustomization whose only resource is
the upstream standalone overlay at a pinned tag, with the operator image pinned again through
kustomize's ``images:``. The Pulumi component applies exactly this directory
(``workloads/manifests/training-operator``, written from this function and checked by a test);
``kubectl apply --server-side -k`` applies the rendered copy.
"""

from __future__ import annotations

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


def crd_names() -> tuple[str, ...]:
    """CRDs the install provides that the project's objects depend on."""
    return ("pytorchjobs.kubeflow.org",)
