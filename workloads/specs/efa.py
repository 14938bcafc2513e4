"""EFA for a job's workers: the device plugin's extended resource, or a DRA claim.

With ``efa: device-plugin`` (a node group's default) a worker requests
``vpc.amazonaws.com/efa: N`` (``InstanceType.pod_resources``). With ``efa: dra`` its nodes run
the EFA DRA driver (DRANET; ``infra.efa_dra``) instead, which advertises no extended resource:
the worker asks for its EFA devices through a ``ResourceClaimTemplate`` (``resource.k8s.io/v1``,
GA in Kubernetes 1.34) that the pod spec references. Upstream facts, from the EKS user guide
"Manage EFA devices on Amazon EKS" (awsdocs/amazon-eks-user-guide
``latest/ug/ml/device-management-efa.adoc``, section "Install the EFA DRA driver (DRANET)"):
the driver is ``dra.net``, its DeviceClass ``efa.networking.k8s.aws`` (created by eks-charts
``stable/aws-dranet`` 1.0.0 ``templates/deviceclass.yaml``), and a pod references a template
through ``spec.resourceClaims[].resourceClaimTemplateName`` and
``containers[].resources.claims[].name``; the scheduler makes one ResourceClaim per pod.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from infra.efa import DEVICE_CLASS
from workloads.specs.common import K8sObject

EFA_RESOURCE = "vpc.amazonaws.com/efa"
"""The device plugin's extended resource."""
RESOURCE_API = "resource.k8s.io/v1"
"""DRA's GA API (Kubernetes 1.34)."""
CLAIM = "efa"
"""Name of the claim in the pod spec and of the template's device request."""


def claim_template_name(job: str) -> str:
    """The job's ResourceClaimTemplate: ``<job>-efa``."""
    return f"{job}-{CLAIM}"


def resource_claim_template(
    job: str, namespace: str, count: int, labels: Mapping[str, str] | None = None
) -> K8sObject:
    """``count`` EFA devices per pod, from the driver's DeviceClass (one node's worth)."""
    if count < 1:
        raise ValueError(f"efa: {count} EFA devices per pod: at least 1")
    return {
        "apiVersion": RESOURCE_API,
        "kind": "ResourceClaimTemplate",
        "metadata": {
            "name": claim_template_name(job),
            "namespace": namespace,
            **({"labels": dict(labels)} if labels else {}),
        },
        "spec": {
            "spec": {
                "devices": {
                    "requests": [
                        {
                            "name": CLAIM,
                            "exactly": {"deviceClassName": DEVICE_CLASS, "count": count},
                        }
                    ]
                }
            }
        },
    }


def pod_claims(job: str) -> list[dict[str, str]]:
    """``spec.resourceClaims`` of a worker pod."""
    return [{"name": CLAIM, "resourceClaimTemplateName": claim_template_name(job)}]


def container_claims() -> list[dict[str, str]]:
    """``resources.claims`` of the worker container."""
    return [{"name": CLAIM}]


def without_efa(devices: Mapping[str, Any]) -> dict[str, Any]:
    """The extended resources a DRA worker still requests (its GPUs)."""
    return {k: v for k, v in devices.items() if k != EFA_RESOURCE}


def efa_expect(instance: Any, efa: bool) -> str:
    """The preflight's ``efa=N``: every EFA interface of the type, where the group attaches
    them (``training.preflight`` counts the verbs devices the container got)."""
    if not (efa and instance.efa_supported and instance.efa_interfaces):
        return ""
    return f"efa={instance.efa_interfaces}"
