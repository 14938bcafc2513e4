"""The cluster stack declares the platform, never a job: the real Pulumi program under mocks.

Mocked, and why: no Pulumi engine or AWS here; ``tests/pulumi_mocks.run_program`` runs
``__main__.py`` with Pulumi's unit-test mocks (providers echo their inputs). If these fail, a
``pulumi up`` would again own a job: an edit of ``training/`` (a new image tag) or of a job file
would replace or re-create resources of the stack (before, the PyTorchJob was deleted and
created again, on p5-16 128 GPUs' worth of running job), or a stack file with a leftover
``job:`` block would be taken as a job the next ``up`` submits.
"""

from __future__ import annotations

from typing import Any

import pytest

import jobs.schema
import tests.pulumi_mocks as pm
import workloads.training_image as training_image
from infra.config import ConfigError
from tests.pulumi_mocks import ProgramRun, run_program

STACKS = ("dev", "p4de-odcr", "p5-16")
SECRETS = {"hfToken": "hf_mock", "grafanaAdminPassword": "mock-password"}
JOB_KINDS = ("PyTorchJob", "TrainJob", "TrainingRuntime", "ClusterTrainingRuntime")
IMAGE_TYPES = ("docker-build:index:Image",)
"""What an image-tag change may touch: the build (a new tag pushed); nothing else."""


def _declared(run: ProgramRun, skip: tuple[str, ...] = ()) -> dict[tuple[str, str], Any]:
    """(type, name) -> inputs of every resource but ``skip``'s types."""
    return {(r.type, r.name): r.inputs for r in run.resources if r.type not in skip}


@pytest.mark.parametrize("stack", STACKS)
def test_no_stack_declares_a_job(stack: str) -> None:
    run = run_program(stack, secrets=SECRETS)
    kinds = [
        r
        for r in run.resources
        if r.type.rsplit(":", 1)[-1] in JOB_KINDS
        or r.inputs.get("kind") in JOB_KINDS
        or r.type == "eks-fsdp:workloads:PyTorchJob"
    ]
    assert kinds == []
    assert {"jobName", "rdzvId"}.isdisjoint(run.outputs)
    assert {"jobsNamespace", "checkpointClaims", "etcdEndpoint", "trainingImage"} <= set(
        run.outputs
    )


@pytest.mark.parametrize("stack", ["dev", "p5-16"])
def test_a_new_image_tag_changes_only_the_build(
    stack: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Two ``up``s that differ only in the training image's tag (an edit of ``training/``):
    every resource but the image build is declared with the same inputs, so nothing is
    replaced or updated; ``trainingImage`` names the new tag for the next submitted job."""
    runs = []
    for tag in ("sha-aaaaaaaaaaaa", "sha-bbbbbbbbbbbb"):
        monkeypatch.setattr(training_image, "content_tag", lambda *_a, t=tag, **_k: t)
        runs.append(run_program(stack, secrets=SECRETS))
    first, second = runs
    assert _declared(first, IMAGE_TYPES) == _declared(second, IMAGE_TYPES)
    assert [r.name for r in first.of_type(IMAGE_TYPES[0])] == [
        r.name for r in second.of_type(IMAGE_TYPES[0])
    ]
    assert first.outputs["trainingImage"] != second.outputs["trainingImage"]
    assert "sha-bbbbbbbbbbbb" in second.outputs["trainingImage"]


def test_the_program_never_reads_a_job_file(monkeypatch: pytest.MonkeyPatch) -> None:
    """Job files can change (or be submitted, cancelled, resumed) without any effect on the
    stack: the program runs with the job-file reader disabled and declares the same."""
    plain = run_program("dev", secrets=SECRETS)

    def refuse(*_a: Any, **_k: Any) -> Any:
        raise AssertionError("the Pulumi program read a job file")

    for name in ("load", "loads", "parse"):
        monkeypatch.setattr(jobs.schema, name, refuse)
    again = run_program("dev", secrets=SECRETS)
    assert _declared(again) == _declared(plain)


def test_a_leftover_job_block_stops_the_program_with_the_way_out() -> None:
    """Refused rather than ignored: ignored, the block reads as a job the next ``up`` submits."""
    dev_job = {"name": "llama-finetune-dev", "workers": 2, "model": "tiny-llama"}
    with pytest.raises(ConfigError, match=r"^eks-fsdp:job: jobs are not part of the cluster"):
        run_program("dev", overrides={"job": dev_job}, secrets=SECRETS)
    # Pulumi.yaml's declared empty default is what the engine hands over: it passes
    assert run_program("dev", overrides={"job": {}}, secrets=SECRETS).resources
    assert pm.stack_config("dev")["job"] == {}


def test_the_hf_token_secret_keeps_its_state_from_when_the_job_owned_it(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Before jobs left the stack, the Secret was ``pytorch-job-hf-token``, a child of the
    ``eks-fsdp:workloads:PyTorchJob`` component ``pytorch-job`` (``workloads/pytorch_job.py`` in
    git history). Without an alias to that URN, the first ``up`` of an old stack would create
    ``hf-token`` (refused: the Kubernetes Secret of that name exists, pulumi-kubernetes 4.34
    fails with AlreadyExists) and delete the old one. The alias is read from the
    RegisterResource request the engine would get (the mock monitor records it)."""
    seen: dict[str, list[Any]] = {}
    register = pm.RecordingMockMonitor.RegisterResource

    def recording(self: Any, request: Any) -> Any:
        seen[request.name] = list(request.aliases)
        return register(self, request)

    monkeypatch.setattr(pm.RecordingMockMonitor, "RegisterResource", recording)
    run = run_program("p5-16", secrets=SECRETS)
    secret = run.one("kubernetes:core/v1:Secret", "hf-token")
    assert secret.inputs["metadata"]["name"] == "hf-token"
    assert secret.parent == "urn:pulumi:p5-16::eks-fsdp::pulumi:pulumi:Stack::eks-fsdp-p5-16"
    (alias,) = seen["hf-token"]
    spec = alias.spec
    # the old component was a child of the stack: its URN carries no parent type
    assert (spec.name, spec.type, spec.parentUrn, spec.noParent) == (
        "pytorch-job-hf-token",
        "",  # the type is the Secret's, as it was
        "urn:pulumi:p5-16::eks-fsdp::eks-fsdp:workloads:PyTorchJob::pytorch-job",
        False,
    )
    assert "hf-token" not in {r.name for r in run_program("dev").resources}  # no hfToken
