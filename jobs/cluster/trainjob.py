"""``api: v2`` jobs on a cluster: a Kubeflow Trainer v2 ``TrainJob`` (``trainer.kubeflow.org/
v1alpha1``, plural ``trainjobs``: the vendored CRD ``workloads/manifests/trainer/crds``)
created through the Kubernetes API, next to the same NetworkPolicy (owned by the TrainJob) and
the same record ConfigMap as a v1 PyTorchJob (``jobs.cluster.backend``, which calls in here for a job
file with ``api: v2`` or when the name it looks up is a TrainJob, not a PyTorchJob).

Phases come from the TrainJob's conditions (``Complete``, ``Failed``, ``Suspended``:
``pkg/apis/trainer/v1alpha1/trainjob_types.go`` at v2.3.0): ``Succeeded``, ``Failed``,
``Suspended``, else ``Running`` once a pod runs, else ``Pending``. Trainer builds a JobSet of
the TrainJob's name (``pkg/runtime/framework/plugins/jobset/jobset.go``); JobSet labels every
pod ``jobset.sigs.k8s.io/jobset-name: <name>`` and ``jobset.sigs.k8s.io/replicatedjob-name``
(``labelAndAnnotateObject`` in ``pkg/controllers/jobset_controller.go`` at v0.12.0, the
JobSet Trainer v2.3.0 requires), the runtime labels them ``trainer.kubeflow.org/
trainjob-ancestor-step: trainer`` (``workloads.specs.trainjob``), and the Job controller
labels an Indexed Job's pod with its completion index ``batch.kubernetes.io/
job-completion-index`` (Kubernetes ``PodIndexLabel``, GA in 1.32), which Trainer's torch plugin
makes the node rank (``PET_NODE_RANK``, ``pkg/runtime/framework/plugins/torch/torch.go``):
``logs --rank R`` reads the pod of index R. Suspend: a queued TrainJob through its Kueue
Workload, as a v1 job; any other through the TrainJob's ``spec.suspend`` (Trainer suspends its
JobSet, whose Jobs delete their pods: SIGTERM, the grace period, the emergency checkpoint).
World size is fixed (no elastic policy in Trainer v2), and no rendezvous id is made: torchrun's
static rendezvous at the master pod.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from datetime import datetime
from typing import Any

from jobs import manifest, queue, resume_from
from jobs.cluster import efa_claim
from jobs.cluster import metrics as cluster_metrics
from jobs.cluster.kube import STILL_DELETING, api_errors, delete_object
from jobs.cluster.kube import raw as _raw
from jobs.progress import from_gauges, planned_steps
from jobs.schema import JobSpec
from jobs.types import FINISHED, Condition, JobInfo, JobsError, Progress, Replica, Submitted
from workloads.specs import pytorchjob as pj
from workloads.specs import trainjob as tj
from workloads.specs.settings import Workloads

GROUP = tj.GROUP
VERSION = "v1alpha1"
PLURAL = "trainjobs"
KIND = "TrainJob"
JOBSET_LABEL = "jobset.sigs.k8s.io/jobset-name"
INDEX_LABEL = "batch.kubernetes.io/job-completion-index"
"""The pod's completion index in the ``node`` Job: its node rank."""
INDEX_ANNOTATION = INDEX_LABEL
"""The same index as an annotation (every Kubernetes version with Indexed Jobs)."""
NO_TRAINER = (
    "the cluster has no TrainJob API (trainer.kubeflow.org/v1alpha1): set trainerV2: true in "
    "the stack config and pulumi up the cluster stack"
)
STATIC_RDZV = "static"
"""What the record and ``status`` show as the rendezvous id: torchrun's static rendezvous at
node 0 needs none (a v1 job gets a fresh one per generation)."""
DELETE_WAIT_S = 60.0
POLL_S = 2.0


def get(b: Any, name: str, namespace: str | None = None) -> dict[str, Any] | None:
    """The TrainJob ``name`` (None when there is none, or the cluster serves no TrainJob API)."""
    ns = namespace or b.namespace
    try:
        return _raw(  # type: ignore[no-any-return]
            b.custom.get_namespaced_custom_object, GROUP, VERSION, ns, PLURAL, name
        )
    except Exception as err:
        if getattr(err, "status", None) == 404:  # no such object, or no such API
            return None
        with api_errors(b.api, f"get trainjob {name}"):
            raise


def phase_of(job: dict[str, Any], pods: list[dict[str, Any]] | None = None) -> str:
    """``Succeeded``/``Failed``/``Suspended`` from the TrainJob's conditions, else ``Running``
    when one of ``pods`` runs, else ``Pending``."""
    cond = {
        c.get("type"): c.get("status") for c in (job.get("status") or {}).get("conditions") or []
    }
    if cond.get("Complete") == "True":
        return "Succeeded"
    if cond.get("Failed") == "True":
        return "Failed"
    if cond.get("Suspended") == "True" or (job.get("spec") or {}).get("suspend"):
        return "Suspended"
    if any((p.get("status") or {}).get("phase") == "Running" for p in pods or []):
        return "Running"
    return "Pending"


def pod_index(pod: dict[str, Any]) -> int:
    meta = pod.get("metadata") or {}
    value = (meta.get("labels") or {}).get(INDEX_LABEL) or (meta.get("annotations") or {}).get(
        INDEX_ANNOTATION, 0
    )
    return int(value)


def pods(b: Any, name: str | None = None, rank: int | None = None) -> list[dict[str, Any]]:
    """The training pods of TrainJob ``name`` (of every TrainJob without it), rank order."""
    selector = f"{JOBSET_LABEL}={name}" if name else JOBSET_LABEL
    selector += f",{tj.ANCESTOR_LABEL}={tj.ANCESTOR_TRAINER}"
    with api_errors(b.api, f"list pods in {b.namespace}"):
        found = _raw(b.core.list_namespaced_pod, b.namespace, label_selector=selector)
    items = [p for p in (found or {}).get("items") or [] if rank is None or pod_index(p) == rank]
    return sorted(items, key=pod_index)


def _replica(pod: dict[str, Any]) -> Replica:
    status = pod.get("status") or {}
    main = next((c for c in status.get("containerStatuses") or [] if c.get("name") == tj.NODE), {})
    state, last = main.get("state") or {}, (main.get("lastState") or {}).get("terminated") or {}
    terminated = state.get("terminated") or {}
    reason = (
        terminated.get("reason") or last.get("reason") or (state.get("waiting") or {}).get("reason")
    )
    return Replica(
        name=pod["metadata"]["name"],
        state=status.get("phase", "Pending"),
        restarts=int(main.get("restartCount", 0)),
        exit_code=terminated.get("exitCode", last.get("exitCode")),
        reason=str(reason or ""),
    )


def info(
    b: Any,
    job: dict[str, Any],
    record: dict[str, Any] | None,
    job_pods: list[dict[str, Any]],
    *,
    detail: bool,
    workload: dict[str, Any] | None = None,
) -> JobInfo:
    """What ``list`` and ``status`` show of a TrainJob."""
    meta = job.get("metadata") or {}
    name, ns = meta.get("name", ""), meta.get("namespace", b.namespace)
    trainer = (job.get("spec") or {}).get("trainer") or {}
    replicas = [_replica(p) for p in job_pods]
    phase = phase_of(job, job_pods)
    total = planned_steps(pj.finetune_flags(trainer.get("command") or []))
    progress = Progress(total=total)
    if detail or phase == "Running":
        from workloads.specs.observability import ObservabilitySettings

        obs = ObservabilitySettings()
        values = cluster_metrics.prometheus_values(
            b.api, name, ns, metrics_namespace=obs.namespace, service=obs.prometheus_service
        )
        if values is not None:
            progress = from_gauges(values, total)
    conditions = [
        Condition(
            type=c.get("type", ""),
            status=c.get("status", ""),
            reason=c.get("reason", ""),
            message=c.get("message", ""),
            time=c.get("lastTransitionTime", ""),
        )
        for c in (job.get("status") or {}).get("conditions") or []
    ]
    failed = [c for c in conditions if c.type == "Failed" and c.status == "True"]
    bad = [r for r in replicas if r.exit_code not in (None, 0)]
    last_failure = (
        f"{failed[-1].reason}: {failed[-1].message}"
        if failed
        else f"{bad[-1].name}: {bad[-1].reason or 'Error'} (exit {bad[-1].exit_code})"
        if bad
        else ""
    )
    admission, why = queue.admission(workload)
    data = (record or {}).get("data") or {}
    return JobInfo(
        name=name,
        backend=b.name,
        phase=phase,
        ready=sum(r.state == "Running" for r in replicas),
        wanted=int(trainer.get("numNodes", 0)),
        restarts=sum(r.restarts for r in replicas),
        age_s=_age(meta.get("creationTimestamp")),
        progress=progress,
        namespace=ns,
        generation=int(
            (meta.get("labels") or {}).get("eks-fsdp/generation")
            or data.get(manifest.GENERATION_KEY, 1)
        ),
        rdzv_id=STATIC_RDZV,
        conditions=conditions,
        replicas=replicas,
        last_failure=last_failure,
        next_step=b._next_step(name, phase),
        where={
            "trainjob": f"{ns}/{name}",
            "jobset": f"{ns}/{name}",
            "record": f"configmap/{manifest.record_name(name)}",
            **({"workload": f"{ns}/{workload['metadata']['name']}"} if workload else {}),
        },
        queue=queue.queue_of(job),
        admission=admission,
        admission_reason=why,
    )


def _age(stamp: str | None) -> float | None:
    if not stamp:
        return None
    try:
        t = datetime.fromisoformat(stamp.replace("Z", "+00:00"))
    except ValueError:
        return None
    return max(0.0, time.time() - t.timestamp())


def _workload(b: Any, job: dict[str, Any]) -> dict[str, Any] | None:
    if not queue.queue_of(job):
        return None
    uid = job["metadata"].get("uid", "")
    return b._workload_of(job, b._workloads(f"{queue.JOB_UID_LABEL}={uid}"))  # type: ignore[no-any-return]


def status(b: Any, job: dict[str, Any]) -> JobInfo:
    name = job["metadata"]["name"]
    record = b._get_record(name)
    return info(b, job, record, pods(b, name), detail=True, workload=_workload(b, job))


def list_infos(b: Any, records: dict[str, dict[str, Any]]) -> list[JobInfo]:
    """The namespace's TrainJobs of the project; their records are taken out of ``records``
    (none where the cluster serves no TrainJob API)."""
    try:
        found = _raw(
            b.custom.list_namespaced_custom_object,
            GROUP,
            VERSION,
            b.namespace,
            PLURAL,
            label_selector=manifest.PART_OF_SELECTOR,
        )
    except Exception as err:
        if getattr(err, "status", None) == 404:
            return []
        with api_errors(b.api, f"list trainjobs in {b.namespace}"):
            raise
    jobs = (found or {}).get("items") or []
    if not jobs:
        return []
    all_pods = pods(b)
    workloads = b._workloads() if any(queue.queue_of(j) for j in jobs) else []
    out = []
    for job in jobs:
        name = job["metadata"]["name"]
        mine = [p for p in all_pods if p["metadata"]["labels"].get(JOBSET_LABEL) == name]
        out.append(
            info(
                b,
                job,
                records.pop(name, None),
                mine,
                detail=False,
                workload=b._workload_of(job, workloads),
            )
        )
    return out


def templates(body: dict[str, Any]) -> list[dict[str, Any]]:
    """The pod template (patch) of a TrainJob: where a team's ServiceAccount goes."""
    return [tj.pod_spec_patch(body)]


def body(job_file: JobSpec, settings: Any) -> dict[str, Any]:
    """The TrainJob a submission creates: the builder's, naming the job's queue."""
    return queue.queued(tj.trainjob(settings), job_file.queue, pod_template_paths=templates)


def _delete(b: Any, name: str, ns: str) -> bool:
    return delete_object(b.api, b.custom, (GROUP, VERSION, PLURAL), ns, name)


def _wait_gone(b: Any, name: str, ns: str) -> None:
    deadline = time.monotonic() + DELETE_WAIT_S
    while get(b, name, ns) is not None and time.monotonic() < deadline:
        time.sleep(0.5)


def create(b: Any, job_file: JobSpec, w: Workloads, root: str | None = None) -> tuple[Any, str]:
    """Create the TrainJob and its NetworkPolicy from the job's built settings ``w``
    (``resume``: after deleting the finished or cancelled one of the name); returns (settings,
    ``STATIC_RDZV``)."""
    from workloads.specs.observability import ObservabilitySettings

    settings = resume_from.with_root(w.job, root)
    generation = settings.generation
    ns, name = settings.namespace, settings.name
    old = get(b, name, ns)
    if old is not None and generation > 1:  # resume: the old generation goes first
        if not (old.get("metadata") or {}).get("deletionTimestamp"):
            phase = phase_of(old)
            if phase not in FINISHED:
                raise JobsError(
                    f"job {name} is {phase}: nothing to resume (`eks-fsdp jobs cancel {name}` "
                    "first)"
                )
            if phase == "Succeeded":
                raise JobsError(
                    f"job {name} succeeded: nothing to resume; submit it again under a new --name"
                )
            _delete(b, name, ns)
        _wait_gone(b, name, ns)
    b._clear_stale_policy(name, ns)
    with api_errors(
        b.api,
        f"create trainjob {name} in {ns}",
        f"no namespace {ns!r} or {NO_TRAINER}",
        conflict=STILL_DELETING,
    ):
        created = _raw(
            b.custom.create_namespaced_custom_object,
            GROUP,
            VERSION,
            ns,
            PLURAL,
            body(job_file, settings),
        )
    try:
        metrics_ns = ObservabilitySettings().namespace if settings.metrics_port else None
        policy = manifest.owned_by(manifest.network_policy(settings, metrics_ns), created)
        with api_errors(b.api, f"create networkpolicy {policy['metadata']['name']}"):
            _raw(b.net.create_namespaced_network_policy, ns, policy)
    except JobsError:
        _delete(b, name, ns)
        raise
    return settings, STATIC_RDZV


def submit(b: Any, job: JobSpec, w: Workloads, *, replace: bool) -> Submitted:
    """``submit`` of an ``api: v2`` job file, built (``w``; the v1 rules: a name in use is
    refused unless ``replace`` and finished)."""
    image = w.job.image
    ns = job.namespace
    b.namespace = ns
    existing = get(b, job.name, ns)
    record = b._get_record(job.name, ns)
    v1 = b._get_job(job.name, ns) if existing is None and record is not None else None
    if replace and (existing is not None or record is not None):
        phase = phase_of(existing) if existing is not None else "Cancelled"
        if v1 is not None or phase not in FINISHED:
            raise JobsError(
                f"--replace: job {job.name!r} is {phase}; only a finished job is replaced "
                f"(`eks-fsdp jobs cancel {job.name}` first)",
                status=2,
            )
        if existing is not None:
            _delete(b, job.name, ns)
            _wait_gone(b, job.name, ns)
        if record is not None:
            with api_errors(b.api, f"delete configmap {manifest.record_name(job.name)}"):
                _raw(b.core.delete_namespaced_config_map, manifest.record_name(job.name), ns)
        existing, record = None, None
    if existing is not None and (existing.get("metadata") or {}).get("deletionTimestamp"):
        raise JobsError(f"job {job.name!r} in {ns}: {STILL_DELETING}")
    if existing is not None or record is not None:
        phase = phase_of(existing) if existing is not None else "Cancelled"
        raise JobsError(
            f"job {job.name!r} exists in {ns} ({phase}): pass --name NEW, or `eks-fsdp "
            f"jobs resume {job.name}`, or --replace (a finished job)",
            status=2,
        )
    settings, rdzv = create(b, job, w)
    rec = manifest.record(settings, job.dump(), generation=1, rdzv_id=rdzv, image=image)
    try:
        with api_errors(b.api, f"create configmap {rec['metadata']['name']}"):
            _raw(b.core.create_namespaced_config_map, ns, rec)
    except JobsError:
        _delete(b, job.name, ns)
        raise
    return Submitted(
        name=job.name,
        backend=b.name,
        rdzv_id=rdzv,
        generation=1,
        namespace=ns,
        follow=b._cmd("logs", job.name, "--follow"),
    )


def cancel(b: Any, job: dict[str, Any], *, purge: bool) -> str:
    """Delete the TrainJob (its JobSet, Jobs and pods go with it); the record is kept (marked
    cancelled) unless ``purge``."""
    name, ns = job["metadata"]["name"], b.namespace
    _delete(b, name, ns)
    record = b._get_record(name)
    if record is not None and purge:
        with api_errors(b.api, f"delete configmap {manifest.record_name(name)}"):
            _raw(b.core.delete_namespaced_config_map, manifest.record_name(name), ns)
        return f"cancelled {name}; record removed (checkpoints on the claim are kept)"
    if record is not None:
        stamp = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
        with api_errors(b.api, f"patch configmap {manifest.record_name(name)}"):
            _raw(
                b.core.patch_namespaced_config_map,
                manifest.record_name(name),
                ns,
                {"data": {manifest.CANCELLED_KEY: stamp}},
            )
    return (
        f"cancelled {name}: the TrainJob and its pods are deleted; its checkpoints stay on "
        f"the claim (resume: {b._cmd('resume', name)})"
    )


def suspend(b: Any, job: dict[str, Any], *, on: bool) -> str:
    """Through the Kueue Workload of a queued TrainJob (as a v1 job: Kueue would undo a suspend
    written on an admitted job), else the TrainJob's ``spec.suspend``. A queued TrainJob Kueue
    has seen but made no Workload for yet is refused in one line (``queue.set_active``)."""
    name = job["metadata"]["name"]
    verb = "suspend" if on else "unsuspend"
    phase = phase_of(job)
    if phase in FINISHED:
        raise JobsError(f"job {name} is {phase}: nothing to {verb}")
    workload = _workload(b, job)
    if workload is not None or (queue.queue_of(job) and queue.kueue_defaulted(job)):
        how = queue.set_active(b, workload, active=not on, job=job)
    else:
        with api_errors(b.api, f"patch trainjob {name}", NO_TRAINER):
            _raw(
                b.custom.patch_namespaced_custom_object,
                GROUP,
                VERSION,
                b.namespace,
                PLURAL,
                name,
                {"spec": {"suspend": on}},
            )
        how = f"spec.suspend: {str(on).lower()}"
    if on:
        return (
            f"suspended {name} ({how}): its pods get SIGTERM and write a checkpoint; "
            f"`{b._cmd('unsuspend', name)}` resumes it from there"
        )
    return f"unsuspended {name} ({how}): its pods resume from the newest checkpoint"


def logs(
    b: Any,
    job: dict[str, Any],
    *,
    rank: int,
    follow: bool,
    tail: int | None,
    write: Callable[[str], None],
    wait_timeout_s: float,
    note: Callable[[str], None],
) -> None:
    """Node ``rank``'s log (the pod of completion index ``rank``); with ``follow`` it waits for
    the pod to start and streams until it ends."""
    from jobs.cluster.logs import started, stream, waiting_state

    name = job["metadata"]["name"]
    wanted = int(((job.get("spec") or {}).get("trainer") or {}).get("numNodes", 0))
    if not 0 <= rank < wanted:
        raise JobsError(
            f"--rank {rank}: job {name} has {wanted} node pods (--rank 0..{wanted - 1})", status=2
        )
    deadline = time.monotonic() + wait_timeout_s
    last = ""
    while True:
        found = pods(b, name, rank)
        if found and started(found[0]):
            break
        state = waiting_state(found[0]) if found else f"not created yet (job {phase_of(job)})"
        if not follow:
            raise JobsError(
                f"job {name}: node pod {rank} has not started ({phase_of(job)}, pod {state}): "
                "--follow waits for it"
            )
        if state != last:
            note(f"waiting for node pod {rank} of {name} to start: {state}")
            last = state
        if time.monotonic() >= deadline:
            raise JobsError(
                f"job {name}: node pod {rank} has not started after {wait_timeout_s:g} s "
                f"({state}): `eks-fsdp jobs status {name}` says why; --wait-timeout waits longer"
            )
        time.sleep(POLL_S)
        job = get(b, name) or {}
        if not job:
            raise JobsError(f"job {name}: gone before node pod {rank} started (cancelled?)")
        if phase_of(job) in FINISHED and not found:
            raise JobsError(f"job {name} is {phase_of(job)} and node pod {rank} never started")
    pod = found[0]["metadata"]["name"]
    stream(b, name, pod, follow=follow, tail=tail, write=write, container=tj.NODE)


def as_submitted(
    components: dict[str, list[dict[str, Any]]], job_file: JobSpec, settings: Any
) -> dict[str, list[dict[str, Any]]]:
    """``workloads.render``'s job objects as ``submit`` creates them: the PyTorchJob naming the
    job's queue (``jobs.queue``), or for ``api: v2`` the TrainJob in its place
    (``trainjob.yaml``); on an ``efa: dra`` group the ResourceClaimTemplate its workers
    reference (``efa-claim-template.yaml``, ``jobs.cluster.efa_claim``: without it ``kubectl apply`` of
    the files leaves the pods waiting); the other components unchanged, in their order."""
    out: dict[str, list[dict[str, Any]]] = {}
    for component, objs in components.items():
        if component != "pytorchjob":
            out[component] = objs
        elif job_file.api == "v2":
            out["trainjob"] = [body(job_file, settings)]
        else:
            out[component] = [
                queue.queued(o, job_file.queue, pod_template_paths=queue.pytorchjob_templates)
                for o in objs
            ]
            if getattr(settings, "efa_dra", False):
                out["efa-claim-template"] = [efa_claim.template(settings)]
    return out


def validate_object(obj: dict[str, Any], kubernetes_version: str) -> None:
    """``workloads.specs.validate.validate``, and a TrainJob against Trainer's CRD at the pin."""
    from workloads.specs.validate import validate

    if obj.get("apiVersion") == tj.API_VERSION:
        tj.validate(obj)
    else:
        validate(obj, kubernetes_version)
