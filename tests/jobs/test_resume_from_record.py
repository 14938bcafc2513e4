"""``resume NAME --from s3://...`` on a machine (or cluster) with no record of the job.

``submit --from ROOT`` writes the job's record beside its checkpoints, ``ROOT/NAME/job.json``
(the job file's values and the image); ``resume NAME --from ROOT`` with no local record
rebuilds the submission from it. Local scenario, nothing mocked but AWS itself (moto's S3
server on loopback, as tests/jobs/test_submit_from.py): ``x`` trains to a checkpoint, its
records are wiped, ``submit --from`` continues it in the bucket and writes ``job.json``; it is
cancelled after a checkpoint there, the records are wiped again, and ``resume x --from ROOT``
trains the remaining steps, each logged once, with the losses of an uninterrupted run. A root
without ``job.json`` answers the usual one-line hint, naming the file it looked for.

If these fail, a job could not be resumed by name on a new cluster, or a resumed job would
redo or skip steps. The cluster test also checks the image and the root a rebuilt
PyTorchJob gets.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from jobs.cluster import logs as cluster_logs
from jobs.local.backend import STATE_ENV, LocalBackend
from jobs.manifest import record_name
from jobs.resume_from import REQUIRED_FLAG
from localrun.result import complete_checkpoint_steps, read_metrics
from tests.jobs.fake_kube import FakeKube
from tests.jobs.test_submit_from import (
    BUCKET,
    DEV,
    IMAGE,
    P4DE,
    P4DE_NAME,
    PREFIX,
    TINY,
    _cli,
    _export,
    _wait,
    s3,  # noqa: F401 - the fixture
)
from tests.training.conftest import S3Server
from training.checkpoint import latest_complete
from training.s3.uri import S3Uri
from workloads.specs import pytorchjob as pj

STEPS, EVERY = 16, 4


@pytest.mark.slow
@pytest.mark.integration
def test_resume_by_name_from_s3_rebuilds_the_job_from_its_record(
    s3: S3Server,  # noqa: F811
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    home = tmp_path / "jobs"
    monkeypatch.setenv(STATE_ENV, str(home))
    sets = [f"--set={s}" for s in TINY]
    steps = [f"--set=maxTrainStep={STEPS}", f"--set=checkpointEvery={EVERY}"]
    backend = LocalBackend(home)
    root = f"s3://{BUCKET}/{PREFIX}"
    try:
        for name in ("ref", "x"):
            code, _, err = _cli(capsys, "submit", "--local", DEV, "--name", name, *sets, *steps)
            assert code == 0, err
        own = home / "x" / "shared" / "x"
        _wait("x's first checkpoint", lambda: complete_checkpoint_steps(own))
        assert _cli(capsys, "cancel", "--local", "x")[0] == 0
        n = complete_checkpoint_steps(own)[0]  # the first, however far a loaded run went on
        assert _export(s3, own / f"step-{n:06d}", f"{PREFIX}/x/step-{n:06d}") > 0
        shutil.rmtree(home / "x")

        # no job.json under the root yet: the usual hint, one line, naming the file
        code, _, err = _cli(capsys, "resume", "--local", "x", "--from", root)
        assert code == 1 and err.count("\n") == 1, err
        assert "submit FILE --from ROOT --local" in err and f"{root}/x/job.json" in err

        code, _, err = _cli(capsys, "submit", "--local", DEV, "--name", "x", *sets, *steps,
                            "--from", root)  # fmt: skip
        assert code == 0, err
        body = s3.client().get_object(Bucket=BUCKET, Key=f"{PREFIX}/x/job.json")["Body"].read()
        assert json.loads(body)["values"]["name"] == "x"
        ckpts = S3Uri(BUCKET, f"{PREFIX}/x")

        def newer() -> int | None:
            latest = latest_complete(ckpts)
            step = int(latest.name[5:11]) if latest is not None else 0
            return step if step > n else None

        m = _wait("a checkpoint of the second generation in the bucket", newer)
        assert _cli(capsys, "cancel", "--local", "x")[0] == 0
        # A tiny model's steps take milliseconds: the generation may reach its end before the
        # cancel lands. Then its final checkpoint goes, as if cancelled before it (training
        # keeps the two newest, so the one before it is there).
        client = s3.client()
        m = int(latest_complete(ckpts).name[5:11])  # type: ignore[union-attr]
        if m == STEPS:
            final = f"{PREFIX}/x/step-{STEPS:06d}"
            for obj in client.list_objects_v2(Bucket=BUCKET, Prefix=final)["Contents"]:
                client.delete_object(Bucket=BUCKET, Key=obj["Key"])
            m = int(latest_complete(ckpts).name[5:11])  # type: ignore[union-attr]
        assert n < m < STEPS, (n, m)
        shutil.rmtree(home / "x")  # a new cluster again

        code, out, err = _cli(capsys, "resume", "--local", "x", "--from", root, "-f")
        assert code == 0, (out + err)[-3000:]
        assert backend.status("x").phase == "Succeeded"
        _wait("the reference run", lambda: backend.status("ref").phase == "Succeeded")
        reference = {
            r["step"]: r["loss"]
            for r in read_metrics(home / "ref" / "shared" / "ref" / "output" / "metrics.jsonl")
        }
        rows = read_metrics(own / "output" / "metrics.jsonl")
        assert [r["step"] for r in rows] == list(range(m + 1, STEPS + 1))  # each step once
        diff = max(abs(r["loss"] - reference[r["step"]]) for r in rows)
        assert diff <= 1e-6, diff
    finally:
        for name in ("ref", "x"):
            if (home / name / "record.json").is_file() and backend.alive(name):
                backend.cancel(name)


def test_cluster_resume_by_name_from_s3_on_a_new_cluster(
    s3: S3Server,  # noqa: F811
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    """Cluster side (``FakeKube``, tests/jobs/fake_kube.py, a loopback server in the API's
    shapes): ``submit --from s3://...`` writes ``job.json`` with the image; on a second, empty
    cluster ``resume NAME --from`` creates the job with that image, the root and
    ``--resume_required``, and keeps the root in the new record."""
    monkeypatch.setattr(cluster_logs, "POLL_S", 0.01)
    root = f"s3://{BUCKET}/{PREFIX}"
    old, new = FakeKube().start(), FakeKube().start()
    try:
        where = ("--kubeconfig", str(old.kubeconfig(tmp_path / "old")))
        code, _, err = _cli(capsys, "submit", P4DE, *where, "--image", IMAGE, "--from", root)
        assert code == 0, err
        key = f"{PREFIX}/{P4DE_NAME}/job.json"
        saved = json.loads(s3.client().get_object(Bucket=BUCKET, Key=key)["Body"].read())
        assert saved["image"] == IMAGE and saved["values"]["name"] == P4DE_NAME

        where = ("--kubeconfig", str(new.kubeconfig(tmp_path / "new")))
        code, _, err = _cli(capsys, "resume", P4DE_NAME, *where, "--from", root)
        assert code == 0, err
        job = new.get("pytorchjobs", P4DE_NAME)
        assert job is not None
        spec = job["spec"]["pytorchReplicaSpecs"]["Worker"]["template"]["spec"]
        assert spec["containers"][0]["image"] == IMAGE
        flags = pj.finetune_flags(spec["containers"][0]["command"])
        assert {f"--dist_checkpoint_root_folder={root}", "--resume", REQUIRED_FLAG} <= set(flags)
        record = new.get("configmaps", record_name(P4DE_NAME))
        assert record is not None and record["data"]["checkpointRoot"] == root

        code, _, err = _cli(capsys, "resume", "other", *where, "--from", root)
        assert code == 1 and err.count("\n") == 1 and f"{root}/other/job.json" in err, err
    finally:
        old.stop()
        new.stop()
