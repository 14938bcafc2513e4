"""What the API server refuses in a team's namespace, whoever asks: three ValidatingAdmissionPolicies.

RBAC says *who* may create a job; it cannot say *what* the job must look like. Three
``ValidatingAdmissionPolicy`` objects (``admissionregistration.k8s.io/v1``, GA since
Kubernetes 1.30; kubernetes.io/docs/reference/access-authn-authz/validating-admission-policy/),
each with its ``ValidatingAdmissionPolicyBinding``, apply to the team's namespace (selected by
the label its Namespace carries, ``eks-fsdp/team: <team>``, which a member cannot change: the
team Role grants nothing on Namespaces):

- **every job names a queue** (``queue_policy``): a PyTorchJob (kubeflow.org) or TrainJob
  (trainer.kubeflow.org) created or updated without a non-empty ``kueue.x-k8s.io/queue-name``
  label is refused. Kueue manages only jobs that carry it (``manageJobsWithoutQueueName`` is
  off: Kueue v0.17.0 ``pkg/controller/jobframework/reconciler.go``), so without this a member
  could run a job outside every quota, or take the label off a suspended job and unsuspend
  it. The check reads the label alone: Kueue's own writes (unsuspending, the runtime patches
  of an admitted job) and the finalizer edits made while a job is deleted and garbage
  collected (Kueue's finalizers are on Workloads and Pods, not on jobs) keep the label and
  pass; status writes go to the ``/status`` subresource, which the policy does not match.
  An update of a job that had no label before the policy existed is not checked
  (``matchConditions``), so such a job can still be finished and deleted.
- **pods stay unprivileged** (``pod_policy``): a pod created in the namespace (by the training
  operator or JobSet for a member's job) may not use the host's network, PID or IPC
  namespaces, mount a ``hostPath`` volume, run a privileged container, add any capability
  but ``IPC_LOCK`` (what EFA needs: ``workloads.specs.pytorchjob.EFA_CAPABILITIES``, which is
  why the Pod Security ``baseline`` level, which refuses it, is not used), run as another
  ServiceAccount than the team's ``jobs``, or mount that ServiceAccount's token
  (``automountServiceAccountToken: true`` in the pod overrides the ServiceAccount's
  ``false``: Kubernetes docs, "Configure Service Accounts for Pods", opt out of API
  credential automounting). Our own job pods pass (they set it to ``false``):
  ``tests/controlplane/test_team_namespace.py`` has a real API server admit the pod the
  training operator made for a member's job, and refuse it with each privilege added.
- **a member's Workload keeps its priority and queue** (``workload_policy``): the team Role
  lets members patch Kueue Workloads (to suspend one through ``spec.active``), and Kueue
  v0.17.0 lets ``spec.priority`` change on update (``pkg/webhooks/workload_webhook.go``
  ``ValidateWorkloadUpdate`` makes only the pod sets, the admission and the cluster name
  immutable; the scheduler orders and preempts by ``spec.priority``,
  ``pkg/util/priority/priority.go``), so a member could raise a job's priority and preempt
  other teams. An update of a Workload by the team's group (``matchConditions`` on
  ``request.userInfo.groups``) may not change ``spec.priority``, the priority class
  (``spec.priorityClassRef`` in v1beta2; ``spec.priorityClassName`` and
  ``spec.priorityClassSource`` in v1beta1, both served: the v0.17.0 CRD
  ``config/components/crd/bases/kueue.x-k8s.io_workloads.yaml``) or ``spec.queueName``.
  (The CRD's own rule makes ``queueName`` immutable only while quota is reserved.) Kueue's
  own updates (its controller's ServiceAccount is not in the group) are not matched.
  The fields are compared with CEL's optional field selection (``object.spec.?priority``:
  Kubernetes docs, "Common Expression Language in Kubernetes", optional types, Kubernetes
  1.29+), which is equal when both are unset.

All use ``failurePolicy: Fail`` and ``validationActions: [Deny]``: a policy the server cannot
evaluate refuses rather than lets through.
"""

from __future__ import annotations

from typing import Any

from workloads.specs import pytorchjob
from workloads.specs.common import PART_OF, K8sObject

API_VERSION = "admissionregistration.k8s.io/v1"
QUEUE_LABEL = "kueue.x-k8s.io/queue-name"
"""Kueue's queue label (``jobs.queue.QUEUE_LABEL``; a test checks they agree)."""
TEAM_LABEL = "eks-fsdp/team"
"""The label on a team's Namespace naming the team (``workloads.specs.teams.TEAM_LABEL``)."""
ALLOWED_CAPABILITIES = pytorchjob.EFA_CAPABILITIES
SERVICE_ACCOUNT = pytorchjob.SERVICE_ACCOUNT

JOB_RESOURCES = (("kubeflow.org", "pytorchjobs"), ("trainer.kubeflow.org", "trainjobs"))
"""The job kinds a member may create (the team Role's), as (API group, resource)."""

_HAS_QUEUE = (
    "has({o}.metadata.labels) && '{label}' in {o}.metadata.labels && "
    "{o}.metadata.labels['{label}'] != ''"
)
QUEUE_EXPRESSION = _HAS_QUEUE.format(o="object", label=QUEUE_LABEL)
"""CEL: the job carries a non-empty queue label."""
QUEUE_MESSAGE = (
    f"a job in a team namespace must carry the label {QUEUE_LABEL} (its LocalQueue, the job's "
    "node group): Kueue admits only labelled jobs; submit with `eks-fsdp jobs submit --team`"
)

_CONTAINERS = (
    "object.spec.containers + (has(object.spec.initContainers) ? object.spec.initContainers : [])"
)
POD_RULES: tuple[tuple[str, str], ...] = (
    (
        "!has(object.spec.hostNetwork) || !object.spec.hostNetwork",
        "hostNetwork is not allowed in a team namespace",
    ),
    ("!has(object.spec.hostPID) || !object.spec.hostPID", "hostPID is not allowed"),
    ("!has(object.spec.hostIPC) || !object.spec.hostIPC", "hostIPC is not allowed"),
    (
        "!has(object.spec.volumes) || object.spec.volumes.all(v, !has(v.hostPath))",
        "hostPath volumes are not allowed in a team namespace",
    ),
    (
        "variables.containers.all(c, !has(c.securityContext) || "
        "!has(c.securityContext.privileged) || !c.securityContext.privileged)",
        "privileged containers are not allowed in a team namespace",
    ),
    (
        "variables.containers.all(c, !has(c.securityContext) || "
        "!has(c.securityContext.capabilities) || !has(c.securityContext.capabilities.add) || "
        "c.securityContext.capabilities.add.all(a, a in ["
        + ", ".join(f"'{a}'" for a in ALLOWED_CAPABILITIES)
        + "]))",
        "no capability may be added but " + ", ".join(ALLOWED_CAPABILITIES),
    ),
    (
        f"has(object.spec.serviceAccountName) && object.spec.serviceAccountName == "
        f"'{SERVICE_ACCOUNT}'",
        f"pods in a team namespace run as the ServiceAccount {SERVICE_ACCOUNT}",
    ),
    (
        "!has(object.spec.automountServiceAccountToken) || "
        "!object.spec.automountServiceAccountToken",
        f"pods in a team namespace may not mount the token of the ServiceAccount {SERVICE_ACCOUNT} "
        "(automountServiceAccountToken: true)",
    ),
)
"""(CEL expression, message) of every check on a pod."""


WORKLOAD_RESOURCE = ("kueue.x-k8s.io", "workloads")
"""Kueue's Workloads, which the team Role lets members patch (``spec.active``)."""
WORKLOAD_FIELDS = (
    "priority",
    "priorityClassRef",
    "priorityClassName",
    "priorityClassSource",
    "queueName",
)
"""The ``spec`` fields of a Workload a member may not change (v1beta2's and v1beta1's)."""


def workload_message(field: str) -> str:
    return (
        f"a team member may not change a Workload's spec.{field} (only spec.active, to suspend "
        "or unsuspend the job); ask an admin"
    )


def member_group(team: str) -> str:
    """The Kubernetes group a team member's access entry carries (``teams.group_name``)."""
    return f"eks-fsdp-team-{team}"


def queue_policy_name(team: str) -> str:
    return f"eks-fsdp-team-{team}-jobs-name-a-queue"


def pod_policy_name(team: str) -> str:
    return f"eks-fsdp-team-{team}-pods-unprivileged"


def workload_policy_name(team: str) -> str:
    return f"eks-fsdp-team-{team}-workloads-keep-priority"


def _meta(name: str, team: str) -> dict[str, Any]:
    return {
        "name": name,
        "labels": {
            "app.kubernetes.io/component": "team",
            "app.kubernetes.io/part-of": PART_OF,
            TEAM_LABEL: team,
        },
    }


def _rules(resources: list[tuple[str, str]], operations: list[str]) -> list[dict[str, Any]]:
    return [
        {
            "apiGroups": [group],
            "apiVersions": ["*"],
            "operations": list(operations),
            "resources": [resource],
            "scope": "Namespaced",
        }
        for group, resource in resources
    ]


def queue_policy(team: str) -> K8sObject:
    """Jobs in the team's namespace name a queue (see the module text)."""
    return {
        "apiVersion": API_VERSION,
        "kind": "ValidatingAdmissionPolicy",
        "metadata": _meta(queue_policy_name(team), team),
        "spec": {
            "failurePolicy": "Fail",
            "matchConstraints": {
                "resourceRules": _rules(list(JOB_RESOURCES), ["CREATE", "UPDATE"]),
            },
            "matchConditions": [
                {
                    # an update of a job that had no queue label (made before the policy) is
                    # left alone; taking the label off one that had it is not
                    "name": "created-or-queued-before",
                    "expression": "request.operation == 'CREATE' || ("
                    + _HAS_QUEUE.format(o="oldObject", label=QUEUE_LABEL)
                    + ")",
                }
            ],
            "validations": [
                {"expression": QUEUE_EXPRESSION, "message": QUEUE_MESSAGE, "reason": "Forbidden"}
            ],
        },
    }


def pod_policy(team: str) -> K8sObject:
    """Pods in the team's namespace stay unprivileged (see the module text)."""
    return {
        "apiVersion": API_VERSION,
        "kind": "ValidatingAdmissionPolicy",
        "metadata": _meta(pod_policy_name(team), team),
        "spec": {
            "failurePolicy": "Fail",
            "matchConstraints": {"resourceRules": _rules([("", "pods")], ["CREATE"])},
            "variables": [{"name": "containers", "expression": _CONTAINERS}],
            "validations": [
                {"expression": e, "message": m, "reason": "Forbidden"} for e, m in POD_RULES
            ],
        },
    }


def workload_policy(team: str) -> K8sObject:
    """A member's updates of Workloads keep their priority and queue (see the module text)."""
    return {
        "apiVersion": API_VERSION,
        "kind": "ValidatingAdmissionPolicy",
        "metadata": _meta(workload_policy_name(team), team),
        "spec": {
            "failurePolicy": "Fail",
            "matchConstraints": {"resourceRules": _rules([WORKLOAD_RESOURCE], ["UPDATE"])},
            "matchConditions": [
                {
                    # the team's members only: Kueue's own updates are not matched
                    "name": "by-a-team-member",
                    "expression": (
                        f"request.userInfo.groups.exists(g, g == '{member_group(team)}')"
                    ),
                }
            ],
            "validations": [
                {
                    "expression": f"object.spec.?{f} == oldObject.spec.?{f}",
                    "message": workload_message(f),
                    "reason": "Forbidden",
                }
                for f in WORKLOAD_FIELDS
            ],
        },
    }


def binding(policy: K8sObject, team: str) -> K8sObject:
    """``policy`` bound to the team's namespace (by its Namespace's team label)."""
    name = policy["metadata"]["name"]
    return {
        "apiVersion": API_VERSION,
        "kind": "ValidatingAdmissionPolicyBinding",
        "metadata": _meta(name, team),
        "spec": {
            "policyName": name,
            "validationActions": ["Deny"],
            "matchResources": {"namespaceSelector": {"matchLabels": {TEAM_LABEL: team}}},
        },
    }


def objects(team: str) -> list[K8sObject]:
    """The policies of ``team`` and their bindings (cluster-scoped, named for the team)."""
    out: list[K8sObject] = []
    for policy in (queue_policy(team), pod_policy(team), workload_policy(team)):
        out += [policy, binding(policy, team)]
    return out
