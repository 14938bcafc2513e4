"""``eks-fsdp render`` shows what ``eks-fsdp jobs submit`` creates.

Renders the p4de-odcr stack's example job as ``api: v1`` and as a fixed-size ``api: v2`` job
file, and a stack with ``trainerV2: true``. If this fails, render would show a PyTorchJob
without the Kueue labels (and, on an EFA pool, the preferred-topology annotation) submit puts on
it (a reader of the YAML would apply a job no queue admits), a PyTorchJob where submit creates a TrainJob, a TrainJob Trainer's CRD at the pin
refuses, or leave out the Trainer v2 install a stack with the key needs.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any

import pytest
import yaml

from jobs import queue
from jobs import schema as jobfile
from jobs.build import build
from workloads import render
from workloads.specs import kueue
from workloads.specs import pytorchjob as pj
from workloads.specs import trainjob as tj

EXAMPLES = Path(__file__).resolve().parents[2] / "jobs" / "examples"
IMAGE = "123456789012.dkr.ecr.us-east-1.amazonaws.com/eks-fsdp:sha-1"
STACK = "p4de-odcr"


def _job_file(tmp_path: Path, *sets: str) -> Path:
    job = jobfile.load(EXAMPLES / f"{STACK}.yaml", sets=list(sets))
    path = tmp_path / "job.yaml"
    path.write_text(job.dump())
    return path


def _objects(path: Path) -> list[dict[str, Any]]:
    return [o for o in yaml.safe_load_all(path.read_text()) if o]


def _prefer_one_block(job: Any, template: dict[str, Any]) -> None:
    """What submit adds to the pod template of a job on an EFA pool (p4de-odcr is one): Kueue's
    preferred topology, the bottom EKS network layer."""
    group = job.platform.node_group(job.node_group)
    assert group.efa and kueue.topology_aware(group)
    template["metadata"]["annotations"][kueue.PREFERRED_TOPOLOGY_ANNOTATION] = (
        "topology.k8s.aws/network-node-layer-3"
    )


def test_a_v1_job_renders_with_the_queue_labels_submit_puts(tmp_path: Path) -> None:
    path = _job_file(tmp_path)
    out = tmp_path / "out"
    render.render(STACK, out, job=path, image=IMAGE)
    job = jobfile.load(path, stack=STACK)
    assert job.queue is not None
    (rendered,) = _objects(out / "pytorchjob.yaml")
    w = build(job, image=IMAGE)
    want = pj.pytorchjob(w.job, w.etcd.host)
    want["metadata"]["labels"].update(
        {queue.QUEUE_LABEL: job.node_group, queue.PRIORITY_LABEL: "experiment"}
    )
    _prefer_one_block(job, want["spec"]["pytorchReplicaSpecs"]["Worker"]["template"])
    assert rendered == want
    assert not (out / "trainjob.yaml").exists() and not (out / tj.INSTALL_DIR).exists()


def test_a_v2_job_renders_the_trainjob_submit_creates(tmp_path: Path) -> None:
    path = _job_file(tmp_path, "api=v2", "minWorkers=2", "workers=2")
    out = tmp_path / "out"
    files = render.render(STACK, out, job=path, image=IMAGE)
    assert out / "trainjob.yaml" in files and not (out / "pytorchjob.yaml").exists()
    job = jobfile.load(path, stack=STACK)
    (rendered,) = _objects(out / "trainjob.yaml")
    want = tj.trainjob(build(job, image=IMAGE).job)
    want["metadata"]["labels"].update(
        {queue.QUEUE_LABEL: job.node_group, queue.PRIORITY_LABEL: "experiment"}
    )
    _prefer_one_block(job, tj.pod_spec_patch(want))
    assert rendered == want
    tj.validate(rendered)
    (policy,) = _objects(out / "workers-network-policy.yaml")
    selected = policy["spec"]["podSelector"]["matchLabels"]
    pod_labels = tj.pod_spec_patch(rendered)["metadata"]["labels"]
    assert selected.items() <= pod_labels.items()  # the policy selects the TrainJob's pods


def test_a_stack_with_trainer_v2_renders_its_install(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    real = render.load_job

    def with_trainer(stack: str, job: Any = None) -> Any:
        spec = real(stack, job)
        return dataclasses.replace(
            spec, platform=dataclasses.replace(spec.platform, trainer_v2=True)
        )

    monkeypatch.setattr(render, "load_job", with_trainer)
    out = tmp_path / "out"
    code = render.main(["--stack", STACK, "--out", str(out), "--image", IMAGE])
    printed = capsys.readouterr().out
    assert code == 0
    folder = out / tj.INSTALL_DIR
    assert sorted(p.name for p in folder.iterdir()) == ["kustomization.yaml", "runtime.yaml"]
    for name, text in tj.manifest_files().items():
        assert (folder / name).read_text() == text
    tj.validate(yaml.safe_load((folder / "runtime.yaml").read_text()))
    assert f"trainer-v2: kubectl apply --server-side -k {folder}" in printed
