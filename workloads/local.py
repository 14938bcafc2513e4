"""Run a stack's PyTorchJob on this machine, for real: ``python -m workloads.local``.

The runner builds the PyTorchJob exactly as the stack applies it (``workloads.specs``), starts a
real etcd 3.5 on loopback, and runs each worker "pod" as a ``torchrun`` agent with the container's
command and the environment the training operator would inject (PET_NNODES=min:max,
PET_RDZV_BACKEND, PET_RDZV_ENDPOINT, PET_RDZV_ID, PET_MAX_RESTARTS, PET_NPROC_PER_NODE,
PYTHONUNBUFFERED, plus the container's env). Only what cannot exist here is swapped: the
rendezvous endpoint (loopback etcd instead of the Service), the shared checkpoint volume (a
folder under ``--out``), and on ``device: cpu`` one process per worker with no GPU.

Faults rehearse what happens on the cluster:
``kill-worker@K``      SIGKILL the training process of worker 1 at step K (torchrun restarts it),
``kill-node@K``        SIGKILL worker 1's whole pod (agent included) at step K, never replaced,
``kill-in-checkpoint@K`` freeze then kill worker 1 while checkpoint K is being written,
``restart-etcd@K``     stop etcd at step K and start it again on the same data
                       (``--etcd-down`` seconds later),
``lose-etcd@K``        the same, on an EMPTY data dir,
``preempt-node@K``     SIGTERM to worker 1's pod (its torchrun agent, the container's PID 1), as
                       the kubelet does on a spot/capacity-block reclaim or a ``kubectl delete``;
                       SIGKILL after the pod's grace period; the operator's replacement pod
                       arrives ``--replacement-delay`` seconds after the old one is gone,
``drain-node@K``       the same, with the replacement at once (a node drain onto a spare node),
``hang-worker@K``      SIGSTOP worker 1's training process: a hung rank, never resumed.
``--fault-pod`` picks another pod (0 hosts the c10d store).

The summary names the fault, the seconds from the fault to the next NEW step (a step past every
step logged before) and the steps redone (logged again after a restart went back to an older
checkpoint). Logs go to ``<out>/logs/<pod>.log``; metrics to
``<out>/shared/<job>/output/metrics.jsonl``. On exit, Ctrl-C or SIGTERM every pod (agents and
their workers, which torchrun starts in sessions of their own) and etcd are stopped within
seconds: SIGTERM, a short wait, then SIGKILL to every process found below each agent.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import re
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TextIO

from workloads.local_prometheus import LocalPrometheusHook
from workloads.localrun.etcd_server import EtcdError, LocalEtcd, free_port
from workloads.localrun.operator_env import container, container_env, operator_env
from workloads.specs import pytorchjob as pj
from workloads.specs.settings import RDZV_BACKENDS, JobSettings
from workloads.specs.stack import check_train_flags, load

REPO_ROOT = Path(__file__).resolve().parent.parent
FAULT_KINDS = (
    "none",
    "kill-worker",
    "kill-node",
    "kill-in-checkpoint",
    "restart-etcd",
    "lose-etcd",
    "preempt-node",
    "drain-node",
    "hang-worker",
)
FAULT_POD = 1
"""Index of the worker pod faults hit by default (worker 0 hosts the c10d store)."""
REPLACEMENT_DELAY_S = 10.0
"""preempt-node: seconds between the old pod's end and its replacement's start."""
ETCD_DOWN_S = 1.0
"""restart-etcd / lose-etcd: seconds between etcd's stop and its start."""
STOP_WAIT_S = 4.0
"""Cleanup: seconds between SIGTERM to every pod and SIGKILL to whatever is left."""
_RESUMED = re.compile(r"resumed from (\S+) at step (\d+)")
_CLOSED = "RendezvousClosedError"
_SUMMARY = "=== training summary ==="
_SCRUB_PREFIXES = ("PET_", "TORCHELASTIC_", "MASTER_", "LOCAL_RANK", "RANK", "WORLD_SIZE")


class LocalRunError(ValueError):
    """Bad runner input; the message is one line naming the option."""


@dataclass(frozen=True)
class Fault:
    """A fault to inject: ``kind`` at optimizer step ``step``."""

    kind: str = "none"
    step: int = 0

    @classmethod
    def parse(cls, text: str) -> Fault:
        """``none`` or ``KIND@STEP`` (e.g. ``kill-worker@8``)."""
        if text == "none":
            return cls()
        kind, sep, step = text.partition("@")
        if kind not in FAULT_KINDS or kind == "none" or not sep or not step.isdigit():
            raise LocalRunError(
                f"--fault: {text!r} is not none or KIND@STEP with KIND one of "
                f"{', '.join(FAULT_KINDS[1:])}"
            )
        if int(step) < 1:
            raise LocalRunError(f"--fault: step {step} must be >= 1")
        return cls(kind, int(step))

    def __str__(self) -> str:
        return self.kind if self.kind == "none" else f"{self.kind}@{self.step}"


@dataclass(frozen=True, kw_only=True)
class LocalOptions:
    """What ``python -m workloads.local`` was asked to do."""

    stack: str = "dev"
    """Stack whose job runs (``Pulumi.<stack>.yaml``)."""
    out: Path = Path("runs/local")
    """Output folder (logs, shared volume, etcd data); wiped of earlier job state first."""
    workers: int | None = None
    """Worker pods (elastic max); None = the stack's."""
    min_workers: int | None = None
    """Elastic min; None = the stack's (lowered to workers-1 for kill-node)."""
    backend: str | None = None
    """Rendezvous backend; None = the stack's."""
    fault: Fault = field(default_factory=Fault)
    """Fault to inject."""
    train_overrides: tuple[str, ...] = ()
    """``--flag=value`` replacing the job's training flags of the same name."""
    generation: int | None = None
    """Job generation (the rendezvous id changes with it); None = the stack's."""
    etcd_endpoint: str | None = None
    """Use a running etcd (``host:port``) instead of starting one."""
    timeout_s: float = 900.0
    """Give up (and stop everything) after this long."""
    progress_every: int = 0
    """Print a progress line every N steps (0 = about 20 lines per run)."""
    keep_checkpoints: bool = False
    """Keep checkpoints from an earlier run in ``out`` (resume across runs)."""
    prometheus: bool = False
    """Start a local Prometheus scraping every pod's exporter (``workloads.local_prometheus``)."""
    fault_pod: int = FAULT_POD
    """Index of the pod the fault hits."""
    replacement_delay_s: float = REPLACEMENT_DELAY_S
    """preempt-node: seconds until the replacement pod starts after the old one is gone."""
    etcd_down_s: float = ETCD_DOWN_S
    """restart-etcd / lose-etcd: seconds etcd stays stopped (its start comes on top)."""


@dataclass
class PodResult:
    """How one worker pod ended."""

    name: str
    log: Path
    exit_code: int | None = None
    lost: bool = False
    """Killed by a kill-node fault (not expected to finish)."""
    restarts: int = 0
    """Times the pod was restarted after a failure (restartPolicy OnFailure, like the kubelet)."""
    replaced: int = 0
    """Times the pod was deleted (preempted, drained) and the operator created it again."""
    restart_count: int = 0
    """The live pod's containerStatuses restartCount (0 again after a replacement)."""


@dataclass
class RunResult:
    """What a local run did, for the summary and for tests."""

    job: dict[str, Any]
    """The PyTorchJob object the run was built from (local endpoint/paths)."""
    rdzv_id: str
    metrics_path: Path
    checkpoint_root: Path
    pods: list[PodResult]
    wall_s: float
    fault: Fault
    fault_time_s: float | None = None
    """Seconds after start when the fault fired (None if it never did)."""
    fault_note: str = ""
    fault_checkpoint_complete: bool | None = None
    """kill-in-checkpoint: whether checkpoint K was complete when the worker was frozen."""
    checkpoints_at_fault: list[int] = field(default_factory=list)
    """Steps whose checkpoint was complete (its ``COMPLETE`` marker written) when the fault
    fired: a resume must start from the newest of them or a later one that was finishing."""
    recovery_s: float | None = None
    """Seconds from the fault to the next optimizer step logged after it."""
    new_step_s: float | None = None
    """Seconds from the fault to the next NEW step: past every step logged before, and logged
    by a restarted group when the fault restarted it (the time the fault cost)."""
    steps_redone: int = 0
    """Rows logged after the fault for steps already logged before (work done twice)."""
    resumed_from_steps: list[int] = field(default_factory=list)
    """Steps the workers resumed from (one entry per resume, from the pod logs)."""
    rendezvous_closed: bool = False
    """Some pod failed with RendezvousClosedError."""
    training_summary: str = ""
    """The training package's own summary block (from the pod that printed it last)."""
    timed_out: bool = False
    interrupted: bool = False
    observed: list[dict[str, Any]] = field(default_factory=list)
    """Every metrics row the runner saw, in order, including rows a resume later dropped."""

    @property
    def metrics(self) -> list[dict[str, Any]]:
        """The rows of metrics.jsonl now (a resume drops the rows past its checkpoint)."""
        return read_metrics(self.metrics_path)

    @property
    def losses(self) -> dict[int, float]:
        """Loss per step, the last value written for each step."""
        return {m["step"]: float(m["loss"]) for m in self.metrics}

    @property
    def succeeded(self) -> bool:
        """Every pod not lost to a fault exited 0, and at least one step ran."""
        alive = [p for p in self.pods if not p.lost]
        return (
            bool(alive)
            and all(p.exit_code == 0 for p in alive)
            and bool(self.metrics)
            and not self.timed_out
            and not self.interrupted
        )


_PUBLISHED = re.compile(r"step-(\d{6,})(?:\.old)?")
"""A published checkpoint folder, as ``training.checkpoint`` names them (``step-N.old`` is a
re-saved step's previous copy, still loadable); a write in flight is ``step-N.tmp`` and holds
its ``COMPLETE`` marker just before the rename publishes it."""


def complete_checkpoint_steps(root: Path) -> list[int]:
    """Steps of the published checkpoints under ``root`` whose ``COMPLETE`` marker exists."""
    return sorted(
        {
            int(m.group(1))
            for marker in root.glob("step-*/COMPLETE")
            if (m := _PUBLISHED.fullmatch(marker.parent.name))
        }
    )


def read_metrics(path: Path) -> list[dict[str, Any]]:
    """Parsed lines of a metrics.jsonl (a partial last line is skipped)."""
    if not path.is_file():
        return []
    out = []
    for line in path.read_text(encoding="utf-8").splitlines():
        with contextlib.suppress(json.JSONDecodeError):
            out.append(json.loads(line))
    return out


def _override_flags(args: tuple[str, ...], overrides: Sequence[str]) -> tuple[str, ...]:
    def name(flag: str) -> str:
        return flag.split("=", 1)[0].lstrip("-").replace("-", "_")

    for o in overrides:
        if not o.startswith("--"):
            raise LocalRunError(f"--set: {o!r} must look like --flag=value")
    replaced = {name(o) for o in overrides}
    return tuple(a for a in args if name(a) not in replaced) + tuple(overrides)


def _cpu_log_every(device: str, opts: LocalOptions) -> tuple[str, ...]:
    """The runner's --set flags, with ``--log_every=1`` first on CPU unless one sets it: the
    cluster job logs every ``pj.CLUSTER_LOG_EVERY`` steps (a GPU step then makes no host sync),
    but on CPU that costs nothing, and the progress lines, fault triggers and recovery times
    read each row of metrics.jsonl as it is written."""
    overrides = tuple(opts.train_overrides)
    if device != "cpu" or any(o.split("=", 1)[0] == "--log_every" for o in overrides):
        return overrides
    return ("--log_every=1", *overrides)


def local_job_settings(opts: LocalOptions, shared: Path) -> tuple[JobSettings, str]:
    """The stack's job settings with the runner's overrides, and the device."""
    if opts.backend is not None and opts.backend not in RDZV_BACKENDS:
        raise LocalRunError(f"--backend: {opts.backend!r} is not one of {', '.join(RDZV_BACKENDS)}")
    w = load(opts.stack, generation=opts.generation)
    job = w.job
    workers = opts.workers or job.workers
    min_workers = opts.min_workers or min(job.min_workers, workers)
    if opts.fault.kind == "kill-node" and min_workers >= workers:
        if workers < 2:
            raise LocalRunError("--fault kill-node needs --workers >= 2")
        min_workers = workers - 1
    try:
        job = job.replace(
            workers=workers,
            min_workers=min_workers,
            rdzv_backend=opts.backend or job.rdzv_backend,
            train_args=_override_flags(job.train_args, _cpu_log_every(w.device, opts)),
        )
        # The rendezvous id is the cluster job's: fixed before the local swaps (paths, ports).
        job = job.replace(
            rdzv_id=pj.rdzv_id(job),
            resume=True,  # the local folder is shared by every pod, like a claim
            checkpoint_mount=str(shared),
            nproc_per_node=1 if w.device == "cpu" else None,
        )
    except ValueError as err:
        raise LocalRunError(str(err)) from None
    check_train_flags(type(w)(**{**w.__dict__, "job": job}))
    return job, w.device


def _ppids() -> dict[int, int]:
    """pid -> parent pid of every process (from /proc)."""
    out = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
        except OSError:
            continue
        # comm may contain spaces: the ppid is the 2nd field after the closing parenthesis.
        out[int(entry.name)] = int(stat.rsplit(")", 1)[1].split()[1])
    return out


def _children(pid: int) -> list[int]:
    """PIDs whose parent is ``pid``."""
    return sorted(child for child, parent in _ppids().items() if parent == pid)


def _descendants(pid: int) -> list[int]:
    """Every process below ``pid``: torchrun starts its workers in sessions of their own, so a
    process-group signal to the agent does not reach them."""
    ppids = _ppids()
    found, frontier = [], [pid]
    while frontier:
        parent = frontier.pop()
        kids = [c for c, p in ppids.items() if p == parent]
        found += kids
        frontier += kids
    return found


def _kill_tree(proc: subprocess.Popen[bytes], sig: int) -> list[int]:
    """Send ``sig`` to the agent's process group and to every descendant; the pids hit."""
    pids = _descendants(proc.pid)
    _signal_group(proc, sig)
    for pid in pids:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.kill(pid, sig)
    return pids


def _kill_everything(procs: Sequence[subprocess.Popen[bytes]]) -> None:
    """SIGKILL every process below each agent, then the agents' groups, until none is left.

    Descendants first: once an agent is dead its workers (in sessions of their own) are
    re-parented and can no longer be found from it."""
    for _ in range(5):
        found = False
        for p in procs:
            for pid in _descendants(p.pid):
                found = True
                with contextlib.suppress(ProcessLookupError, PermissionError):
                    os.kill(pid, signal.SIGKILL)
            _signal_group(p, signal.SIGKILL)
        for p in procs:
            with contextlib.suppress(subprocess.TimeoutExpired):
                p.wait(timeout=2)
        if not found:
            return
        time.sleep(0.05)


def _signal_group(proc: subprocess.Popen[bytes], sig: int) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(proc.pid, sig)


class Runner:
    """One local run: etcd, the worker pods, progress, the fault, the cleanup."""

    def __init__(
        self,
        opts: LocalOptions,
        echo: Callable[[str], None] | None = None,
        etcd: LocalEtcd | None = None,
    ) -> None:
        """``etcd``: a running server to use (and leave running) instead of starting one."""
        self.opts = opts
        self.echo = echo or (lambda line: print(line, flush=True))
        self.out = opts.out.resolve()
        self.shared = self.out / "shared"
        self.logs = self.out / "logs"
        self.etcd: LocalEtcd | None = etcd
        self._own_etcd = etcd is None
        self.procs: list[subprocess.Popen[bytes]] = []
        self._all_procs: list[subprocess.Popen[bytes]] = []
        """Every agent ever started (a replaced pod's old one included), for the cleanup."""
        self._leaving: dict[int, tuple[float, float]] = {}
        """Deleted pods: index -> (SIGKILL deadline, seconds until the replacement)."""
        self._replace_at: dict[int, float] = {}
        self._seen_at: list[float] = []
        """Seconds after the start at which each row of ``RunResult.observed`` was seen."""
        self._pod_args: tuple[dict[str, Any], str, list[str]] = ({}, "cpu", [])
        self._log_files: list[TextIO] = []
        self.prometheus: LocalPrometheusHook | None = None
        self._etcd_fault: threading.Thread | None = None
        """restart-etcd / lose-etcd run beside the monitor loop, which keeps reading the
        metrics meanwhile (the outage must not stop the clock that measures it)."""
        self._stopping = threading.Event()
        """Set by ``cleanup``: an etcd fault still waiting out ``--etcd-down`` starts nothing."""

    # -- setup ------------------------------------------------------------------------------
    def _prepare_dirs(self, job: JobSettings) -> None:
        import shutil

        self.logs.mkdir(parents=True, exist_ok=True)
        job_dir = self.shared / job.name
        if job_dir.exists() and not self.opts.keep_checkpoints:
            shutil.rmtree(job_dir)
        for log in self.logs.glob("*.log"):
            log.unlink()
        if self._own_etcd:
            shutil.rmtree(self.out / "etcd-data", ignore_errors=True)

    def _endpoint(self, job: JobSettings) -> tuple[str, int]:
        if job.uses_etcd:
            if self.opts.etcd_endpoint:
                host, _, port = self.opts.etcd_endpoint.rpartition(":")
                if not host or not port.isdigit():
                    raise LocalRunError(
                        f"--etcd-endpoint: {self.opts.etcd_endpoint!r} is not host:port"
                    )
                return host, int(port)
            if self.etcd is None:
                self.etcd = LocalEtcd(self.out / "etcd-data", self.logs / "etcd.log").start()
            return "127.0.0.1", self.etcd.client_port
        return "127.0.0.1", free_port()

    def pod_env(self, job_obj: dict[str, Any], device: str, pod: str) -> dict[str, str]:
        """The environment of one worker pod: host basics + container env + operator env."""
        env = {k: v for k, v in os.environ.items() if not k.startswith(_SCRUB_PREFIXES)}
        secrets = {}
        if os.environ.get("HF_TOKEN"):
            for var in container(job_obj).get("env") or []:
                ref = (var.get("valueFrom") or {}).get("secretKeyRef")
                if ref:
                    secrets[(ref["name"], ref["key"])] = os.environ["HF_TOKEN"]
        env.update(container_env(job_obj, secrets))
        env.update(operator_env(job_obj))
        env["HOSTNAME"] = pod
        env["OMP_NUM_THREADS"] = "1"
        env["PYTHONPATH"] = os.pathsep.join(
            p for p in (str(REPO_ROOT), os.environ.get("PYTHONPATH", "")) if p
        )
        if device == "cpu":
            env["CUDA_VISIBLE_DEVICES"] = ""
        return env

    @staticmethod
    def pod_command(job_obj: dict[str, Any]) -> list[str]:
        """The container command, with ``python`` (or ``torchrun``) run by this interpreter."""
        command = list(container(job_obj)["command"])
        if command[0] == "torchrun":
            command = [sys.executable, "-m", "torch.distributed.run", *command[1:]]
        elif command[0] == "python":
            command = [sys.executable, *command[1:]]
        return command

    # -- run --------------------------------------------------------------------------------
    def run(self) -> RunResult:
        t0 = time.monotonic()
        job, device = local_job_settings(self.opts, self.shared)
        self._prepare_dirs(job)
        result: RunResult | None = None
        try:
            host, port = self._endpoint(job)
            job = job.replace(rdzv_host=host, rdzv_port=port)
            job_obj = pj.pytorchjob(job, host)
            (self.out / "pytorchjob.local.json").write_text(json.dumps(job_obj, indent=2))
            rdzv = job_obj["spec"]["elasticPolicy"]["rdzvId"]
            metrics_path = Path(pj.output_dir(job)) / "metrics.jsonl"
            ckpt_root = self.shared / job.name
            pods = [
                PodResult(
                    name=f"{job.name}-worker-{i}", log=self.logs / f"{job.name}-worker-{i}.log"
                )
                for i in range(job.workers)
            ]
            result = RunResult(
                job=job_obj,
                rdzv_id=rdzv,
                metrics_path=metrics_path,
                checkpoint_root=ckpt_root,
                pods=pods,
                wall_s=0.0,
                fault=self.opts.fault,
            )
            self._announce(job, job_obj, device)
            command = self.pod_command(job_obj)
            if self.opts.prometheus:  # observability hook: a metrics port per pod, scraped
                self.prometheus = LocalPrometheusHook.start(
                    job.name, len(pods), self.out, self.echo
                )
            for index, pod in enumerate(pods):
                self.procs.append(self._start_pod(job_obj, device, command, index, pod))
            self._monitor(result, t0, self._planned_steps(job))
        except KeyboardInterrupt:
            if result is not None:
                result.interrupted = True
            self.echo("interrupted: stopping the pods and etcd")
        finally:
            self.cleanup()
        if result is None:
            raise LocalRunError("interrupted before the pods started")
        result.wall_s = time.monotonic() - t0
        self._collect(result)
        self._fault_figures(result)
        return result

    def _start_pod(
        self,
        job_obj: dict[str, Any],
        device: str,
        command: list[str],
        index: int,
        pod: PodResult,
    ) -> subprocess.Popen[bytes]:
        """Start (or restart) one worker pod: its torchrun agent in a process group of its own."""
        log = pod.log.open("a")
        self._log_files.append(log)
        self._pod_args = (job_obj, device, command)
        proc = subprocess.Popen(
            self.prometheus.command_for(command, index) if self.prometheus else command,
            cwd=REPO_ROOT,
            env=self.pod_env(job_obj, device, pod.name),
            stdout=log,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            start_new_session=True,
        )
        self._all_procs.append(proc)
        return proc

    def _maybe_restart(self, result: RunResult, index: int, code: int) -> bool:
        """Restart a failed pod as the kubelet would (restartPolicy OnFailure, backoffLimit)."""
        pod = result.pods[index]
        spec = result.job["spec"]
        policy = spec["pytorchReplicaSpecs"]["Worker"].get("restartPolicy", "Never")
        limit = (spec.get("runPolicy") or {}).get("backoffLimit", 0)
        # training-operator v1.9 pkg/core/job.go, PastBackoffLimit: the job fails once the sum
        # of restartCount over its Running pods reaches backoffLimit (0: at the first restart);
        # a replaced pod starts again at 0.
        total = sum(p.restart_count for p in result.pods if not p.lost)
        if code == 0 or pod.lost or policy not in ("OnFailure", "Always") or total + 1 >= limit:
            return False
        pod.restarts += 1
        pod.restart_count += 1
        self.echo(
            f"  {pod.name} exited with {code}: restarting it (restartPolicy {policy}, "
            f"restart {total + 1} of backoffLimit {limit})"
        )
        job_obj, device, command = self._pod_args
        self.procs[index] = self._start_pod(job_obj, device, command, index, pod)
        return True

    @staticmethod
    def _planned_steps(job: JobSettings) -> int | None:
        for arg in job.train_args:
            if arg.startswith("--max_train_step="):
                return int(arg.split("=", 1)[1]) or None
        return None

    def _announce(self, job: JobSettings, job_obj: dict[str, Any], device: str) -> None:
        elastic = job_obj["spec"]["elasticPolicy"]
        where = (
            f"etcd {self.etcd.version} at {self.etcd.endpoint}"
            if self.etcd
            else f"{job.rdzv_backend} at {elastic['rdzvHost']}:{elastic['rdzvPort']}"
        )
        self.echo(
            f"job {job.name} (stack {self.opts.stack}): {job.workers} worker pods "
            f"(min {job.min_workers}), backend {job.rdzv_backend}, rdzvId {elastic['rdzvId']}, "
            f"device {device}, fault {self.opts.fault}"
        )
        self.echo(f"rendezvous: {where}; logs: {self.logs}")

    def _monitor(self, result: RunResult, t0: float, planned: int | None) -> None:
        fault = self.opts.fault
        fired = False
        seen: set[str] = set()
        last_step = 0
        running_max = 0
        every = self.opts.progress_every or max(1, (planned or 100) // 20)
        tmp_dir = result.checkpoint_root / f"step-{fault.step:06d}.tmp"
        watch_pids: list[int] = []
        watch_refreshed = 0.0
        while True:
            now = time.monotonic()
            if now - t0 > self.opts.timeout_s:
                result.timed_out = True
                self.echo(f"timeout after {self.opts.timeout_s:.0f} s: stopping")
                return
            # A resumed run drops the rows logged past its checkpoint and logs those steps again,
            # so new rows are told apart by content, not by position.
            fresh = []
            if result.metrics_path.is_file():
                for line in result.metrics_path.read_text(encoding="utf-8").splitlines():
                    if line not in seen and line.endswith("}"):
                        seen.add(line)
                        with contextlib.suppress(json.JSONDecodeError):
                            fresh.append(json.loads(line))
            result.observed.extend(fresh)
            self._seen_at.extend([now - t0] * len(fresh))
            for m in fresh:
                step = int(m["step"])
                after_fault = fired and result.fault_time_s is not None
                if after_fault and result.recovery_s is None:
                    result.recovery_s = now - t0 - result.fault_time_s  # type: ignore[operator]
                    self.echo(
                        f"  recovered: step {step} logged {result.recovery_s:.1f} s after the fault"
                    )
                if step % every == 0 or step == planned or step <= last_step:
                    total = f"/{planned}" if planned else ""
                    self.echo(
                        f"  step {step}{total}  loss {float(m['loss']):.4f}  "
                        f"world {m.get('world_size', '?')}  "
                        f"{float(m.get('tokens_per_s', 0)):,.0f} tok/s  t={now - t0:.0f}s"
                    )
                last_step = step
                running_max = max(running_max, step)
            if not fired and fault.kind != "none":
                if fault.kind == "kill-in-checkpoint":
                    if tmp_dir.is_dir():
                        fired = self._fire(result, t0, watch_pids)
                    elif now - watch_refreshed > 0.3:  # know whom to freeze before it matters
                        watch_pids = _children(self.procs[self._fault_index].pid)
                        watch_refreshed = now
                elif last_step >= fault.step:
                    fired = self._fire(result, t0)
            self._kubelet(result)
            codes = [p.poll() for p in self.procs]
            for index, (pod, code) in enumerate(zip(result.pods, codes, strict=True)):
                if index in self._leaving:
                    codes[index] = None  # deleted pod: its replacement is on the way
                    continue
                if code is not None and pod.exit_code is None:
                    if self._maybe_restart(result, index, code):
                        codes[index] = None
                        continue
                    pod.exit_code = code
                    if not pod.lost:
                        self.echo(f"  {pod.name} exited with {code}")
            if all(c is not None for c in codes):
                return
            if fault.kind == "kill-in-checkpoint" and not fired:
                # A checkpoint of a small model is written in tens of milliseconds: watch for
                # its folder with a cheap stat every millisecond, not a metrics read.
                until = time.monotonic() + 0.2
                while time.monotonic() < until and not tmp_dir.is_dir():
                    time.sleep(0.001)
                if tmp_dir.is_dir():
                    fired = self._fire(result, t0, watch_pids)
            else:
                time.sleep(0.2)

    @property
    def _fault_index(self) -> int:
        return min(self.opts.fault_pod, len(self.procs) - 1)

    def _fault_figures(self, result: RunResult) -> None:
        """Steps redone after the fault, and seconds from the fault to the next NEW step.

        A row is redone when its step was logged before it. The next new step is the first row
        past every step logged before it; when the fault restarted the job (the training
        package counts restarts in every row), the first such row of the restarted job, so
        that a step the old group still finished right after the fault does not count."""
        fault_t = result.fault_time_s
        if fault_t is None:
            return
        rows = list(zip(self._seen_at, result.observed, strict=True))
        before = [m for t, m in rows if t <= fault_t]
        running = max((int(m["step"]) for m in before), default=0)
        r0 = max((int(m.get("restarts", 0)) for m in before), default=0)
        after = [(t, m) for t, m in rows if t > fault_t]
        restarted = any(int(m.get("restarts", 0)) > r0 for _, m in after)
        redone, new = 0, None
        for t, m in after:
            step = int(m["step"])
            if step <= running:
                redone += 1
            elif new is None and (not restarted or int(m.get("restarts", 0)) > r0):
                new = t - fault_t
            running = max(running, step)
        result.steps_redone, result.new_step_s = redone, new

    def _kubelet(self, result: RunResult) -> None:
        """Deleted pods: SIGKILL after the grace period; the replacement when it is due."""
        now = time.monotonic()
        for index in list(self._leaving):
            deadline, replace_after = self._leaving[index]
            proc = self.procs[index]
            if proc.poll() is None and now >= deadline:
                self.echo(f"  {result.pods[index].name}: grace period over, SIGKILL")
                _kill_everything([proc])
            if proc.poll() is None:
                continue
            if index not in self._replace_at:
                self._replace_at[index] = now + replace_after
                if replace_after:
                    self.echo(
                        f"  {result.pods[index].name} is gone (exit {proc.returncode}); its "
                        f"replacement starts in {replace_after:.0f} s"
                    )
            if now >= self._replace_at[index]:
                del self._leaving[index], self._replace_at[index]
                pod = result.pods[index]
                pod.replaced += 1
                pod.restart_count = 0
                self.echo(f"  {pod.name}: replacement pod started")
                job_obj, device, command = self._pod_args
                self.procs[index] = self._start_pod(job_obj, device, command, index, pod)

    def _fire(self, result: RunResult, t0: float, known_pids: Sequence[int] = ()) -> bool:
        fault = self.opts.fault
        pod_index = self._fault_index
        proc, pod = self.procs[pod_index], result.pods[pod_index]
        result.fault_time_s = time.monotonic() - t0
        result.checkpoints_at_fault = complete_checkpoint_steps(result.checkpoint_root)
        if fault.kind in ("kill-worker", "kill-in-checkpoint"):
            workers = list(known_pids) or _children(proc.pid)
            if fault.kind == "kill-in-checkpoint":
                for pid in workers:  # freeze first: the write cannot finish without them
                    with contextlib.suppress(ProcessLookupError):
                        os.kill(pid, signal.SIGSTOP)
                workers = sorted(set(workers) | set(_children(proc.pid)))
                for pid in workers:
                    with contextlib.suppress(ProcessLookupError):
                        os.kill(pid, signal.SIGSTOP)
            complete = (result.checkpoint_root / f"step-{fault.step:06d}" / "COMPLETE").exists()
            if fault.kind == "kill-in-checkpoint":
                result.fault_checkpoint_complete = complete
            for pid in workers:
                with contextlib.suppress(ProcessLookupError):
                    os.kill(pid, signal.SIGKILL)
            result.fault_note = f"SIGKILL to the training process(es) {workers} of {pod.name}" + (
                f"; checkpoint {fault.step} complete at that moment: {complete}"
                if fault.kind == "kill-in-checkpoint"
                else ""
            )
        elif fault.kind == "kill-node":
            _kill_tree(proc, signal.SIGKILL)
            pod.lost = True
            result.fault_note = f"SIGKILL to every process of {pod.name} (node lost, not replaced)"
        elif fault.kind in ("preempt-node", "drain-node"):
            spec = result.job["spec"]["pytorchReplicaSpecs"]["Worker"]["template"]["spec"]
            grace = float(spec.get("terminationGracePeriodSeconds", 30))
            delay = self.opts.replacement_delay_s if fault.kind == "preempt-node" else 0.0
            with contextlib.suppress(ProcessLookupError):
                os.kill(proc.pid, signal.SIGTERM)  # the container's PID 1: the torchrun agent
            self._leaving[pod_index] = (time.monotonic() + grace, delay)
            result.fault_note = (
                f"SIGTERM to {pod.name} (its torchrun agent), SIGKILL after the {grace:.0f} s "
                f"grace period; replacement pod {delay:.0f} s after it is gone"
            )
        elif fault.kind == "hang-worker":
            workers = _children(proc.pid)
            for pid in workers:
                with contextlib.suppress(ProcessLookupError):
                    os.kill(pid, signal.SIGSTOP)
            result.fault_note = f"SIGSTOP to the training process(es) {workers} of {pod.name}"
        elif fault.kind in ("restart-etcd", "lose-etcd"):
            if self.etcd is None:
                raise LocalRunError(f"--fault {fault.kind} needs the runner's own etcd")
            self._etcd_fault = threading.Thread(
                target=self._bounce_etcd, args=(result, fault.kind == "lose-etcd"), daemon=True
            )
            self._etcd_fault.start()
            result.fault_note = "etcd stopping"
        self.echo(f"fault {fault} at t={result.fault_time_s:.1f}s: {result.fault_note}")
        return True

    def _bounce_etcd(self, result: RunResult, lose: bool) -> None:
        """Stop etcd, delete its data dir when ``lose``, start it again on the same ports."""
        import shutil

        assert self.etcd is not None
        t = time.monotonic()
        self.etcd.stop()
        if lose:
            shutil.rmtree(self.etcd.data_dir, ignore_errors=True)
        if self._stopping.wait(self.opts.etcd_down_s):
            result.fault_note = "etcd stopped; the run ended before its start"
            return
        try:
            self.etcd.start()
        except EtcdError as err:
            result.fault_note = f"etcd did not come back: {err}"
            self.echo(f"  {result.fault_note}")
            return
        down = time.monotonic() - t
        result.fault_note = (
            f"etcd stopped, its data dir deleted, started again empty ({down:.1f} s down)"
            if lose
            else f"etcd stopped and started again ({down:.1f} s down)"
        )
        self.echo(f"  {result.fault_note}")

    def cleanup(self) -> None:
        """Stop every pod (SIGTERM, a short wait, then SIGKILL to every process) and etcd."""
        try:
            self._stop_pods()
        finally:
            self._stopping.set()  # an etcd fault in its --etcd-down wait starts nothing
            if self._etcd_fault is not None:  # never stop etcd while the fault starts it
                self._etcd_fault.join(timeout=30)  # LocalEtcd.start waits 20 s at most
            for f in self._log_files:
                f.close()
            self._log_files.clear()
            if self.etcd is not None and self._own_etcd:
                self.etcd.stop(timeout_s=3.0)

    def _stop_pods(self) -> None:
        procs = list(dict.fromkeys(self._all_procs + self.procs))
        alive = [p for p in procs if p.poll() is None]
        for p in alive:
            _signal_group(p, signal.SIGTERM)  # torchrun forwards it to its workers
        deadline = time.monotonic() + STOP_WAIT_S
        for p in alive:
            with contextlib.suppress(subprocess.TimeoutExpired):
                p.wait(timeout=max(0.1, deadline - time.monotonic()))
        _kill_everything(procs)
        if self.prometheus is not None:  # observability hook: snapshot, then stop
            snap = self.prometheus.stop()
            if snap is not None:
                self.echo(f"prometheus snapshot: {self.prometheus.prometheus.files.config.parent}")

    def _collect(self, result: RunResult) -> None:
        best = -1
        for pod, proc in zip(result.pods, self.procs, strict=False):
            if pod.exit_code is None:
                pod.exit_code = proc.returncode
            text = pod.log.read_text(errors="replace") if pod.log.is_file() else ""
            result.resumed_from_steps += [int(m.group(2)) for m in _RESUMED.finditer(text)]
            if _CLOSED in text:
                result.rendezvous_closed = True
            if pod.exit_code != 0:
                continue
            # Rank 0 prints the summary; after a restart rank 0 may sit on another pod, and a
            # stopped attempt printed one too: keep the block that got furthest.
            for block in re.finditer(re.escape(_SUMMARY), text):
                lines = text[block.start() :].splitlines()
                end = next((i for i, ln in enumerate(lines[1:], 1) if not ln.strip()), len(lines))
                steps = re.search(r"^steps\s+(\d+)", "\n".join(lines[:end]), re.MULTILINE)
                n = int(steps.group(1)) if steps else 0
                if n >= best:
                    best, result.training_summary = n, "\n".join(lines[:end])


def summary(result: RunResult) -> str:
    """A readable summary of a run."""
    losses = result.losses
    steps = sorted(losses)
    lines = ["", "=== local PyTorchJob run ==="]
    lines.append(f"job            {result.job['metadata']['name']}  (rdzvId {result.rdzv_id})")
    status = "SUCCEEDED" if result.succeeded else "FAILED"
    if result.interrupted:
        status = "INTERRUPTED"
    lines.append(f"status         {status} in {result.wall_s:.1f} s")
    for pod in result.pods:
        lost = " (lost to the fault)" if pod.lost else ""
        again = f", restarted {pod.restarts}x" if pod.restarts else ""
        again += f", replaced {pod.replaced}x" if pod.replaced else ""
        lines.append(f"  {pod.name:<28} exit {pod.exit_code}{lost}{again}  log {pod.log}")
    if steps:
        first, last = losses[steps[0]], losses[steps[-1]]
        lines.append(
            f"steps          {len(steps)} (last {steps[-1]}), loss {first:.4f} -> {last:.4f} "
            f"({(last - first) / first * 100:+.1f}%)"
        )
        worlds = sorted({int(m.get("world_size", 0)) for m in result.metrics})
        lines.append(f"world sizes    {worlds}")
    if result.fault.kind != "none":
        when = (
            f"at t={result.fault_time_s:.1f}s" if result.fault_time_s is not None else "never fired"
        )
        lines.append(f"fault          {result.fault} {when}: {result.fault_note}")
        if result.recovery_s is not None:
            lines.append(
                f"recovery       next step logged {result.recovery_s:.1f} s after the fault"
            )
        new = f"{result.new_step_s:.1f} s" if result.new_step_s is not None else "never"
        lines.append(
            f"lost           {new} from the fault to the next new step; "
            f"{result.steps_redone} steps redone"
        )
    if result.resumed_from_steps:
        lines.append(f"resumed from   step(s) {sorted(set(result.resumed_from_steps))}")
    if result.rendezvous_closed:
        lines.append("rendezvous     RendezvousClosedError seen (reused rdzvId?)")
    lines.append(f"metrics        {result.metrics_path}")
    lines.append(f"checkpoints    {result.checkpoint_root}")
    out_dir = result.metrics_path.parent
    extras = [name for name in ("summary.json", "metrics.png", "hf") if (out_dir / name).exists()]
    if extras:
        lines.append(f"outputs        {out_dir} ({', '.join(extras)})")
    if result.training_summary:
        lines += ["", result.training_summary]
    return "\n".join(lines)


def parse_options(argv: Sequence[str] | None = None) -> LocalOptions:
    """Command-line flags to ``LocalOptions`` (``LocalRunError`` on bad input)."""
    parser = argparse.ArgumentParser(
        prog="python -m workloads.local",
        description="Run a stack's PyTorchJob locally: real etcd, one torchrun agent per pod.",
    )
    parser.add_argument("--stack", default="dev", help="stack name (default dev)")
    parser.add_argument("--workers", type=int, help="worker pods (default: the stack's)")
    parser.add_argument("--min-workers", type=int, help="elastic minimum (default: the stack's)")
    parser.add_argument("--backend", help="rendezvous backend: etcd | etcd-v2 | c10d")
    parser.add_argument(
        "--fault",
        default="none",
        help="none | " + " | ".join(f"{k}@K" for k in FAULT_KINDS[1:]),
    )
    parser.add_argument(
        "--fault-pod", type=int, default=FAULT_POD, help="pod the fault hits (default 1)"
    )
    parser.add_argument(
        "--replacement-delay",
        type=float,
        default=REPLACEMENT_DELAY_S,
        help="preempt-node: seconds until the replacement pod starts (default 10)",
    )
    parser.add_argument(
        "--etcd-down",
        type=float,
        default=ETCD_DOWN_S,
        help="restart-etcd/lose-etcd: seconds etcd stays stopped (default 1)",
    )
    parser.add_argument("--out", type=Path, default=Path("runs/local"), help="output folder")
    parser.add_argument(
        "--set",
        action="append",
        default=[],
        metavar="--FLAG=VALUE",
        dest="overrides",
        help="replace one training flag, e.g. --set=--max_train_step=20 (repeatable)",
    )
    parser.add_argument("--generation", type=int, help="job generation (new rendezvous id)")
    parser.add_argument("--etcd-endpoint", help="use a running etcd host:port")
    parser.add_argument("--timeout", type=float, default=900.0, help="seconds before giving up")
    parser.add_argument(
        "--prometheus",
        action="store_true",
        help="start a local Prometheus scraping the pods' training metrics (same rules as the cluster)",
    )
    args = parser.parse_args(argv)
    if args.workers is not None and args.workers < 1:
        raise LocalRunError(f"--workers: {args.workers} must be >= 1")
    if args.min_workers is not None and args.min_workers < 1:
        raise LocalRunError(f"--min-workers: {args.min_workers} must be >= 1")
    if args.fault_pod < 0:
        raise LocalRunError(f"--fault-pod: {args.fault_pod} must be >= 0")
    if args.replacement_delay < 0:
        raise LocalRunError(f"--replacement-delay: {args.replacement_delay} must be >= 0")
    if args.etcd_down < 0:
        raise LocalRunError(f"--etcd-down: {args.etcd_down} must be >= 0")
    return LocalOptions(
        stack=args.stack,
        out=args.out,
        workers=args.workers,
        min_workers=args.min_workers,
        backend=args.backend,
        fault=Fault.parse(args.fault),
        train_overrides=tuple(args.overrides),
        generation=args.generation,
        etcd_endpoint=args.etcd_endpoint,
        timeout_s=args.timeout,
        prometheus=args.prometheus,
        fault_pod=args.fault_pod,
        replacement_delay_s=args.replacement_delay,
        etcd_down_s=args.etcd_down,
    )


def main(argv: Sequence[str] | None = None) -> int:
    try:
        opts = parse_options(argv)
        runner = Runner(opts)
        # Ctrl-C and SIGTERM both stop the pods and etcd (also when started with SIGINT ignored).
        previous = {
            sig: signal.signal(sig, _raise_interrupt) for sig in (signal.SIGINT, signal.SIGTERM)
        }
        try:
            result = runner.run()
        finally:
            for sig, handler in previous.items():
                signal.signal(sig, handler)
    except (LocalRunError, EtcdError, ValueError, KeyError, FileNotFoundError) as err:
        message = err.args[0] if err.args else str(err)
        print(f"local: {message}", file=sys.stderr)
        return 2
    print(summary(result), flush=True)
    if result.interrupted:
        return 130
    return 0 if result.succeeded else 1


def _raise_interrupt(signum: int, frame: object) -> None:
    # Once: a second Ctrl-C or SIGTERM must not interrupt the cleanup it started.
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    raise KeyboardInterrupt


if __name__ == "__main__":
    sys.exit(main())
