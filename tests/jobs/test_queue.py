"""Jobs through a Kueue queue, over the fake API: ``submit --team/--priority``, and ``list``
and ``status`` reading Kueue's Workload.

The stack is p4de-odcr (one pool of 2 p4de.24xlarge, 16 GPUs) with two teams, written to a
temporary folder next to the repository's ``Pulumi.yaml``. ``FakeKube`` stores objects; the
test plays Kueue by writing the Workload Kueue makes for a job (named, labelled with the job's
uid and owned by it as ``jobframework/reconciler.go`` at v0.17.0 does, its pod sets the job's
own template and replica count) with the conditions and messages of Kueue's sources
(``apis/kueue/v1beta2/workload_types.go``; the flavor assigner's ``insufficient unused quota
for R in flavor F, N more needed``). Kueue's real behaviour is in
``tests/controlplane/test_jobs_queue.py``.

If these fail, a team's job would land outside its namespace or queue, run under the wrong
ServiceAccount, carry no priority, a bad team or priority would reach the API server, or
``list``/``status`` would not say why a job waits or that it was preempted, a job on an EFA
pool would not ask Kueue to keep its pods in one network block (or a job on a pool without a
Topology would ask, and never be admitted: ``tas_flavorassigner.go``, "does not support
TopologyAwareScheduling"), or ``suspend`` of a queued job whose Workload Kueue has not made
yet would silently write a flag Kueue overrides.
"""

from __future__ import annotations

import json
import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from infra.config import sources
from jobs import queue
from jobs.manifest import record_name
from tests.jobs.fake_kube import FakeKube, run_cli
from workloads.specs import kueue

REPO = Path(__file__).resolve().parents[2]
P4DE = str(REPO / "jobs" / "examples" / "p4de-odcr.yaml")
DEV = str(REPO / "jobs" / "examples" / "dev.yaml")
NAME = "llama2-13b-samsum"
POOL = "p4de-odcr"
IMAGE = "123456789012.dkr.ecr.us-east-1.amazonaws.com/eks-fsdp-p4de-odcr-training:sha-1"
TEAMS = [
    {
        "name": "nlp",
        "principalArns": ["arn:aws:iam::123456789012:role/nlp"],
        "quota": {POOL: 8},
        "defaultPriority": "production",
    },
    {"name": "vision", "principalArns": ["arn:aws:iam::123456789012:role/vision"]},
]


@pytest.fixture
def root(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A repository root whose p4de-odcr and dev stacks declare the two teams."""
    out = tmp_path / "root"
    out.mkdir()
    shutil.copy(REPO / "Pulumi.yaml", out / "Pulumi.yaml")
    for stack in ("p4de-odcr", "dev"):
        data = yaml.safe_load((REPO / f"Pulumi.{stack}.yaml").read_text())
        data["config"]["eks-fsdp:teams"] = [
            {k: v for k, v in t.items() if k != "quota" or stack == POOL} for t in TEAMS
        ]
        (out / f"Pulumi.{stack}.yaml").write_text(yaml.safe_dump(data))
    monkeypatch.setattr(sources, "REPO_ROOT", out)
    return out


@pytest.fixture
def kube(tmp_path: Path, root: Path) -> Iterator[tuple[FakeKube, str]]:
    fake = FakeKube().start()
    fake.namespaces |= {"nlp", "vision", "lab"}
    try:
        yield fake, str(fake.kubeconfig(tmp_path / "kubeconfig"))
    finally:
        fake.stop()


def _cli(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    return run_cli(capsys, *argv)


def _submit(capsys: pytest.CaptureFixture[str], kubeconfig: str, *extra: str) -> Any:
    return _cli(capsys, "submit", P4DE, "--kubeconfig", kubeconfig, "--image", IMAGE, *extra)


def _workload(fake: FakeKube, job: dict[str, Any], conditions: list[dict[str, Any]]) -> None:
    """What Kueue makes for ``job``: ``pytorchjob-<name>-<hash>``, labelled and owned."""
    meta = job["metadata"]
    worker = job["spec"]["pytorchReplicaSpecs"]["Worker"]
    fake.put(
        "workloads",
        {
            "apiVersion": "kueue.x-k8s.io/v1beta2",
            "kind": "Workload",
            "metadata": {
                "name": f"pytorchjob-{meta['name']}-3f2a1",
                "namespace": meta["namespace"],
                "labels": {queue.JOB_UID_LABEL: meta["uid"]},
                "ownerReferences": [
                    {
                        "apiVersion": job["apiVersion"],
                        "kind": job["kind"],
                        "name": meta["name"],
                        "uid": meta["uid"],
                    }
                ],
            },
            "spec": {
                "queueName": meta["labels"][queue.QUEUE_LABEL],
                "podSets": [
                    {"name": "worker", "count": worker["replicas"], "template": worker["template"]}
                ],
            },
            "status": {"conditions": conditions},
        },
    )


def _cond(kind: str, status: str, reason: str, message: str) -> dict[str, Any]:
    return {
        "type": kind,
        "status": status,
        "reason": reason,
        "message": message,
        "lastTransitionTime": "2026-01-01T00:00:00Z",
    }


def test_a_team_job_lands_in_its_namespace_queue_and_service_account(
    kube: tuple[FakeKube, str], capsys: pytest.CaptureFixture[str]
) -> None:
    fake, kubeconfig = kube
    code, out, err = _submit(capsys, kubeconfig, "--team", "vision", "--priority", "production")
    assert code == 0, err
    assert "namespace vision" in out
    job = fake.get("pytorchjobs", NAME, "vision")
    assert job is not None and fake.get("pytorchjobs", NAME) is None
    labels = job["metadata"]["labels"]
    assert labels[queue.QUEUE_LABEL] == POOL and labels[queue.PRIORITY_LABEL] == "production"
    pod = job["spec"]["pytorchReplicaSpecs"]["Worker"]["template"]["spec"]
    assert pod["serviceAccountName"] == queue.SERVICE_ACCOUNT
    assert pod["automountServiceAccountToken"] is False
    record = fake.get("configmaps", record_name(NAME), "vision")
    assert record is not None
    assert yaml.safe_load(record["data"]["job.yaml"])["team"] == "vision"
    # the team's default priority when none is given; the file key works as the flag
    code, _, err = _submit(capsys, kubeconfig, "--set", "team=nlp", "--name", "nlp-job")
    assert code == 0, err
    nlp = fake.get("pytorchjobs", "nlp-job", "nlp")
    assert nlp is not None and nlp["metadata"]["labels"][queue.PRIORITY_LABEL] == "production"


@pytest.mark.parametrize(
    ("argv", "culprit"),
    [
        (("--team", "robotics"), "team: 'robotics' is not a team of stack p4de-odcr"),
        (("--team", "nlp", "--priority", "urgent"), "priority: 'urgent' is not a priority"),
        (("--team", "nlp", "-n", "vision"), "namespace: 'vision': a job of team nlp runs in"),
    ],
)
def test_a_bad_team_or_priority_is_one_line_and_creates_nothing(
    kube: tuple[FakeKube, str],
    capsys: pytest.CaptureFixture[str],
    argv: tuple[str, ...],
    culprit: str,
) -> None:
    fake, kubeconfig = kube
    code, out, err = _submit(capsys, kubeconfig, *argv)
    assert code == 2 and out == "" and err.count("\n") == 1, err
    assert culprit in err and err.startswith(f"eks-fsdp jobs: error: {P4DE}")
    assert not [r for r in fake.requests if r[0] == "POST"]


def test_outside_the_jobs_namespace_a_job_names_a_queue_only_with_a_team(root: Path) -> None:
    from jobs.schema import JobFileError, load

    assert load(DEV, sets=["namespace=lab"]).queue is None  # no LocalQueue there
    assert load(DEV).queue == queue.Queue(name="gpu-g5", priority="experiment")
    topology = ((kueue.PREFERRED_TOPOLOGY_ANNOTATION, kueue.PREFERRED_TOPOLOGY_LEVEL),)
    assert load(P4DE).queue == queue.Queue(
        name=POOL, priority="experiment", pod_annotations=topology
    )
    team = load(DEV, sets=["team=vision"])
    assert team.queue == queue.Queue(name="gpu-g5", priority="experiment", team="vision")
    assert team.namespace == "vision"
    with pytest.raises(JobFileError, match="priority: a job outside the jobs namespace goes"):
        load(DEV, sets=["priority=production", "namespace=lab"])


def test_list_and_status_show_kueues_state_and_reason(
    kube: tuple[FakeKube, str], capsys: pytest.CaptureFixture[str]
) -> None:
    fake, kubeconfig = kube
    assert _submit(capsys, kubeconfig, "--team", "nlp")[0] == 0
    job = fake.get("pytorchjobs", NAME, "nlp")
    assert job is not None
    gpus = 2 * 8  # two p4de workers
    waiting = (
        "couldn't assign flavors to pod set worker: insufficient unused quota for "
        f"nvidia.com/gpu in flavor {POOL}, 8 more needed"
    )
    _workload(fake, job, [_cond("QuotaReserved", "False", "Pending", waiting)])
    where = ("--kubeconfig", kubeconfig, "-n", "nlp")
    code, out, err = _cli(capsys, "status", NAME, *where, "--json")
    assert code == 0, err
    info = json.loads(out)
    assert info["queue"] == f"{POOL} (production)" and info["admission"] == "queued"
    assert info["admission_reason"] == f"waiting for {gpus} GPUs in {POOL}, {gpus - 8} free"
    assert info["where"]["workload"] == f"nlp/pytorchjob-{NAME}-3f2a1"
    code, out, _ = _cli(capsys, "list", *where)
    header, row = out.splitlines()
    assert header.split()[-1] == "QUEUE"
    assert row.endswith(f"queued: waiting for {gpus} GPUs in {POOL}, {gpus - 8} free")
    # reclaimed by the other team: preempted, with Kueue's reason
    fake.objects.pop(("workloads", "nlp", f"pytorchjob-{NAME}-3f2a1"))
    preempted = "Preempted to accommodate a workload (UID: u1) due to reclamation within the cohort"
    _workload(
        fake,
        job,
        [
            _cond("Evicted", "True", "Preempted", preempted),
            _cond("Preempted", "True", "InCohortReclamation", preempted),
            _cond("QuotaReserved", "False", "Preempted", preempted),
        ],
    )
    code, out, _ = _cli(capsys, "status", NAME, *where)
    assert f"queue:     {POOL} (production): preempted: InCohortReclamation: {preempted}" in out
    # admitted again: Kueue resets Evicted and Preempted (workload.SetQuotaReservation)
    fake.objects.pop(("workloads", "nlp", f"pytorchjob-{NAME}-3f2a1"))
    _workload(
        fake,
        job,
        [
            _cond("QuotaReserved", "True", "QuotaReserved", "Quota reserved in ClusterQueue"),
            _cond("Admitted", "True", "Admitted", "The workload is admitted"),
            _cond("Preempted", "False", "QuotaReserved", "Previously: " + preempted),
        ],
    )
    info = json.loads(_cli(capsys, "status", NAME, *where, "--json")[1])
    assert (info["admission"], info["admission_reason"]) == ("admitted", "")
    # deactivated (suspend), then active again: Kueue requeues it (Requeued, Reactivated)
    fake.objects.pop(("workloads", "nlp", f"pytorchjob-{NAME}-3f2a1"))
    _workload(
        fake,
        job,
        [
            _cond("Evicted", "True", "Deactivated", "The workload is deactivated"),
            _cond("QuotaReserved", "False", "Deactivated", "The workload is deactivated"),
            _cond("Requeued", "True", "Reactivated", "The workload was reactivated"),
        ],
    )
    info = json.loads(_cli(capsys, "status", NAME, *where, "--json")[1])
    assert info["admission"] == "queued"
    assert info["admission_reason"] == "requeued (Reactivated: The workload was reactivated)"


def test_suspend_deactivates_a_queued_jobs_workload_and_patches_any_other_job(
    kube: tuple[FakeKube, str], capsys: pytest.CaptureFixture[str]
) -> None:
    fake, kubeconfig = kube
    assert _submit(capsys, kubeconfig, "--team", "nlp")[0] == 0
    job = fake.get("pytorchjobs", NAME, "nlp")
    assert job is not None
    _workload(fake, job, [_cond("Admitted", "True", "Admitted", "The workload is admitted")])
    where = ("--kubeconfig", kubeconfig, "-n", "nlp")
    code, out, err = _cli(capsys, "suspend", NAME, *where)
    assert code == 0 and f"suspended {NAME} (workload pytorchjob-{NAME}-3f2a1" in out, err
    wl = fake.get("workloads", f"pytorchjob-{NAME}-3f2a1", "nlp")
    assert wl is not None and wl["spec"]["active"] is False
    assert wl["spec"]["podSets"][0]["count"] == 2  # the merge patch kept the rest
    assert "runPolicy" not in job["spec"] or "suspend" not in job["spec"]["runPolicy"]
    assert _cli(capsys, "unsuspend", NAME, *where)[0] == 0
    wl = fake.get("workloads", f"pytorchjob-{NAME}-3f2a1", "nlp")
    assert wl is not None and wl["spec"]["active"] is True
    # a job Kueue does not manage (no team, a namespace without queues): runPolicy.suspend
    code, _, err = _cli(
        capsys, "submit", DEV, "--kubeconfig", kubeconfig, "--name", "cpu-job", "-n", "lab"
    )
    assert code == 0, err
    assert _cli(capsys, "suspend", "cpu-job", "--kubeconfig", kubeconfig, "-n", "lab")[0] == 0
    cpu = fake.get("pytorchjobs", "cpu-job", "lab")
    assert cpu is not None and cpu["spec"]["runPolicy"]["suspend"] is True
    assert cpu["spec"]["runPolicy"]["cleanPodPolicy"] == "Running"  # kept by the merge patch
    assert _cli(capsys, "unsuspend", "cpu-job", "--kubeconfig", kubeconfig, "-n", "lab")[0] == 0
    cpu = fake.get("pytorchjobs", "cpu-job", "lab")
    assert cpu is not None and cpu["spec"]["runPolicy"]["suspend"] is False
    code, _, err = _cli(capsys, "suspend", "nope", "--kubeconfig", kubeconfig)
    assert code == 1 and "no job 'nope'" in err and err.count("\n") == 1


def test_a_job_on_an_efa_pool_prefers_one_network_block(root: Path) -> None:
    """The pod templates of a queued job name the preferred topology level exactly when its
    pool's ResourceFlavor has the Topology (EFA pools), for both job kinds; the TrainJob keeps
    it in its runtime patch's pod metadata, which both Trainer CRDs allow."""
    from jobs.build import build as job_workloads
    from jobs.cluster import trainjob as tjobs
    from jobs.schema import load
    from workloads.specs import trainjob as tj

    for path, stack in ((P4DE, POOL), (DEV, "dev")):
        plain = load(path)
        assert plain.queue is not None
        group = plain.platform.node_group(plain.queue.name)
        flavor = kueue.resource_flavor(group)
        wanted = (
            {kueue.PREFERRED_TOPOLOGY_ANNOTATION: kueue.PREFERRED_TOPOLOGY_LEVEL}
            if "topologyName" in flavor["spec"]
            else {}
        )
        assert bool(wanted) == (stack == POOL)  # p4de is EFA; dev's g5 pool is not
        for sets in ([], ["api=v2", "minWorkers=1", "workers=1"]):
            job = load(path, sets=sets)
            body = job_workloads(job, image=IMAGE).job
            if job.api == "v2":
                out = queue.queued(tj.trainjob(body), job.queue, pod_template_paths=tjobs.templates)
                tj.validate(out)
                templates = tjobs.templates(out)
            else:
                from workloads.specs import pytorchjob as pj

                out = queue.queued(
                    pj.pytorchjob(body, "etcd"), job.queue,
                    pod_template_paths=queue.pytorchjob_templates,
                )  # fmt: skip
                templates = queue.pytorchjob_templates(out)
            for template in templates:
                annotations = template["metadata"].get("annotations") or {}
                got = {k: v for k, v in annotations.items() if k.startswith("kueue.x-k8s.io/")}
                assert got == wanted, (path, sets)
                assert len(annotations) > len(got)  # the builder's own are kept


def test_suspend_of_a_trainjob_kueue_has_not_queued_yet_is_one_line(
    kube: tuple[FakeKube, str], capsys: pytest.CaptureFixture[str]
) -> None:
    """Kueue's webhook has defaulted the TrainJob (its ``kueue.x-k8s.io/manager`` runtime
    patch, ``trainjob_webhook.go``) but its reconciler has not made the Workload yet: nothing is
    patched, and the user is told to retry; once the Workload exists, suspend deactivates it."""
    fake, kubeconfig = kube
    v2 = ["--set", "api=v2", "--set", "minWorkers=2", "--set", "workers=2"]
    assert _submit(capsys, kubeconfig, "--team", "nlp", *v2)[0] == 0
    job = fake.get("trainjobs", NAME, "nlp")
    assert job is not None and job["metadata"]["labels"][queue.QUEUE_LABEL] == POOL
    job["spec"]["runtimePatches"].append({"manager": queue.KUEUE_PATCH_MANAGER})
    where = ("--kubeconfig", kubeconfig, "-n", "nlp")
    before = len(fake.requests)
    for verb in ("suspend", "unsuspend"):
        code, out, err = _cli(capsys, verb, NAME, *where)
        assert code == 1 and out == "" and err.count("\n") == 1, err
        assert f"job {NAME} in queue {POOL} (production) has no Kueue Workload yet" in err
        assert err.rstrip().endswith("(not admitted/queued yet): retry in a few seconds")
    assert not [r for r in fake.requests[before:] if r[0] == "PATCH"]
    assert "suspend" not in job["spec"] or job["spec"]["suspend"] is not False
    fake.put(
        "workloads",
        {
            "apiVersion": "kueue.x-k8s.io/v1beta2",
            "kind": "Workload",
            "metadata": {
                "name": f"trainjob-{NAME}-9c8d7",
                "namespace": "nlp",
                "labels": {queue.JOB_UID_LABEL: job["metadata"]["uid"]},
            },
            "spec": {"active": True},
            "status": {"conditions": [_cond("QuotaReserved", "False", "Pending", "waiting")]},
        },
    )
    code, out, err = _cli(capsys, "suspend", NAME, *where)
    assert code == 0 and f"workload trainjob-{NAME}-9c8d7 deactivated" in out, err
    wl = fake.get("workloads", f"trainjob-{NAME}-9c8d7", "nlp")
    assert wl is not None and wl["spec"]["active"] is False


def test_suspend_of_a_pytorchjob_kueue_has_not_queued_yet_is_one_line(
    kube: tuple[FakeKube, str], capsys: pytest.CaptureFixture[str]
) -> None:
    """A queued PyTorchJob whose Workload Kueue has not made yet: ``runPolicy.suspend`` is not
    written (Kueue owns that flag on its jobs and would undo it at admission,
    ``jobframework/reconciler.go``, v0.17.0); the user is told to retry in one line."""
    fake, kubeconfig = kube
    assert _submit(capsys, kubeconfig, "--team", "nlp")[0] == 0
    job = fake.get("pytorchjobs", NAME, "nlp")
    assert job is not None and job["metadata"]["labels"][queue.QUEUE_LABEL] == POOL
    where = ("--kubeconfig", kubeconfig, "-n", "nlp")
    before = len(fake.requests)
    for verb in ("suspend", "unsuspend"):
        code, out, err = _cli(capsys, verb, NAME, *where)
        assert code == 1 and out == "" and err.count("\n") == 1, err
        assert f"job {NAME} in queue {POOL} (production) has no Kueue Workload yet" in err
    assert not [r for r in fake.requests[before:] if r[0] == "PATCH"]
    assert "suspend" not in (job["spec"].get("runPolicy") or {})
