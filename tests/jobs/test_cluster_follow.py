"""Following, resuming and addressing a cluster job: the client layer over real HTTP.

The requests go to ``FakeKube`` (``tests/jobs/fake_kube.py``), a loopback server answering in
the upstream API's response shapes; the test plays the operator and the kubelet by writing the
objects they would (pods that appear late, first ``Pending`` with the kubelet's waiting reason
``ContainerCreating``, then ``Running``; a job held by a finalizer while it is deleted). Where
``--stack`` is used, a stand-in ``pulumi`` on PATH answers ``pulumi stack output`` (no Pulumi
backend or state here), as the real CLI prints outputs with ``--json``.

If these fail, ``submit --follow`` would ask for the log of a pod that does not exist or has
not started (the API server answers 400) instead of waiting for it, a character split between
two reads would print as two replacement characters, a dropped connection would be reported
as an unreachable API server, a submit or resume right after a cancel would print a raw 409,
``--stack`` would put jobs in ``default`` instead of the stack's ``jobsNamespace``, and
``resume --from`` would render a checkpoint root the training never reads or accept a URI it
cannot use.
"""

from __future__ import annotations

import copy
import json
import os
import stat
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from jobs.cluster import backend as cluster
from jobs.cluster import logs as cluster_logs
from jobs.cluster import operator
from jobs.manifest import record_name
from tests.jobs.fake_kube import FakeKube, run_cli
from workloads.specs import pytorchjob as pj

EXAMPLES = Path(__file__).resolve().parents[2] / "jobs" / "examples"
P4DE = str(EXAMPLES / "p4de-odcr.yaml")
NAME = "llama2-13b-samsum"
IMAGE = "123456789012.dkr.ecr.us-east-1.amazonaws.com/eks-fsdp-p4de-odcr-training:sha-1"
POD0 = f"{NAME}-worker-0"


@pytest.fixture
def kube(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[tuple[FakeKube, str]]:
    monkeypatch.setattr(cluster_logs, "POLL_S", 0.01)
    fake = FakeKube().start()
    try:
        yield fake, str(fake.kubeconfig(tmp_path / "kubeconfig"))
    finally:
        fake.stop()


def _cli(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    return run_cli(capsys, *argv)


def _submit(
    capsys: pytest.CaptureFixture[str], kubeconfig: str, *extra: str
) -> tuple[int, str, str]:
    return _cli(capsys, "submit", P4DE, "--kubeconfig", kubeconfig, "--image", IMAGE, *extra)


def _pod(fake: FakeKube, index: int, status: dict[str, Any]) -> None:
    """Worker pod ``index`` of the job as the operator creates it, with the kubelet's status."""
    job = fake.get("pytorchjobs", NAME)
    assert job is not None
    fake.put(
        "pods",
        {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {
                "name": f"{NAME}-worker-{index}",
                "labels": {
                    operator.JOB_LABEL: NAME,
                    operator.TYPE_LABEL: "worker",
                    operator.INDEX_LABEL: str(index),
                },
                "ownerReferences": [{"kind": pj.KIND, "name": NAME, "uid": job["metadata"]["uid"]}],
            },
            "status": status,
        },
    )


CREATING = {
    "phase": "Pending",
    "conditions": [{"type": "PodScheduled", "status": "True"}],
    "containerStatuses": [
        {
            "name": pj.CONTAINER,
            "ready": False,
            "state": {"waiting": {"reason": "ContainerCreating"}},
        }
    ],
}
RUNNING = {
    "phase": "Running",
    "containerStatuses": [
        {
            "name": pj.CONTAINER,
            "ready": True,
            "state": {"running": {"startedAt": "2026-01-01T00:00:00Z"}},
        }
    ],
}


def _succeed(fake: FakeKube) -> None:
    job = fake.get("pytorchjobs", NAME)
    assert job is not None
    job["status"] = {
        "conditions": [
            {"type": "Created", "status": "True", "reason": "PyTorchJobCreated"},
            {"type": "Running", "status": "False", "reason": "PyTorchJobRunning"},
            {"type": "Succeeded", "status": "True", "reason": "PyTorchJobSucceeded"},
        ]
    }


def test_submit_follow_waits_for_pod_0_to_start_then_streams_it(
    kube: tuple[FakeKube, str], capsys: pytest.CaptureFixture[str]
) -> None:
    """The pods come late: none for two looks, then pod 0 ContainerCreating for two, then
    Running with its log (the job succeeds with it). One line per state; no log request
    before the container started."""
    fake, kubeconfig = kube
    lists = 0
    log_asked_at: list[int] = []

    def operator(method: str, path: str) -> None:
        nonlocal lists
        if path.endswith("/pods") and method == "GET":
            lists += 1
            if lists == 3:
                _pod(fake, 0, CREATING)
                _pod(fake, 1, CREATING)
            elif lists == 5:
                _pod(fake, 0, RUNNING)
                fake.logs[POD0] = "step 1 loss 2.0\nstep 2 loss 1.5\n"
                _succeed(fake)
        if path.endswith("/log"):
            log_asked_at.append(lists)

    fake.on_request = operator
    code, out, err = _submit(capsys, kubeconfig, "--follow")
    assert code == 0, err
    assert out.startswith(f"submitted {NAME}") and out.endswith(
        "step 1 loss 2.0\nstep 2 loss 1.5\n"
    )
    # the planner's estimate (plan: lines) and the Hub revisions (jobs.revisions: pinned, or
    # not where the Hub cannot be reached) are printed once the job exists, then the waits
    notes = ("plan: ", "pinned: ", "warning: model ", "warning: dataset ")
    assert [line for line in err.splitlines() if not line.startswith(notes)] == [
        f"waiting for pod {POD0} to start: not created yet (job Pending)",
        f"waiting for pod {POD0} to start: Pending: ContainerCreating",
    ]
    assert log_asked_at == [5]  # once, after the container had started


def test_follow_gives_up_after_the_wait_timeout_in_one_line(
    kube: tuple[FakeKube, str], capsys: pytest.CaptureFixture[str]
) -> None:
    fake, kubeconfig = kube
    assert _submit(capsys, kubeconfig)[0] == 0
    _pod(
        fake,
        0,
        {
            "phase": "Pending",
            "conditions": [{"type": "PodScheduled", "status": "False", "reason": "Unschedulable"}],
        },
    )
    code, out, err = _cli(
        capsys, "logs", NAME, "--kubeconfig", kubeconfig, "-f", "--wait-timeout", "0.2"
    )
    assert code == 1 and out == ""
    note, error = err.splitlines()
    assert note == f"waiting for pod {POD0} to start: Pending: Unschedulable"
    assert error == (
        f"eks-fsdp jobs: error: job {NAME}: worker pod 0 has not started after 0.2 s (Pending: Unschedulable): "
        f"`eks-fsdp jobs status {NAME}` says why; --wait-timeout waits longer"
    )
    assert not any(path.endswith("/log") for _, path in fake.requests)
    # without --follow: one line at once, and a bad rank or timeout is bad input
    code, _, err = _cli(capsys, "logs", NAME, "--kubeconfig", kubeconfig)
    assert code == 1 and err.count("\n") == 1 and "worker pod 0 has not started" in err
    code, _, err = _cli(capsys, "logs", NAME, "--kubeconfig", kubeconfig, "-f", "--rank", "2")
    assert code == 2 and "--rank 0..1" in err
    code, _, err = _cli(capsys, "logs", NAME, "--kubeconfig", kubeconfig, "--wait-timeout", "0")
    assert code == 2 and err == "eks-fsdp jobs: error: --wait-timeout 0: must be > 0 seconds\n"


def test_rank_is_the_replica_index_and_a_split_character_prints_whole(
    kube: tuple[FakeKube, str], capsys: pytest.CaptureFixture[str]
) -> None:
    """Pod 1's log carries a two-byte character across the first read's end (byte CHUNK)."""
    fake, kubeconfig = kube
    assert _submit(capsys, kubeconfig)[0] == 0
    _pod(fake, 0, RUNNING)
    _pod(fake, 1, RUNNING)
    fake.logs[POD0] = "worker 0: rank 0 and 1 of 16\n"
    text = "x" * (cluster_logs.CHUNK - 1) + "é\nworker 1: ranks 8-15, loss ≈ 1.5 ✓\n"
    fake.logs[f"{NAME}-worker-1"] = text
    first_read = text.encode()[: cluster_logs.CHUNK]
    assert first_read.decode(errors="replace").endswith("\ufffd")  # the split is real
    code, out, err = _cli(capsys, "logs", NAME, "--kubeconfig", kubeconfig, "--rank", "1")
    assert code == 0, err
    assert out == text and out != fake.logs[POD0]
    code, out, _ = _cli(capsys, "logs", NAME, "--kubeconfig", kubeconfig)
    assert out == fake.logs[POD0]


def test_a_connection_dropped_while_streaming_is_one_line_saying_so(
    kube: tuple[FakeKube, str], capsys: pytest.CaptureFixture[str]
) -> None:
    fake, kubeconfig = kube
    assert _submit(capsys, kubeconfig)[0] == 0
    _pod(fake, 0, RUNNING)
    fake.logs[POD0] = "".join(f"step {i}\n" for i in range(1, 2001))
    fake.broken_logs.add(POD0)
    code, out, err = _cli(capsys, "logs", NAME, "--kubeconfig", kubeconfig, "-f")
    assert code == 1 and err.count("\n") == 1, err
    assert f"logs of pod {POD0}: the connection dropped while streaming" in err
    assert "unreachable" not in err
    assert fake.logs[POD0].startswith(out) and "step 1\n" in out  # what came before the break


def test_submit_and_resume_while_a_cancel_is_still_deleting_say_to_wait(
    kube: tuple[FakeKube, str], capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """A finalizer holds the deleted job (``deletionTimestamp`` set): the same name cannot be
    created until it is gone (409 AlreadyExists)."""
    fake, kubeconfig = kube
    assert _submit(capsys, kubeconfig)[0] == 0
    job = fake.get("pytorchjobs", NAME)
    assert job is not None
    job["metadata"]["finalizers"] = ["example.com/hold"]
    code, _, err = _cli(capsys, "cancel", NAME, "--kubeconfig", kubeconfig)
    assert code == 0, err
    assert fake.get("pytorchjobs", NAME)["metadata"]["deletionTimestamp"]  # type: ignore[index]
    wait = "still being deleted (a cancel in progress): wait a few seconds"
    monkeypatch.setattr(cluster, "DELETE_WAIT_S", 0.2)
    code, _, err = _cli(capsys, "resume", NAME, "--kubeconfig", kubeconfig)
    assert code == 1 and err.count("\n") == 1 and "409" not in err and wait in err, err
    assert "already exists" in err  # the API server's answer, then what to do
    code, _, err = _cli(capsys, "cancel", NAME, "--kubeconfig", kubeconfig, "--purge")
    assert code == 0 and fake.get("configmaps", record_name(NAME)) is None
    code, _, err = _submit(capsys, kubeconfig)
    assert code == 1 and err.count("\n") == 1 and wait in err, err
    # the race: the job read as gone, the create still refused
    monkeypatch.setattr(cluster.ClusterBackend, "_get_job", lambda *_a, **_k: None)
    code, _, err = _submit(capsys, kubeconfig)
    assert code == 1 and err.count("\n") == 1 and wait in err and "already exists" in err, err


def _fake_pulumi(tmp_path: Path, outputs: dict[str, Any]) -> str:
    """A ``pulumi`` that answers ``pulumi stack output KEY --json --stack S`` from ``outputs``."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "outputs.json").write_text(json.dumps(outputs))
    script = bin_dir / "pulumi"
    script.write_text(
        f"#!{sys.executable}\n"
        "import json, sys\n"
        "from pathlib import Path\n"
        "args = sys.argv[1:]\n"
        "outputs = json.loads((Path(__file__).parent / 'outputs.json').read_text())\n"
        "assert args[:2] == ['stack', 'output'] and '--json' in args, args\n"
        "key = args[2]\n"
        "if key not in outputs:\n"
        "    sys.exit(f'error: current stack does not have output property {key!r}')\n"
        "print(json.dumps(outputs[key]))\n"
    )
    script.chmod(script.stat().st_mode | stat.S_IXUSR)
    return str(bin_dir)


def test_stack_jobs_go_to_its_jobs_namespace(
    tmp_path: Path,
    kube: tuple[FakeKube, str],
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    fake, kubeconfig = kube
    fake.namespaces.add("team-a")
    outputs = {
        "kubeconfig": json.dumps(yaml.safe_load(Path(kubeconfig).read_text())),
        "jobsNamespace": "team-a",
        "trainingImage": IMAGE,
    }
    monkeypatch.setenv("PATH", _fake_pulumi(tmp_path, outputs) + os.pathsep + os.environ["PATH"])
    code, out, err = _cli(capsys, "submit", P4DE, "--stack", "p4de-odcr")
    assert code == 0, err
    assert out.startswith(f"submitted {NAME} (cluster in namespace team-a, generation 1")
    created = fake.get("pytorchjobs", NAME, "team-a")
    assert created is not None and fake.of("pytorchjobs") == []
    container = created["spec"]["pytorchReplicaSpecs"]["Worker"]["template"]["spec"]["containers"][
        0
    ]
    assert container["image"] == IMAGE
    code, out, _ = _cli(capsys, "list", "--stack", "p4de-odcr", "--json")
    assert [(j["name"], j["namespace"]) for j in json.loads(out)] == [(NAME, "team-a")]
    code, out, _ = _cli(capsys, "list", "--stack", "p4de-odcr", "-n", "default", "--json")
    assert json.loads(out) == []
    code, _, err = _cli(capsys, "status", NAME, "--stack", "p4de-odcr")
    assert code == 0, err


def test_the_output_names_are_the_programs() -> None:
    from jobs.cluster.kube import JOBS_NAMESPACE_OUTPUT
    from workloads.program import OUTPUT_JOBS_NAMESPACE

    assert JOBS_NAMESPACE_OUTPUT == OUTPUT_JOBS_NAMESPACE


def _flags(fake: FakeKube) -> list[str]:
    job = fake.get("pytorchjobs", NAME)
    assert job is not None
    command = job["spec"]["pytorchReplicaSpecs"]["Worker"]["template"]["spec"]["containers"][0][
        "command"
    ]
    return pj.finetune_flags(command)


def test_resume_from_renders_the_checkpoint_root_and_keeps_it(
    kube: tuple[FakeKube, str], capsys: pytest.CaptureFixture[str]
) -> None:
    fake, kubeconfig = kube
    assert _submit(capsys, kubeconfig)[0] == 0
    first = _flags(fake)
    assert "--dist_checkpoint_root_folder=/checkpoints" in first  # the claim's mount
    assert _cli(capsys, "cancel", NAME, "--kubeconfig", kubeconfig)[0] == 0
    code, _, err = _cli(
        capsys, "resume", NAME, "--kubeconfig", kubeconfig, "--from", "s3://ckpt-bucket/runs/"
    )
    assert code == 0, err
    flags = _flags(fake)
    roots = [f for f in flags if f.startswith("--dist_checkpoint_root_folder=")]
    assert roots == ["--dist_checkpoint_root_folder=s3://ckpt-bucket/runs"]
    assert f"--dist_checkpoint_folder={NAME}" in flags and "--resume" in flags
    assert f"--output_dir=/checkpoints/{NAME}/output" in flags  # metrics stay on the claim
    # but for the root, the flags are the first submission's
    assert [f for f in flags if f not in roots] == [
        f for f in first if not f.startswith("--dist_checkpoint_root_folder=")
    ]
    record = fake.get("configmaps", record_name(NAME))
    assert record is not None and record["data"]["checkpointRoot"] == "s3://ckpt-bucket/runs"
    # a later resume continues from there; a path on the claim is taken as is
    _succeed_failed = {"conditions": [{"type": "Failed", "status": "True", "reason": "X"}]}
    fake.get("pytorchjobs", NAME)["status"] = _succeed_failed  # type: ignore[index]
    assert _cli(capsys, "resume", NAME, "--kubeconfig", kubeconfig)[0] == 0
    assert "--dist_checkpoint_root_folder=s3://ckpt-bucket/runs" in _flags(fake)
    fake.get("pytorchjobs", NAME)["status"] = _succeed_failed  # type: ignore[index]
    code, _, err = _cli(
        capsys, "resume", NAME, "--kubeconfig", kubeconfig, "--from", "/checkpoints/saved/"
    )
    assert code == 0, err
    assert "--dist_checkpoint_root_folder=/checkpoints/saved" in _flags(fake)


@pytest.mark.parametrize(
    ("uri", "message"),
    [
        ("s3://", "--from s3://: no bucket: give s3://BUCKET/PREFIX"),
        ("s3:///prefix", "--from s3:///prefix: no bucket"),
        ("gs://bucket/x", "--from gs://bucket/x: unknown scheme 'gs': give a path or s3://"),
        ("s3://Bad_Bucket/x", "'Bad_Bucket' is not an S3 bucket name"),
        ("checkpoints/x", "a path in the pods must be absolute"),
        ("/data/x", "not on the job's checkpoint claim (mounted at /checkpoints)"),
        ("", "--from: empty"),
    ],
)
def test_a_bad_from_is_one_line_and_changes_nothing(
    kube: tuple[FakeKube, str], capsys: pytest.CaptureFixture[str], uri: str, message: str
) -> None:
    fake, kubeconfig = kube
    assert _submit(capsys, kubeconfig)[0] == 0
    assert _cli(capsys, "cancel", NAME, "--kubeconfig", kubeconfig)[0] == 0
    before = copy.deepcopy(fake.objects)
    asked = len(fake.requests)
    code, out, err = _cli(capsys, "resume", NAME, "--kubeconfig", kubeconfig, "--from", uri)
    assert code == 2 and out == "" and err.count("\n") == 1 and message in err, err
    assert fake.objects == before
    if not uri.startswith("/"):  # its form is checked before any request
        assert len(fake.requests) == asked
