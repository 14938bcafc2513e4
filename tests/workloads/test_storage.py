"""The shared checkpoint volume as data (``workloads.specs.storage``) and as rendered YAML.

Nothing is mocked: the objects are plain dicts validated with kubernetes-validate in strict
mode for the stack's Kubernetes version, and ``workloads.render`` writes real files.

If these fail, the FSx stacks would apply a PersistentVolume the API server rejects (or one that
names no file system, or binds to another claim), a claim that a dynamic provisioner answers
instead of the static volume, or a job that mounts a claim nobody created; or ``render`` would
write a checkpoint volume that differs from what ``pulumi up`` applies.
"""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest
import yaml

from infra import versions
from infra.config import DEFAULT_CHECKPOINT_CLAIM
from jobs.build import build
from tests.workloads.conftest import job_stack, stack_workloads
from workloads import render
from workloads.specs import pytorchjob, storage
from workloads.specs.stack import objects_by_component
from workloads.specs.validate import ValidationError, validate

FS = storage.FileSystemRef(
    file_system_id="fs-0123456789abcdef0",
    dns_name="fs-0123456789abcdef0.fsx.us-east-2.amazonaws.com",
    mount_name="abcdefgh",
)
IMAGE = "repo/train:sha-1234"


def _settings(**kw: object) -> storage.CheckpointVolumeSettings:
    base: dict[str, object] = {"claim_name": "fsx-checkpoints", "capacity_gib": 2400}
    return storage.CheckpointVolumeSettings(**{**base, **kw})  # type: ignore[arg-type]


def test_volume_and_claim_validate_strictly_and_bind_to_each_other() -> None:
    s = _settings(namespace="train")
    pv, pvc = storage.objects(s, FS)
    for obj in (pv, pvc):
        validate(obj, versions.KUBERNETES_VERSION)
    assert pv["spec"]["csi"] == {
        "driver": "fsx.csi.aws.com",
        "volumeHandle": "fs-0123456789abcdef0",
        "volumeAttributes": {"dnsname": FS.dns_name, "mountname": "abcdefgh"},
    }
    assert pv["spec"]["capacity"] == {"storage": "2400Gi"}
    assert pv["spec"]["accessModes"] == pvc["spec"]["accessModes"] == ["ReadWriteMany"]
    assert pv["spec"]["storageClassName"] == pvc["spec"]["storageClassName"] == ""
    assert pv["spec"]["claimRef"] == {"namespace": "train", "name": "fsx-checkpoints"}
    assert pv["metadata"]["name"] == pvc["spec"]["volumeName"] == "train-fsx-checkpoints"
    assert "namespace" not in pv["metadata"]  # cluster-scoped
    assert pvc["metadata"] == {
        "name": "fsx-checkpoints",
        "namespace": "train",
        "labels": pvc["metadata"]["labels"],
    }
    assert pvc["spec"]["resources"] == {"requests": {"storage": "2400Gi"}}


def test_strict_validation_rejects_unknown_volume_fields() -> None:
    pv = storage.persistent_volume(_settings(), FS)
    pv["spec"]["csi"]["volumeHandel"] = "fs-1"
    with pytest.raises(ValidationError, match="PersistentVolume/default-fsx-checkpoints"):
        validate(pv, versions.KUBERNETES_VERSION)


@pytest.mark.parametrize(
    ("change", "field"),
    [
        ({"claim_name": "Checkpoints_1"}, "checkpoint_volume.claim_name"),
        ({"namespace": "a.b"}, "checkpoint_volume.namespace"),
        ({"capacity_gib": 0}, "checkpoint_volume.capacity_gib"),
    ],
)
def test_bad_volume_settings_name_their_field(change: dict[str, object], field: str) -> None:
    with pytest.raises(ValueError, match=field.replace(".", r"\.")):
        _settings(**change)


def test_file_system_ref_needs_every_part() -> None:
    with pytest.raises(ValueError, match=r"file_system\.mount_name"):
        storage.FileSystemRef(file_system_id="fs-1", dns_name="x", mount_name="")
    ref = storage.file_system_ref("fs-1", "m", "us-east-2")
    assert ref.dns_name == "fs-1.fsx.us-east-2.amazonaws.com"


@pytest.mark.parametrize("stack", ["p4de-odcr", "p5-16"])
def test_fsx_stacks_mount_the_claim_they_create_and_resume(stack: str) -> None:
    cfg = job_stack(stack).platform
    w = stack_workloads(stack)
    assert w.checkpoint_volume is not None
    assert w.checkpoint_volume.claim_name == w.job.checkpoint_claim == DEFAULT_CHECKPOINT_CLAIM
    assert w.checkpoint_volume.capacity_gib == cfg.shared_storage.storage_capacity_gib
    assert w.checkpoint_volume.namespace == w.job.namespace == "default"
    assert w.job.workers > 1 and w.job.resumes
    job = pytorchjob.pytorchjob(w.job, w.etcd.host)
    spec = job["spec"]["pytorchReplicaSpecs"]["Worker"]["template"]["spec"]
    assert {"name": "checkpoints", "persistentVolumeClaim": {"claimName": "fsx-checkpoints"}} in (
        spec["volumes"]
    )
    assert spec["containers"][0]["command"].count("--resume") == 1
    pv, pvc = objects_by_component(w, FS)["checkpoint-volume"]
    assert pvc["metadata"]["name"] == "fsx-checkpoints"
    assert pv["spec"]["csi"]["volumeHandle"] == FS.file_system_id


def test_an_existing_claim_is_mounted_without_creating_one() -> None:
    """sharedStorage none + job.checkpointClaim: the job mounts a claim made outside the stack."""
    spec = job_stack("p5-16")
    assert spec.checkpoint_claim == DEFAULT_CHECKPOINT_CLAIM  # the FSx stack's default claim
    spec = replace(
        spec,
        platform=replace(spec.platform, shared_storage=job_stack("dev").platform.shared_storage),
        checkpoint_claim="team-efs",
    )
    w = build(spec, image=IMAGE)
    assert w.checkpoint_volume is None
    assert w.job.checkpoint_claim == "team-efs" and w.job.resumes
    assert "checkpoint-volume" not in objects_by_component(w)


def test_dev_has_no_checkpoint_volume() -> None:
    w = stack_workloads("dev")
    assert w.checkpoint_volume is None and w.job.checkpoint_claim is None
    assert "checkpoint-volume" not in objects_by_component(w)


def test_render_p5_writes_the_checkpoint_volume(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    image = "123456789012.dkr.ecr.us-east-1.amazonaws.com/eks-fsdp-p5-16-training:sha-1"
    argv = ["--stack", "p5-16", "--out", str(tmp_path), "--image", image]
    fs_flags = ["--fsx-id", FS.file_system_id, "--fsx-mount-name", FS.mount_name]
    assert render.main([*argv, *fs_flags]) == 0
    w = stack_workloads("p5-16")
    written = list(yaml.safe_load_all((tmp_path / "checkpoint-volume.yaml").read_text()))
    assert written == objects_by_component(w, FS)["checkpoint-volume"]
    assert [o["kind"] for o in written] == ["PersistentVolume", "PersistentVolumeClaim"]
    (job,) = yaml.safe_load_all((tmp_path / "pytorchjob.yaml").read_text())
    command = job["spec"]["pytorchReplicaSpecs"]["Worker"]["template"]["spec"]["containers"][0][
        "command"
    ]
    assert "--resume" in command
    out = capsys.readouterr().out
    assert "no shared checkpoint claim" not in out
    assert "placeholders" not in out
    # Without the file system's id: placeholders, and a line saying how to fill them in.
    assert render.main(argv) == 0
    pv = next(yaml.safe_load_all((tmp_path / "checkpoint-volume.yaml").read_text()))
    assert pv["spec"]["csi"]["volumeHandle"] == storage.PLACEHOLDER_FILE_SYSTEM_ID
    assert "--fsx-id $(pulumi stack output sharedFileSystemId)" in capsys.readouterr().out
