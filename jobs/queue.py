"""Jobs through a Kueue queue: which queue a job names, and what Kueue says about it.

A job file's ``team`` (or ``submit --team``) puts the job in the team's namespace (its name,
``infra.config.teams.TeamConfig.namespace``), its pods under the team's ServiceAccount
(``workloads.specs.teams.SERVICE_ACCOUNT``), and names two labels Kueue reads:
``kueue.x-k8s.io/queue-name`` (the LocalQueue: the job's node group, the same name in every
namespace, ``workloads.specs.kueue.local_queue_name``) and ``kueue.x-k8s.io/priority-class``
(a WorkloadPriorityClass: ``priority``, else the team's ``defaultPriority``). The label keys are
Kueue's ``QueueLabel`` and ``WorkloadPriorityClassLabel`` (``pkg/controller/constants/
constants.go`` at v0.17.0). On a topology-aware pool (EFA, not Karpenter) pod templates also ask
Kueue to keep the pods within one network block (``workloads.specs.kueue.pod_annotations``:
``kueue.x-k8s.io/podset-preferred-topology: topology.k8s.aws/network-node-layer-3``). A job on a GPU node group without a team still names its pool's
queue when it runs in the jobs namespace (``default``, where the stack creates a LocalQueue per
pool), so every GPU job there is admitted by Kueue; elsewhere (a namespace without queues) and
on nodes without GPUs it names one only with a team.

Kueue's webhook suspends a queued job on creation (``jobframework.ApplyDefaultForSuspend``,
``pkg/controller/jobframework/defaults.go``) and creates a **Workload** for it, labelled
``kueue.x-k8s.io/job-uid: <job uid>`` (``JobUIDLabel``, set in ``jobframework/reconciler.go``)
and owned by the job. ``admission`` folds its conditions (``apis/kueue/v1beta2/
workload_types.go``: ``QuotaReserved``, ``Admitted``, ``Evicted``, ``Preempted``,
``Finished``, ``Requeued``: an evicted Workload Kueue requeued, e.g. ``Reactivated``, waits
again) into one state and a reason a person reads: Kueue's flavor-assigner message
``insufficient unused quota for R in flavor F, N more needed`` (``pkg/scheduler/
flavorassigner/flavorassigner.go``) becomes ``waiting for W R in F, W-N free``, W being what
the Workload's pod sets request.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

QUEUE_LABEL = "kueue.x-k8s.io/queue-name"
PRIORITY_LABEL = "kueue.x-k8s.io/priority-class"
JOB_UID_LABEL = "kueue.x-k8s.io/job-uid"
"""The label Kueue puts on a job's Workload: the job's uid."""
WORKLOAD_GROUP = "kueue.x-k8s.io"
WORKLOAD_VERSION = "v1beta2"
WORKLOAD_PLURAL = "workloads"
JOBS_NAMESPACE = "default"
"""The stack's jobs namespace: it has a LocalQueue per pool (``workloads.specs.kueue``)."""
SERVICE_ACCOUNT = "jobs"
"""A team's job pods run as this ServiceAccount (``workloads.specs.teams.SERVICE_ACCOUNT``)."""
STATES = ("queued", "admitted", "preempted", "evicted", "finished", "inactive")
"""What ``admission`` answers (``""``: the job names no queue, or Kueue made no Workload yet)."""
_NEEDED = re.compile(
    r"insufficient unused quota for (?P<resource>\S+) in flavor (?P<flavor>\S+), "
    r"(?P<needed>\S+) more needed"
)


class QueueError(ValueError):
    """A bad ``team``, ``namespace`` or ``priority``: the key and what is wrong with it."""

    def __init__(self, key: str, problem: str) -> None:
        super().__init__(f"{key}: {problem}")
        self.key, self.problem = key, problem


@dataclass(frozen=True)
class Queue:
    """The queue a job is submitted to."""

    name: str
    """The LocalQueue (the job's node group)."""
    priority: str
    """The WorkloadPriorityClass."""
    team: str | None = None
    """The team (its namespace); None = the stack's jobs namespace."""
    pod_annotations: tuple[tuple[str, str], ...] = ()
    """What the job's pod templates carry for Kueue (the pool's preferred topology)."""

    def labels(self) -> dict[str, str]:
        return {QUEUE_LABEL: self.name, PRIORITY_LABEL: self.priority}


def resolve(values: Mapping[str, Any], platform: Any, *, gpu_job: bool) -> Queue | None:
    """The queue of a job file's ``team`` and ``priority`` on ``platform`` (its stack config),
    or None (no team, and not a GPU job in the jobs namespace). ``gpu_job``: its node group's
    instances have GPUs. Raises ``QueueError`` (``KEY: message``)."""
    from infra.config.teams import DEFAULT_PRIORITY, PRIORITIES

    team_name = values.get("team")
    priority = values.get("priority")
    team = None
    if team_name is not None:
        teams = {t.name: t for t in platform.teams}
        if not isinstance(team_name, str) or team_name not in teams:
            known = ", ".join(teams) or "none: the stack declares no teams"
            raise QueueError(
                "team", f"{team_name!r} is not a team of stack {platform.stack} (teams: {known})"
            )
        team = teams[team_name]
        namespace = values.get("namespace")
        if namespace not in (None, team.namespace):
            raise QueueError(
                "namespace",
                f"{namespace!r}: a job of team {team.name} runs in its namespace "
                f"{team.namespace} (drop namespace)",
            )
    if priority is not None and priority not in PRIORITIES:
        raise QueueError(
            "priority", f"{priority!r} is not a priority class ({', '.join(PRIORITIES)})"
        )
    in_jobs_namespace = values.get("namespace") in (None, JOBS_NAMESPACE)
    if team is None and not (gpu_job and in_jobs_namespace):
        if priority is not None:
            where = "on nodes without GPUs" if not gpu_job else "outside the jobs namespace"
            raise QueueError("priority", f"a job {where} goes through a queue only with a team")
        return None
    from workloads.specs.kueue import pod_annotations

    default = team.default_priority if team is not None else DEFAULT_PRIORITY
    pool = _pool(values, platform)
    group = next((g for g in platform.gpu_node_groups if g.name == pool), None)
    return Queue(
        name=pool,
        priority=str(priority or default),
        team=team.name if team is not None else None,
        pod_annotations=tuple(pod_annotations(group).items()) if group is not None else (),
    )


def _pool(values: Mapping[str, Any], platform: Any) -> str:
    groups = [g.name for g in platform.gpu_node_groups]
    group = values.get("nodeGroup") or (groups[0] if groups else "")
    return str(group)


def queued(body: dict[str, Any], queue: Queue | None, *, pod_template_paths: Any) -> dict[str, Any]:
    """``body`` (a job object) naming ``queue``: its labels, the queue's pod annotations on
    every pod template (``pod_template_paths(body)`` yields them), and on a team's job the
    team's ServiceAccount there."""
    if queue is None:
        return body
    meta = body["metadata"]
    meta["labels"] = {**(meta.get("labels") or {}), **queue.labels()}
    for template in pod_template_paths(body):
        if queue.pod_annotations:
            pod_meta = template.setdefault("metadata", {})
            annotations = {**(pod_meta.get("annotations") or {}), **dict(queue.pod_annotations)}
            pod_meta["annotations"] = annotations
        if queue.team is not None:
            template["spec"]["serviceAccountName"] = SERVICE_ACCOUNT
    return body


def pytorchjob_templates(body: dict[str, Any]) -> list[dict[str, Any]]:
    """The pod templates of a PyTorchJob."""
    return [r["template"] for r in body["spec"]["pytorchReplicaSpecs"].values()]


def queue_of(job: Mapping[str, Any]) -> str:
    """``<queue> (<priority>)`` from a job's labels ('' when it names none)."""
    labels = (job.get("metadata") or {}).get("labels") or {}
    if QUEUE_LABEL not in labels:
        return ""
    priority = labels.get(PRIORITY_LABEL)
    return labels[QUEUE_LABEL] + (f" ({priority})" if priority else "")


def _conditions(workload: Mapping[str, Any]) -> dict[str, dict[str, Any]]:
    return {c.get("type", ""): c for c in (workload.get("status") or {}).get("conditions") or []}


def _quantity(value: Any) -> float:
    """A Kubernetes quantity as a number (``8``, ``500m``, ``16Gi``)."""
    text = str(value)
    suffixes = {"m": 1e-3, "k": 1e3, "M": 1e6, "G": 1e9, "Ki": 2**10, "Mi": 2**20, "Gi": 2**30}
    for suffix, factor in sorted(suffixes.items(), key=lambda kv: -len(kv[0])):
        if text.endswith(suffix):
            return float(text[: -len(suffix)]) * factor
    return float(text)


def requested(workload: Mapping[str, Any], resource: str) -> float:
    """What the Workload's pod sets request of ``resource`` in all (count x each container's
    requests, else its limits, as Kubernetes defaults requests from limits)."""
    total = 0.0
    for podset in (workload.get("spec") or {}).get("podSets") or []:
        per_pod = 0.0
        for c in ((podset.get("template") or {}).get("spec") or {}).get("containers") or []:
            res = c.get("resources") or {}
            amount = (res.get("requests") or {}).get(
                resource, (res.get("limits") or {}).get(resource)
            )
            if amount is not None:
                per_pod += _quantity(amount)
        total += per_pod * int(podset.get("count", 1))
    return total


def _number(value: float) -> str:
    return str(int(value)) if value == int(value) else f"{value:g}"


def waiting_text(workload: Mapping[str, Any], message: str) -> str:
    """Kueue's 'insufficient unused quota' message as ``waiting for W R in F, N free``
    (the message itself when it says something else)."""
    hits = list(_NEEDED.finditer(message))
    if not hits:
        return message
    hit = next((h for h in hits if h["resource"] == "nvidia.com/gpu"), hits[0])
    try:
        needed = _quantity(hit["needed"])
    except ValueError:
        return message
    wanted = requested(workload, hit["resource"])
    free = max(0.0, wanted - needed)
    name = "GPUs" if hit["resource"] == "nvidia.com/gpu" else hit["resource"]
    return f"waiting for {_number(wanted)} {name} in {hit['flavor']}, {_number(free)} free"


def admission(workload: Mapping[str, Any] | None) -> tuple[str, str]:
    """(state, reason) of a job from its Workload: ``queued``, ``admitted``, ``preempted``,
    ``evicted``, ``finished`` or ``inactive``; ``("", "")`` without one."""
    if not workload:
        return "", ""
    cond = _conditions(workload)

    def true(kind: str) -> dict[str, Any] | None:
        c = cond.get(kind)
        return c if c is not None and c.get("status") == "True" else None

    if true("Finished"):
        return "finished", str(cond["Finished"].get("message", ""))
    if (workload.get("spec") or {}).get("active") is False:
        evicted = cond.get("Evicted") or {}
        return "inactive", str(evicted.get("message") or "deactivated (spec.active: false)")
    preempted, evicted = true("Preempted"), true("Evicted")
    if preempted or (evicted and evicted.get("reason") == "Preempted"):
        c = preempted or evicted or {}
        return "preempted", f"{c.get('reason', '')}: {c.get('message', '')}".strip(": ")
    requeued = true("Requeued")
    if evicted and not requeued:  # e.g. PodsReadyTimeout, waiting out its back-off
        return "evicted", f"{evicted.get('reason', '')}: {evicted.get('message', '')}".strip(": ")
    if true("Admitted"):
        return "admitted", ""
    reserved = cond.get("QuotaReserved")
    if reserved is not None and reserved.get("status") == "True":
        return "admitted", "quota reserved, waiting for admission checks"
    message = str((reserved or {}).get("message", ""))
    if requeued and (not message or (reserved or {}).get("reason") != "Pending"):
        message = f"requeued ({requeued.get('reason', '')}: {requeued.get('message', '')})"
    return "queued", waiting_text(workload, message or "waiting for Kueue to admit it")


KUEUE_PATCH_MANAGER = "kueue.x-k8s.io/manager"
"""The ``runtimePatches[].manager`` Kueue's webhook appends to every TrainJob it sees
(``pkg/controller/jobs/trainjob/trainjob_webhook.go`` ``Default``, v0.17.0)."""


def kueue_defaulted(job: Mapping[str, Any]) -> bool:
    """Whether Kueue's webhook has seen ``job`` (a TrainJob: its runtime patch), so a Workload
    is Kueue's to make even if it does not exist yet."""
    patches = (job.get("spec") or {}).get("runtimePatches") or []
    return any(p.get("manager") == KUEUE_PATCH_MANAGER for p in patches)


def set_active(
    b: Any,
    workload: Mapping[str, Any] | None,
    *,
    active: bool,
    job: Mapping[str, Any] | None = None,
) -> str:
    """Deactivate (or reactivate) a queued job's Kueue Workload, ``spec.active`` as ``kueuectl
    stop workload`` sets it: Kueue evicts the job and releases its quota, or requeues it. ``b``
    is a cluster backend (its API clients and namespace); returns what was done, for the user.

    ``workload`` None: Kueue has not made the Workload of ``job`` yet (its job reconciler does,
    moments after the webhook suspended the job). Then nothing is patched and the call fails
    in one line: the job's own suspend flag is not Kueue's to read (Kueue would unsuspend the
    job once admitted, and an unsuspend written there would start it past the queue)."""
    from jobs.cluster.kube import api_errors, raw
    from jobs.types import JobsError

    if workload is None:
        meta = (job or {}).get("metadata") or {}
        raise JobsError(
            f"job {meta.get('name')} in queue {queue_of(job or {})} has no Kueue Workload yet "
            "(not admitted/queued yet): retry in a few seconds"
        )
    name = workload["metadata"]["name"]
    with api_errors(b.api, f"patch workload {name}"):
        raw(
            b.custom.patch_namespaced_custom_object,
            WORKLOAD_GROUP,
            WORKLOAD_VERSION,
            b.namespace,
            WORKLOAD_PLURAL,
            name,
            {"spec": {"active": active}},
        )
    return f"workload {name} {'active again' if active else 'deactivated'}"
