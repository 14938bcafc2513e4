"""The scaling sweep's cloud mode is safe to run on a real bill.

If this fails, a sweep could leave ``Pulumi.<stack>.yaml`` rewritten (``maxTrainStep: 12``, the
last node count, a job name growing on each re-run), destroy a stack it did not create, keep
paying for idle GPU nodes while a job has failed, cannot pull its image or the port-forward is
dead, lose the counts already measured when a later one fails, leave the stack locked and scaled
up after an interrupt, or report a throughput that is not the steady-state rate of the job.

Mocked, and only these, because none exists here: the Pulumi engine and CLI behind the
Automation API's ``Stack`` (:class:`FakeStack`: like the CLI it rewrites the stack file on
``set_config``, reads it on ``up``, holds a lock during an update, raises the Automation API's
own ``ConcurrentUpdateError`` on a locked stack, and can fail ``up``/``destroy``; an
interrupted update is a ``pulumi`` child process (:data:`FAKE_PULUMI`) that the sweep's own
``interrupt_pulumi_children`` finds and sends SIGINT, and that keeps the lock for seconds
after it (or for good when killed)), EKS with its training operator (each job the sweep
submits, :class:`FakeJobs` in place of the job CLI's cluster backend, starts as a thread that
logs steps at a fixed pace into a real ``PrometheusSink``)
the Kubernetes API server the job watch reads (:meth:`FakeCluster.kube_get` answers with
PyTorchJob, Pod and Node objects shaped like the API's), and the ``aws``/``docker`` CLIs
(:class:`FakeAws`: credentials, the EKS nodegroup's scaling config validated as the EKS API does
and its health issues, ECR's images and tags with the API's error codes, ``docker buildx
version``). Real: Prometheus (Debian's 2.42 on loopback,
started at ``up`` as the cluster's scrapes from pod start, the cluster's scrape rules), the
``rate()`` queries, the port-forward stand-in (a real process, killed to simulate its death),
the stack file on disk, the results file.
"""

from __future__ import annotations

import _thread
import contextlib
import json
import re
import shutil
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
import yaml
from pulumi import automation as auto
from pulumi.automation import OutputValue
from pulumi.automation._cmd import CommandResult

from infra import config as infra_config
from localrun.prometheus import start_local_prometheus, worker_targets
from sweeps.aws import empty_repository_command
from sweeps.cloud import job_name_for, measure_cloud
from sweeps.cluster import JobState, JobWatch, KubectlJobWatch, PortForward
from sweeps.common import Measurement, PrerequisiteError, SweepError, to_json
from sweeps.prerequisites import check_prerequisites, stack_plan
from sweeps.pulumi_ops import CLEANUP_ATTEMPTS
from sweeps.report import scaling_table
from sweeps.stackfile import StackFile
from training.prometheus import PrometheusSink
from workloads.specs.image import content_tag

pytestmark = [pytest.mark.slow, pytest.mark.integration]

ROOT = Path(__file__).resolve().parents[2]
STACK = "p5-16"
BASE_JOB = "llama2-7b-samsum-128gpu"
STEP_S = 0.05
"""Seconds per training step of the fake job (paced, so its average rate is exact)."""
# 60 measured steps x the planner's 1.19 s on p5-16's example job = 71 s >= 3 scrapes x 15 s
STEPS, WARMUP = 65, 5
REPOSITORY = "eks-fsdp-p5-16-training"
"""The stack's ECR repository (``workloads.specs.image.repository_name``)."""
FAKE_PULUMI = """\
import signal
import sys
import time
from pathlib import Path

lock, hold_s, release = Path(sys.argv[1]), float(sys.argv[2]), sys.argv[3] == "release"
inherited = "ignored" if signal.getsignal(signal.SIGINT) == signal.SIG_IGN else "handled"
got = []
# The real CLI is Go: pkg/backend/cancellation_scope.go (pulumi/pulumi, NewScope) calls
# signal.Notify(c.sigint, os.Interrupt, syscall.SIGTERM), and Go's os/signal package: "If the
# program was started with SIGHUP or SIGINT ignored, and Notify is called for either signal, a
# signal handler will be installed for that signal and it will no longer be ignored." Python
# installs no handler for a SIGINT it inherited as ignored, so this stand-in installs its own.
signal.signal(signal.SIGINT, lambda signum, frame: got.append(signum))
print("ready", inherited, flush=True)
deadline = time.monotonic() + 60
while not got and time.monotonic() < deadline:
    time.sleep(0.05)
if not got:
    sys.exit(3)
print("sigint", flush=True)
time.sleep(hold_s)  # the graceful cancel: operations in flight finish, the state is saved
if release:
    lock.unlink()
print("error: update canceled", file=sys.stderr, flush=True)
sys.exit(255)
"""
"""The ``pulumi`` child of an interrupted update: holds the stack's lock until a SIGINT, then
``hold_s`` longer, and releases it (``release``) or dies leaving it (``keep``)."""


def efficiency(n: int) -> float:
    return 0.9 ** (n - 1)


def tokens_per_step(n: int) -> float:
    return 100.0 * n * efficiency(n)


@dataclass
class RunningJob:
    name: str
    workers: int
    steps: int
    sink: PrometheusSink
    prometheus: Any
    phase: str = "Created"
    message: str = ""
    waiting: str = ""
    unschedulable: bool = False
    thread: threading.Thread | None = None


@dataclass
class FakeCluster:
    """EKS + the training operator + the kubelet, for the jobs the sweep submits."""

    tmp: Path
    fail_job: dict[int, int] = field(default_factory=dict)
    """Node count -> step at which that job fails (the operator marks it Failed)."""
    image_pull: set[int] = field(default_factory=set)
    """Node counts whose image cannot be pulled (pods wait in ImagePullBackOff)."""
    unschedulable: set[int] = field(default_factory=set)
    """Node counts whose pods the scheduler cannot place (no EFA device advertised)."""
    capacity: int | None = None
    """Instances EC2 can launch for the nodegroup (None: as many as asked)."""
    aws: Any = None
    """The fake AWS whose nodegroup size decides how many nodes are Ready."""
    jobs: dict[str, RunningJob] = field(default_factory=dict)
    current: str = ""

    def ready_nodes(self) -> int:
        desired = self.aws.scaling["desiredSize"] if self.aws else 0
        return desired if self.capacity is None else min(desired, self.capacity)

    def apply(self, job: str, workers: int, steps: int) -> None:
        if job in self.jobs or not job:
            self.current = job
            return
        sink = PrometheusSink(0, addr="127.0.0.1", env={"RANK": "0"})
        prom = start_local_prometheus(worker_targets(job, [sink.port]), self.tmp / job)
        run = RunningJob(job, workers, steps, sink, prom)
        self.jobs[job] = run
        self.current = job
        if workers in self.image_pull:
            run.waiting = "ImagePullBackOff"
            return
        if workers in self.unschedulable:
            run.unschedulable = True
            return
        # The pod starts and Prometheus discovers and scrapes it before the first step (on the
        # cluster, model loading takes far longer than a scrape interval).
        prom.wait_for(f'eksfsdp_steps_total{{training_job="{job}"}}', timeout=60)
        run.thread = threading.Thread(target=self._train, args=(run,), daemon=True)
        run.thread.start()

    def _train(self, run: RunningJob) -> None:
        run.phase = "Running"
        t0 = time.monotonic()
        for step in range(1, run.steps + 1):
            if self.fail_job.get(run.workers) == step:
                run.phase, run.message = "Failed", f"worker-0 exited with code 1 at step {step}"
                run.sink.close()
                return
            time.sleep(max(0.0, t0 + step * STEP_S - time.monotonic()))
            run.sink.log({"tokens": tokens_per_step(run.workers), "loss": 1.0}, step)
        time.sleep(0.75)  # a final save: scraped (3 scrapes at 250 ms), no tokens
        run.phase = "Succeeded"
        run.sink.close()  # the pod ends: its target goes away

    def kube_get(self, kind: str, *args: str) -> dict[str, Any]:
        """``kubectl get ... -o json`` as the API server would answer it."""
        if kind == "nodes":
            assert args == ("-l", "eks.amazonaws.com/nodegroup=p5-block-ng"), args
            ready = {"type": "Ready", "status": "True"}
            return {
                "items": [
                    {"metadata": {"name": f"ip-10-0-0-{i}"}, "status": {"conditions": [ready]}}
                    for i in range(self.ready_nodes())
                ]
            }
        if kind == "pods":
            job = args[1].split("=", 1)[1]
            run = self.jobs.get(job)
            if run is None:
                return {"items": []}
            if run.unschedulable:
                cond = {
                    "type": "PodScheduled",
                    "status": "False",
                    "reason": "Unschedulable",
                    "message": "0/3 nodes are available: 3 Insufficient vpc.amazonaws.com/efa.",
                }
                return {
                    "items": [
                        {
                            "metadata": {"name": f"{job}-worker-{i}"},
                            "status": {"phase": "Pending", "conditions": [cond]},
                        }
                        for i in range(run.workers)
                    ]
                }
            waiting = {"reason": run.waiting, "message": "Back-off pulling image"}
            state = {"waiting": waiting} if run.waiting else {"running": {}}
            pods = [
                {
                    "metadata": {"name": f"{job}-worker-{i}"},
                    "status": {"containerStatuses": [{"name": "pytorch", "state": state}]},
                }
                for i in range(run.workers)
            ]
            return {"items": pods}
        assert kind == "pytorchjob"
        run = self.jobs.get(args[0])
        if run is None:
            raise OSError(f'pytorchjobs.kubeflow.org "{args[0]}" not found')
        if run.phase != "Failed":
            order = ["Created", "Running", "Succeeded"]
            conds = [{"type": t, "status": "True"} for t in order[: order.index(run.phase) + 1]]
        else:
            conds = [
                {"type": "Created", "status": "True"},
                {"type": "Running", "status": "False"},
                {"type": "Failed", "status": "True", "message": run.message},
            ]
        return {"kind": "PyTorchJob", "status": {"conditions": conds}}

    def close(self) -> None:
        for run in self.jobs.values():
            if run.thread is not None:
                run.thread.join(timeout=30)
            run.sink.close()
            run.prometheus.stop()


def locked(lock: Path) -> auto.ConcurrentUpdateError:
    """The Automation API's own error for a locked stack (``pulumi/automation/errors.py``),
    with the self-managed backend's message."""
    text = f"error: the stack is currently locked by 1 lock(s): {lock}"
    return auto.ConcurrentUpdateError(CommandResult("", text, 255))


@dataclass
class FakeAws:
    """The ``aws`` CLI calls the sweep makes (no AWS here): credentials, and the EKS managed
    nodegroup's scaling config, validated as the EKS API does (min <= desired <= max)."""

    calls: list[str]
    scaling: dict[str, int] = field(
        default_factory=lambda: {"minSize": 0, "maxSize": 16, "desiredSize": 16}
    )
    credentials: bool = True
    health_issues: list[dict[str, Any]] = field(default_factory=list)
    """``nodegroup.health.issues`` of describe-nodegroup."""
    ecr: dict[str, set[str]] = field(default_factory=lambda: {REPOSITORY: {"sha256:" + "a" * 64}})
    """ECR: repository -> image digests (the stack's pushed training image)."""
    tags: dict[str, set[str]] = field(default_factory=lambda: {REPOSITORY: {content_tag()}})
    """ECR: repository -> tags (by default the image the program would build is pushed)."""
    buildx: bool = True
    """``docker buildx version`` works."""

    def __call__(self, cmd: list[str], **_kw: Any) -> subprocess.CompletedProcess[str]:
        def done(out: Any = None, rc: int = 0, err: str = "") -> subprocess.CompletedProcess[str]:
            return subprocess.CompletedProcess(cmd, rc, json.dumps(out or {}), err)

        if cmd[0] == "docker":
            assert cmd[1:] == ["buildx", "version"], cmd
            if self.buildx:
                return subprocess.CompletedProcess(cmd, 0, "github.com/docker/buildx v0.17.1", "")
            return subprocess.CompletedProcess(cmd, 1, "", "docker: 'buildx' is not a command.")
        assert cmd[0] == "aws" and cmd[-2:] == ["--output", "json"], cmd
        if cmd[1:3] == ["sts", "get-caller-identity"]:
            return (
                done({"Account": "123456789012"})
                if self.credentials
                else done(rc=255, err="An error occurred (ExpiredToken)")
            )
        if cmd[1] == "ecr":
            return self._ecr(cmd, done)
        assert cmd[1] == "eks" and cmd[cmd.index("--cluster-name") + 1] == "eks-fsdp-p5"
        assert cmd[cmd.index("--nodegroup-name") + 1] == "p5-block-ng"
        if cmd[2] == "describe-nodegroup":
            return done(
                {
                    "nodegroup": {
                        "scalingConfig": dict(self.scaling),
                        "health": {"issues": list(self.health_issues)},
                    }
                }
            )
        if cmd[2] == "update-nodegroup-config":
            pairs = (kv.split("=") for kv in cmd[cmd.index("--scaling-config") + 1].split(","))
            new = {k: int(v) for k, v in pairs}
            if not new["minSize"] <= new["desiredSize"] <= new["maxSize"]:
                return done(rc=254, err=f"InvalidParameterException: {new}")
            self.scaling = new
            self.calls.append(f"aws scale {new['desiredSize']}")
            return done({"update": {"status": "InProgress"}})
        assert cmd[2:4] == ["wait", "nodegroup-active"], cmd
        return done()

    def _ecr(self, cmd: list[str], done: Any) -> subprocess.CompletedProcess[str]:
        """``list-images`` / ``batch-delete-image`` as the ECR API answers them."""
        repo = cmd[cmd.index("--repository-name") + 1]
        assert cmd[cmd.index("--region") + 1] == "us-east-2"
        if repo not in self.ecr:
            return done(rc=254, err=f"An error occurred (RepositoryNotFoundException): {repo}")
        if cmd[2] == "describe-images":
            tag = cmd[cmd.index("--image-ids") + 1].removeprefix("imageTag=")
            if tag not in self.tags.get(repo, set()):
                return done(rc=254, err=f"An error occurred (ImageNotFoundException): {tag}")
            return done({"imageDetails": [{"imageTags": [tag]}]})
        if cmd[2] == "list-images":
            return done({"imageIds": [{"imageDigest": d} for d in sorted(self.ecr[repo])]})
        assert cmd[2] == "batch-delete-image", cmd
        ids = cmd[cmd.index("--image-ids") + 1 : cmd.index("--output")]
        assert 0 < len(ids) <= 100
        deleted = [i.removeprefix("imageDigest=") for i in ids]
        self.ecr[repo] -= set(deleted)
        self.calls.append(f"aws ecr delete {len(deleted)}")
        return done({"imageIds": [{"imageDigest": d} for d in deleted], "failures": []})


@dataclass
class FakeStack:
    """The Automation API ``Stack`` the sweep uses, behaving like the CLI over a work dir."""

    work: Path
    cluster: FakeCluster
    deployed: bool = True
    fail_ups_from: int | None = None
    """Every ``up`` from this one (1-based) on fails (no capacity)."""
    interrupt_up: int | None = None
    """Up number during which the user interrupts the sweep (KeyboardInterrupt in the main
    thread) while the ``pulumi`` child holds the lock."""
    holds_after_sigint_s: float = 3.0
    """How long the interrupted child keeps the lock after its SIGINT (a graceful cancel)."""
    killed: bool = False
    """The interrupted child dies without releasing the lock (the self-managed backend's lock
    file stays): only then, once it has exited, may the sweep cancel."""
    sigint: threading.Event = field(default_factory=threading.Event)
    """Set when the interrupted update's ``pulumi`` child has received the sweep's SIGINT."""
    cli_sigint: str = ""
    """How the ``pulumi`` child found SIGINT when it started: ``ignored`` (it is started so,
    the worst case) or ``handled``."""
    updating: threading.Event = field(default_factory=threading.Event)
    overlaps: list[str] = field(default_factory=list)
    """Calls made while the interrupted update still ran (must stay empty)."""
    destroy_failures: int = 0
    results: Path | None = None
    calls: list[str] = field(default_factory=list)
    job_calls: list[str] = field(default_factory=list)
    """What the sweep asked of the job CLI (``submit NAME N STEPS``, ``delete NAME``)."""
    ups: list[dict[str, Any]] = field(default_factory=list)
    results_at_up: list[int] = field(default_factory=list)
    aws: FakeAws = field(init=False)

    def __post_init__(self) -> None:
        self.aws = FakeAws(self.calls)
        self.cluster.aws = self.aws

    @property
    def file(self) -> Path:
        return self.work / f"Pulumi.{STACK}.yaml"

    @property
    def lock(self) -> Path:
        return self.work / ".pulumi" / "locks" / f"{STACK}.json"

    def set_config(self, key: str, value: Any, *, path: bool = False) -> None:
        assert path and key.startswith("eks-fsdp:")
        self.calls.append(f"set {key.removeprefix('eks-fsdp:')}={value.value}")
        data = yaml.safe_load(self.file.read_text())
        parts = re.findall(r"[^.\[\]]+|\[\d+\]", key)
        node: Any = data["config"]
        head = parts[0]
        node = node[head]
        for part in parts[1:-1]:
            node = node[int(part[1:-1])] if part.startswith("[") else node[part]
        last = parts[-1]
        node[int(last[1:-1]) if last.startswith("[") else last] = value.value
        self.file.write_text(yaml.safe_dump(data, sort_keys=False))  # the CLI reformats

    def _locked_op(self, name: str) -> None:
        if self.updating.is_set():
            self.overlaps.append(name)
        if self.lock.exists():
            raise locked(self.lock)
        self.lock.parent.mkdir(parents=True, exist_ok=True)
        self.lock.write_text(name)

    def up(self, on_output: Any = None) -> None:
        self.calls.append("up")
        n_up = self.calls.count("up")
        self._locked_op("up")
        if self.fail_ups_from is not None and n_up >= self.fail_ups_from:
            self.lock.unlink()
            raise RuntimeError("error: update failed: InsufficientInstanceCapacity")
        if self.results is not None:
            text = self.results.read_text() if self.results.exists() else "[]"
            self.results_at_up.append(len(json.loads(text)))
        cfg = infra_config.load_stack_file(STACK, root=self.work)  # the program reads the file
        assert not hasattr(cfg, "job")  # the stack declares no job: the sweep submits them
        self.ups.append(infra_config.stack_file_values(STACK, root=self.work))
        if on_output:
            on_output(f"Updating ({STACK}): {cfg.cluster_name}\n")
        if n_up == self.interrupt_up:
            self.updating.set()
            try:
                self._interrupted_update()
            finally:
                self.updating.clear()
            raise auto.CommandError(CommandResult("", "error: update canceled", 255))
        self.deployed = True
        self.lock.unlink()

    def destroy(self, on_output: Any = None, exclude_protected: bool = False) -> None:
        self.calls.append("destroy")
        self._locked_op("destroy")
        self.lock.unlink()
        if not exclude_protected:  # the stack's data bucket is protected (infra/data_bucket.py)
            raise RuntimeError(
                "error: resource urn:pulumi:...:aws:s3/bucket:Bucket::data cannot be deleted"
                " because it is protected"
            )
        if self.aws.ecr.get(REPOSITORY):  # aws.ecr.Repository(force_delete=False)
            raise RuntimeError(
                "error: deleting ECR Repository: RepositoryNotEmptyException: The repository "
                f"with name '{REPOSITORY}' cannot be deleted because it still contains images"
            )
        if self.destroy_failures > 0:
            self.destroy_failures -= 1
            raise RuntimeError("error: deleting VPC: DependencyViolation")
        self.deployed = False

    def _interrupted_update(self) -> None:
        """Ctrl-C reaches the sweep, not the CLI: the update goes on holding the lock until the
        sweep sends its ``pulumi`` child SIGINT, and a little longer while it cancels
        gracefully. The child is run as the Automation API runs the CLI (``subprocess.Popen``
        of ``pulumi``, ``pulumi/automation/_cmd.py``), with SIGINT ignored from its start, as
        it inherits it from a process started with SIGINT ignored."""
        cli = self.work.parent / "bin" / "pulumi"  # named so that ``pgrep -x pulumi`` finds it
        cli.parent.mkdir(exist_ok=True)
        cli.write_text(f"#!{sys.executable}\n{FAKE_PULUMI}")
        cli.chmod(0o755)
        mode = "keep" if self.killed else "release"
        hold = str(self.holds_after_sigint_s)
        with subprocess.Popen(
            ["sh", "-c", 'trap "" INT; exec "$0" "$@"', str(cli), str(self.lock), hold, mode],
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
            text=True,
        ) as child:
            assert child.stdout is not None
            ready, self.cli_sigint = child.stdout.readline().split()
            assert ready == "ready"
            _thread.interrupt_main()  # the user's Ctrl-C, in the sweep's process
            if child.stdout.readline() == "sigint\n":
                self.calls.append("sigint")
                self.sigint.set()
        assert self.sigint.is_set(), "the sweep never stopped the pulumi child"

    def cancel(self) -> None:
        self.calls.append("cancel")
        if self.updating.is_set():
            self.overlaps.append("cancel")
        self.lock.unlink(missing_ok=True)

    def outputs(self) -> dict[str, OutputValue]:
        if not self.deployed:
            return {}
        return {
            "kubeconfig": OutputValue(value="{}", secret=True),
            "observability": OutputValue(value={"namespace": "monitoring"}, secret=False),
            "clusterName": OutputValue(value="eks-fsdp-p5", secret=False),
            "region": OutputValue(value="us-east-2", secret=False),
            "gpuNodeGroupNames": OutputValue(value=["p5-block-ng"], secret=False),
        }

    @property
    def pulumi_calls(self) -> list[str]:
        return [c for c in self.calls if not c.startswith("aws ")]


@pytest.fixture
def work(tmp_path: Path) -> Path:
    w = tmp_path / "repo"
    w.mkdir()
    for name in ("Pulumi.yaml", f"Pulumi.{STACK}.yaml", "Pulumi.dev.yaml"):
        shutil.copy2(ROOT / name, w / name)
    (w / "jobs" / "examples").mkdir(parents=True)
    shutil.copy2(ROOT / "jobs" / "examples" / f"{STACK}.yaml", w / "jobs" / "examples")
    return w


@dataclass
class FakeJobs:
    """``eks-fsdp jobs``' cluster backend as the sweep uses it: a submitted job starts on the
    fake cluster; a deleted one is recorded."""

    cluster: FakeCluster
    calls: list[str]
    plan: Any

    def submit(self, name: str, workers: int, steps: int) -> None:
        assert self.plan.job_file.name == f"{STACK}.yaml" and self.plan.namespace == "default"
        self.calls.append(f"submit {name} {workers} {steps}")
        self.cluster.apply(name, workers, steps)

    def delete(self, name: str) -> None:
        self.calls.append(f"delete {name}")


@pytest.fixture
def kernel_sigint() -> Iterator[None]:
    """Ctrl-C reaches the sweep as it does in the notebook: Python's KeyboardInterrupt handler
    installed for the test, as ipykernel installs it before each cell whatever the kernel
    inherited (``Kernel.pre_handler_hook``: ``signal(SIGINT, default_int_handler)``,
    ``ipykernel/kernelbase.py``). A pytest started with SIGINT ignored (``nohup``, a background
    job of a non-interactive shell, some CI runners) has no such handler (Python installs it
    only when SIGINT is not ignored at start), and ``_thread.interrupt_main()`` then does
    nothing."""
    previous = signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, previous)


@pytest.fixture
def cluster(tmp_path: Path) -> Iterator[FakeCluster]:
    c = FakeCluster(tmp_path / "cluster")
    yield c
    c.close()


@dataclass
class Forwards:
    """The port-forward stand-ins: real processes, killed on request."""

    cluster: FakeCluster
    kill_for: set[str] = field(default_factory=set)
    procs: list[subprocess.Popen[bytes]] = field(default_factory=list)

    @contextlib.contextmanager
    def __call__(self, outputs: dict[str, Any], namespace: str) -> Iterator[PortForward]:
        assert outputs["kubeconfig"] == "{}" and namespace == "default"
        proc = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)"])
        self.procs.append(proc)
        run = self.cluster.jobs[self.cluster.current]
        if run.name in self.kill_for:
            proc.kill()  # the forward dies (pod rescheduled, network blip)
            proc.wait()
        try:
            yield PortForward(run.prometheus.url, proc)
        finally:
            if proc.poll() is None:
                proc.kill()
                proc.wait()


def sweep(
    stack: FakeStack, forwards: Forwards, nodes: list[int], lines: list[str], **kw: Any
) -> list[Measurement]:
    def watch(outputs: dict[str, Any], ns: str, tmp: Path) -> JobWatch:
        return KubectlJobWatch(tmp / "kubeconfig", ns, get=stack.cluster.kube_get)

    options: dict[str, Any] = {
        "stack_name": STACK,
        "work_dir": stack.work,
        "steps": STEPS,
        "warmup_steps": WARMUP,
        "min_scrapes": 3,
        "sweep_id": "t1",
        "results": stack.results,
        "select_stack": lambda **_kw: stack,
        "prometheus": forwards,
        "job_watch": watch,
        "which": lambda tool: f"/usr/bin/{tool}",
        "run": stack.aws,
        "wait_timeout_s": 600,
        "poll_s": 0.3,
        "log": lines.append,
        "jobs": lambda outputs, plan: FakeJobs(stack.cluster, stack.job_calls, plan),
        **kw,
    }
    return measure_cloud(nodes, **options)


def _original(work: Path) -> tuple[bytes, dict[str, Any]]:
    return (
        (work / f"Pulumi.{STACK}.yaml").read_bytes(),
        infra_config.stack_file_values(STACK, root=work),
    )


@pytest.mark.prometheus
def test_sweep_measures_saves_each_count_restores_and_scales_back(
    work: Path, cluster: FakeCluster, tmp_path: Path
) -> None:
    raw, values = _original(work)
    stack = FakeStack(work, cluster, results=tmp_path / "out" / "measured.json")
    lines: list[str] = []
    measured = sweep(stack, Forwards(cluster), [1, 2, 4], lines)

    assert [m.nodes for m in measured] == [1, 2, 4]
    for m in measured:
        assert m.job == f"{BASE_JOB}-{m.nodes}n-t1" and m.source == "prometheus"
        # rate() over the steady state: the paced job's rate, warm-up and the final save out.
        assert m.tokens_per_s == pytest.approx(tokens_per_step(m.nodes) / STEP_S, rel=0.1), m
        assert m.tokens_measured / m.steps_measured == pytest.approx(tokens_per_step(m.nodes))
        assert m.first_step >= WARMUP and m.steps == STEPS and m.scrapes >= 3
    rows = scaling_table(measured)
    for r, n in zip(rows, [1, 2, 4], strict=True):
        assert r["efficiency"] == pytest.approx(efficiency(n), rel=0.1)
    assert stack.calls[:4] == [
        "set gpuNodeGroups[0].desiredSize=1",
        "set gpuNodeGroups[0].maxSize=16",
        "up",
        "aws scale 1",  # the nodegroup ignores desiredSize after creation: the EKS API scales
    ]
    # The stack declares no job: each count's job is the job file, submitted once its nodes
    # are Ready, and deleted once measured (the stack file never names a job).
    assert stack.job_calls == [
        c
        for n in (1, 2, 4)
        for c in (f"submit {BASE_JOB}-{n}n-t1 {n} {STEPS}", f"delete {BASE_JOB}-{n}n-t1")
    ]
    assert not any(c.startswith("set job") for c in stack.calls)
    # The nodegroup back to its live size first (the restored maxSize may be below the largest
    # count), then the up that restores the config.
    assert stack.calls[-2:] == ["aws scale 16", "up"]
    assert stack.aws.scaling == {"minSize": 0, "maxSize": 16, "desiredSize": 16}
    # Saved as soon as measured: each up saw the counts measured before it.
    assert stack.results_at_up == [0, 1, 2, 3]
    assert stack.results is not None
    assert json.loads(stack.results.read_text()) == [json.loads(to_json([m]))[0] for m in measured]
    # Afterwards: the file byte for byte, one more up with the original config, no destroy.
    assert (work / f"Pulumi.{STACK}.yaml").read_bytes() == raw
    assert stack.calls.count("up") == 4 and "destroy" not in stack.calls
    assert [c for c in stack.calls if c.startswith("aws")] == [
        "aws scale 1",
        "aws scale 2",
        "aws scale 4",
        "aws scale 16",
    ]
    assert stack.ups[-1] == values and stack.ups[-1]["gpuNodeGroups"][0]["desiredSize"] == 16
    assert any("scaled back to its original size" in line for line in lines)
    assert any(line.startswith("Updating (p5-16)") for line in lines)  # up's output streamed

    # A second sweep derives its names from the original again (no "-1n-t1-1n-t1").
    stack2 = FakeStack(work, cluster)
    assert sweep(stack2, Forwards(cluster), [1], [], sweep_id="t2")[0].job == f"{BASE_JOB}-1n-t2"


@pytest.mark.prometheus
def test_a_failed_job_stops_the_sweep_and_keeps_what_was_measured(
    work: Path, cluster: FakeCluster, tmp_path: Path
) -> None:
    raw, values = _original(work)
    cluster.fail_job = {2: 12}
    stack = FakeStack(work, cluster, results=tmp_path / "measured.json")
    with pytest.raises(SweepError, match=r"job .*-2n-t1: Failed: worker-0 exited"):
        sweep(stack, Forwards(cluster), [1, 2, 4], [])
    assert stack.results is not None
    assert [m["nodes"] for m in json.loads(stack.results.read_text())] == [1]
    assert stack.calls.count("up") == 3  # 1, 2, then the scale-back; 4 never started
    assert (work / f"Pulumi.{STACK}.yaml").read_bytes() == raw and stack.ups[-1] == values
    # the failed job is deleted in the clean-up (its nodes are scaled back anyway)
    assert stack.job_calls[-2:] == [
        f"submit {BASE_JOB}-2n-t1 2 {STEPS}",
        f"delete {BASE_JOB}-2n-t1",
    ]


@pytest.mark.prometheus
def test_an_image_pull_error_stops_the_sweep_at_once(work: Path, cluster: FakeCluster) -> None:
    raw, _ = _original(work)
    cluster.image_pull = {1}
    stack = FakeStack(work, cluster)
    with pytest.raises(SweepError, match=r"ImagePullBackOff: .*-1n-t1-worker-0"):
        sweep(stack, Forwards(cluster), [1, 2], [], wait_timeout_s=3600)
    assert stack.calls.count("up") == 2 and (work / f"Pulumi.{STACK}.yaml").read_bytes() == raw


@pytest.mark.prometheus
def test_a_dead_port_forward_stops_the_sweep(work: Path, cluster: FakeCluster) -> None:
    stack = FakeStack(work, cluster)
    forwards = Forwards(cluster, kill_for={f"{BASE_JOB}-1n-t1"})
    with pytest.raises(SweepError, match=r"port-forward to Prometheus exited"):
        sweep(stack, forwards, [1], [], wait_timeout_s=3600)
    assert stack.calls[-2:] == ["aws scale 16", "up"]  # scaled back


@pytest.mark.prometheus
@pytest.mark.usefixtures("kernel_sigint")
def test_an_interrupt_waits_for_the_update_to_release_its_lock_then_scales_back(
    work: Path, cluster: FakeCluster, tmp_path: Path
) -> None:
    """Ctrl-C during up #2: the ``pulumi`` child keeps the lock for seconds after its SIGINT.
    The sweep must neither cancel nor start another up while it lives, and prints the recovery
    commands before its clean-up. Its SIGINT reaches a child that started with SIGINT ignored
    (and re-enabled it, as the Go CLI does): the sweep relies on no inherited disposition."""
    raw, values = _original(work)
    stack = FakeStack(work, cluster, interrupt_up=2, results=tmp_path / "measured.json")
    lines: list[str] = []
    with pytest.raises(KeyboardInterrupt):
        sweep(stack, Forwards(cluster), [1, 2], lines)
    assert stack.cli_sigint == "ignored" and stack.sigint.is_set()
    assert stack.overlaps == []
    assert "cancel" not in stack.calls
    assert stack.pulumi_calls[-2:] == ["sigint", "up"] and not stack.lock.exists()
    assert (work / f"Pulumi.{STACK}.yaml").read_bytes() == raw
    assert stack.aws.scaling["desiredSize"] == 16
    assert stack.ups[-1] == values
    assert stack.results is not None
    assert [m["nodes"] for m in json.loads(stack.results.read_text())] == [1]
    first_cmd = lines.index(f"    pulumi up --stack {STACK} --yes")
    assert first_cmd < lines.index(
        f"scale back ({STACK}): the nodegroup to "
        "{'minSize': 0, 'maxSize': 16, 'desiredSize': 16}, then pulumi up"
    )


@pytest.mark.prometheus
@pytest.mark.usefixtures("kernel_sigint")
def test_a_lock_left_by_the_interrupted_update_is_cancelled_only_after_it_exited(
    work: Path, cluster: FakeCluster
) -> None:
    """The interrupted child dies without releasing the lock: once it has exited (never
    before), the lock is its own, and cancelling it is safe."""
    stack = FakeStack(work, cluster, interrupt_up=2, killed=True, holds_after_sigint_s=1.0)
    lines: list[str] = []
    with pytest.raises(KeyboardInterrupt):
        sweep(stack, Forwards(cluster), [1, 2], lines)
    assert stack.overlaps == []
    # up #3 met the lock (ConcurrentUpdateError), the sweep cancelled it, up #4 scaled back
    assert stack.pulumi_calls[-4:] == ["sigint", "up", "cancel", "up"]
    assert not stack.lock.exists() and stack.aws.scaling["desiredSize"] == 16


@pytest.mark.prometheus
def test_a_lock_the_sweep_did_not_take_is_never_cancelled(work: Path, cluster: FakeCluster) -> None:
    """Someone else's update holds the stack (Pulumi Cloud: "[409] Conflict"): no cancel, the
    recovery commands instead."""
    stack = FakeStack(work, cluster, results=None)
    lines: list[str] = []
    real_up = stack.up

    def up_then_someone_locks(on_output: Any = None) -> None:
        real_up(on_output)
        stack.lock.parent.mkdir(parents=True, exist_ok=True)
        stack.lock.write_text("a colleague's update")

    stack.up = up_then_someone_locks  # type: ignore[method-assign]
    with pytest.raises(SweepError, match=r"^scale-back failed"):
        sweep(stack, Forwards(cluster), [1], lines)
    assert "cancel" not in stack.calls and stack.calls.count("up") == 2
    assert "the stack is locked by an update the sweep did not start: not cancelled" in lines


@pytest.mark.prometheus
@pytest.mark.usefixtures("kernel_sigint")
def test_a_second_interrupt_prints_the_recovery_again_and_leaves(
    work: Path, cluster: FakeCluster
) -> None:
    """Ctrl-C, then Ctrl-C again while the sweep waits for the update: the recovery commands
    are printed again and the interrupt propagates; nothing is cancelled."""
    stack = FakeStack(work, cluster, interrupt_up=2, holds_after_sigint_s=10.0)
    lines: list[str] = []
    waiting = "waiting for the interrupted pulumi operation to exit (interrupt again to leave)"

    def press_again() -> None:
        while waiting not in lines:
            time.sleep(0.1)
        _thread.interrupt_main()

    second = threading.Thread(target=press_again, daemon=True)
    second.start()
    with pytest.raises(KeyboardInterrupt):
        sweep(stack, Forwards(cluster), [1, 2], lines)
    second.join()
    assert stack.sigint.wait(timeout=30)  # the child's word that it got the SIGINT
    assert "cancel" not in stack.calls and stack.pulumi_calls[-1] == "sigint"
    assert lines.count(f"    pulumi up --stack {STACK} --yes") == 2
    assert any(line.startswith(f"clean-up of {STACK} interrupted") for line in lines)


@pytest.mark.prometheus
def test_destroy_empties_the_repository_retries_and_prints_the_recovery(
    work: Path, cluster: FakeCluster, tmp_path: Path
) -> None:
    """The stack's ECR repository holds the pushed image: destroy empties it first (ECR
    refuses to delete a repository with images), retries, and prints the recovery."""
    raw, _ = _original(work)
    stack = FakeStack(work, cluster, deployed=False, destroy_failures=2, results=tmp_path / "m")
    lines: list[str] = []
    sweep(stack, Forwards(cluster), [1], lines, destroy=True)
    assert stack.calls.count("destroy") == 3 and stack.calls.count("up") == 1
    assert stack.calls.index("aws ecr delete 1") < stack.calls.index("destroy")
    assert stack.aws.ecr[REPOSITORY] == set() and not stack.deployed
    assert (work / f"Pulumi.{STACK}.yaml").read_bytes() == raw

    stack = FakeStack(work, cluster, deployed=False, destroy_failures=99, results=tmp_path / "2")
    lines = []
    with pytest.raises(SweepError, match=r"^destroy failed"):
        sweep(stack, Forwards(cluster), [1], lines, destroy=True, sweep_id="t3")
    assert stack.calls.count("destroy") == CLEANUP_ATTEMPTS
    backup = tmp_path / f"Pulumi.{STACK}.yaml.orig"
    assert backup.read_bytes() == raw
    assert f"    cd {work}" in lines
    assert f"    cp {backup} Pulumi.{STACK}.yaml" in lines
    empty = f"    {empty_repository_command(REPOSITORY, 'us-east-2')}"
    destroy = f"    pulumi destroy --stack {STACK} --yes --exclude-protected"
    assert empty in lines and lines.index(empty) < lines.index(destroy)


@pytest.mark.prometheus
def test_without_emptying_the_repository_destroy_never_succeeds(
    work: Path, cluster: FakeCluster
) -> None:
    """What the fake ECR proves: a destroy that does not empty the repository fails every try
    (``force_delete=False``)."""
    stack = FakeStack(work, cluster, deployed=False)
    with pytest.raises(SweepError, match=r"RepositoryNotEmptyException"):
        sweep(stack, Forwards(cluster), [1], [], destroy=True, run=_no_ecr(stack.aws))
    assert stack.calls.count("destroy") == CLEANUP_ATTEMPTS and stack.deployed


def _no_ecr(aws: FakeAws) -> Any:
    def run(cmd: list[str], **kw: Any) -> subprocess.CompletedProcess[str]:
        if cmd[1] == "ecr":  # as if the sweep skipped it: pretend the repository is absent
            return subprocess.CompletedProcess(cmd, 254, "", "RepositoryNotFoundException")
        return aws(cmd, **kw)

    return run


@pytest.mark.prometheus
def test_destroy_of_a_stack_the_sweep_did_not_create_needs_its_own_opt_in(
    work: Path, cluster: FakeCluster
) -> None:
    """A deployed stack with destroy=True alone: refused before the first up; with
    destroy_existing=True as well it is torn down."""
    stack = FakeStack(work, cluster)
    with pytest.raises(PrerequisiteError, match=r"pass destroy_existing=True too"):
        sweep(stack, Forwards(cluster), [1], [], destroy=True)
    assert "up" not in stack.calls and stack.deployed
    sweep(stack, Forwards(cluster), [1], [], destroy=True, destroy_existing=True)
    assert stack.calls.count("destroy") == 1 and not stack.deployed


@pytest.mark.prometheus
def test_a_failing_scale_back_prints_the_exact_recovery(
    work: Path, cluster: FakeCluster, tmp_path: Path
) -> None:
    stack = FakeStack(work, cluster, fail_ups_from=2, results=tmp_path / "m.json")
    lines: list[str] = []
    with pytest.raises(SweepError, match=r"^scale-back failed"):
        sweep(stack, Forwards(cluster), [1], lines)
    assert stack.calls.count("up") == 1 + CLEANUP_ATTEMPTS
    assert f"    pulumi up --stack {STACK} --yes" in lines
    assert (
        "    aws eks update-nodegroup-config --cluster-name eks-fsdp-p5 --nodegroup-name "
        "p5-block-ng --region us-east-2 --scaling-config minSize=0,maxSize=16,desiredSize=16"
    ) in lines


@pytest.mark.parametrize(
    ("kw", "message"),
    [
        ({"which": lambda t: None if t == "kubectl" else f"/bin/{t}"}, "not on PATH: kubectl"),
        ({"credentials": False}, "no AWS credentials"),
        ({"steps": 12}, "steps 12: need >= warmup_steps + 10"),
        ({"deployed": False}, "stack is not deployed"),
        # 15 measured steps x the planner's step time on p5 (1.19 s for p5-16's example job at
        # one node) = 18 s < 3 scrapes x 15 s; <S> stands for the planner's figure
        ({"steps": 20}, "steps 20: 15 measured steps x <S> s (the planner's step time at 1"),
        ({"buildx": False, "pushed": False}, "is not in ECR, so pulumi up builds it, but docker"),
    ],
)
@pytest.mark.prometheus
def test_prerequisites_stop_before_the_first_up(
    work: Path, cluster: FakeCluster, kw: dict[str, Any], message: str
) -> None:
    raw, _ = _original(work)
    stack = FakeStack(work, cluster, deployed=kw.pop("deployed", True))
    stack.aws.credentials = kw.pop("credentials", True)
    stack.aws.buildx = kw.pop("buildx", True)
    if not kw.pop("pushed", True):
        stack.aws.tags = {}
    pattern = re.escape(message).replace("<S>", r"\d+\.\d\d")
    with pytest.raises(PrerequisiteError, match=pattern):
        sweep(stack, Forwards(cluster), [1], [], **kw)
    assert "up" not in stack.calls and not cluster.jobs
    assert (work / f"Pulumi.{STACK}.yaml").read_bytes() == raw


@pytest.mark.prometheus
def test_a_stack_without_observability_is_refused(work: Path, cluster: FakeCluster) -> None:
    text = (work / f"Pulumi.{STACK}.yaml").read_text()
    (work / f"Pulumi.{STACK}.yaml").write_text(
        text.replace(
            "eks-fsdp:observability:\n    enabled: true",
            "eks-fsdp:observability:\n    enabled: false",
        )
    )
    stack = FakeStack(work, cluster)
    with pytest.raises(PrerequisiteError, match=r"observability off"):
        sweep(stack, Forwards(cluster), [1], [])
    assert "up" not in stack.calls


def test_bad_node_counts_stop_before_pulumi() -> None:
    with pytest.raises(ValueError, match=r"^nodes: \[0\]"):
        measure_cloud([0], stack_name="x", select_stack=lambda **kw: pytest.fail("called"))


def test_job_names_derive_from_the_original_and_fit() -> None:
    assert job_name_for("llama", 8, "ab12") == "llama-8n-ab12"
    long = job_name_for("x" * 60, 16, "ab12")
    assert len(long) == 50 and long.endswith("-16n-ab12")


@pytest.mark.skipif(
    shutil.which("pulumi") is None, reason="no Pulumi CLI: the fake stack stands in"
)
def test_config_paths_with_real_automation_api(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from pulumi import automation as auto

    monkeypatch.setenv("PULUMI_CONFIG_PASSPHRASE", "test")
    opts = auto.LocalWorkspaceOptions(
        env_vars={"PULUMI_BACKEND_URL": f"file://{tmp_path}", "PULUMI_CONFIG_PASSPHRASE": "test"}
    )
    stack = auto.create_or_select_stack(
        "scaling", project_name="eks-fsdp", program=lambda: None, opts=opts
    )
    values = infra_config.stack_file_values(STACK)
    key = "gpuNodeGroups"
    stack.set_config(f"eks-fsdp:{key}", auto.ConfigValue(value=json.dumps(values[key])))
    stack.set_config("eks-fsdp:gpuNodeGroups[0].maxSize", auto.ConfigValue(value="4"), path=True)
    assert json.loads(stack.get_config("eks-fsdp:gpuNodeGroups").value)[0]["maxSize"] in (4, "4")


def test_job_watch_reads_conditions_and_container_reasons() -> None:
    """What the API server answers becomes a state: an elastic restart is waited out, a crash
    loop, a bad image or a Failed job stop the sweep."""

    def answers(conditions: list[dict[str, str]], waiting: str = "") -> Any:
        def get(kind: str, *args: str) -> dict[str, Any]:
            if kind == "pods":
                state = {"waiting": {"reason": waiting}} if waiting else {"running": {}}
                pod = {
                    "metadata": {"name": "j-worker-0"},
                    "status": {"containerStatuses": [{"name": "pytorch", "state": state}]},
                }
                return {"items": [pod]}
            return {"status": {"conditions": conditions}}

        return KubectlJobWatch(Path("/nonexistent"), "default", get=get)

    created = {"type": "Created", "status": "True"}
    running = {"type": "Running", "status": "True"}
    restarting = {"type": "Restarting", "status": "True"}
    failed = {"type": "Failed", "status": "True", "message": "backoff limit"}
    assert answers([created]).state("j") == JobState("Created")
    assert not answers([created, running, restarting]).state("j").fatal
    assert answers([created, running]).state("j").phase == "Running"
    assert answers([created, failed]).state("j") == JobState("Failed", "backoff limit")
    for reason in ("CrashLoopBackOff", "ErrImagePull", "ImagePullBackOff"):
        state = answers([created], waiting=reason).state("j")
        assert state.fatal and state.reason.startswith(f"{reason}: j-worker-0")
    assert not answers([created], waiting="ContainerCreating").state("j").fatal


@pytest.mark.prometheus
def test_an_unpushed_image_needs_only_a_working_buildx(work: Path, cluster: FakeCluster) -> None:
    """The tag is not in ECR (``pulumi up`` will build it): with ``docker buildx`` working the
    prerequisites pass; ECR is asked for exactly the content tag the program would push."""
    stack = FakeStack(work, cluster)
    stack.aws.tags = {}
    plan = stack_plan(stack, STACK, work)
    asked: list[list[str]] = []

    def run(cmd: list[str], **kw: Any) -> subprocess.CompletedProcess[str]:
        asked.append(cmd)
        return stack.aws(cmd, **kw)

    check_prerequisites(
        plan,
        nodes=[1],
        steps=200,
        warmup_steps=20,
        destroy=False,
        step_time_s={1: 1.5},
        image_tag=content_tag(),
        which=lambda tool: f"/usr/bin/{tool}",
        run=run,
    )
    describe = next(c for c in asked if c[1:3] == ["ecr", "describe-images"])
    assert f"imageTag={content_tag()}" in describe and REPOSITORY in describe
    assert ["docker", "buildx", "version"] in asked


@pytest.mark.prometheus
def test_nodes_short_of_capacity_stop_the_sweep_with_the_health_issue(
    work: Path, cluster: FakeCluster
) -> None:
    """EC2 launches 1 of 2 instances: the nodegroup is ACTIVE, its health says why; the sweep
    stops at once (not after the job's hour-long timeout) and scales back."""
    cluster.capacity = 1
    stack = FakeStack(work, cluster)
    stack.aws.health_issues = [
        {
            "code": "AsgInstanceLaunchFailures",
            "message": "Could not launch On-Demand Instances. InsufficientInstanceCapacity",
        }
    ]
    with pytest.raises(
        SweepError, match=r"1/2 node\(s\) Ready, health issues: AsgInstanceLaunchFailures"
    ):
        sweep(stack, Forwards(cluster), [2], [], wait_timeout_s=3600)
    assert stack.calls[-2:] == ["aws scale 16", "up"]


@pytest.mark.prometheus
def test_nodes_that_never_become_ready_stop_the_sweep_at_the_deadline(
    work: Path, cluster: FakeCluster
) -> None:
    cluster.capacity = 1
    stack = FakeStack(work, cluster)
    with pytest.raises(SweepError, match=r"1/2 node\(s\) Ready after 2 s"):
        sweep(stack, Forwards(cluster), [2], [], nodes_timeout_s=2, wait_timeout_s=3600)
    assert stack.calls[-2:] == ["aws scale 16", "up"]


@pytest.mark.prometheus
def test_a_pod_unschedulable_too_long_stops_the_sweep(work: Path, cluster: FakeCluster) -> None:
    """Nodes Ready, but the scheduler cannot place the pods (no EFA device advertised): after
    ``unschedulable_s`` the sweep stops with the scheduler's message."""
    cluster.unschedulable = {1}
    stack = FakeStack(work, cluster)
    with pytest.raises(
        SweepError,
        match=r"pod unschedulable for over 1 s: .*-1n-t1-worker-0: 0/3 nodes .*vpc.amazonaws.com/efa",
    ):
        sweep(stack, Forwards(cluster), [1, 2], [], unschedulable_s=1, wait_timeout_s=3600)
    assert stack.calls.count("up") == 2  # 1, then the scale-back; 2 never started


def test_the_restored_stack_file_keeps_its_mode(tmp_path: Path) -> None:
    """A stack file kept private (0640) is still 0640 after the restore, byte for byte."""
    path = tmp_path / f"Pulumi.{STACK}.yaml"
    path.write_bytes(b"config:\n  eks-fsdp:job:\n    name: a\n")
    path.chmod(0o640)
    kept = StackFile(path, tmp_path / "out")
    path.write_bytes(b"config: {}\n")  # the CLI rewrites it
    assert kept.restore()
    assert path.read_bytes() == kept.original and (path.stat().st_mode & 0o777) == 0o640
