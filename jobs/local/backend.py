"""The local backend: jobs run on this machine by ``localrun``, detached, kept under
``runs/jobs/<name>/`` so that ``list``, ``status``, ``logs``, ``cancel`` and ``resume`` work from
any later invocation.

Each job owns its folder (``EKS_FSDP_JOBS_DIR`` moves the root): ``job.yaml`` (the resolved job
file), ``record.json`` (generation, rendezvous id, times), ``runner.pid`` and ``runner.log`` (the
detached runner, ``python -m jobs.local.worker``: the demo's progress lines and summary),
``pods.json`` (the pods as the runner sees them, every second), ``result.json`` (how it
ended), and what ``localrun`` writes: ``logs/<pod>.log``, ``shared/<name>/`` (checkpoints and
``output/metrics.jsonl``) and its own etcd's data. Two jobs never share anything: each run
starts its own etcd on free loopback ports (so its keys are its own), its rendezvous id is
fresh, its folder is its name's, and the exporter port is left off (``metrics_port`` 0).
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from eks_fsdp_cli.paths import REPO_ROOT
from jobs import gate_status, resume_from
from jobs.build import build
from jobs.local import queue as local_queue
from jobs.manifest import fresh_rdzv_id
from jobs.progress import from_rows, planned_steps, read_rows
from jobs.queue import Queue
from jobs.schema import JobSpec, loads
from jobs.types import FINISHED, Condition, JobInfo, JobsError, Replica, Submitted
from localrun.result import complete_checkpoint_steps
from workloads.specs.pytorchjob import JOBS_NAMESPACE
from workloads.specs.settings import JobSettings

STATE_ENV = "EKS_FSDP_JOBS_DIR"
_STARTING_S = 10.0
"""A runner's pid file younger than this counts as its runner starting (``alive``)."""
DEFAULT_ROOT = Path("runs/jobs")

RUNNER_MODULE = "jobs.local.worker"
CANCEL_WAIT_S = 60.0
"""``cancel``: seconds to wait for the runner to stop its pods and etcd (it takes ~5 s)."""
FOLLOW_POLL_S = 0.2

JOB_FILE = "job.yaml"
RECORD = "record.json"
PID = "runner.pid"
RUNNER_LOG = "runner.log"
PODS = "pods.json"
RESULT = "result.json"
CANCEL_MARK = "cancel-requested"
SUSPEND_MARK = "suspend-requested"
"""Written by ``suspend`` before it stops the runner: the run ends Suspended, not Cancelled."""


def state_root() -> Path:
    """Where local jobs are kept: ``$EKS_FSDP_JOBS_DIR``, else ``runs/jobs``."""
    return Path(os.environ.get(STATE_ENV) or DEFAULT_ROOT)


def local_settings(
    job_file: JobSpec,
    *,
    generation: int,
    rdzv_id: str,
    checkpoint_root: str | None = None,
    fault: str | None = None,
) -> tuple[JobSettings, str]:
    """The job as the local runner runs it, and its device: the cluster job's settings with
    ``--log_every=1`` on CPU unless the file sets it (the runner's progress lines read every
    row, as ``eks-fsdp local`` does), no exporter port (two jobs at once would share
    it), the submission's rendezvous id, ``checkpoint_root`` (``resume --from``) as its
    checkpoint root, and the elastic minimum ``fault`` needs (``localrun.job.fault_min_workers``,
    as ``eks-fsdp local`` applies it). ``localrun`` localizes the rest."""
    from localrun.job import fault_min_workers
    from localrun.options import Fault, LocalRunError

    w = build(job_file, generation=generation, local_paths=True)
    job: JobSettings = w.job
    if fault is not None:
        try:
            parsed = Fault.parse(fault)
            job = job.replace(min_workers=fault_min_workers(parsed, job.workers, job.min_workers))
        except (LocalRunError, ValueError) as err:
            raise JobsError(str(err.args[0] if err.args else err), status=2) from None
    args = job.train_args
    if w.device == "cpu" and not any(a.split("=", 1)[0] == "--log_every" for a in args):
        args = (*args, "--log_every=1")
    # one machine's local jobs are apart by name (its state folder): no namespace in their
    # checkpoint folder (``pytorchjob.job_folder``), which stays ``shared/<name>``
    job = job.replace(train_args=args, metrics_port=0, rdzv_id=rdzv_id, namespace=JOBS_NAMESPACE)
    return resume_from.with_root(job, checkpoint_root), w.device


def available_memory(meminfo: Path = Path("/proc/meminfo")) -> int | None:
    """Bytes the kernel says can be allocated without swapping (``MemAvailable``, Linux 3.14+,
    ``Documentation/filesystems/proc.rst``); None where there is no such file."""
    try:
        for row in meminfo.read_text().splitlines():
            if row.startswith("MemAvailable:"):
                return int(row.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        return None
    return None


def memory_problem(job: JobSpec, available: int | None = None) -> str | None:
    """One line when the planner's memory for ``job`` (per worker process, ``planner.predict``:
    parameters, gradients, optimizer state, activations of one micro-batch) times its workers
    exceeds this machine's available memory; None when it fits or the planner cannot model the
    job. The planner models a GPU's memory, so on a CPU it errs high (no CUDA context here)."""
    from planner.args import UsageError
    from planner.estimate import plan_input
    from planner.predict import predict

    available = available_memory() if available is None else available
    if available is None:
        return None
    try:
        inp, nodes = plan_input(job)
        need = predict(inp, nodes).memory.total * job.workers
    except (UsageError, ValueError, KeyError):
        return None
    if need <= available:
        return None
    gib = 1024**3
    key = "batchSize" if "batchSize" in job.values else "contextLength"
    return str(
        job.error(
            key,
            f"the {job.workers} local worker(s) need about {need / gib:,.1f} GiB by the "
            f"planner (batchSize {job.batch_size} x contextLength {job.context_length}), this "
            f"machine has {available / gib:.1f} GiB available: a smaller micro-batch or context",
        )
    )


def read_json(path: Path) -> Any:
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except (OSError, json.JSONDecodeError):
        return None


def write_json(path: Path, data: Any) -> None:
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(json.dumps(data, indent=2) + "\n", encoding="utf-8")
    tmp.replace(path)


def _iso(t: float | None) -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(t)) if t else ""


class LocalBackend:
    """Jobs on this machine (``--local``)."""

    name = "local"
    namespace = ""
    """One machine's jobs are apart by name (their state folders), in no namespace."""

    def __init__(self, root: Path | None = None, python: str = sys.executable) -> None:
        self.root = (root or state_root()).resolve()
        self.python = python
        self._procs: dict[str, subprocess.Popen[bytes]] = {}

    # -- paths and state ------------------------------------------------------------------------
    def folder(self, name: str) -> Path:
        return self.root / name

    def _existing(self, name: str) -> Path:
        folder = self.folder(name)
        if not (folder / RECORD).is_file():
            raise JobsError(f"no local job {name!r}: `eks-fsdp jobs list --local` shows them")
        return folder

    def checkpoints(self, name: str) -> Path:
        """The job's checkpoint folder: under the root ``resume --from`` gave (when a local
        path), else on its shared volume."""
        record = read_json(self.folder(name) / RECORD) or {}
        root = record.get("checkpoint_root")
        found = resume_from.checkpoint_folder(root, name) if root else None
        return found or self.folder(name) / "shared" / name

    def metrics_path(self, name: str) -> Path:
        return self.folder(name) / "shared" / name / "output" / "metrics.jsonl"

    def pod_log(self, name: str, rank: int) -> Path:
        return self.folder(name) / "logs" / f"{name}-worker-{rank}.log"

    def alive(self, name: str) -> bool:
        """Whether the job's runner process is running (a reused pid is not it)."""
        folder = self.folder(name)
        proc = self._procs.get(name)
        if proc is not None:
            return proc.poll() is None
        try:
            pid = int((folder / PID).read_text())
        except (OSError, ValueError):
            return False
        with contextlib.suppress(ChildProcessError, OSError):
            os.waitpid(pid, os.WNOHANG)  # reap it if it is this process's finished child
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return False
        except PermissionError:
            return True
        cmdline = Path(f"/proc/{pid}/cmdline")
        if cmdline.parent.is_dir():
            try:
                words = cmdline.read_bytes().split(b"\0")
            except OSError:
                words = []
            if RUNNER_MODULE.encode() in words and str(folder).encode() in words:
                return True
            # A runner started moments ago may not show its command line yet (a loaded machine,
            # or its interpreter still starting); no pid is reused within seconds.
            return time.time() - (folder / PID).stat().st_mtime < _STARTING_S
        return True

    def _phase(self, name: str, result: dict[str, Any] | None, pods: list[dict[str, Any]]) -> str:
        if result is not None:
            return str(result["phase"])
        if self.alive(name):
            if any(p.get("state") == "Restarting" for p in pods):
                return "Restarting"
            return "Running" if any(p.get("state") == "Running" for p in pods) else "Pending"
        return "Failed"

    # -- verbs ----------------------------------------------------------------------------------
    def submit(
        self,
        job: JobSpec,
        *,
        image: str | None = None,
        replace: bool = False,
        from_uri: str | None = None,
        fault: str | None = None,
    ) -> Submitted:
        """Start ``job`` detached (``jobs.local.worker``); ``fault`` (``kill-worker@K``, ...,
        ``localrun.options.Fault``) is injected by its runner."""
        if image is not None:
            raise JobsError("--image: a local job runs this checkout's training/", status=2)
        # every check before anything is created: the fault's form and the workers it needs
        settings, _ = local_settings(job, generation=1, rdzv_id="", fault=fault)
        if (problem := memory_problem(job)) is not None:
            raise JobsError(problem, status=2)
        local_queue.check_fits(settings.workers)
        root, steps = resume_from.local_root(from_uri, job.name) if from_uri else (None, [])
        folder = self.folder(job.name)
        self.root.mkdir(parents=True, exist_ok=True)
        if replace and (folder / RECORD).is_file():
            phase = self.status(job.name).phase
            if phase not in FINISHED:
                raise JobsError(
                    f"--replace: job {job.name!r} is {phase}; only a finished job is replaced "
                    f"(`eks-fsdp jobs cancel --local {job.name}` first)",
                    status=2,
                )
            shutil.rmtree(folder)
        try:
            folder.mkdir()
        except FileExistsError:
            phase = self.status(job.name).phase if (folder / RECORD).is_file() else "unknown"
            resume = (
                f"`eks-fsdp jobs resume --local {job.name}`, or "
                if phase in ("Failed", "Cancelled")
                else ""
            )
            raise JobsError(
                f"job {job.name!r} exists ({phase}): pass --name NEW, or {resume}--replace "
                "(a finished job: its logs and checkpoints go)",
                status=2,
            ) from None
        (folder / JOB_FILE).write_text(job.dump(), encoding="utf-8")
        record = {
            "name": job.name,
            "stack": job.stack,
            "source": job.source,
            "device": job.device,
            "workers": settings.workers,
            "train_args": list(settings.train_args),
            "generation": 1,
            "rdzv_id": fresh_rdzv_id(settings),
            "submitted_at": time.time(),
            "suspend": False,
        }
        if fault is not None:
            record["fault"] = fault
        if root:  # submit --from: kept for later resumes, as resume --from keeps it
            record.update(checkpoint_root=root, resumed_from_step=steps[-1] if steps else None)
        quota = local_queue.quota_from_env()
        if quota is not None:
            queued = job.queue or Queue(name=job.node_group, priority="")
            record["queue"] = {"name": queued.name, "priority": queued.priority, "quota": quota}
        write_json(folder / RECORD, record)
        self._start(job.name)
        return self._submitted(record)

    def _submitted(self, record: dict[str, Any]) -> Submitted:
        name = record["name"]
        return Submitted(
            name=name,
            backend=self.name,
            rdzv_id=record["rdzv_id"],
            generation=record["generation"],
            follow=f"eks-fsdp jobs logs --local {name} --follow",
        )

    def _start(self, name: str) -> None:
        folder = self.folder(name)
        env = {**os.environ, "OMP_NUM_THREADS": os.environ.get("OMP_NUM_THREADS", "1")}
        env["PYTHONPATH"] = os.pathsep.join(
            p for p in (str(REPO_ROOT), os.environ.get("PYTHONPATH", "")) if p
        )
        with (folder / RUNNER_LOG).open("ab") as log:
            proc = subprocess.Popen(
                [self.python, "-m", RUNNER_MODULE, str(folder)],
                cwd=REPO_ROOT,
                env=env,
                stdout=log,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                start_new_session=True,  # detached: it outlives this command, Ctrl-C included
            )
        (folder / PID).write_text(str(proc.pid))
        self._procs[name] = proc

    def list(self) -> list[JobInfo]:
        if not self.root.is_dir():
            return []
        names = [p.name for p in self.root.iterdir() if (p / RECORD).is_file()]
        infos = [self.status(n) for n in names]
        return sorted(infos, key=lambda i: -(i.age_s or 0.0))

    def status(self, name: str) -> JobInfo:
        folder = self._existing(name)
        record = read_json(folder / RECORD) or {}
        result = read_json(folder / RESULT)
        pods = (result or {}).get("pods") or read_json(folder / PODS) or []
        phase = self._phase(name, result, pods)
        log0 = self.pod_log(name, 0)
        head = log0.read_text(errors="replace")[:20000] if log0.is_file() else ""
        total = planned_steps(record.get("train_args", ()), head)
        progress = from_rows(read_rows(self.metrics_path(name)), total)
        replicas = [
            Replica(
                name=p["name"],
                state=p.get("state", "Pending"),
                restarts=int(p.get("restarts", 0)),
                exit_code=p.get("exit_code"),
            )
            for p in pods
        ]
        submitted = record.get("submitted_at")
        started = record.get("started_at")
        conditions = [Condition("Created", "True", "JobCreated", "submitted", _iso(submitted))]
        if started:
            running = phase in ("Running", "Restarting")
            conditions.append(Condition("Running", str(running), "PodsStarted", "", _iso(started)))
        last_failure = ""
        if result is not None:
            reason = str(result.get("reason", ""))
            conditions.append(
                Condition(
                    phase,
                    "True",
                    reason.split(":")[0] or phase,
                    reason,
                    _iso(result.get("finished_at")),
                )
            )
            if phase != "Succeeded":
                gate = gate_status.from_output(self.metrics_path(name).parent)
                last_failure = gate or reason
        elif phase == "Failed":
            last_failure = f"the runner exited without a result: see {folder / RUNNER_LOG}"
        if not last_failure:
            failed = [r for r in replicas if r.exit_code not in (None, 0)]
            if failed:
                last_failure = f"{failed[-1].name} exited with {failed[-1].exit_code}"
        steps = complete_checkpoint_steps(self.checkpoints(name))
        queue = record.get("queue") or {}
        admission = local_queue.read(folder) if queue else {}
        return JobInfo(
            name=name,
            backend=self.name,
            phase=phase,
            ready=sum(r.state == "Running" for r in replicas),
            wanted=int(record.get("workers", len(replicas))),
            restarts=sum(r.restarts for r in replicas),
            age_s=time.time() - submitted if submitted else None,
            progress=progress,
            stack=str(record.get("stack", "")),
            generation=int(record.get("generation", 1)),
            rdzv_id=str(record.get("rdzv_id", "")),
            conditions=conditions,
            replicas=replicas,
            last_failure=last_failure,
            next_step=self._next(name, phase, steps),
            where={
                "logs": str(folder / "logs"),
                "runner log": str(folder / RUNNER_LOG),
                "checkpoints": str(self.checkpoints(name))
                + (f" (newest complete: step {steps[-1]})" if steps else " (none complete)"),
                "metrics": str(self.metrics_path(name)),
            },
            queue=(
                f"{queue['name']} (local, {queue['quota']} workers)" if queue.get("name") else ""
            ),
            admission=str(admission.get("state", "")),
            admission_reason=str(admission.get("reason", "")),
        )

    @staticmethod
    def _next(name: str, phase: str, steps: Sequence[int]) -> str:
        if phase in ("Pending", "Running", "Restarting"):
            return f"eks-fsdp jobs logs --local {name} --follow"
        if phase == "Suspended":
            return f"eks-fsdp jobs unsuspend --local {name}"
        if phase == "Succeeded":
            return f"eks-fsdp jobs logs --local {name} --runner  (the run's summary)"
        if steps:
            return f"eks-fsdp jobs resume --local {name}"
        return f"eks-fsdp jobs logs --local {name}  (no checkpoint to resume from)"

    def logs(
        self,
        name: str,
        *,
        rank: int = 0,
        follow: bool = False,
        tail: int | None = None,
        write: Callable[[str], None],
        runner: bool = False,
        wait_timeout_s: float = 0.0,
    ) -> None:
        """Pod ``rank``'s log (or the runner's); ``wait_timeout_s`` is the cluster's (a local
        pod's log exists from its start)."""
        folder = self._existing(name)
        record = read_json(folder / RECORD) or {}
        workers = int(record.get("workers", 1))
        if not runner and not 0 <= rank < workers:
            raise JobsError(
                f"--rank {rank}: job {name} has {workers} worker pods (--rank 0..{workers - 1})",
                status=2,
            )
        path = folder / RUNNER_LOG if runner else self.pod_log(name, rank)
        self._stream(name, path, follow=follow, tail=tail, write=write)

    def _stream(
        self, name: str, path: Path, *, follow: bool, tail: int | None, write: Callable[[str], None]
    ) -> None:
        """Print ``path`` (its last ``tail`` lines), then, with ``follow``, what is appended
        until the job's runner has exited and nothing is left to read."""
        offset = 0
        if path.is_file():
            text = path.read_text(errors="replace")
            if tail is not None:
                kept = text.splitlines(keepends=True)[-tail:] if tail > 0 else []
                text = "".join(kept)
            write(text)
            offset = path.stat().st_size
        while follow:
            running = self.alive(name)
            size = path.stat().st_size if path.is_file() else 0
            if size < offset:  # the runner started the pod's log again (a resume)
                offset = 0
            if size > offset:
                with path.open("rb") as f:
                    f.seek(offset)
                    chunk = f.read(size - offset)
                offset = size
                write(chunk.decode(errors="replace"))
                continue
            if not running:
                return
            time.sleep(FOLLOW_POLL_S)

    def follow(
        self, name: str, write: Callable[[str], None], *, wait_timeout_s: float = 0.0
    ) -> int:
        """Stream the runner's log (the demo's output) until the job ends: 0 when it
        succeeded, 1 otherwise; Ctrl-C cancels the job (130)."""
        try:
            self._stream(name, self.folder(name) / RUNNER_LOG, follow=True, tail=None, write=write)
            proc = self._procs.get(name)
            if proc is not None:
                proc.wait()
        except KeyboardInterrupt:
            signal.signal(signal.SIGINT, signal.SIG_IGN)
            print(f"\ninterrupted: cancelling {name}", file=sys.stderr, flush=True)
            print(self.cancel(name), file=sys.stderr, flush=True)
            return 130
        return 0 if self.status(name).phase == "Succeeded" else 1

    def cancel(self, name: str, *, purge: bool = False) -> str:
        folder = self._existing(name)
        steps_note = ""
        if self.alive(name):
            self._stop(name, CANCEL_MARK, "Cancelled", "Cancelled: by the user")
        elif not purge and self.status(name).phase == "Suspended":
            (folder / RESULT).unlink(missing_ok=True)
            write_json(
                folder / RESULT,
                {
                    "phase": "Cancelled",
                    "reason": "Cancelled: while suspended",
                    "finished_at": time.time(),
                },
            )
        elif not purge:
            phase = self.status(name).phase
            raise JobsError(
                f"job {name} is not running ({phase}): nothing to cancel; "
                f"`eks-fsdp jobs cancel --local {name} --purge` removes it with its checkpoints"
            )
        if purge:
            shutil.rmtree(folder)
            return f"removed {name}: its record, logs and checkpoints ({folder})"
        steps = complete_checkpoint_steps(self.checkpoints(name))
        if steps:
            steps_note = f"newest complete step {steps[-1]}; "
        return (
            f"cancelled {name}: checkpoints kept in {self.checkpoints(name)} ({steps_note or 'none complete; '}"
            f"resume: eks-fsdp jobs resume --local {name})"
        )

    def _stop(self, name: str, mark: str, phase: str, reason: str) -> None:
        """SIGTERM to the runner (it stops every pod with SIGTERM, then etcd), waited for."""
        folder = self.folder(name)
        (folder / mark).write_text(_iso(time.time()))
        pid = int((folder / PID).read_text())
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGTERM)  # the runner stops its pods and etcd
        deadline = time.monotonic() + CANCEL_WAIT_S
        while self.alive(name) and time.monotonic() < deadline:
            time.sleep(0.1)
        if self.alive(name):
            raise JobsError(
                f"job {name}: the runner (pid {pid}) did not stop within "
                f"{CANCEL_WAIT_S:.0f} s; see {folder / RUNNER_LOG}"
            )
        if read_json(folder / RESULT) is None:  # it died before writing one
            write_json(
                folder / RESULT, {"phase": phase, "reason": reason, "finished_at": time.time()}
            )

    def suspend(self, name: str, *, on: bool = True) -> str:
        """``runPolicy.suspend`` as the training operator honours it (``pkg/controller.v1/
        common/job.go`` ``ReconcileJobs`` at v1.9.4: a suspended job's pods are deleted and the
        job kept, with a ``Suspended`` condition; unsuspended, its pods are created again):
        suspend stops every pod with SIGTERM (the training program writes its emergency
        checkpoint, docs/adr/0004) and keeps the job, its record saying ``suspend: true``;
        unsuspend starts its pods again, which resume from the newest complete checkpoint
        (a fresh rendezvous id, as a re-created pod set would need: a closed one stays
        closed). A job in the local queue waits there again before its pods start."""
        folder = self._existing(name)
        record = read_json(folder / RECORD) or {}
        phase = self.status(name).phase
        if on:
            if phase in FINISHED or phase == "Suspended" or not self.alive(name):
                raise JobsError(f"job {name} is {phase}: nothing to suspend")
            record["suspend"] = True
            write_json(folder / RECORD, record)
            self._stop(name, SUSPEND_MARK, "Suspended", "Suspended: by the user")
            steps = complete_checkpoint_steps(self.checkpoints(name))
            newest = f"step {steps[-1]}" if steps else "none complete"
            return (
                f"suspended {name}: its pods were stopped with SIGTERM, the job is kept "
                f"(newest checkpoint: {newest}); `eks-fsdp jobs unsuspend --local {name}` "
                "resumes it"
            )
        if phase != "Suspended":
            raise JobsError(f"job {name} is {phase}, not Suspended: nothing to unsuspend")
        steps = complete_checkpoint_steps(self.checkpoints(name))
        root = record.get("checkpoint_root")
        self._next_generation(name, record, root, steps, suspend=False)
        since = f"step {steps[-1]}" if steps else "the start (no complete checkpoint)"
        return f"unsuspended {name}: its pods start again from {since}"

    def resume(
        self, name: str, *, from_uri: str | None = None, image: str | None = None
    ) -> Submitted:
        """The next generation of job ``name`` from its newest complete checkpoint: in its own
        folder, or under ``from_uri`` (``resume --from``: a folder here or
        ``s3://BUCKET/PREFIX``), which the record keeps for the next resume. A local job runs
        this checkout's training/ (no ``image``)."""
        if image is not None:
            raise JobsError("--image: a local job runs this checkout's training/", status=2)
        root = resume_from.parse(from_uri, local=True) if from_uri is not None else None
        if not (self.folder(name) / RECORD).is_file():
            raise resume_from.no_record(name, "on this machine", " --local")
        folder = self._existing(name)
        info = self.status(name)
        if info.phase not in FINISHED:
            raise JobsError(
                f"job {name} is {info.phase}: nothing to resume (`eks-fsdp jobs cancel --local "
                f"{name}` first)"
            )
        if info.phase == "Succeeded":
            raise JobsError(
                f"job {name} succeeded: nothing to resume; submit it again under a new --name"
            )
        record = read_json(folder / RECORD) or {}
        root = root or record.get("checkpoint_root")
        where = resume_from.checkpoint_folder(root, name) if root else self.checkpoints(name)
        steps = complete_checkpoint_steps(where) if where is not None else []
        if where is not None and not steps:
            raise JobsError(
                f"job {name} has no complete checkpoint in {where}: a resume would start over; "
                + (
                    f"--from names the root that holds {name}/step-N/"
                    if from_uri is not None
                    else f"submit it again (--name, or `cancel --local {name} --purge`)"
                ),
                status=2 if from_uri is not None else 1,
            )
        record = read_json(folder / RECORD) or {}
        return self._next_generation(name, record, root, steps)

    def _next_generation(
        self,
        name: str,
        record: dict[str, Any],
        root: str | None,
        steps: Sequence[int],
        **changes: Any,
    ) -> Submitted:
        """Start the job's next generation (its earlier logs kept as ``logs-g<N>``)."""
        folder = self.folder(name)
        job_file = loads(
            (folder / JOB_FILE).read_text(encoding="utf-8"), source=f"{folder / JOB_FILE}"
        )
        generation = int(record.get("generation", 1)) + 1
        settings, _ = local_settings(
            job_file, generation=generation, rdzv_id="", checkpoint_root=root
        )
        old = generation - 1
        for entry, kept in (
            (folder / "logs", f"logs-g{old}"),
            (folder / RUNNER_LOG, f"runner-g{old}.log"),
        ):
            if entry.exists():
                entry.rename(folder / kept)
        for stale in (RESULT, PODS, CANCEL_MARK, SUSPEND_MARK, local_queue.ADMISSION):
            (folder / stale).unlink(missing_ok=True)
        record.update(
            generation=generation,
            rdzv_id=fresh_rdzv_id(settings),
            resumed_from_step=steps[-1] if steps else None,
            started_at=None,
            checkpoint_root=root,
            **changes,
        )
        write_json(folder / RECORD, record)
        self._start(name)
        return self._submitted(record)
