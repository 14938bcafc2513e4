"""Scaling study: measured tokens/s per node count next to the capacity planner's prediction.

Plain functions that ``notebooks/scaling.ipynb`` calls (and the tests call directly). Both modes
read their figures from Prometheus only, the same way: :func:`steady_throughput` takes the
``eksfsdp_tokens_total`` / ``eksfsdp_steps_total`` counters of global rank 0, drops the warm-up
steps, and evaluates ``rate()`` over the window from the first scrape after the warm-up to the
last scrape of the job, refusing a window with too few steps or scrapes for a steady-state figure.

- :func:`measure_local`: the stack's PyTorchJob on this machine (``workloads.local --prometheus``:
  real etcd, one torchrun agent per "pod", a real Prometheus scraping every pod); after each run
  its Prometheus data directory is opened again by a fresh Prometheus and queried.
- :func:`measure_cloud`: the paid path, with Pulumi's Automation API. Before the first ``up`` it
  checks the prerequisites (:func:`check_prerequisites`: observability on, ``pulumi``/``kubectl``/
  ``aws`` present, AWS credentials, the stack deployed or ``destroy=True``, NCCL_NET=OFI on EFA
  types, enough steps) and prints the cost estimate. For each node count it sets the config
  (nodegroup maxSize, job size, a job name derived from the original), runs ``up`` (its output
  streamed), sets the nodegroup's size through the EKS API (the nodegroup leaves
  ``desiredSize`` to the operator after creation), watches the PyTorchJob and its pods (a Failed job, an image pull error or a crash
  loop stops the sweep at once) and the port-forward to the cluster's Prometheus (a dead one
  stops it too), measures, and saves the result at once. Whatever happens (success, an error, an
  interrupt), ``Pulumi.<stack>.yaml`` is restored byte for byte and the stack is scaled back to
  its original size (the nodegroup's live scaling config as it was, then one more ``up``) (or destroyed, only with ``destroy=True``); each is
  retried, and the exact recovery commands are printed before the clean-up starts (again if it
  fails or is interrupted). Each ``up``/``destroy`` runs in a worker thread: on an interrupt the
  ``pulumi`` child gets SIGINT and the clean-up waits until it has exited; a lock is cancelled
  only when that interrupted update left it (never another holder's).
- :func:`planner_prediction`: the capacity planner's prediction for the same node counts.
- :func:`scaling_table` and :func:`plot_scaling`: efficiency vs one node, and the PNG chart.
"""

from __future__ import annotations

import contextlib
import json
import math
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Protocol

REPO_ROOT = Path(__file__).resolve().parents[1]
if str(REPO_ROOT) not in sys.path:
    sys.path.insert(0, str(REPO_ROOT))

PROJECT = "eks-fsdp"
R0 = 'rank="0"'
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
NODES_TIMEOUT_S = 1800.0
"""How long the sweep waits for the nodegroup's nodes to be Ready after scaling."""
TOOLS = ("pulumi", "kubectl", "aws")
"""Command-line tools the cloud mode runs (the Automation API shells out to ``pulumi``)."""
STEPS_BY_MODE = {"local": (30, 5), "cloud": (200, 20)}
"""Default (steps, warm-up steps) per notebook mode: on the cluster 180 measured steps of ~1.5 s
(the planner's p5 step time) span 270 s, 18 scrapes at 15 s; 30 steps could not reach 8."""
CLEANUP_ATTEMPTS = 3
"""Tries of the scale-back ``up`` (or ``destroy``) before printing the recovery commands."""


class SweepError(RuntimeError):
    """The sweep stopped: a failed job, an image pull error, a dead port-forward, a timeout."""


class PrerequisiteError(SweepError):
    """Something the sweep needs is missing; nothing was started."""


@dataclass(frozen=True)
class Measurement:
    """Steady-state throughput of one run, from Prometheus' counters."""

    nodes: int
    """Worker pods (= nodes on the cluster)."""
    tokens_per_s: float
    """Job-wide tokens/s: ``rate(eksfsdp_tokens_total)`` of global rank 0 over the window."""
    source: str
    """Where the number came from (always ``prometheus``)."""
    job: str
    """Training job name (the ``training_job`` label)."""
    steps: int
    """Last optimizer step Prometheus saw."""
    wall_s: float
    """Wall time of the run (local) or of ``up`` + training (cloud)."""
    window_s: float = 0.0
    """Length of the measured window (first scrape after the warm-up to the last scrape)."""
    first_step: int = 0
    """Step count at the start of the window (the warm-up steps before it are not measured)."""
    end_step: int = 0
    """Step count at the end of the window (the last scrape before the final count)."""
    steps_measured: int = 0
    """Optimizer steps inside the window (``end_step - first_step``)."""
    tokens_measured: float = 0.0
    """Tokens trained inside the window (``increase`` of the counter)."""
    scrapes: int = 0
    """Scrapes inside the window."""


# --- Prometheus HTTP API ------------------------------------------------------------------------


def _api(url: str, path: str, params: dict[str, Any], timeout: float = 30.0) -> Any:
    q = urllib.parse.urlencode(params)
    with urllib.request.urlopen(f"{url}{path}?{q}", timeout=timeout) as resp:
        body = json.loads(resp.read().decode())
    if body.get("status") != "success":
        raise RuntimeError(f"Prometheus {path} {params}: {body}")
    return body["data"]


def prom_query(
    url: str, promql: str, at: float | None = None
) -> dict[tuple[tuple[str, str], ...], float]:
    """Instant query (at ``at``, default now): ``{sorted labels: value}``."""
    params: dict[str, Any] = {"query": promql}
    if at is not None:
        params["time"] = f"{at:.3f}"
    data = _api(url, "/api/v1/query", params)
    return {tuple(sorted(r["metric"].items())): float(r["value"][1]) for r in data["result"]}


def prom_samples(url: str, selector: str, lookback_s: float) -> list[tuple[float, float]]:
    """The raw samples (scrape time, value) of the one series ``selector`` names, over the last
    ``lookback_s`` seconds (a range-vector selector: real scrape timestamps, no interpolation)."""
    data = _api(url, "/api/v1/query", {"query": f"{selector}[{max(1, math.ceil(lookback_s))}s]"})
    series = data["result"]
    if len(series) > 1:
        raise SweepError(f"{selector}: {len(series)} series, expected one (rank 0 of one job)")
    return [(float(t), float(v)) for t, v in series[0]["values"]] if series else []


def last_logged_step(url: str, job: str, lookback_s: float = 6 * 3600) -> int | None:
    """The step counter of ``job``'s rank 0 at its last scrape, as Prometheus holds it."""
    samples = prom_samples(url, f'eksfsdp_steps_total{{training_job="{job}",{R0}}}', lookback_s)
    return int(samples[-1][1]) if samples else None


def steady_throughput(
    url: str,
    job: str,
    *,
    warmup_steps: int,
    min_steps: int,
    min_scrapes: int = 3,
    lookback_s: float = 6 * 3600,
) -> dict[str, float]:
    """Steady-state tokens/s of ``job`` from its counters, with ``rate()``.

    The window runs from the first scrape whose step counter is past ``warmup_steps`` to the last
    scrape before the counter's final value (the job trained throughout); Prometheus evaluates ``rate(eksfsdp_tokens_total[window])`` at the window's
    end (a range selector is left-open, so the window is widened by a millisecond to include the
    first sample; both ends are real samples, so ``rate`` does not extrapolate). Refuses a window
    with fewer than ``min_steps`` steps or ``min_scrapes`` scrapes: raise the steps (or lower the
    scrape interval) rather than trust 3 samples.
    """
    sel = f'training_job="{job}",{R0}'
    steps = prom_samples(url, f"eksfsdp_steps_total{{{sel}}}", lookback_s)
    if not steps:
        raise SweepError(f"job {job}: no eksfsdp_steps_total in Prometheus")
    start = next(((t, v) for t, v in steps if v >= warmup_steps), None)
    # The last scrape before the counter reached its final value: the job trained during the
    # whole window. Scrapes from then on (the last steps' remainder, a final save, a pod waiting
    # to be reaped) add time but no tokens, which would bias the rate low by up to an interval.
    final = next(i for i, s in enumerate(steps) if s[1] == steps[-1][1])
    end = steps[max(final - 1, 0)]
    in_window = [s for s in steps if start is not None and start[0] <= s[0] <= end[0]]
    n_steps = int(end[1] - start[1]) if start is not None else 0
    if start is None or n_steps < min_steps or len(in_window) < min_scrapes:
        raise SweepError(
            f"job {job}: {n_steps} step(s) in {len(in_window)} scrape(s) after {warmup_steps} "
            f"warm-up steps (last step {int(end[1])}); need >= {min_steps} steps and >= "
            f"{min_scrapes} scrapes for a steady-state rate: raise the steps"
        )
    window_ms = round((end[0] - start[0]) * 1000) + 1
    rng = f"[{window_ms}ms]"
    tokens_per_s = prom_query(url, f"rate(eksfsdp_tokens_total{{{sel}}}{rng})", at=end[0])
    tokens = prom_query(url, f"increase(eksfsdp_tokens_total{{{sel}}}{rng})", at=end[0])
    if not tokens_per_s:
        raise SweepError(f"job {job}: no eksfsdp_tokens_total in Prometheus")
    window_s = end[0] - start[0]
    return {
        "tokens_per_s": next(iter(tokens_per_s.values())),
        "tokens": next(iter(tokens.values())) * (window_s / (window_ms / 1000)),
        "window_s": window_s,
        "first_step": int(start[1]),
        "end_step": int(end[1]),
        "last_step": int(steps[-1][1]),
        "steps": n_steps,
        "scrapes": len(in_window),
    }


def _measurement(nodes: int, job: str, wall_s: float, fig: dict[str, float]) -> Measurement:
    return Measurement(
        nodes=nodes,
        tokens_per_s=fig["tokens_per_s"],
        source="prometheus",
        job=job,
        steps=int(fig["last_step"]),
        wall_s=wall_s,
        window_s=fig["window_s"],
        first_step=int(fig["first_step"]),
        end_step=int(fig["end_step"]),
        steps_measured=int(fig["steps"]),
        tokens_measured=fig["tokens"],
        scrapes=int(fig["scrapes"]),
    )


def save_results(measured: Sequence[Measurement], path: Path) -> None:
    """Write ``measured`` to ``path`` atomically (a crash never leaves half a file)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.tmp")
    tmp.write_text(to_json(measured))
    tmp.replace(path)


# --- planner -------------------------------------------------------------------------------------


def planner_prediction(
    nodes: Sequence[int], *, stack: str | None = None, args: Sequence[str] = ()
) -> list[dict[str, Any]]:
    """The capacity planner's prediction (``python -m planner ... --json``)."""
    cmd = [sys.executable, "-m", "planner", "--nodes", ",".join(map(str, nodes)), "--json"]
    if stack:
        cmd += ["--stack", stack]
    cmd += list(args)
    out = subprocess.run(cmd, cwd=REPO_ROOT, capture_output=True, text=True, timeout=300)
    if out.returncode != 0:
        raise RuntimeError(f"planner failed: {out.stderr.strip().splitlines()[-1:]}")
    rows: list[dict[str, Any]] = json.loads(out.stdout)
    return rows


def planner_before_after(
    nodes: Sequence[int],
    calibration: str | Path,
    *,
    stack: str | None = None,
    args: Sequence[str] = (),
    preflight: Sequence[str | Path] = (),
) -> list[dict[str, Any]]:
    """The planner's tokens/s per node count before and after ``python -m planner calibrate``.

    ``[{"nodes", "gpus", "before", "after"}]`` (``planner.calibrate.prediction_before_after``);
    ``preflight``: the measured nodes' preflight JSON, whose links replace the calibration's.
    """
    from planner.calibrate import prediction_before_after

    plan_args = ["--nodes", ",".join(map(str, nodes)), *(["--stack", stack] if stack else [])]
    return prediction_before_after(
        [*plan_args, *args], Path(calibration), [Path(p) for p in preflight]
    )


# --- local mode ----------------------------------------------------------------------------------


@contextlib.contextmanager
def reopen_prometheus(data_dir: Path, out_dir: Path) -> Iterator[str]:
    """A Prometheus serving what an earlier one stored in ``data_dir`` (no scrape targets);
    yields its URL. The local runner stops its Prometheus when the job ends; its TSDB (head and
    WAL) stays on disk and is replayed here."""
    from workloads.local_prometheus import free_port, prometheus_binary

    out_dir.mkdir(parents=True, exist_ok=True)
    config = out_dir / "prometheus-readonly.yml"
    config.write_text("global:\n  scrape_interval: 1m\n")
    port = free_port()
    with (out_dir / "prometheus-readonly.log").open("wb") as log:
        proc = subprocess.Popen(
            [
                prometheus_binary(),
                f"--config.file={config}",
                f"--storage.tsdb.path={data_dir}",
                f"--web.listen-address=127.0.0.1:{port}",
                "--storage.tsdb.retention.time=1d",
            ],
            stdout=log,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
        )
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 60
        while True:
            with contextlib.suppress(OSError):
                urllib.request.urlopen(f"{url}/-/ready", timeout=2).close()
                break
            if proc.poll() is not None or time.monotonic() > deadline:
                raise SweepError(f"prometheus on {data_dir} did not start (see {log.name})")
            time.sleep(0.3)
        yield url
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(timeout=10)


def measure_local(
    workers: Sequence[int] = (1, 2, 3),
    *,
    stack: str = "dev",
    steps: int = 30,
    warmup_steps: int = 5,
    min_scrapes: int = 3,
    fp32: bool = True,
    out_dir: str | Path | None = None,
    results: str | Path | None = None,
    log: Callable[[str], None] = print,
) -> list[Measurement]:
    """Run the stack's job locally with each worker count; tokens/s from Prometheus' counters.

    ``fp32`` adds ``--mixed_precision=false``: on a CPU without native bf16 (AVX2 only), bf16
    runs about 10x slower than fp32. Each result is written to ``results`` (JSON) as soon as it
    is measured.
    """
    from workloads.local import LocalOptions, Runner

    if steps <= warmup_steps:
        raise ValueError(f"steps: {steps} must exceed warmup_steps ({warmup_steps})")
    root = Path(out_dir) if out_dir else Path(tempfile.mkdtemp(prefix="scaling-"))
    measured: list[Measurement] = []
    for n in workers:
        out = root / f"workers-{n}"
        opts = LocalOptions(
            stack=stack,
            out=out,
            workers=n,
            min_workers=n,
            train_overrides=(
                f"--max_train_step={steps}",
                "--checkpoint_every=0",
                *(["--mixed_precision=false"] if fp32 else []),
            ),
            prometheus=True,
            timeout_s=900,
        )
        lines: list[str] = []
        log(f"{n} worker(s): running {steps} steps locally")
        result = Runner(opts, echo=lines.append).run()
        if not result.succeeded:
            raise SweepError(f"local run with {n} workers failed:\n" + "\n".join(lines[-20:]))
        job = result.job["metadata"]["name"]
        with reopen_prometheus(out / "prometheus" / "data", out / "prometheus") as url:
            fig = steady_throughput(
                url,
                job,
                warmup_steps=warmup_steps,
                min_steps=max(1, (steps - warmup_steps) // 2),
                min_scrapes=min_scrapes,
            )
        m = _measurement(n, job, result.wall_s, fig)
        measured.append(m)
        if results is not None:
            save_results(measured, Path(results))
        log(
            f"{n} worker(s): {m.tokens_per_s:,.0f} tokens/s (rate over steps {m.first_step}-"
            f"{m.end_step}, {m.window_s:.1f} s, {m.scrapes} scrapes, from Prometheus)"
        )
    return measured


# --- cloud mode: the cluster's side ---------------------------------------------------------------


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


# --- cloud mode: the stack's side -----------------------------------------------------------------


class StackFile:
    """``Pulumi.<stack>.yaml`` kept byte for byte: a copy is taken at entry (and written next to
    the results, for a manual restore), and put back at exit, whatever ended the block."""

    def __init__(self, path: Path, backup_dir: Path) -> None:
        self.path = path
        self.original = path.read_bytes()
        backup_dir.mkdir(parents=True, exist_ok=True)
        self.backup = backup_dir / f"{path.name}.orig"
        self.backup.write_bytes(self.original)

    def restore(self) -> bool:
        """Put the original bytes back; True when the file had changed."""
        if self.path.read_bytes() == self.original:
            return False
        tmp = self.path.with_name(f".{self.path.name}.restore")
        tmp.write_bytes(self.original)
        shutil.copymode(self.path, tmp)  # the file's mode as it is, not the umask's
        tmp.replace(self.path)
        return True


def job_name_for(base: str, nodes: int, sweep_id: str) -> str:
    """``<original job name>-<n>n-<sweep id>``, cut to the job-name limit: derived from the
    original each time (never from the last count's), new per sweep (a rendezvous id stays
    closed for 2 h, and Prometheus keeps the series of an earlier sweep)."""
    suffix = f"-{nodes}n-{sweep_id}"
    return f"{base[: 50 - len(suffix)].rstrip('-')}{suffix}"


@dataclass(frozen=True)
class Nodegroup:
    """The job's EKS managed nodegroup, as the stack outputs name it."""

    cluster: str
    name: str
    region: str | None

    def args(self) -> list[str]:
        return [
            "--cluster-name",
            self.cluster,
            "--nodegroup-name",
            self.name,
            *(["--region", self.region] if self.region else []),
        ]

    def scale_command(self, scaling: dict[str, int]) -> list[str]:
        """``aws eks update-nodegroup-config`` to ``scaling`` (minSize/maxSize/desiredSize)."""
        cfg = ",".join(f"{k}={scaling[k]}" for k in ("minSize", "maxSize", "desiredSize"))
        return ["aws", "eks", "update-nodegroup-config", *self.args(), "--scaling-config", cfg]


def nodegroup_of(outputs: dict[str, Any], index: int) -> Nodegroup:
    """The ``index``-th GPU nodegroup of the stack (outputs ``clusterName``, ``region``,
    ``gpuNodeGroupNames`` in config order; ``infra/outputs.py``)."""
    from infra import outputs as keys

    names = outputs.get(keys.GPU_NODE_GROUP_NAMES) or []
    if index >= len(names) or not outputs.get(keys.CLUSTER_NAME):
        raise SweepError(
            f"stack outputs: no {keys.CLUSTER_NAME} or {keys.GPU_NODE_GROUP_NAMES}[{index}]"
        )
    return Nodegroup(outputs[keys.CLUSTER_NAME], names[index], outputs.get(keys.REGION))


def _aws(run: Callable[..., Any], cmd: list[str], timeout: float = 120) -> dict[str, Any]:
    out = run(
        [*cmd, "--output", "json"], capture_output=True, text=True, timeout=timeout, check=False
    )
    if out.returncode != 0:
        last = (out.stderr or "").strip().splitlines()[-1:] or [f"status {out.returncode}"]
        raise SweepError(f"{' '.join(cmd[:3])}: {last[0]}")
    result: dict[str, Any] = json.loads(out.stdout) if (out.stdout or "").strip() else {}
    return result


def live_scaling(run: Callable[..., Any], group: Nodegroup) -> dict[str, int]:
    """The nodegroup's scaling config as EKS has it now (the operator's, not the stack file's:
    the nodegroup ignores ``desiredSize`` changes after creation, ``infra/gpu_nodegroup.py``)."""
    got = _aws(run, ["aws", "eks", "describe-nodegroup", *group.args()])
    cfg = got["nodegroup"]["scalingConfig"]
    return {k: int(cfg[k]) for k in ("minSize", "maxSize", "desiredSize")}


def scale_nodegroup(
    run: Callable[..., Any], group: Nodegroup, scaling: dict[str, int], log: Callable[[str], None]
) -> None:
    """Set the nodegroup's scaling config through the EKS API and wait until it is ACTIVE."""
    log(f"  nodegroup {group.name}: {scaling}")
    _aws(run, group.scale_command(scaling))
    _aws(run, ["aws", "eks", "wait", "nodegroup-active", *group.args()], timeout=3600)


def nodegroup_health(run: Callable[..., Any], group: Nodegroup) -> list[str]:
    """The nodegroup's health issues (``describe-nodegroup``: ``nodegroup.health.issues``, for
    example ``AsgInstanceLaunchFailures`` when EC2 has no capacity), as ``code: message``."""
    got = _aws(run, ["aws", "eks", "describe-nodegroup", *group.args()])
    issues = got.get("nodegroup", {}).get("health", {}).get("issues", [])
    return [f"{i.get('code', '?')}: {i.get('message', '')}" for i in issues]


def wait_for_nodes(
    run: Callable[..., Any],
    watch: JobWatch,
    group: Nodegroup,
    n: int,
    *,
    timeout_s: float,
    poll_s: float,
    log: Callable[[str], None],
) -> None:
    """Until ``n`` nodes of the nodegroup are Ready: the nodegroup turns ACTIVE whether or not
    its instances launched (a capacity block or ODCR short of capacity), so stop on a health
    issue at once, and when ``timeout_s`` passes with fewer nodes Ready."""
    deadline = time.monotonic() + timeout_s
    ready = -1
    while True:
        try:
            now = watch.ready_nodes(group.name)
        except (OSError, subprocess.TimeoutExpired, ValueError):  # an API server blip
            now = ready
        if now != ready:
            log(f"  nodegroup {group.name}: {max(now, 0)}/{n} node(s) Ready")
            ready = now
        if ready >= n:
            return
        issues = nodegroup_health(run, group)
        if issues:
            raise SweepError(
                f"nodegroup {group.name}: {max(ready, 0)}/{n} node(s) Ready, health issues: "
                + "; ".join(issues)
            )
        if time.monotonic() > deadline:
            raise SweepError(
                f"nodegroup {group.name}: {max(ready, 0)}/{n} node(s) Ready after {timeout_s:.0f} s"
            )
        time.sleep(poll_s)


@dataclass
class Plan:
    """What the prerequisites found: the sweep's inputs."""

    stack_file: Path
    group_index: int
    group_name: str
    min_size: int
    max_size: int
    base_job: str
    namespace: str
    usd_per_node_hour: float
    deployed: bool
    problems: list[str] = field(default_factory=list)
    repository: str | None = None
    """The stack's ECR repository (``TrainingImage``), None when the job names its image."""
    region: str | None = None
    """``aws:region`` of the stack."""


def _stack_plan(stack: Any, stack_name: str, work_dir: Path) -> Plan:
    from infra.config import ConfigError, load_stack_file
    from workloads.specs.image import repository_name

    path = work_dir / f"Pulumi.{stack_name}.yaml"
    problems: list[str] = []
    try:
        cfg = load_stack_file(stack_name, root=work_dir)
    except (ConfigError, ValueError) as err:
        raise PrerequisiteError(f"{path.name}: {err}") from None
    if not cfg.observability.enabled:
        problems.append(
            f"stack {stack_name} has observability off (the sweep reads throughput from the "
            "cluster's Prometheus): set eks-fsdp:observability.enabled: true"
        )
    if cfg.job is None or not cfg.job.enabled:
        raise PrerequisiteError(f"stack {stack_name}: no enabled job to measure")
    group = cfg.job_node_group or cfg.gpu_node_groups[0]
    index = [g.name for g in cfg.gpu_node_groups].index(group.name)
    if group.instance.efa_supported:
        from workloads.specs import pytorchjob
        from workloads.specs.settings import from_stack
        from workloads.specs.stack import training_image

        w = from_stack(cfg, image=training_image(cfg), stack=stack_name)
        env = {e.name: e.value for e in pytorchjob.container_env(w.job)}
        if env.get("NCCL_NET") != pytorchjob.NCCL_NET_EFA:
            problems.append(
                f"{group.instance_type} has EFA but the job does not set NCCL_NET="
                f"{pytorchjob.NCCL_NET_EFA}: a broken plugin would fall back to TCP"
            )
    try:
        deployed = bool(stack.outputs())
    except Exception as err:  # the backend is unreachable, the stack unreadable
        raise PrerequisiteError(f"stack {stack_name}: cannot read its outputs: {err}") from None
    return Plan(
        stack_file=path,
        group_index=index,
        group_name=group.name,
        min_size=group.min_size,
        max_size=group.max_size,
        base_job=cfg.job.name,
        namespace=cfg.job.namespace,
        usd_per_node_hour=group.usd_per_hour,
        deployed=deployed,
        problems=problems,
        repository=None if cfg.job.image else repository_name(PROJECT, stack_name),
        region=cfg.region,
    )


def check_prerequisites(
    plan: Plan,
    *,
    nodes: Sequence[int],
    steps: int,
    warmup_steps: int,
    destroy: bool,
    destroy_existing: bool = False,
    step_time_s: Mapping[int, float] | None = None,
    min_scrapes: int = 8,
    scrape_interval_s: float | None = None,
    image_tag: str | None = None,
    which: Callable[[str], str | None] = shutil.which,
    run: Callable[..., subprocess.CompletedProcess[str]] = subprocess.run,
) -> None:
    """Everything the sweep needs, checked before the first ``up``: one line naming every gap.

    ``step_time_s`` ({nodes: seconds}, the planner's): the measured steps of each count must
    span ``min_scrapes`` scrapes of the cluster's Prometheus (``scrape_interval_s``, default
    the observability settings'). ``image_tag``: the content tag the program would push; when
    the stack's repository does not hold it, ``pulumi up`` builds it with Docker Buildx."""
    problems = list(plan.problems)
    missing = [t for t in TOOLS if which(t) is None]
    if missing:
        problems.append(f"not on PATH: {', '.join(missing)}")
    credentials = False
    if which("aws") is not None:
        out = run(
            ["aws", "sts", "get-caller-identity", "--output", "json"],
            capture_output=True,
            text=True,
            timeout=60,
            check=False,
        )
        credentials = out.returncode == 0
        if not credentials:
            problems.append(
                "no AWS credentials (aws sts get-caller-identity: "
                f"{(out.stderr or '').strip().splitlines()[-1:] or out.returncode})"
            )
    if not plan.deployed and not destroy:
        problems.append(
            "stack is not deployed: the sweep would create it and leave it running; deploy it "
            "first (pulumi up), or pass destroy=True to tear it down after the sweep"
        )
    if plan.deployed and destroy and not destroy_existing:
        problems.append(
            "destroy=True on a stack that is already deployed (the sweep did not create it): "
            "it would tear down its cluster, VPC and storage; pass destroy_existing=True too "
            "to mean it, or leave destroy off to scale it back"
        )
    if steps < warmup_steps + 10:
        problems.append(
            f"steps {steps}: need >= warmup_steps + 10 = {warmup_steps + 10} for a steady state"
        )
    if step_time_s:
        scrape = scrape_interval_s if scrape_interval_s is not None else _scrape_interval_s()
        need = min_scrapes * scrape
        short = {n: t for n, t in step_time_s.items() if (steps - warmup_steps) * t < need}
        if short:
            n, t = min(short.items(), key=lambda kv: kv[1])
            problems.append(
                f"steps {steps}: {steps - warmup_steps} measured steps x {t:.2f} s (the "
                f"planner's step time at {n} node(s)) = {(steps - warmup_steps) * t:.0f} s, "
                f"under {min_scrapes} scrapes x {scrape:.0f} s = {need:.0f} s; use steps >= "
                f"{warmup_steps + math.ceil(need / t)}"
            )
    if (
        plan.repository
        and image_tag
        and credentials
        and not _image_in_ecr(run, plan.repository, plan.region, image_tag)
    ):
        buildx = (
            run(
                ["docker", "buildx", "version"],
                capture_output=True,
                text=True,
                timeout=60,
                check=False,
            )
            if which("docker") is not None
            else None
        )
        if buildx is None or buildx.returncode != 0:
            why = "docker is not on PATH" if buildx is None else "docker buildx version failed"
            problems.append(
                f"{plan.repository}:{image_tag} is not in ECR, so pulumi up builds it, but "
                f"{why} (install Docker with the Buildx plugin, or push the image first)"
            )
    if problems:
        raise PrerequisiteError("; ".join(problems))


def _scrape_interval_s() -> float:
    """The cluster's Prometheus scrape interval (``ObservabilitySettings.scrape_interval``)."""
    from workloads.specs.observability import ObservabilitySettings

    value = ObservabilitySettings().scrape_interval
    return float(value[:-1]) * {"s": 1, "m": 60, "h": 3600}[value[-1]]


def _image_in_ecr(run: Callable[..., Any], repository: str, region: str | None, tag: str) -> bool:
    """Whether ``repository:tag`` exists (``aws ecr describe-images``); a missing repository or
    tag is False, any other failure stops the sweep."""
    out = run(
        [
            "aws",
            "ecr",
            "describe-images",
            "--repository-name",
            repository,
            *_region_args(region),
            "--image-ids",
            f"imageTag={tag}",
            "--output",
            "json",
        ],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    if out.returncode == 0:
        return True
    if any(code in (out.stderr or "") for code in ("RepositoryNotFound", "ImageNotFound")):
        return False
    last = (out.stderr or "").strip().splitlines()[-1:] or [f"status {out.returncode}"]
    raise PrerequisiteError(f"aws ecr describe-images {repository}: {last[0]}")


def _content_tag(work: Path) -> str:
    """The tag the program at ``work`` would push (``TrainingImage``: the content tag of the
    build context, the repository root)."""
    from workloads.specs.image import DOCKERFILE, content_tag

    # A work dir holding only stack files (no build context) is the repository's own program.
    return content_tag(work if (work / DOCKERFILE).is_file() else REPO_ROOT)


def planner_step_times(nodes: Sequence[int], stack_name: str) -> dict[int, float]:
    """{nodes: seconds per optimizer step}, the planner's prediction for the stack."""
    return {
        int(p["nodes"]): float(p["step_time_s"])
        for p in planner_prediction(nodes, stack=stack_name)
    }


def estimated_cost_usd(
    nodes: Sequence[int], usd_per_node_hour: float, minutes_per_count: float
) -> float:
    """Node-hours the sweep pays for, priced: every count holds its nodes for the ``up``, the
    warm-up and the measured steps (``minutes_per_count``)."""
    return sum(nodes) * usd_per_node_hour * minutes_per_count / 60


def _region_args(region: str | None) -> list[str]:
    return ["--region", region] if region else []


def empty_repository_command(repository: str, region: str | None) -> str:
    """The shell command that deletes every image of ``repository`` (a recovery step)."""
    r = " ".join(_region_args(region))
    r = f" {r}" if r else ""
    return (
        f"aws ecr list-images --repository-name {repository}{r} --query "
        "'imageIds[].imageDigest' --output text | tr '\\t' '\\n' | sort -u | xargs -r -I{} "
        f"aws ecr batch-delete-image --repository-name {repository}{r} --image-ids imageDigest={{}}"
    )


def empty_repository(
    run: Callable[..., Any], repository: str, region: str | None, log: Callable[[str], None]
) -> int:
    """Delete every image of the stack's ECR repository (``list-images``, then
    ``batch-delete-image`` by digest, 100 ids a call, the API's limit), so that ``destroy`` can
    delete it: the repository has ``force_delete=False`` (``workloads/training_image.py``) and
    ECR refuses to delete one holding images (``RepositoryNotEmptyException``). A missing
    repository (``RepositoryNotFoundException``) holds nothing. Returns the digests deleted."""
    base = ["aws", "ecr"]
    where = ["--repository-name", repository, *_region_args(region)]
    out = run(
        [*base, "list-images", *where, "--output", "json"],
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    if out.returncode != 0:
        if "RepositoryNotFoundException" in (out.stderr or ""):
            return 0
        last = (out.stderr or "").strip().splitlines()[-1:] or [f"status {out.returncode}"]
        raise SweepError(f"aws ecr list-images: {last[0]}")
    ids = json.loads(out.stdout or "{}").get("imageIds", [])
    digests = sorted({i["imageDigest"] for i in ids})
    for start in range(0, len(digests), 100):
        chunk = digests[start : start + 100]
        got = _aws(
            run,
            [*base, "batch-delete-image", *where, "--image-ids"]
            + [f"imageDigest={d}" for d in chunk],
        )
        failures = [f for f in got.get("failures", []) if f.get("failureCode") != "ImageNotFound"]
        if failures:
            raise SweepError(f"aws ecr batch-delete-image {repository}: {failures[0]}")
    log(f"  {repository}: {len(digests)} image(s) deleted")
    return len(digests)


def interrupt_pulumi_children() -> None:
    """SIGINT to this process's ``pulumi`` children: the Automation API runs the CLI with
    ``subprocess.Popen`` (``pulumi/automation/_cmd.py``) in its own session-less child that a
    notebook kernel's interrupt never reaches. On SIGINT the CLI cancels the update gracefully
    (finishes the resource operations in flight, saves the state, releases the lock)."""
    out = subprocess.run(
        ["pgrep", "-P", str(os.getpid()), "-x", "pulumi"],
        capture_output=True,
        text=True,
        check=False,
    )
    for pid in out.stdout.split():
        with contextlib.suppress(ProcessLookupError):
            os.kill(int(pid), signal.SIGINT)


class PulumiOps:
    """Runs each Automation API operation (``up``, ``destroy``) in a worker thread, so that a
    KeyboardInterrupt reaches the sweep, not the thread that waits on the ``pulumi`` child.

    On an interrupt the child is sent SIGINT (``interrupt``) and the operation is kept as the
    lock's holder: :meth:`wait_for_holder` waits until it has exited; only then may a lock still
    held be cancelled, and only the one that holder left (``stack.cancel()`` is "very
    dangerous" per its docstring in ``pulumi/automation/_stack.py``)."""

    def __init__(
        self,
        interrupt: Callable[[], None],
        log: Callable[[str], None],
        progress_s: float = 30.0,
    ) -> None:
        self.interrupt = interrupt
        self.log = log
        self.progress_s = progress_s
        self.holder: threading.Event | None = None
        """Set when the interrupted operation has returned (it holds the stack's lock until
        then). An Event, not ``Thread.is_alive``: a ``join`` interrupted by KeyboardInterrupt
        can leave a live thread reported as stopped (seen with CPython 3.11)."""
        self.holder_exited = False
        """The sweep's own interrupted operation has exited: a lock left now is its own."""

    def run(self, action: Callable[[], Any], what: str) -> None:
        error: list[BaseException] = []
        done = threading.Event()

        def target() -> None:
            try:
                action()
            except BaseException as err:
                error.append(err)
            finally:
                done.set()

        threading.Thread(target=target, name=f"pulumi {what}", daemon=True).start()
        try:
            while not done.wait(0.2):
                pass
        except KeyboardInterrupt:
            self.holder = done
            self.log(f"interrupted: SIGINT to the running pulumi {what} (it releases the lock)")
            self.interrupt()
            raise
        if error:
            raise error[0]

    def wait_for_holder(self) -> None:
        """Until the interrupted operation has exited (a second interrupt leaves it running)."""
        if self.holder is None:
            return
        last = time.monotonic()
        while not self.holder.wait(0.2):
            if time.monotonic() - last >= self.progress_s:
                self.log("  waiting for the interrupted pulumi operation to release the lock")
                last = time.monotonic()
        self.holder_exited = True


def _cleanup(
    action: Callable[[], Any],
    stack: Any,
    what: str,
    recovery: list[str],
    log: Callable[[str], None],
    ops: PulumiOps,
    attempts: int = CLEANUP_ATTEMPTS,
) -> None:
    """Run ``action`` up to ``attempts`` times, after the interrupted operation (if any) has
    exited. A lock (``ConcurrentUpdateError``: ``[409] Conflict`` on Pulumi Cloud, "currently
    locked by" on a self-managed backend) is cancelled only when the sweep's own interrupted
    operation left it and has exited; another holder's lock is never cancelled. Prints
    ``recovery`` and raises when every try failed."""
    from pulumi.automation import ConcurrentUpdateError

    ops.wait_for_holder()
    last: BaseException | None = None
    for attempt in range(1, attempts + 1):
        try:
            ops.run(action, what)
            return
        except Exception as err:
            last = err
            log(f"{what} failed (try {attempt}/{attempts}): {str(err).strip()[:500]}")
            if isinstance(err, ConcurrentUpdateError):
                if not ops.holder_exited:
                    log("the stack is locked by an update the sweep did not start: not cancelled")
                    break
                with contextlib.suppress(Exception):
                    stack.cancel()
                    log("cancelled the lock the interrupted (and exited) update left")
    log(f"{what} failed. GPU nodes may still be running. Run:")
    for cmd in recovery:
        log(f"    {cmd}")
    raise SweepError(f"{what} failed: {last}") from last


def measure_cloud(
    nodes: Sequence[int],
    *,
    stack_name: str,
    work_dir: str | Path = REPO_ROOT,
    steps: int = 200,
    warmup_steps: int = 20,
    min_scrapes: int = 8,
    destroy: bool = False,
    destroy_existing: bool = False,
    results: str | Path | None = None,
    sweep_id: str | None = None,
    minutes_per_count: float = 30.0,
    select_stack: Callable[..., Any] | None = None,
    prometheus: Callable[[dict[str, Any], str], contextlib.AbstractContextManager[PortForward]]
    | None = None,
    job_watch: Callable[[dict[str, Any], str, Path], JobWatch] | None = None,
    which: Callable[[str], str | None] = shutil.which,
    run: Callable[..., subprocess.CompletedProcess[str]] = subprocess.run,
    wait_timeout_s: float = 3600,
    nodes_timeout_s: float = NODES_TIMEOUT_S,
    unschedulable_s: float = UNSCHEDULABLE_S,
    poll_s: float = 30,
    log: Callable[[str], None] = print,
    interrupt: Callable[[], None] = interrupt_pulumi_children,
    step_times: Callable[[Sequence[int], str], Mapping[int, float]] = planner_step_times,
) -> list[Measurement]:
    """For each node count: set the config, ``up``, watch the job, measure, save; then restore.

    ``select_stack`` defaults to ``pulumi.automation.select_stack`` (the Pulumi CLI and the
    stack's backend); ``prometheus(outputs, namespace)`` yields a :class:`PortForward` (default:
    kubectl port-forward to the in-cluster Prometheus); ``job_watch(outputs, namespace, tmpdir)``
    reads the job's state (default: kubectl). ``destroy`` tears the stack down afterwards
    instead of scaling it back (its ECR repository emptied first); only with it may the sweep
    create a stack that is not deployed, and a stack that was deployed before the sweep is
    destroyed only with ``destroy_existing`` as well.
    ``step_times(nodes, stack_name)`` gives the planner's step time per count (the steps must
    span ``min_scrapes`` scrapes). ``interrupt`` stops the running ``pulumi`` child on a KeyboardInterrupt (default: SIGINT
    to it, :func:`interrupt_pulumi_children`); the clean-up waits for it to exit first.
    """
    from pulumi.automation import ConfigValue

    if not nodes or any(n < 1 for n in nodes):
        raise ValueError(f"nodes: {list(nodes)} must be positive node counts")
    if select_stack is None:
        from pulumi import automation

        select_stack = automation.select_stack
    prometheus = prometheus or kubectl_port_forward
    work = Path(work_dir)
    out_dir = Path(results).parent if results else Path(tempfile.mkdtemp(prefix="scaling-"))
    results_path = Path(results) if results else out_dir / "measured.json"
    stack = select_stack(stack_name=stack_name, work_dir=str(work))
    plan = _stack_plan(stack, stack_name, work)
    check_prerequisites(
        plan,
        nodes=nodes,
        steps=steps,
        warmup_steps=warmup_steps,
        destroy=destroy,
        destroy_existing=destroy_existing,
        step_time_s=step_times(nodes, stack_name),
        min_scrapes=min_scrapes,
        image_tag=_content_tag(work) if plan.repository else None,
        which=which,
        run=run,
    )
    original: dict[str, int] | None = None  # the nodegroup's live size before the sweep
    group: Nodegroup | None = None
    if plan.deployed:
        group = nodegroup_of({k: v.value for k, v in stack.outputs().items()}, plan.group_index)
        original = live_scaling(run, group)
    cost = estimated_cost_usd(nodes, plan.usd_per_node_hour, minutes_per_count)
    log(
        f"sweep {list(nodes)} node(s) of stack {stack_name} ({plan.group_name}, "
        f"${plan.usd_per_node_hour:,.2f}/node-hour): about ${cost:,.0f} at "
        f"{minutes_per_count:.0f} min per count; afterwards the stack is "
        + ("destroyed" if destroy else "scaled back to its original size")
    )
    sweep = sweep_id or format(int(time.time()) % 36**4, "x")[-4:]
    stack_file = StackFile(plan.stack_file, out_dir)
    cd = f"cd {work}"
    recovery_up = [
        cd,
        f"cp {stack_file.backup} {plan.stack_file.name}",
        f"pulumi cancel --stack {stack_name} --yes  # only if the stack is locked",
        f"pulumi up --stack {stack_name} --yes",
    ]
    recovery_destroy = [
        *recovery_up[:3],
        *([empty_repository_command(plan.repository, plan.region)] if plan.repository else []),
        f"pulumi destroy --stack {stack_name} --yes",
    ]
    if group is not None and original is not None:
        recovery_up.insert(1, " ".join(group.scale_command(original)))
    stream = lambda line: log(line.rstrip("\n"))  # noqa: E731  (the CLI's output, as it comes)
    measured: list[Measurement] = []
    ops = PulumiOps(interrupt, log)

    def put(path: str, value: Any) -> None:
        stack.set_config(f"{PROJECT}:{path}", ConfigValue(value=str(value)), path=True)

    try:
        for n in nodes:
            job = job_name_for(plan.base_job, n, sweep)
            t0 = time.monotonic()
            g = f"gpuNodeGroups[{plan.group_index}]"
            put(f"{g}.desiredSize", n)
            put(f"{g}.maxSize", max(n, plan.max_size))
            put("job.name", job)
            put("job.workers", n)
            put("job.minWorkers", n)
            put("job.maxTrainStep", steps)
            log(f"{n} node(s): pulumi up ({job})")
            ops.run(lambda: stack.up(on_output=stream), "up")
            outputs = {k: v.value for k, v in stack.outputs().items()}
            # The nodegroup leaves desiredSize to the operator after creation: scale it here.
            group = group or nodegroup_of(outputs, plan.group_index)
            min_size = min(n, original["minSize"] if original else plan.min_size)
            max_size = max(n, plan.max_size)
            scale_nodegroup(
                run, group, {"minSize": min_size, "maxSize": max_size, "desiredSize": n}, log
            )
            with tempfile.TemporaryDirectory(prefix="scaling-") as tmp:
                watch = (job_watch or _kubectl_watch)(outputs, plan.namespace, Path(tmp))
                wait_for_nodes(
                    run, watch, group, n, timeout_s=nodes_timeout_s, poll_s=poll_s, log=log
                )
                with prometheus(outputs, plan.namespace) as pf:
                    wait_for_job(
                        pf,
                        watch,
                        job,
                        steps,
                        timeout_s=wait_timeout_s,
                        poll_s=poll_s,
                        log=log,
                        unschedulable_s=unschedulable_s,
                    )
                    pf.check()
                    fig = steady_throughput(
                        pf.url,
                        job,
                        warmup_steps=warmup_steps,
                        min_steps=max(1, (steps - warmup_steps) // 2),
                        min_scrapes=min_scrapes,
                    )
            m = _measurement(n, job, time.monotonic() - t0, fig)
            measured.append(m)
            save_results(measured, results_path)
            log(
                f"{n} node(s): {m.tokens_per_s:,.0f} tokens/s (rate over steps {m.first_step}-"
                f"{m.end_step}, {m.window_s:.0f} s, {m.scrapes} scrapes); saved to {results_path}"
            )
    finally:
        recovery = recovery_destroy if destroy else recovery_up
        log(f"clean-up of {stack_name}; if it fails or is interrupted, run:")
        for cmd in recovery:
            log(f"    {cmd}")
        try:
            restored = stack_file.restore()
            log(f"{plan.stack_file.name}: " + ("restored" if restored else "unchanged"))
            if ops.holder is not None:
                log(
                    "waiting for the interrupted pulumi operation to exit (interrupt again to leave)"
                )
            if destroy:
                log(f"pulumi destroy ({stack_name})")

                def tear_down() -> None:
                    if plan.repository:  # ECR refuses to delete a repository with images
                        empty_repository(run, plan.repository, plan.region, log)
                    stack.destroy(on_output=stream)

                _cleanup(
                    tear_down,
                    stack,
                    "destroy",
                    recovery_destroy,
                    log,
                    ops,
                )
            else:
                log(f"scale back ({stack_name}): the nodegroup to {original}, then pulumi up")

                def scale_back() -> None:
                    if group is not None and original is not None:
                        scale_nodegroup(run, group, original, log)  # first: the restored maxSize
                    stack.up(on_output=stream)  # may be below the sweep's largest count

                _cleanup(scale_back, stack, "scale-back", recovery_up, log, ops)
        except KeyboardInterrupt:
            log(f"clean-up of {stack_name} interrupted. GPU nodes may still be running. Run:")
            for cmd in recovery:
                log(f"    {cmd}")
            raise
    return measured


def _kubectl_watch(outputs: dict[str, Any], namespace: str, tmp: Path) -> JobWatch:
    return KubectlJobWatch(_write_kubeconfig(outputs, tmp), namespace)


# --- analysis ------------------------------------------------------------------------------------


def scaling_table(
    measured: Sequence[Measurement],
    predicted: Sequence[dict[str, Any]] = (),
    calibrated: Sequence[dict[str, Any]] = (),
) -> list[dict[str, Any]]:
    """One row per node count: measured tokens/s and efficiency vs the planner's (and, with
    ``calibrated`` from :func:`planner_before_after`, the calibrated planner's tokens/s)."""
    if not measured:
        return []
    base = min(measured, key=lambda m: m.nodes)
    per_node_base = base.tokens_per_s / base.nodes
    pred = {int(p["nodes"]): p for p in predicted}
    after = {int(c["nodes"]): float(c["after"]) for c in calibrated}
    rows = []
    for m in sorted(measured, key=lambda m: m.nodes):
        p = pred.get(m.nodes, {})
        predicted_tps = (
            p["tokens_per_s_per_gpu"] * p["gpus"] if "tokens_per_s_per_gpu" in p else None
        )
        rows.append(
            {
                "nodes": m.nodes,
                "tokens_per_s": m.tokens_per_s,
                "efficiency": m.tokens_per_s / (per_node_base * m.nodes),
                "source": m.source,
                "predicted_tokens_per_s": predicted_tps,
                "predicted_efficiency": p.get("scaling_efficiency"),
                "calibrated_tokens_per_s": after.get(m.nodes),
            }
        )
    return rows


def plot_scaling(
    rows: Sequence[dict[str, Any]], png: str | Path, *, title: str, predicted_label: str = "planner"
) -> Path:
    """Throughput and scaling efficiency vs node count (measured, ideal, planner) as a PNG."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    nodes = [r["nodes"] for r in rows]
    fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(10, 4))
    tps = [r["tokens_per_s"] for r in rows]
    ax1.plot(nodes, tps, "o-", label="measured")
    ax1.plot(nodes, [tps[0] / nodes[0] * n for n in nodes], "k--", label="linear")
    handles, labels = ax1.get_legend_handles_labels()
    if all(r["predicted_tokens_per_s"] is not None for r in rows):
        ax1b = ax1.twinx()
        (line,) = ax1b.plot(
            nodes,
            [r["predicted_tokens_per_s"] for r in rows],
            "s:",
            color="tab:orange",
            label=f"{predicted_label} (right axis)",
        )
        ax1b.set_ylabel(f"{predicted_label} tokens/s", color="tab:orange")
        handles, labels = [*handles, line], [*labels, line.get_label()]
    if rows and all(r.get("calibrated_tokens_per_s") is not None for r in rows):
        # after calibration the prediction is in the measured units: same (left) axis
        (cal,) = ax1.plot(
            nodes,
            [r["calibrated_tokens_per_s"] for r in rows],
            "^-.",
            color="tab:green",
            label=f"{predicted_label}, calibrated",
        )
        handles, labels = [*handles, cal], [*labels, cal.get_label()]
    ax1.set_xlabel("nodes")
    ax1.set_ylabel("tokens/s (job)")
    ax1.set_title("Throughput")
    ax1.legend(handles, labels, loc="upper left")
    ax2.plot(nodes, [r["efficiency"] for r in rows], "o-", label="measured")
    if all(r["predicted_efficiency"] is not None for r in rows):
        ax2.plot(nodes, [r["predicted_efficiency"] for r in rows], "s:", label=predicted_label)
    ax2.axhline(1.0, color="k", ls="--", lw=0.8)
    ax2.set_ylim(0, 1.1)
    ax2.set_xlabel("nodes")
    ax2.set_ylabel("scaling efficiency vs 1 node")
    ax2.set_title("Efficiency")
    ax2.legend()
    for ax in (ax1, ax2):
        ax.set_xticks(nodes)
    fig.suptitle(title)
    fig.tight_layout()
    path = Path(png)
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=100)
    plt.close(fig)
    return path


def to_json(measured: Sequence[Measurement]) -> str:
    """Measurements as JSON (for saving next to the PNG)."""
    return json.dumps([asdict(m) for m in measured], indent=2)
