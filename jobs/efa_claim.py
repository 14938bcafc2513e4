"""The ResourceClaimTemplate a job on an ``efa: dra`` node group needs.

Its workers reference ``<job>-efa`` (``workloads.specs.efa``) instead of requesting
``vpc.amazonaws.com/efa``; the scheduler's resource-claim controller makes one ResourceClaim
per pod from it, so it must exist in the job's namespace (Kubernetes docs, "Dynamic Resource
Allocation": a pod whose template is missing waits). Created right after the PyTorchJob and
owned by it, like the job's NetworkPolicy, so ``cancel`` and the operator's TTL remove it.
"""

from __future__ import annotations

from typing import Any

from infra.instances import lookup
from jobs import manifest
from jobs.kube import api_errors, raw
from workloads.specs import efa
from workloads.specs.common import labels
from workloads.specs.pytorchjob import COMPONENT
from workloads.specs.settings import JobSettings


def template(s: JobSettings) -> dict[str, Any]:
    """The job's template: every EFA device of one node, per pod (one pod per node)."""
    return efa.resource_claim_template(
        s.name, s.namespace, lookup(s.instance_type).efa_interfaces, labels(s.name, COMPONENT)
    )


def create(api: Any, s: JobSettings, owner: dict[str, Any]) -> None:
    """Create the job's template, owned by the created PyTorchJob ``owner``."""
    from kubernetes import client

    body = manifest.owned_by(template(s), owner)
    name = body["metadata"]["name"]
    with api_errors(
        api,
        f"create resourceclaimtemplate {name}",
        "no resource.k8s.io/v1 API on the cluster (Kubernetes >= 1.34 has it)",
    ):
        raw(client.ResourceV1Api(api).create_namespaced_resource_claim_template, s.namespace, body)
