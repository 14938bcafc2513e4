"""``submit FILE --from ROOT``: a job continues from its checkpoints on a cluster that has no
record of it (after ``pulumi destroy`` and a new ``pulumi up``), and ``--resume_required``.

Local scenario, nothing mocked but AWS itself (moto's S3 server on loopback, as
tests/training/test_s3_resume.py): a reference job runs uninterrupted next to job ``x``; ``x``
is cancelled once a checkpoint at step N is complete, and that checkpoint reaches
``s3://BUCKET/PREFIX/x/step-N/`` as FSx's automatic export copies the claim's files (every
file, ``COMPLETE`` last; FSx for Lustre user guide, "Exporting changes to the data
repository"). The local job records are wiped (a new cluster), ``resume x`` says to use
``submit --from``, and ``submit --from s3://BUCKET/PREFIX`` trains steps N+1.. with the losses
of the uninterrupted run, each step logged once, its new checkpoints written to the bucket.

Cluster side: the rendered PyTorchJob (sent to ``FakeKube``, tests/jobs/fake_kube.py, a
loopback server in the API's shapes) carries the root and ``--resume_required``, and the
record keeps the root for a later ``resume``.

If these fail, a job could not be continued on a fresh cluster, a resumed job would redo or
skip steps or start over at step 0 from a root with no checkpoint of it, or its later
checkpoints would go elsewhere than the root it was given.
"""

from __future__ import annotations

import shutil
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from jobs.cluster import logs as cluster_logs
from jobs.local.backend import STATE_ENV, LocalBackend
from jobs.manifest import record_name
from jobs.resume_from import REQUIRED_FLAG
from localrun.result import complete_checkpoint_steps, read_metrics
from tests.jobs.fake_kube import FakeKube, run_cli
from tests.training.conftest import S3Server
from tests.training.helpers import TINY as TRAIN_TINY
from tests.training.helpers import finetune_cmd, run
from workloads.specs import pytorchjob as pj

EXAMPLES = Path(__file__).resolve().parents[2] / "jobs" / "examples"
DEV = str(EXAMPLES / "dev.yaml")
P4DE = str(EXAMPLES / "p4de-odcr.yaml")
P4DE_NAME = "llama2-13b-samsum"
IMAGE = "123456789012.dkr.ecr.us-east-1.amazonaws.com/eks-fsdp-p4de-odcr-training:sha-1"
TINY = (
    "model=tiny-llama-2l",
    "contextLength=128",
    "args.max_train_samples=256",
    "args.mixed_precision=false",  # fp32: bf16 is ~10x slower on most CPUs
    "args.run_validation=false",
    "args.save_model=false",
    "args.plot_metrics=false",
)
STEPS, EVERY = 12, 4
BUCKET, PREFIX = "durable-ckpt", "training/checkpoints"
TIMEOUT_S = 300.0


def _cli(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    return run_cli(capsys, *argv)


def _wait(what: str, check: Any, timeout_s: float = TIMEOUT_S) -> Any:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        value = check()
        if value:
            return value
        time.sleep(0.3)
    raise AssertionError(f"timed out waiting for {what}")


@pytest.fixture
def s3(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[S3Server]:
    server = S3Server()
    for key in ("AWS_PROFILE", "AWS_DEFAULT_REGION", "AWS_ENDPOINT_URL", "AWS_SESSION_TOKEN"):
        monkeypatch.delenv(key, raising=False)
    for key, value in server.env.items():
        monkeypatch.setenv(key, value)  # the runner, its pods and training inherit them
    monkeypatch.setenv("HF_HOME", str(tmp_path / "hf_home"))
    server.client().create_bucket(Bucket=BUCKET)
    try:
        yield server
    finally:
        server.stop()


def _export(s3: S3Server, folder: Path, prefix: str) -> int:
    """Upload ``folder``'s files under ``prefix`` as FSx's automatic export would, the
    ``COMPLETE`` marker last; the number of bytes."""
    files = sorted(p for p in folder.rglob("*") if p.is_file())
    files.sort(key=lambda p: p.name == "COMPLETE")
    client, size = s3.client(), 0
    for path in files:
        body = path.read_bytes()
        client.put_object(Bucket=BUCKET, Key=f"{prefix}/{path.relative_to(folder)}", Body=body)
        size += len(body)
    return size


@pytest.mark.slow
@pytest.mark.integration
def test_submit_from_s3_on_a_new_cluster_continues_with_the_uninterrupted_losses(
    s3: S3Server,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    home = tmp_path / "jobs"
    monkeypatch.setenv(STATE_ENV, str(home))
    sets = [f"--set={s}" for s in TINY]
    steps = [f"--set=maxTrainStep={STEPS}", f"--set=checkpointEvery={EVERY}"]
    backend = LocalBackend(home)
    try:
        for name in ("ref", "x"):
            code, _, err = _cli(capsys, "submit", "--local", DEV, "--name", name, *sets, *steps)
            assert code == 0, err
        own = home / "x" / "shared" / "x"
        _wait("x's first checkpoint", lambda: complete_checkpoint_steps(own))
        assert _cli(capsys, "cancel", "--local", "x")[0] == 0
        n = complete_checkpoint_steps(own)[-1]
        assert n < STEPS
        assert _export(s3, own / f"step-{n:06d}", f"{PREFIX}/x/step-{n:06d}") > 0
        _wait("the reference run", lambda: backend.status("ref").phase == "Succeeded")
        reference = {
            r["step"]: r["loss"]
            for r in read_metrics(home / "ref" / "shared" / "ref" / "output" / "metrics.jsonl")
        }
        assert sorted(reference) == list(range(1, STEPS + 1))

        shutil.rmtree(home / "x")  # a new cluster: no record of x, the bucket kept
        code, _, err = _cli(capsys, "resume", "--local", "x")
        assert code == 1 and err.count("\n") == 1
        assert "no record of job x on this machine (a new cluster?)" in err
        assert "submit FILE --from ROOT --local" in err

        empty = tmp_path / "empty-root"
        empty.mkdir()
        code, _, err = _cli(capsys, "submit", "--local", DEV, "--name", "x", "--from", str(empty))
        assert (
            code == 2 and err.count("\n") == 1 and f"no complete checkpoint in {empty / 'x'}" in err
        )
        assert not (home / "x").exists()  # refused before anything was created

        root = f"s3://{BUCKET}/{PREFIX}"
        code, out, err = _cli(
            capsys, "submit", "--local", DEV, "--name", "x", *sets, *steps, "--from", root, "-f"
        )
        assert code == 0, (out + err)[-3000:]
        info = backend.status("x")
        assert info.phase == "Succeeded" and info.generation == 1
        rows = read_metrics(own / "output" / "metrics.jsonl")
        assert [r["step"] for r in rows] == list(range(n + 1, STEPS + 1))  # each step once
        diff = max(abs(r["loss"] - reference[r["step"]]) for r in rows)
        assert diff <= 1e-6, diff
        pods = "".join(p.read_text(errors="replace") for p in (home / "x" / "logs").glob("*.log"))
        assert f"at step {n}" in pods
        assert list(own.glob("step-*")) == []  # its checkpoints went to the bucket
        keys = {
            o["Key"]
            for o in s3.client().list_objects_v2(Bucket=BUCKET, Prefix=f"{PREFIX}/x/")["Contents"]
        }
        assert f"{PREFIX}/x/step-{STEPS:06d}/COMPLETE" in keys
        # a later resume keeps the root (the record holds it)
        assert (home / "x" / "record.json").read_text().count(root) == 1
    finally:
        for name in ("ref", "x"):
            if (home / name / "record.json").is_file() and backend.alive(name):
                backend.cancel(name)


def test_resume_required_stops_before_the_first_step_without_a_checkpoint(
    s3: S3Server, tmp_path: Path
) -> None:
    """``--resume_required`` with a root holding no complete checkpoint: one line, exit 1,
    no step trained (one process, no torchrun); a partial save (no COMPLETE) does not count."""
    client = s3.client()
    client.put_object(Bucket=BUCKET, Key="empty/job/step-000004/.metadata", Body=b"x")
    argv = [
        *TRAIN_TINY,
        "--max_train_step=2",
        f"--output_dir={tmp_path / 'out'}",
        f"--dist_checkpoint_root_folder=s3://{BUCKET}/empty",
        "--dist_checkpoint_folder=job",
        "--resume",
        "--resume_required",
    ]
    proc = run(finetune_cmd(0, argv), timeout=300, **s3.env)
    assert proc.returncode != 0
    lines = [line for line in proc.stderr.splitlines() if line.strip()]
    expected = f"--resume_required: no complete checkpoint under s3://{BUCKET}/empty/job"
    assert len(lines) == 1 and expected in lines[0], proc.stderr[-2000:]
    assert not (tmp_path / "out" / "metrics.jsonl").exists()
    proc = run(finetune_cmd(0, [*argv[:-2], "--resume_required"]), timeout=60)
    assert proc.returncode != 0 and "--resume_required: needs --resume" in proc.stderr


@pytest.fixture
def kube(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[tuple[FakeKube, str]]:
    monkeypatch.setattr(cluster_logs, "POLL_S", 0.01)
    fake = FakeKube().start()
    try:
        yield fake, str(fake.kubeconfig(tmp_path / "kubeconfig"))
    finally:
        fake.stop()


def _flags(fake: FakeKube) -> list[str]:
    job = fake.get("pytorchjobs", P4DE_NAME)
    assert job is not None
    spec = job["spec"]["pytorchReplicaSpecs"]["Worker"]["template"]["spec"]
    return pj.finetune_flags(spec["containers"][0]["command"])


def test_cluster_submit_from_renders_the_root_and_records_it(
    kube: tuple[FakeKube, str], capsys: pytest.CaptureFixture[str]
) -> None:
    fake, kubeconfig = kube
    where = ("--kubeconfig", kubeconfig)
    code, _, err = _cli(capsys, "resume", P4DE_NAME, *where)
    assert code == 1 and err.count("\n") == 1
    assert f"no record of job {P4DE_NAME} on this cluster (namespace default" in err
    assert "use `eks-fsdp jobs submit FILE --from ROOT`" in err
    assert fake.get("pytorchjobs", P4DE_NAME) is None

    # bad roots stop before any request (the claim of p4de-odcr's job is mounted at /checkpoints)
    for uri, message in (
        ("s3://", "--from s3://: no bucket"),
        ("/tmp/ckpt", "--from /tmp/ckpt: not on the job's checkpoint claim"),
        ("relative/path", "a path in the pods must be absolute"),
    ):
        code, _, err = _cli(capsys, "submit", P4DE, *where, "--image", IMAGE, "--from", uri)
        assert code == 2 and err.count("\n") == 1 and message in err, err
        assert fake.get("configmaps", record_name(P4DE_NAME)) is None

    root = "s3://ckpt-bucket/training/checkpoints"
    code, _, err = _cli(capsys, "submit", P4DE, *where, "--image", IMAGE, "--from", root + "/")
    assert code == 0, err
    flags = _flags(fake)
    assert [f for f in flags if f.startswith("--dist_checkpoint_root_folder=")] == [
        f"--dist_checkpoint_root_folder={root}"
    ]
    assert {"--resume", REQUIRED_FLAG, f"--dist_checkpoint_folder={P4DE_NAME}"} <= set(flags)
    assert f"--output_dir=/checkpoints/{P4DE_NAME}/output" in flags  # metrics on the claim
    record = fake.get("configmaps", record_name(P4DE_NAME))
    assert record is not None and record["data"]["checkpointRoot"] == root
    assert record["data"]["generation"] == "1"

    # a later resume (generation 2) continues from the recorded root
    failed = {"conditions": [{"type": "Failed", "status": "True", "reason": "X"}]}
    fake.get("pytorchjobs", P4DE_NAME)["status"] = failed  # type: ignore[index]
    assert _cli(capsys, "resume", P4DE_NAME, *where)[0] == 0
    assert f"--dist_checkpoint_root_folder={root}" in _flags(fake)

    # a path on the claim is taken as is
    code, _, err = _cli(
        capsys, "submit", P4DE, *where, "--image", IMAGE, "--name", "other", "--from",
        "/checkpoints/saved/",
    )  # fmt: skip
    assert code == 0, err
    job = fake.get("pytorchjobs", "other")
    assert job is not None
    command = job["spec"]["pytorchReplicaSpecs"]["Worker"]["template"]["spec"]["containers"][0][
        "command"
    ]
    assert "--dist_checkpoint_root_folder=/checkpoints/saved" in pj.finetune_flags(command)
