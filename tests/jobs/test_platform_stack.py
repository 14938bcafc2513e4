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

import jobs.file
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
        monkeypatch.setattr(jobs.file, name, refuse)
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
