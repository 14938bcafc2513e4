"""The worker "pods" of a local run, supervised as the kubelet and the training operator would.

Each pod is a ``torchrun`` agent (the container's command, run by this interpreter) in a session
of its own, with the container's env and the operator's PET_* variables. ``Pods`` starts them,
restarts a failed one under ``restartPolicy: OnFailure`` within the job's ``backoffLimit``,
deletes one (SIGTERM, SIGKILL after the grace period) and starts its replacement, and stops
them all.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from typing import Any, TextIO

from eks_fsdp_cli.paths import REPO_ROOT
from localrun.operator_env import container, container_env, operator_env
from localrun.procs import kill_everything, signal_group
from localrun.prometheus import LocalPrometheusHook
from localrun.result import PodResult

STOP_WAIT_S = 4.0
"""Cleanup: seconds between SIGTERM to every pod and SIGKILL to whatever is left."""
_SCRUB_PREFIXES = ("PET_", "TORCHELASTIC_", "MASTER_", "LOCAL_RANK", "RANK", "WORLD_SIZE")


def pod_name(job_name: str, index: int) -> str:
    """Worker ``index``'s pod name, as the training operator names it (``GenGeneralName`` in its
    ``pkg/core/utils.go``: ``<job>-<replica type, lower case>-<index>``)."""
    return f"{job_name}-worker-{index}"


def restart_policy(job_obj: dict[str, Any]) -> str:
    """The worker pods' ``restartPolicy`` as the local run applies it: the Worker replica's
    (``Never`` when unset); ``ExitCode`` is ``Never`` on the pod, as the operator sets it
    (``SetRestartPolicy`` in its ``pkg/core/pod.go``)."""
    policy = job_obj["spec"]["pytorchReplicaSpecs"]["Worker"].get("restartPolicy", "Never")
    return "Never" if policy == "ExitCode" else str(policy)


def pod_env(job_obj: dict[str, Any], device: str, pod: str) -> dict[str, str]:
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
    # The exporter of a local pod listens on loopback only (a pod's on its own network
    # namespace, behind the workers' NetworkPolicy): training.prometheus.METRICS_ADDR_ENV.
    env["EKS_FSDP_METRICS_ADDR"] = "127.0.0.1"
    env["PYTHONPATH"] = os.pathsep.join(
        p for p in (str(REPO_ROOT), os.environ.get("PYTHONPATH", "")) if p
    )
    if device == "cpu":
        env["CUDA_VISIBLE_DEVICES"] = ""
    return env


def pod_command(job_obj: dict[str, Any]) -> list[str]:
    """The container command, with ``python`` (or ``torchrun``) run by this interpreter."""
    command = list(container(job_obj)["command"])
    if command[0] == "torchrun":
        command = [sys.executable, "-m", "torch.distributed.run", *command[1:]]
    elif command[0] == "python":
        command = [sys.executable, *command[1:]]
    return command


class Pods:
    """The worker pods of one job: ``procs[i]`` is the live agent of ``results[i]``."""

    def __init__(
        self,
        job_obj: dict[str, Any],
        device: str,
        results: list[PodResult],
        echo: Callable[[str], None],
        prometheus: LocalPrometheusHook | None = None,
    ) -> None:
        """``prometheus``: gives each pod its metrics port (``--prometheus``)."""
        self.job_obj = job_obj
        self.device = device
        self.command = pod_command(job_obj)
        self.results = results
        self.echo = echo
        self.prometheus = prometheus
        self.procs: list[subprocess.Popen[bytes]] = []
        self._all_procs: list[subprocess.Popen[bytes]] = []
        """Every agent ever started (a replaced pod's old one included), for the cleanup."""
        self._leaving: dict[int, tuple[float, float]] = {}
        """Deleted pods: index -> (SIGKILL deadline, seconds until the replacement)."""
        self._replace_at: dict[int, float] = {}
        self._log_files: list[TextIO] = []

    def start_all(self) -> None:
        """Start every pod, in order."""
        for index in range(len(self.results)):
            self.procs.append(self._start(index))

    def _start(self, index: int) -> subprocess.Popen[bytes]:
        """Start (or restart) one worker pod: its torchrun agent in a process group of its own."""
        pod = self.results[index]
        log = pod.log.open("a")
        self._log_files.append(log)
        command = self.command
        proc = subprocess.Popen(
            self.prometheus.command_for(command, index) if self.prometheus else command,
            cwd=REPO_ROOT,
            env=pod_env(self.job_obj, self.device, pod.name),
            stdout=log,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            start_new_session=True,
        )
        self._all_procs.append(proc)
        return proc

    def poll(self) -> list[int | None]:
        """Exit codes of the live agents (None: running, or deleted and being replaced)."""
        codes = [p.poll() for p in self.procs]
        for index in self._leaving:
            codes[index] = None
        return codes

    def leaving(self, index: int) -> bool:
        """Pod ``index`` was deleted and its replacement is on the way."""
        return index in self._leaving

    def restart_failed(self, index: int, code: int) -> bool:
        """Restart a failed pod as the kubelet would (restartPolicy OnFailure, backoffLimit)."""
        pod = self.results[index]
        spec = self.job_obj["spec"]
        policy = restart_policy(self.job_obj)
        limit = (spec.get("runPolicy") or {}).get("backoffLimit", 0)
        # training-operator v1.9 pkg/core/job.go, PastBackoffLimit: the job fails once the sum
        # of restartCount over its Running pods reaches backoffLimit (0: at the first restart);
        # a replaced pod starts again at 0.
        total = sum(p.restart_count for p in self.results if not p.lost)
        if code == 0 or pod.lost or policy not in ("OnFailure", "Always") or total + 1 >= limit:
            return False
        pod.restarts += 1
        pod.restart_count += 1
        self.echo(
            f"  {pod.name} exited with {code}: restarting it (restartPolicy {policy}, "
            f"restart {total + 1} of backoffLimit {limit})"
        )
        self.procs[index] = self._start(index)
        return True

    def grace_period_s(self) -> float:
        """The pods' ``terminationGracePeriodSeconds`` (Kubernetes' default: 30)."""
        spec = self.job_obj["spec"]["pytorchReplicaSpecs"]["Worker"]["template"]["spec"]
        return float(spec.get("terminationGracePeriodSeconds", 30))

    def delete(self, index: int, grace_s: float, replace_after_s: float) -> None:
        """Delete pod ``index`` as the kubelet does: SIGTERM to its agent (the container's PID
        1) now, SIGKILL after ``grace_s``; its replacement ``replace_after_s`` after it is gone
        (``kubelet`` carries both out)."""
        with contextlib.suppress(ProcessLookupError):
            os.kill(self.procs[index].pid, signal.SIGTERM)
        self._leaving[index] = (time.monotonic() + grace_s, replace_after_s)

    def kubelet(self) -> None:
        """Deleted pods: SIGKILL after the grace period; the replacement when it is due."""
        now = time.monotonic()
        for index in list(self._leaving):
            deadline, replace_after = self._leaving[index]
            proc = self.procs[index]
            if proc.poll() is None and now >= deadline:
                self.echo(f"  {self.results[index].name}: grace period over, SIGKILL")
                kill_everything([proc])
            if proc.poll() is None:
                continue
            if index not in self._replace_at:
                self._replace_at[index] = now + replace_after
                if replace_after:
                    self.echo(
                        f"  {self.results[index].name} is gone (exit {proc.returncode}); its "
                        f"replacement starts in {replace_after:.0f} s"
                    )
            if now >= self._replace_at[index]:
                del self._leaving[index], self._replace_at[index]
                pod = self.results[index]
                pod.replaced += 1
                pod.restart_count = 0
                self.echo(f"  {pod.name}: replacement pod started")
                self.procs[index] = self._start(index)

    def stop(self) -> None:
        """SIGTERM to every agent ever started (torchrun forwards it to its workers), a short
        wait, then SIGKILL to every process left below each."""
        procs = list(dict.fromkeys(self._all_procs + self.procs))
        alive = [p for p in procs if p.poll() is None]
        for p in alive:
            signal_group(p, signal.SIGTERM)  # torchrun forwards it to its workers
        deadline = time.monotonic() + STOP_WAIT_S
        for p in alive:
            with contextlib.suppress(subprocess.TimeoutExpired):
                p.wait(timeout=max(0.1, deadline - time.monotonic()))
        kill_everything(procs)

    def close_logs(self) -> None:
        """Close the pods' log files."""
        for f in self._log_files:
            f.close()
        self._log_files.clear()
