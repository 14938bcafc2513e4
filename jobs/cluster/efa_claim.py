"""The ResourceClaimTemplate a job on an ``efa: dra`` node group needs.

Its workers reference ``<job>-efa`` (``workloads.specs.efa``) instead of requesting
``vpc.amazonaws.com/efa``; the scheduler's resource-claim controller makes one ResourceClaim
per pod from it, so it must exist in the job's namespace (Kubernetes docs, "Dynamic Resource
Allocation": a pod whose template is missing waits). Created right after the PyTorchJob and
owned by it, like the job's NetworkPolicy, so ``cancel`` and the operator's TTL remove it.

``resume`` and ``submit --replace`` delete the old PyTorchJob in the background: the API server
removes the job at once and the garbage collector its dependents later
(``DeletePropagationBackground``, k8s.io/apimachinery ``pkg/apis/meta/v1/types.go``), so the
new job's create can meet the old ``<job>-efa`` (409 AlreadyExists). A template whose owner is
a PyTorchJob of this name with another uid is that leftover: it is deleted and created again,
owned by the new job. One with any other owner, or none, is not touched: the create fails in
one line naming it.
"""

from __future__ import annotations

from typing import Any

from infra.instances import lookup
from jobs import manifest
from jobs.cluster.kube import api_errors, object_not_found, raw
from jobs.types import JobsError
from workloads.specs import efa
from workloads.specs.common import labels
from workloads.specs.pytorchjob import COMPONENT
from workloads.specs.settings import JobSettings


def template(s: JobSettings) -> dict[str, Any]:
    """The job's template: every EFA device of one node, per pod (one pod per node)."""
    return efa.resource_claim_template(
        s.name, s.namespace, lookup(s.instance_type).efa_interfaces, labels(s.name, COMPONENT)
    )


NO_API = "no resource.k8s.io/v1 API on the cluster (Kubernetes >= 1.34 has it)"


def create(api: Any, s: JobSettings, owner: dict[str, Any]) -> None:
    """Create the job's template, owned by the created PyTorchJob ``owner``; a leftover of an
    earlier job of this name is replaced."""
    from kubernetes import client
    from kubernetes.client.exceptions import ApiException

    resource = client.ResourceV1Api(api)
    body = manifest.owned_by(template(s), owner)
    name = body["metadata"]["name"]
    with api_errors(api, f"create resourceclaimtemplate {name}", NO_API):
        try:
            raw(resource.create_namespaced_resource_claim_template, s.namespace, body)
            return
        except ApiException as err:
            if err.status != 409:
                raise
    _delete_leftover(api, resource, s, name, owner)
    with api_errors(api, f"create resourceclaimtemplate {name}", NO_API):
        raw(resource.create_namespaced_resource_claim_template, s.namespace, body)


def _delete_leftover(
    api: Any, resource: Any, s: JobSettings, name: str, owner: dict[str, Any]
) -> None:
    """Delete template ``name`` if an earlier PyTorchJob of this name owns it (JobsError
    naming it otherwise)."""
    with api_errors(api, f"get resourceclaimtemplate {name}"):
        try:
            found = raw(resource.read_namespaced_resource_claim_template, name, s.namespace)
        except Exception as err:
            if object_not_found(err):  # the garbage collector was quicker
                return
            raise
    owners = (found.get("metadata") or {}).get("ownerReferences") or []
    uid = owner["metadata"]["uid"]
    leftover = bool(owners) and all(
        o.get("kind") == owner["kind"] and o.get("name") == s.name and o.get("uid") != uid
        for o in owners
    )
    if not leftover:
        raise JobsError(
            f"create resourceclaimtemplate {name}: one of that name exists in {s.namespace} "
            f"and is not a leftover of an earlier job {s.name}: delete it or rename the job"
        )
    with api_errors(api, f"delete resourceclaimtemplate {name} (of a deleted job)"):
        try:
            raw(resource.delete_namespaced_resource_claim_template, name, s.namespace)
        except Exception as err:
            if not object_not_found(err):
                raise
