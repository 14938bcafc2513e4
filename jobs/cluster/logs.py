"""A worker pod's log on a cluster: wait for the pod to start, then print or stream its log.

``--rank N`` is the pod's replica index (the operator's ``training.kubeflow.org/replica-index``
label, pod ``<name>-worker-N``), not torch's global ``RANK``: one pod runs a node's processes
and elastic rounds can reorder ranks.

Following a job just submitted means waiting: the operator creates the pods after the job, the
scheduler places them (a node may have to join), the kubelet pulls the image. Until the pod's
container has started the API server answers a log request with 400 ("container ... is waiting
to start"), so ``wait_started`` polls the pod, prints one line whenever its state changes
(``Pending: ContainerCreating``, ``Pending: Unschedulable``, ...) and gives up with one line
after ``--wait-timeout`` seconds. The log is decoded with an incremental UTF-8 decoder (a
character split between two reads prints whole), and a connection that breaks while streaming
is reported as such (urllib3's ``ProtocolError``), not as an unreachable API server.
"""

from __future__ import annotations

import codecs
import sys
import time
from collections.abc import Callable
from typing import Any

from jobs.cluster.kube import TIMEOUT, api_errors
from jobs.cluster.operator import INDEX_LABEL, JOB_LABEL, phase_of, worker_spec
from jobs.types import FINISHED, JobsError
from workloads.specs import pytorchjob as pj

CHUNK = 4096
"""Bytes read from the log stream at a time."""
POLL_S = 1.0
"""Seconds between two looks at a pod that has not started."""
WAIT_TIMEOUT_S = 900.0
"""Default ``--wait-timeout``: a new GPU node joining (minutes) plus a pull of the training
image (several GB) fit in it; a pod still pending then needs a look (``status``)."""
STARTED_PHASES = ("Running", "Succeeded", "Failed")


def started(pod: dict[str, Any]) -> bool:
    """Whether the pod's training container has started (its log exists)."""
    status = pod.get("status") or {}
    if status.get("phase") in STARTED_PHASES:
        return True
    for c in status.get("containerStatuses") or []:
        if c.get("name") == pj.CONTAINER:
            state = c.get("state") or {}
            return "running" in state or "terminated" in state
    return False


def waiting_state(pod: dict[str, Any]) -> str:
    """``Pending: <reason>``: the container's waiting reason (ContainerCreating,
    ImagePullBackOff, ...), else the scheduler's (Unschedulable), else the phase alone."""
    status = pod.get("status") or {}
    phase = status.get("phase") or "Pending"
    for c in (
        *(status.get("initContainerStatuses") or []),
        *(status.get("containerStatuses") or []),
    ):
        reason = ((c.get("state") or {}).get("waiting") or {}).get("reason")
        if reason:
            return f"{phase}: {reason}"
    for cond in status.get("conditions") or []:
        if cond.get("type") == "PodScheduled" and cond.get("status") == "False":
            return f"{phase}: {cond.get('reason') or 'not scheduled'}"
    return phase


def wait_started(
    backend: Any,
    name: str,
    rank: int,
    *,
    timeout_s: float,
    note: Callable[[str], None],
) -> dict[str, Any]:
    """Worker pod ``rank`` of job ``name`` once its container has started; ``note`` gets one
    line per state it passes through. ``JobsError`` (one line) when the job goes away or ends
    without it, when ``rank`` is not a pod of the job, or after ``timeout_s``."""
    pod_name = f"{name}-worker-{rank}"
    deadline = time.monotonic() + timeout_s
    last = ""
    while True:
        pods = backend._pods(f"{JOB_LABEL}={name},{INDEX_LABEL}={rank}")
        if pods and started(pods[0]):
            return pods[0]  # type: ignore[no-any-return]
        job = backend._get_job(name)
        if job is None:
            raise JobsError(
                f"job {name}: gone before worker pod {rank} started (cancelled?): "
                f"`eks-fsdp jobs list` shows it"
            )
        wanted = int(worker_spec(job).get("replicas", 0))
        if not 0 <= rank < wanted:
            raise JobsError(
                f"--rank {rank}: job {name} has {wanted} worker pods (--rank 0..{wanted - 1})",
                status=2,
            )
        phase = phase_of(job)
        if phase in FINISHED and not pods:
            raise JobsError(
                f"job {name} is {phase} and worker pod {rank} never started: "
                f"`eks-fsdp jobs status {name}` says why"
            )
        state = waiting_state(pods[0]) if pods else f"not created yet (job {phase})"
        if state != last:
            note(f"waiting for pod {pod_name} to start: {state}")
            last = state
        if time.monotonic() >= deadline:
            raise JobsError(
                f"job {name}: worker pod {rank} has not started after {timeout_s:g} s "
                f"({state}): `eks-fsdp jobs status {name}` says why; --wait-timeout waits longer"
            )
        time.sleep(POLL_S)


def stream(
    backend: Any,
    name: str,
    pod: str,
    *,
    follow: bool,
    tail: int | None,
    write: Callable[[str], None],
    container: str = pj.CONTAINER,
) -> None:
    """Print pod ``pod``'s log (its last ``tail`` lines of ``container``: the PyTorchJob's, or a
    TrainJob's node); with ``follow`` until it ends."""
    import urllib3

    with api_errors(backend.api, f"logs of pod {pod}"):
        resp = backend.core.read_namespaced_pod_log(
            pod,
            backend.namespace,
            container=container,
            follow=follow,
            tail_lines=tail,
            _preload_content=False,
            _request_timeout=(TIMEOUT[0], None) if follow else TIMEOUT,
        )
    decoder = codecs.getincrementaldecoder("utf-8")(errors="replace")
    try:
        with api_errors(backend.api, f"logs of pod {pod}"):
            try:
                for chunk in resp.stream(CHUNK):
                    text = decoder.decode(chunk)
                    if text:
                        write(text)
            except urllib3.exceptions.ProtocolError as err:
                cause = err.args[0] if err.args else err
                raise JobsError(
                    f"logs of pod {pod}: the connection dropped while streaming ({cause}); the "
                    f"job is not affected: `eks-fsdp jobs logs {name} --follow --tail 20` "
                    "picks it up again"
                ) from None
        rest = decoder.decode(b"", final=True)
        if rest:
            write(rest)
    finally:
        resp.release_conn()


FINISH_WAIT_S = 30.0
"""``follow``: seconds to wait, once pod 0's log has ended, for the operator to mark the job
finished (it does so after the pod's exit, on its next reconcile)."""


def follow(b: Any, name: str, write: Callable[[str], None], *, wait_timeout_s: float) -> int:
    """Stream worker pod 0's log of job ``name`` (backend ``b``) until it ends, then wait
    ``FINISH_WAIT_S`` for the operator to mark the job finished: 0 when it succeeded, 1
    otherwise; Ctrl-C stops following (130) and the job keeps running."""
    try:
        b.logs(name, rank=0, follow=True, tail=None, write=write, wait_timeout_s=wait_timeout_s)
        phase = b.status(name).phase
        deadline = time.monotonic() + FINISH_WAIT_S
        while phase not in FINISHED and time.monotonic() < deadline:
            time.sleep(1.0)  # pod 0's log ended; the operator's condition follows
            phase = b.status(name).phase
    except KeyboardInterrupt:
        print(f"\nstopped following; {name} keeps running", file=sys.stderr)
        return 130
    if phase not in FINISHED:
        print(
            f"jobs: the log of {name}'s worker pod 0 ended, the job is {phase}: "
            f"`{b._cmd('logs', name, '--follow')}` goes on",
            file=sys.stderr,
        )
    return 0 if phase == "Succeeded" else 1
