"""The cluster backend: a job is a PyTorchJob (``kubeflow.org/v1``) created through the
Kubernetes API, next to its workers' NetworkPolicy (owned by the job, so deleted with it) and
its record, a ConfigMap ``<name>-job`` holding the resolved job file, the generation, the
rendezvous id and the image; the record outlives ``cancel`` so that ``resume`` can create the
job again (same name, so the same checkpoint folder; next generation, fresh rendezvous id).

Phases are the training operator's conditions (the last true one: Created, Running,
Restarting, Succeeded, Failed, Suspended); a job deleted by ``cancel`` is ``Cancelled`` from its
record. Progress comes from the job's ``eksfsdp_*`` gauges in the cluster's Prometheus (through
the API server's service proxy), else from a worker's exporter through the pod proxy
(``jobs.cluster.metrics``), on jobs that export metrics (stacks with observability).
"""

from __future__ import annotations

import contextlib
import sys
import time
from collections.abc import Callable
from datetime import datetime
from typing import Any

from jobs import manifest, queue, resume_from
from jobs.build import build
from jobs.cluster import capacity, trainjob
from jobs.cluster import logs as cluster_logs
from jobs.cluster import metrics as cluster_metrics
from jobs.cluster.efa_claim import create as create_efa_claim
from jobs.cluster.kube import (
    STILL_DELETING,
    api_errors,
    delete_object,
    object_not_found,
    stack_output,
)
from jobs.cluster.kube import raw as _raw
from jobs.cluster.operator import INDEX_LABEL, JOB_LABEL, phase_of, worker_container, worker_spec
from jobs.gate_status import from_pods as gate_line_of
from jobs.progress import from_gauges, planned_steps
from jobs.schema import JobSpec, loads
from jobs.types import FINISHED, Condition, JobInfo, JobsError, Progress, Replica, Submitted
from workloads.specs import pytorchjob as pj
from workloads.specs.settings import Workloads

GROUP = "kubeflow.org"
VERSION = "v1"
PLURAL = "pytorchjobs"
DELETE_WAIT_S = 60.0
"""Seconds ``resume`` and ``submit --replace`` wait for a deleted job to be gone."""
ROOT_KEY = "checkpointRoot"
"""Record key: the checkpoint root ``resume --from`` gave (kept for the next resume)."""
FINAL_KEY = "finalPhase"
"""Record key: Succeeded or Failed, once seen, so a job the operator's TTL
(``runPolicy.ttlSecondsAfterFinished``) removed still shows how it ended."""
NO_OPERATOR = (
    "the cluster has no PyTorchJob API (kubeflow.org/v1): is the training operator installed? "
    "(pulumi up of the cluster stack)"
)


def _note(line: str) -> None:
    print(line, file=sys.stderr, flush=True)


def _age(stamp: str | None) -> float | None:
    if not stamp:
        return None
    try:
        t = datetime.fromisoformat(stamp.replace("Z", "+00:00"))
    except ValueError:
        return None
    return max(0.0, time.time() - t.timestamp())


def _replica(pod: dict[str, Any]) -> Replica:
    status = pod.get("status") or {}
    containers = status.get("containerStatuses") or []
    main: dict[str, Any] = next((c for c in containers if c.get("name") == pj.CONTAINER), {})
    restarts = int(main.get("restartCount", 0))
    state = main.get("state") or {}
    last = (main.get("lastState") or {}).get("terminated") or {}
    terminated = state.get("terminated") or {}
    exit_code = terminated.get("exitCode", last.get("exitCode"))
    reason = (
        terminated.get("reason")
        or last.get("reason")
        or (state.get("waiting") or {}).get("reason", "")
    )
    phase = status.get("phase", "Pending")
    return Replica(
        name=pod["metadata"]["name"],
        state=phase,
        restarts=restarts,
        exit_code=exit_code,
        reason=str(reason or ""),
    )


class ClusterBackend:
    """Jobs on the cluster a kubeconfig reaches."""

    name = "cluster"

    def __init__(
        self,
        api: Any,
        *,
        namespace: str = "default",
        stack: str | None = None,
        connection: str = "",
    ) -> None:
        from kubernetes import client

        self.api = api
        self.namespace = namespace
        self.stack = stack
        self.connection = connection
        """The flags that reached this cluster (``--stack S`` / ``--kubeconfig P``): the
        commands the CLI prints carry them, so they talk to the same cluster."""
        self.custom = client.CustomObjectsApi(api)
        self.core = client.CoreV1Api(api)
        self.net = client.NetworkingV1Api(api)

    # -- reads ----------------------------------------------------------------------------------
    def _get_job(self, name: str, namespace: str | None = None) -> dict[str, Any] | None:
        ns = namespace or self.namespace
        with api_errors(self.api, f"get pytorchjob {name}", NO_OPERATOR):
            try:
                return _raw(  # type: ignore[no-any-return]
                    self.custom.get_namespaced_custom_object, GROUP, VERSION, ns, PLURAL, name
                )
            except Exception as err:
                if object_not_found(err):
                    return None
                raise

    def _get_record(self, name: str, namespace: str | None = None) -> dict[str, Any] | None:
        ns = namespace or self.namespace
        with api_errors(self.api, f"get configmap {manifest.record_name(name)}"):
            try:
                obj = _raw(self.core.read_namespaced_config_map, manifest.record_name(name), ns)
            except Exception as err:
                if object_not_found(err):
                    return None
                raise
        return obj  # type: ignore[no-any-return]

    def _workloads(self, selector: str | None = None) -> list[dict[str, Any]]:
        """Kueue's Workloads in the namespace (none where Kueue is not installed or its
        Workloads may not be read: the queue's state is then left out)."""
        try:
            data = _raw(
                self.custom.list_namespaced_custom_object,
                queue.WORKLOAD_GROUP,
                queue.WORKLOAD_VERSION,
                self.namespace,
                queue.WORKLOAD_PLURAL,
                **({"label_selector": selector} if selector else {}),
            )
        except Exception as err:
            if getattr(err, "status", None) in (403, 404):
                return []
            with api_errors(self.api, f"list workloads in {self.namespace}"):
                raise
        return list((data or {}).get("items") or [])

    def _workload_of(
        self, job: dict[str, Any], workloads: list[dict[str, Any]]
    ) -> dict[str, Any] | None:
        """The Workload Kueue made for ``job``: labelled with its uid, owned by it."""
        uid = job["metadata"].get("uid")
        for w in workloads:
            meta = w.get("metadata") or {}
            owners = [o.get("uid") for o in meta.get("ownerReferences") or []]
            if (meta.get("labels") or {}).get(queue.JOB_UID_LABEL) == uid or uid in owners:
                return w
        return None

    def _pods(self, selector: str) -> list[dict[str, Any]]:
        with api_errors(self.api, f"list pods in {self.namespace}"):
            pods = _raw(self.core.list_namespaced_pod, self.namespace, label_selector=selector)
        items = (pods or {}).get("items") or []
        return sorted(
            items, key=lambda p: int((p["metadata"].get("labels") or {}).get(INDEX_LABEL, 0))
        )

    def _progress(
        self, job: dict[str, Any], pods: list[dict[str, Any]], total: int | None
    ) -> Progress:
        """The job's gauges from the cluster's Prometheus, else from a running worker's
        exporter (``jobs.cluster.metrics``); none on a job without a metrics port."""
        from workloads.specs.observability import ObservabilitySettings

        port = next(
            (
                p.get("containerPort")
                for p in worker_container(job).get("ports") or []
                if p.get("name") == "metrics"
            ),
            None,
        )
        if port is None:
            return Progress(total=total)
        obs = ObservabilitySettings()
        meta = job.get("metadata") or {}
        values = cluster_metrics.prometheus_values(
            self.api,
            meta.get("name", ""),
            meta.get("namespace", self.namespace),
            metrics_namespace=obs.namespace,
            service=obs.prometheus_service,
        )
        if values is None:
            values = cluster_metrics.pod_values(self.api, pods, port, self.namespace)
        return from_gauges(values, total)

    def _next_step(self, name: str, phase: str) -> str:
        """What to run next: follow a running job, resume a failed one, read a finished one."""
        if phase not in FINISHED:
            return self._cmd("logs", name, "--follow")
        return self._cmd("resume", name) if phase == "Failed" else self._cmd("logs", name)

    def _cmd(self, verb: str, name: str, *flags: str) -> str:
        """A ``eks-fsdp jobs`` command for job ``name`` on this cluster and namespace."""
        words = ["eks-fsdp jobs", verb, name, *flags]
        if self.connection:
            words.append(self.connection)
        return " ".join([*words, "-n", self.namespace])

    def _info(
        self,
        job: dict[str, Any] | None,
        record: dict[str, Any] | None,
        pods: list[dict[str, Any]],
        *,
        detail: bool,
        workload: dict[str, Any] | None = None,
    ) -> JobInfo:
        data = (record or {}).get("data") or {}
        meta = (job or record or {}).get("metadata") or {}
        name = (job or {}).get("metadata", {}).get("name") or (record or {}).get(
            "metadata", {}
        ).get("labels", {}).get(manifest.RECORD_LABEL, "")
        if job is None:  # cancelled, or removed (the operator's TTL) once finished
            phase = (
                "Cancelled"
                if data.get(manifest.CANCELLED_KEY)
                else data.get(FINAL_KEY) or "Deleted"
            )
            return JobInfo(
                name=name,
                backend=self.name,
                phase=phase,
                namespace=meta.get("namespace", self.namespace),
                generation=int(data.get(manifest.GENERATION_KEY, 1)),
                rdzv_id=data.get(manifest.RDZV_ID_KEY, ""),
                age_s=_age(meta.get("creationTimestamp")),
                next_step="" if phase == "Succeeded" else self._cmd("resume", name),
                where={"record": f"configmap/{manifest.record_name(name)}"},
            )
        spec = job.get("spec") or {}
        worker = worker_spec(job)
        replicas = [_replica(p) for p in pods]
        container = worker_container(job)
        total = planned_steps(pj.finetune_flags(container.get("command") or []))
        progress = Progress(total=total)
        if detail or phase_of(job) in ("Running", "Restarting"):
            progress = self._progress(job, pods, total)
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
        failures = [
            c for c in conditions if c.type in ("Failed", "Restarting") and c.status == "True"
        ]
        last_failure = f"{failures[-1].reason}: {failures[-1].message}" if failures else ""
        if not last_failure:
            bad = [
                r
                for r in replicas
                if r.exit_code not in (None, 0)
                or r.reason
                in (
                    "CreateContainerConfigError",
                    "ImagePullBackOff",
                    "ErrImagePull",
                    "CrashLoopBackOff",
                    "OOMKilled",
                )
            ]
            if bad:
                r = bad[-1]
                last_failure = f"{r.name}: {r.reason or 'Error'}" + (
                    f" (exit {r.exit_code})" if r.exit_code is not None else ""
                )
        last_failure = gate_line_of(pods, pj.CONTAINER) or last_failure  # the node, named
        phase = phase_of(job)
        ns = meta.get("namespace", self.namespace)
        admission, why = queue.admission(workload)
        return JobInfo(
            name=name,
            backend=self.name,
            phase=phase,
            ready=sum(r.state == "Running" for r in replicas),
            wanted=int(worker.get("replicas", 0)),
            restarts=sum(r.restarts for r in replicas),
            age_s=_age(meta.get("creationTimestamp")),
            progress=progress,
            namespace=ns,
            generation=int((meta.get("labels") or {}).get("eks-fsdp/generation", 1)),
            rdzv_id=(spec.get("elasticPolicy") or {}).get("rdzvId", ""),
            conditions=conditions,
            replicas=replicas,
            last_failure=last_failure,
            next_step=self._next_step(name, phase),
            where={
                "pytorchjob": f"{ns}/{name}",
                "record": f"configmap/{manifest.record_name(name)}",
                **(
                    {"workload": f"{ns}/{workload['metadata']['name']}"}
                    if workload is not None
                    else {}
                ),
            },
            queue=queue.queue_of(job),
            admission=admission,
            admission_reason=why,
        )

    # -- verbs ----------------------------------------------------------------------------------
    def image_for(self, job: JobSpec, image: str | None) -> str:
        """``--image``, else the job file's, else the stack's ``trainingImage`` output; a GPU
        job refuses an image without a registry (the nodes would pull it from Docker Hub)."""
        from workloads.specs.image import has_registry, local_reference

        chosen = image or job.image
        if not chosen and self.stack:
            chosen = str(stack_output(self.stack, "trainingImage"))
        if chosen and (has_registry(chosen) or job.device == "cpu"):
            return chosen
        if job.device == "cpu":
            return local_reference()
        if chosen:
            raise JobsError(
                f"image: {chosen!r} names no registry (the nodes would pull it from Docker Hub): "
                "--set image=<account>.dkr.ecr.<region>.amazonaws.com/<repository>:<tag>",
                status=2,
            )
        raise JobsError(
            f"image: job {job.name} runs on GPU nodes and needs a registry image: pass --stack "
            f"{job.stack} (its trainingImage output) or --set image=<registry>/<repository>:<tag>",
            status=2,
        )

    def _create(
        self, job: JobSpec, w: Workloads, root: str | None = None, rdzv: str | None = None
    ) -> tuple[Any, str]:
        """Create the job's objects from its built settings ``w`` (``jobs.build.build``)."""
        if job.api == "v2":  # a Trainer v2 TrainJob (jobs.cluster.trainjob)
            return trainjob.create(self, job, w, root)
        settings = resume_from.with_root(w.job, root)
        rdzv = rdzv or manifest.fresh_rdzv_id(settings)
        settings = settings.replace(rdzv_id=rdzv)
        from workloads.specs.observability import ObservabilitySettings

        body = queue.queued(
            manifest.pytorchjob(settings, w.etcd.host),
            job.queue,
            pod_template_paths=queue.pytorchjob_templates,
        )
        ns = settings.namespace
        self._clear_stale_policy(settings.name, ns)
        with api_errors(
            self.api,
            f"create pytorchjob {settings.name} in {ns}",
            f"no namespace {ns!r} or no PyTorchJob API (kubeflow.org/v1) on the cluster: "
            "check the job's namespace and that the stack installed the training operator",
            conflict=STILL_DELETING,
        ):
            created = _raw(
                self.custom.create_namespaced_custom_object, GROUP, VERSION, ns, PLURAL, body
            )
        try:
            metrics_ns = ObservabilitySettings().namespace if settings.metrics_port else None
            policy = manifest.owned_by(manifest.network_policy(settings, metrics_ns), created)
            with api_errors(self.api, f"create networkpolicy {policy['metadata']['name']}"):
                _raw(self.net.create_namespaced_network_policy, ns, policy)
            if settings.efa_dra:  # the workers' EFA claim (workloads.specs.efa)
                create_efa_claim(self.api, settings, created)
        except JobsError:
            self._delete_job(settings.name, ns)  # nothing half-made is left behind
            raise
        return settings, rdzv

    def _clear_stale_policy(self, name: str, ns: str) -> None:
        """Delete ``<name>-workers`` when it belongs to a deleted job. ``cancel``, ``resume``
        and ``submit --replace`` delete a PyTorchJob in the background: the API server removes
        the job at once and the garbage collector its NetworkPolicy later, so a job created
        again under the name would meet the old policy (409 AlreadyExists). Called when no job
        of this name exists, so an owner that is a PyTorchJob is a deleted one; a policy with
        other owners, or none, is left alone (the create then says so)."""
        policy_name = f"{name}-workers"  # workloads.specs.pytorchjob.network_policy's name
        with api_errors(self.api, f"get networkpolicy {policy_name}"):
            try:
                policy = _raw(self.net.read_namespaced_network_policy, policy_name, ns)
            except Exception as err:
                if object_not_found(err):
                    return
                raise
        owners = (policy.get("metadata") or {}).get("ownerReferences") or []
        if not owners or any(o.get("kind") != pj.KIND for o in owners):
            return
        with api_errors(self.api, f"delete networkpolicy {policy_name} (of a deleted job)"):
            try:
                _raw(self.net.delete_namespaced_network_policy, policy_name, ns)
            except Exception as err:
                if not object_not_found(err):  # the garbage collector was quicker
                    raise

    def submit(
        self,
        job: JobSpec,
        *,
        image: str | None = None,
        replace: bool = False,
        from_uri: str | None = None,
        fault: str | None = None,
    ) -> Submitted:
        from jobs.cluster.team_check import check as check_team  # the team's pods' claim, SA, token

        if fault is not None:
            raise JobsError(
                f"--fault {fault}: faults are injected by the local runner (--local)", status=2
            )
        if job.api == "v2" and from_uri is not None:
            raise JobsError("--from: api v2 (TrainJob) jobs: not yet; submit api v1", status=2)
        w = build(job, image=self.image_for(job, image))  # every check before the first request
        check_team(self, job, w.job)
        if job.api == "v2":  # a Trainer v2 TrainJob (jobs.cluster.trainjob)
            return trainjob.submit(self, job, w, replace=replace)
        image = w.job.image
        root = resume_from.for_job(from_uri, w.job) if from_uri is not None else None
        ns = job.namespace
        self.namespace = ns
        existing = self._get_job(job.name, ns)
        record = self._get_record(job.name, ns)
        if replace and (existing is not None or record is not None):
            phase = phase_of(existing) if existing is not None else "Cancelled"
            if phase not in FINISHED:
                raise JobsError(
                    f"--replace: job {job.name!r} is {phase}; only a finished job is replaced "
                    f"(`eks-fsdp jobs cancel {job.name}` first)",
                    status=2,
                )
            self.cancel(job.name, purge=True)
            deadline = time.monotonic() + DELETE_WAIT_S
            while self._get_job(job.name, ns) is not None and time.monotonic() < deadline:
                time.sleep(0.5)
            existing, record = None, None
        if existing is not None and (existing.get("metadata") or {}).get("deletionTimestamp"):
            raise JobsError(f"job {job.name!r} in {ns}: {STILL_DELETING}")
        if existing is not None or record is not None:
            phase = (
                phase_of(existing)
                if existing is not None
                else self._info(None, record, [], detail=False).phase
            )
            raise JobsError(
                f"job {job.name!r} exists in {ns} ({phase}): pass --name NEW, or `eks-fsdp "
                f"jobs resume {job.name}`, or --replace (a finished job)",
                status=2,
            )
        # The record first: a job without one could not be resumed (or listed once deleted),
        # so an interruption between the two requests must leave neither.
        rdzv = manifest.fresh_rdzv_id(w.job)
        body = manifest.record(w.job, job.dump(), generation=1, rdzv_id=rdzv, image=image)
        if root:  # submit --from: kept for later resumes, as resume --from keeps it
            body["data"][ROOT_KEY] = root
        with api_errors(self.api, f"create configmap {body['metadata']['name']}"):
            _raw(self.core.create_namespaced_config_map, ns, body)
        try:
            self._create(job, w, root, rdzv=rdzv)
        except BaseException:  # a JobsError, or Ctrl-C while the job is created
            made = body["metadata"]["name"]
            with contextlib.suppress(JobsError), api_errors(self.api, f"delete configmap {made}"):
                _raw(self.core.delete_namespaced_config_map, made, ns)
            raise
        return Submitted(
            name=job.name,
            backend=self.name,
            rdzv_id=rdzv,
            generation=1,
            namespace=ns,
            follow=self._cmd("logs", job.name, "--follow"),
        )

    def list(self) -> list[JobInfo]:
        ns = self.namespace
        with api_errors(self.api, f"list pytorchjobs in {ns}", NO_OPERATOR):
            jobs = (
                _raw(
                    self.custom.list_namespaced_custom_object,
                    GROUP,
                    VERSION,
                    ns,
                    PLURAL,
                    label_selector=manifest.PART_OF_SELECTOR,
                ).get("items")
                or []
            )
        with api_errors(self.api, f"list configmaps in {ns}"):
            records = (
                _raw(self.core.list_namespaced_config_map, ns, label_selector=manifest.RECORD_LABEL)
                or {}
            ).get("items") or []
        by_name = {r["metadata"]["labels"][manifest.RECORD_LABEL]: r for r in records}
        pods = self._pods(JOB_LABEL)
        workloads = self._workloads() if any(queue.queue_of(j) for j in jobs) else []
        out = []
        for job in jobs:
            name = job["metadata"]["name"]
            mine = [p for p in pods if p["metadata"]["labels"].get(JOB_LABEL) == name]
            self._remember_final(job, by_name.get(name))
            out.append(
                self._info(
                    job,
                    by_name.pop(name, None),
                    mine,
                    detail=False,
                    workload=self._workload_of(job, workloads),
                )
            )
        out += trainjob.list_infos(self, by_name)  # takes the records of TrainJobs
        out += [self._info(None, r, [], detail=False) for r in by_name.values()]
        return sorted(out, key=lambda i: -(i.age_s or 0.0))

    def _remember_final(self, job: dict[str, Any], record: dict[str, Any] | None) -> None:
        """Write a finished job's phase into its record (``FINAL_KEY``), once; best effort."""
        phase = phase_of(job)
        data = (record or {}).get("data") or {}
        if record is None or phase not in ("Succeeded", "Failed") or data.get(FINAL_KEY) == phase:
            return
        try:
            with api_errors(self.api, "patch configmap"):
                _raw(
                    self.core.patch_namespaced_config_map,
                    record["metadata"]["name"],
                    record["metadata"].get("namespace", self.namespace),
                    {"data": {FINAL_KEY: phase}},
                )
        except JobsError:
            pass  # the phase is still shown; only its memory after the TTL is lost

    def status(self, name: str) -> JobInfo:
        job = self._get_job(name)
        if job is None and (v2 := trainjob.get(self, name)) is not None:
            return trainjob.status(self, v2)
        record = self._get_record(name)
        if job is None and record is None:
            raise JobsError(
                f"no job {name!r} in namespace {self.namespace}: `eks-fsdp jobs list` shows them"
            )
        pods = self._pods(f"{JOB_LABEL}={name}") if job is not None else []
        workload = None
        if job is not None and queue.queue_of(job):
            uid = job["metadata"].get("uid", "")
            workload = self._workload_of(job, self._workloads(f"{queue.JOB_UID_LABEL}={uid}"))
        info = self._info(job, record, pods, detail=True, workload=workload)
        if job is not None:
            self._remember_final(job, record)
        info.capacity_ends_at = capacity.ends_at(self.core, job, info.namespace) if job else ""
        return info

    def logs(
        self,
        name: str,
        *,
        rank: int = 0,
        follow: bool = False,
        tail: int | None = None,
        write: Callable[[str], None],
        runner: bool = False,
        wait_timeout_s: float = cluster_logs.WAIT_TIMEOUT_S,
        note: Callable[[str], None] = _note,
    ) -> None:
        """Worker pod ``rank``'s log (the replica index, pod ``<name>-worker-<rank>``). With
        ``follow`` it first waits for the pod to start (``note`` gets one line per state)."""
        if runner:
            raise JobsError(
                "--runner: only local jobs have a runner; the operator's events: "
                f"kubectl describe pytorchjob {name}",
                status=2,
            )
        pods = self._pods(f"{JOB_LABEL}={name},{INDEX_LABEL}={rank}")
        if not pods and (v2 := trainjob.get(self, name)) is not None:
            return trainjob.logs(
                self, v2, rank=rank, follow=follow, tail=tail, write=write,
                wait_timeout_s=wait_timeout_s, note=note,
            )  # fmt: skip
        if follow or (pods and cluster_logs.started(pods[0])):
            pod = cluster_logs.wait_started(self, name, rank, timeout_s=wait_timeout_s, note=note)
            cluster_logs.stream(
                self, name, pod["metadata"]["name"], follow=follow, tail=tail, write=write
            )
            return
        job = self._get_job(name)
        if job is None:
            raise JobsError(
                f"no job {name!r} in namespace {self.namespace}: `eks-fsdp jobs list` shows them"
            )
        wanted = int(worker_spec(job).get("replicas", 0))
        if not 0 <= rank < wanted:
            raise JobsError(
                f"--rank {rank}: job {name} has {wanted} worker pods (--rank 0..{wanted - 1})",
                status=2,
            )
        state = cluster_logs.waiting_state(pods[0]) if pods else "not created yet"
        raise JobsError(
            f"job {name}: worker pod {rank} has not started ({phase_of(job)}, pod {state}): "
            "--follow waits for it"
        )

    def follow(
        self,
        name: str,
        write: Callable[[str], None],
        *,
        wait_timeout_s: float = cluster_logs.WAIT_TIMEOUT_S,
    ) -> int:
        """``jobs.cluster.logs.follow``: pod 0's log to the job's end (0 succeeded, 1 not)."""
        return cluster_logs.follow(self, name, write, wait_timeout_s=wait_timeout_s)

    def _delete_job(self, name: str, ns: str) -> bool:
        return delete_object(self.api, self.custom, (GROUP, VERSION, PLURAL), ns, name)

    def cancel(self, name: str, *, purge: bool = False) -> str:
        ns = self.namespace
        job = self._get_job(name)
        if job is None and (v2 := trainjob.get(self, name)) is not None:
            return trainjob.cancel(self, v2, purge=purge)
        record = self._get_record(name)
        if job is None and record is None:
            raise JobsError(f"no job {name!r} in namespace {ns}: `eks-fsdp jobs list` shows them")
        if job is None and not purge:
            raise JobsError(
                f"job {name} is not running (its record is kept for resume): nothing to cancel; "
                f"`eks-fsdp jobs cancel {name} --purge` removes the record"
            )
        if job is not None:
            self._delete_job(name, ns)
        if record is not None and purge:
            with api_errors(self.api, f"delete configmap {manifest.record_name(name)}"):
                _raw(self.core.delete_namespaced_config_map, manifest.record_name(name), ns)
            return f"cancelled {name}; record removed (checkpoints on the claim are kept)"
        if record is not None:
            patch = {
                "data": {manifest.CANCELLED_KEY: time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())}
            }
            with api_errors(self.api, f"patch configmap {manifest.record_name(name)}"):
                _raw(self.core.patch_namespaced_config_map, manifest.record_name(name), ns, patch)
        return (
            f"cancelled {name}: the PyTorchJob and its pods are deleted; its checkpoints stay on "
            f"the claim (resume: {self._cmd('resume', name)})"
        )

    def suspend(self, name: str, *, on: bool = True) -> str:
        """Stop (``on``) or restart a job's pods, keeping the job. A job in a Kueue queue is
        stopped through its Workload (``spec.active: false``, what ``kueuectl stop workload``
        sets): Kueue evicts it, suspends the job and releases its quota, and would undo a
        suspend written on an admitted job (it unsuspends admitted jobs, ``jobframework/
        reconciler.go`` step 7, v0.17.0); ``active: true`` requeues it. Any other job gets
        ``runPolicy.suspend``: the operator deletes its pods (SIGTERM, the grace period, the
        emergency checkpoint) and, once unsuspended, creates them again, each resuming from the
        newest checkpoint (``pkg/controller.v1/common/job.go`` ``ReconcileJobs``, v1.9.4)."""
        verb = "suspend" if on else "unsuspend"
        job = self._get_job(name)
        if job is None and (v2 := trainjob.get(self, name)) is not None:
            return trainjob.suspend(self, v2, on=on)
        if job is None:
            raise JobsError(
                f"no job {name!r} in namespace {self.namespace}: `eks-fsdp jobs list` shows them"
            )
        phase = phase_of(job)
        if phase in FINISHED:
            raise JobsError(f"job {name} is {phase}: nothing to {verb}")
        if queue.queue_of(job):  # Kueue's (set_active refuses before it made the Workload)
            uid = job["metadata"].get("uid", "")
            workload = self._workload_of(job, self._workloads(f"{queue.JOB_UID_LABEL}={uid}"))
            how = queue.set_active(self, workload, active=not on, job=job)
        else:
            with api_errors(self.api, f"patch pytorchjob {name}", NO_OPERATOR):
                _raw(
                    self.custom.patch_namespaced_custom_object,
                    GROUP,
                    VERSION,
                    self.namespace,
                    PLURAL,
                    name,
                    {"spec": {"runPolicy": {"suspend": on}}},
                )
            how = f"runPolicy.suspend: {str(on).lower()}"
        if on:
            return (
                f"suspended {name} ({how}): its pods get SIGTERM and write a checkpoint; "
                f"`{self._cmd('unsuspend', name)}` resumes it from there"
            )
        return f"unsuspended {name} ({how}): its pods resume from the newest checkpoint"

    def resume(
        self, name: str, *, from_uri: str | None = None, image: str | None = None
    ) -> Submitted:
        """A new generation of job ``name`` from its newest complete checkpoint: in its own
        checkpoint folder, or under ``from_uri`` (``resume --from``: a path on its claim or
        ``s3://BUCKET/PREFIX``), which the record keeps for the next resume. It runs the image
        the job was submitted with (the record's), or ``image`` (``resume --image``: a newer
        build, or one that replaces an image the registry's lifecycle rule expired), which the
        record then keeps."""
        ns = self.namespace
        if from_uri is not None:  # its form before any request; the claim once it is known
            resume_from.parse(from_uri, local=False, claim_mount="/")
        record = self._get_record(name)
        if record is None:
            folder = resume_from.job_folder(name, ns)
            raise resume_from.no_record(name, f"on this cluster (namespace {ns})", folder=folder)
        data = record.get("data") or {}
        job_file = loads(
            data[manifest.JOB_FILE_KEY], source=f"configmap/{manifest.record_name(name)}"
        )
        generation = int(data.get(manifest.GENERATION_KEY, 1)) + 1
        if image is not None:
            image = self.image_for(job_file, image)  # a registry image (or any, on CPU)
        else:
            image = data.get(manifest.IMAGE_KEY) or self.image_for(job_file, None)
        w = build(job_file, image=image, generation=generation)
        root = data.get(ROOT_KEY) or None
        if from_uri is not None:
            mount = w.job.checkpoint_mount if w.job.checkpoint_claim else None
            root = resume_from.parse(from_uri, local=False, claim_mount=mount)
        if not root and not w.job.resumes:
            raise JobsError(
                f"job {name} keeps its checkpoints per pod (no checkpointClaim, {w.job.workers} "
                "workers): a resume would start over; submit it again, or resume --from "
                "s3://BUCKET/PREFIX holding its checkpoints"
            )
        job = self._get_job(name)
        if job is None and data.get(FINAL_KEY) == "Succeeded":
            raise JobsError(
                f"job {name} succeeded: nothing to resume; submit it again under a new --name"
            )
        deleting = job is not None and (job.get("metadata") or {}).get("deletionTimestamp")
        if job is not None and not deleting:
            phase = phase_of(job)
            if phase not in FINISHED:
                raise JobsError(
                    f"job {name} is {phase}: nothing to resume (`eks-fsdp jobs cancel {name}` first)"
                )
            if phase == "Succeeded":
                raise JobsError(
                    f"job {name} succeeded: nothing to resume; submit it again under a new --name"
                )
            self._delete_job(name, ns)
        if job is not None:
            deadline = time.monotonic() + DELETE_WAIT_S
            while self._get_job(name) is not None and time.monotonic() < deadline:
                time.sleep(0.5)
        _, rdzv = self._create(job_file, w, root)
        patch = {
            "data": {
                manifest.GENERATION_KEY: str(generation),
                manifest.RDZV_ID_KEY: rdzv,
                manifest.CANCELLED_KEY: None,
                FINAL_KEY: None,
                ROOT_KEY: root,
                manifest.IMAGE_KEY: image,
            }
        }
        with api_errors(self.api, f"patch configmap {manifest.record_name(name)}"):
            _raw(self.core.patch_namespaced_config_map, manifest.record_name(name), ns, patch)
        return Submitted(
            name=name,
            backend=self.name,
            rdzv_id=rdzv,
            generation=generation,
            namespace=ns,
            follow=self._cmd("logs", name, "--follow"),
        )
