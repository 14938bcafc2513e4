"""The Pulumi program with ``trainerV2``: Kubeflow Trainer v2 and its torch runtime, opt-in.

Runs the real ``__main__.py`` for the p5-16 stack with and without ``trainerV2: true`` under
Pulumi's mocks (no engine, no AWS, no cluster here: ``tests/pulumi_mocks.py``; the kustomize
``Directory`` is a remote component, so nothing inside it runs and what it would apply is read
from its directory). If this fails, ``pulumi up`` would install Trainer v2 on stacks that did
not ask for it (a second controller, CRDs and JobSet), leave ``api: v2`` jobs without the
``eks-fsdp-torch`` runtime they name, or apply it off the cluster's provider or unpinned.
"""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from infra import versions
from infra.config import parse, project_defaults, stack_file_values
from tests.pulumi_mocks import USER_SET, ProgramRun, run_program
from workloads import trainer
from workloads.specs import trainjob as tj

SECRETS = {"hfToken": "hf_mock", "grafanaAdminPassword": "mock-password"}
DIRECTORY = "kubernetes:kustomize/v2:Directory"


@pytest.fixture(scope="module")
def on() -> ProgramRun:
    return run_program("p5-16", overrides={"trainerV2": True}, secrets=SECRETS)


@pytest.fixture(scope="module")
def off() -> ProgramRun:
    return run_program("p5-16", secrets=SECRETS)


def test_the_key_is_declared_off_by_default_and_parsed() -> None:
    assert project_defaults()["trainerV2"] is False
    raw = {**project_defaults(), **USER_SET, **stack_file_values("p5-16")}
    assert parse(raw, stack="p5-16").trainer_v2 is False
    assert parse({**raw, "trainerV2": True}, stack="p5-16").trainer_v2 is True
    with pytest.raises(ValueError, match="trainerV2") as err:
        parse({**raw, "trainerV2": "yes"}, stack="p5-16")
    assert "\n" not in str(err.value)


def test_trainer_v2_and_its_runtime_exist_only_when_on(on: ProgramRun, off: ProgramRun) -> None:
    assert off.of_type(trainer.TYPE_TOKEN) == []
    assert [r.name for r in off.of_type(DIRECTORY)] == ["training-operator-install"]  # v1's
    (comp,) = on.of_type(trainer.TYPE_TOKEN)
    (install,) = [r for r in on.children_of(comp) if r.type == DIRECTORY]
    provider = on.one("pulumi:providers:kubernetes", "cluster-k8s")
    assert install.provider.startswith(provider.urn + "::")
    directory = Path(install.inputs["directory"])
    assert directory == tj.MANIFEST_DIR
    kustomization = yaml.safe_load((directory / "kustomization.yaml").read_text())
    assert kustomization == tj.kustomization()
    overlay, runtime_file = kustomization["resources"]
    assert overlay.endswith(f"?ref={versions.TRAINER_V2_VERSION}")
    runtime = yaml.safe_load((directory / runtime_file).read_text())
    tj.validate(runtime)
    assert (runtime["kind"], runtime["metadata"]["name"]) == ("ClusterTrainingRuntime", tj.RUNTIME)
    # Everything else the program creates is the same with the key on.
    assert sorted((r.type, r.name) for r in off.resources) == sorted(
        (r.type, r.name)
        for r in on.resources
        if r is not comp and r is not install and r.parent != comp.urn
    )
