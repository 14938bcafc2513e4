"""The cluster's side of a cloud sweep: the PyTorchJob, its pods and the nodegroup's nodes as
the API server reports them (``kubectl get``), the port-forward to the cluster's Prometheus, and
the wait for a job that fails fast on what waiting cannot fix."""

from __future__ import annotations

import contextlib
import json
import socket
import subprocess
import tempfile
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

from sweeps.common import SweepError
from sweeps.prometheus import last_logged_step

JOB_NAME_LABEL = "training.kubeflow.org/job-name"
"""Label the training operator puts on a job's pods (``JobNameLabel`` in kubeflow/trainer v1.9,
``pkg/apis/kubeflow.org/v1/common_types.go``)."""
IMAGE_PULL_REASONS = frozenset(
    {"ErrImagePull", "ImagePullBackOff", "InvalidImageName", "ErrImageNeverPull"}
)
"""Container waiting reasons of an image that cannot be pulled (kubelet ``images`` package)."""
FATAL_WAIT_REASONS = IMAGE_PULL_REASONS | {
    "CrashLoopBackOff",
    "CreateContainerConfigError",
    "CreateContainerError",
}
"""Waiting reasons the sweep does not wait out: nothing changes without a fix."""
NODEGROUP_LABEL = "eks.amazonaws.com/nodegroup"
"""Label EKS puts on a managed nodegroup's nodes (value: the nodegroup's name)."""
UNSCHEDULABLE_S = 300.0
"""How long a job's pod may stay unschedulable before the sweep stops: longer than the
cluster needs to register freshly launched nodes and their device plugins."""


@dataclass
class PortForward:
    """A running port-forward to the cluster's Prometheus."""

    url: str
    """Base URL of Prometheus through the forward."""
    process: subprocess.Popen[bytes]
    """The ``kubectl port-forward`` process (it dies with the pod, the node or the network)."""
    log_path: Path | None = None
    """Its output, quoted when it dies."""

    def check(self) -> None:
        """Raise ``SweepError`` when the forward is gone (a dead one answers nothing, forever)."""
        if self.process.poll() is not None:
            tail = ""
            if self.log_path is not None and self.log_path.is_file():
                tail = " ".join(self.log_path.read_text(errors="replace").split()[-30:])
            raise SweepError(
                f"port-forward to Prometheus exited with status {self.process.returncode}"
                + (f": {tail}" if tail else "")
            )


@dataclass(frozen=True)
class JobState:
    """What the training operator and the kubelet say about a PyTorchJob."""

    phase: str
    """Last true condition of the job (Created, Running, Restarting, Succeeded, Failed), or
    ``Pending`` before the operator has seen it."""
    reason: str = ""
    """Why, for a failure (the condition's message, a container's waiting reason)."""
    unschedulable: str = ""
    """A pod the scheduler cannot place (``PodScheduled=False``, reason ``Unschedulable``):
    its name and the scheduler's message; empty when every pod is placed."""

    @property
    def fatal(self) -> bool:
        """A state the sweep stops on (waiting for it costs node-hours and changes nothing)."""
        return self.phase == "Failed" or self.reason.split(":")[0] in FATAL_WAIT_REASONS


class JobWatch(Protocol):
    """Reads a PyTorchJob's state (the cloud mode uses :class:`KubectlJobWatch`)."""

    def state(self, job: str) -> JobState: ...

    def ready_nodes(self, nodegroup: str) -> int: ...


def _write_kubeconfig(outputs: dict[str, Any], directory: Path) -> Path:
    kubeconfig = outputs["kubeconfig"]
    path = directory / "kubeconfig.json"
    path.write_text(kubeconfig if isinstance(kubeconfig, str) else json.dumps(kubeconfig))
    path.chmod(0o600)
    return path


class KubectlJobWatch:
    """``kubectl get pytorchjob`` and the job's pods, with the stack's kubeconfig."""

    def __init__(
        self,
        kubeconfig: Path,
        namespace: str,
        get: Callable[..., dict[str, Any]] | None = None,
    ) -> None:
        self.kubeconfig = kubeconfig
        self.namespace = namespace
        self._get = get or self._kubectl_get

    def _kubectl_get(self, *args: str) -> dict[str, Any]:
        """``kubectl get <args> -o json``; OSError when kubectl fails (NotFound included)."""
        out = subprocess.run(
            [
                "kubectl",
                "--kubeconfig",
                str(self.kubeconfig),
                "-n",
                self.namespace,
                "get",
                *args,
                "-o",
                "json",
            ],
            capture_output=True,
            text=True,
            timeout=60,
            check=False,
        )
        if out.returncode != 0:
            raise OSError(out.stderr.strip() or f"kubectl get {' '.join(args)} failed")
        result: dict[str, Any] = json.loads(out.stdout)
        return result

    def state(self, job: str) -> JobState:
        """The job's last true condition; a fatal container waiting reason wins over it."""
        pods = self._get("pods", "-l", f"{JOB_NAME_LABEL}={job}")
        for pod in pods.get("items", []):
            status = pod.get("status", {})
            for cs in status.get("initContainerStatuses", []) + status.get("containerStatuses", []):
                waiting = (cs.get("state") or {}).get("waiting") or {}
                if waiting.get("reason") in FATAL_WAIT_REASONS:
                    name = pod["metadata"]["name"]
                    return JobState(
                        "Running", f"{waiting['reason']}: {name}: {waiting.get('message', '')}"
                    )
        unschedulable = ""
        for pod in pods.get("items", []):
            for c in pod.get("status", {}).get("conditions", []):
                if (c.get("type"), c.get("status"), c.get("reason")) == (
                    "PodScheduled",
                    "False",
                    "Unschedulable",
                ):
                    unschedulable = f"{pod['metadata']['name']}: {c.get('message', '')}"
        try:
            obj = self._get("pytorchjob", job)
        except OSError:
            return JobState("Pending", unschedulable=unschedulable)
        conditions = [
            c for c in obj.get("status", {}).get("conditions", []) if c.get("status") == "True"
        ]
        if not conditions:
            return JobState("Pending", unschedulable=unschedulable)
        last = conditions[-1]
        reason = last.get("message", "") if last["type"] == "Failed" else ""
        return JobState(last["type"], reason, unschedulable)

    def ready_nodes(self, nodegroup: str) -> int:
        """Nodes of the EKS managed nodegroup (label ``eks.amazonaws.com/nodegroup``, set by
        EKS on its nodes) whose ``Ready`` condition is True."""
        nodes = self._get("nodes", "-l", f"{NODEGROUP_LABEL}={nodegroup}")
        return sum(
            any(
                c.get("type") == "Ready" and c.get("status") == "True"
                for c in n.get("status", {}).get("conditions", [])
            )
            for n in nodes.get("items", [])
        )


def kubectl_watch(outputs: dict[str, Any], namespace: str, tmp: Path) -> JobWatch:
    """The default job watch: kubectl with the stack's kubeconfig, written into ``tmp``."""
    return KubectlJobWatch(_write_kubeconfig(outputs, tmp), namespace)


@contextlib.contextmanager
def kubectl_port_forward(outputs: dict[str, Any], namespace: str) -> Iterator[PortForward]:
    """Port-forward to the cluster's Prometheus with the stack's kubeconfig."""
    from workloads.observability import OUTPUT_KEY
    from workloads.specs.observability import ObservabilitySettings

    obs = outputs.get(OUTPUT_KEY) or {}
    prom_ns = obs.get("namespace", ObservabilitySettings().namespace)
    service = ObservabilitySettings().prometheus_service
    with tempfile.TemporaryDirectory(prefix="scaling-pf-") as tmp:
        kubeconfig = _write_kubeconfig(outputs, Path(tmp))
        port = _free_port()
        log_path = Path(tmp) / "port-forward.log"
        with log_path.open("wb") as log:
            proc = subprocess.Popen(
                [
                    "kubectl",
                    "--kubeconfig",
                    str(kubeconfig),
                    "-n",
                    prom_ns,
                    "port-forward",
                    f"svc/{service}",
                    f"{port}:9090",
                ],
                stdout=log,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
            )
        pf = PortForward(f"http://127.0.0.1:{port}", proc, log_path)
        try:
            deadline = time.monotonic() + 120
            while True:
                pf.check()
                with contextlib.suppress(OSError):
                    urllib.request.urlopen(f"{pf.url}/-/ready", timeout=2).close()
                    break
                if time.monotonic() > deadline:
                    raise SweepError(f"Prometheus not ready through the port-forward ({prom_ns})")
                time.sleep(1)
            yield pf
        finally:
            if proc.poll() is None:
                proc.terminate()
                proc.wait(timeout=10)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def wait_for_job(
    pf: PortForward,
    watch: JobWatch,
    job: str,
    last_step: int,
    *,
    timeout_s: float,
    poll_s: float,
    log: Callable[[str], None],
    unschedulable_s: float = UNSCHEDULABLE_S,
) -> None:
    """Until ``job`` has logged ``last_step`` (or Succeeded): fail fast on a failed job, an
    image that cannot be pulled, a crash loop, a pod unschedulable for ``unschedulable_s``, or
    a dead port-forward; stream the progress."""
    deadline = time.monotonic() + timeout_s
    unschedulable_since: float | None = None
    seen: int | None = None
    phase = ""
    errors = 0
    while True:
        pf.check()
        try:
            state = watch.state(job)
            errors = 0
        except (OSError, subprocess.TimeoutExpired, ValueError) as err:  # an API server blip
            errors += 1
            if errors >= 10:
                raise SweepError(f"job {job}: its state is unreadable: {err}") from err
            state = JobState(phase or "Pending")
        if state.fatal:
            raise SweepError(f"job {job}: {state.phase}: {state.reason}".rstrip(": "))
        if state.unschedulable:
            unschedulable_since = unschedulable_since or time.monotonic()
            if time.monotonic() - unschedulable_since > unschedulable_s:
                raise SweepError(
                    f"job {job}: pod unschedulable for over {unschedulable_s:.0f} s: "
                    f"{state.unschedulable}"
                )
        else:
            unschedulable_since = None
        try:
            step = last_logged_step(pf.url, job)
        except (OSError, RuntimeError, urllib.error.URLError):
            pf.check()  # a refused query through a dead forward is the forward's fault
            step = None
        if step != seen or state.phase != phase:
            log(f"  {job}: {state.phase}, step {step if step is not None else '-'}/{last_step}")
            seen, phase = step, state.phase
        if (seen is not None and seen >= last_step) or state.phase == "Succeeded":
            return
        if time.monotonic() > deadline:
            raise SweepError(
                f"job {job}: step {seen} after {timeout_s:.0f} s, waiting for {last_step}"
            )
        time.sleep(poll_s)
