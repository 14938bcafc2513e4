"""The workload components inside the real Pulumi program, under Pulumi's unit-test mocks.

Mocked, and why: there is no Pulumi engine, AWS account, registry or Kubernetes API server here.
``tests/pulumi_mocks.run_program`` runs ``__main__.py`` with Pulumi's mocks (providers echo their
inputs); this module adds the two computed outputs the workloads read: the ECR repository URL
and the pushed image reference (with a digest). The kustomize ``Directory`` is a remote
component: under mocks only its inputs are seen, nothing is fetched.

If these fail, ``pulumi up`` would submit a different job than ``workloads.render`` shows: a
PyTorchJob without its rendezvous id or on the wrong provider, the Hugging Face token inside the
job object instead of a Secret, an image tag that is not the content hash, an operator install
that is not the pinned overlay, or workloads outside their components.
"""

from __future__ import annotations

import json
from typing import Any

import pytest

import tests.pulumi_mocks as pm
from infra.config import load_stack_file
from tests.pulumi_mocks import ProgramRun, run_program
from workloads.specs import pytorchjob as spec
from workloads.specs.image import content_tag
from workloads.specs.settings import EtcdSettings, JobSettings, from_stack
from workloads.training_operator import MANIFEST_DIR

TOKEN = "hf_mock_secret_token_0123456789"
REPO_URL = f"{pm.ACCOUNT}.dkr.ecr.us-west-2.amazonaws.com/eks-fsdp-training"
DIGEST = "sha256:" + "ab" * 32
JOB_TYPE = "kubernetes:kubeflow.org/v1:PyTorchJob"
WORKLOAD_TYPES = {
    "eks-fsdp:workloads:TrainingImage",
    "eks-fsdp:workloads:TrainingOperator",
    "eks-fsdp:workloads:Etcd",
    "eks-fsdp:workloads:PyTorchJob",
}

_plain_outputs = pm._mock_outputs


def _outputs(args: Any) -> tuple[str, dict[str, Any]]:
    rid, state = _plain_outputs(args)
    if args.typ == "aws:ecr/repository:Repository":
        state["repositoryUrl"] = REPO_URL
        state["registryId"] = pm.ACCOUNT
    elif args.typ == "docker-build:index:Image":
        state["ref"] = f"{args.inputs['tags'][0]}@{DIGEST}"
        state["digest"] = DIGEST
    return rid, state


@pytest.fixture(scope="module")
def runs() -> dict[str, ProgramRun]:
    patch = pytest.MonkeyPatch()
    patch.setattr(pm, "_mock_outputs", _outputs)
    try:
        secrets = {"hfToken": TOKEN, "grafanaAdminPassword": "mock-password"}
        out = {s: run_program(s, secrets=secrets) for s in ("dev", "p4de-odcr", "p5-16")}
        dev = pm.stack_config("dev")
        out["pinned-image"] = run_program(
            "dev",
            overrides={"job": {**dev["job"], "image": "example.com/train:v1.2.3"}},
            secrets=secrets,
        )
        out["no-job"] = run_program(
            "dev", overrides={"job": {**dev["job"], "enabled": False}}, secrets=secrets
        )
        out["no-token"] = run_program("dev", secrets={"grafanaAdminPassword": "x"})
    finally:
        patch.undo()
    return out


def _workload_resources(run: ProgramRun) -> list[pm.RecordedResource]:
    comps = [r for r in run.resources if r.type in WORKLOAD_TYPES]
    urns = {c.urn for c in comps}
    found = list(comps)
    changed = True
    while changed:
        changed = False
        for r in run.resources:
            if r.parent in urns and r.urn not in urns:
                urns.add(r.urn)
                found.append(r)
                changed = True
    return found


@pytest.mark.parametrize("stack", ["dev", "p4de-odcr", "p5-16"])
def test_components_wrap_the_specs_on_the_cluster_provider(
    runs: dict[str, ProgramRun], stack: str
) -> None:
    run = runs[stack]
    assert {r.type for r in run.resources} >= WORKLOAD_TYPES
    provider = run.one("pulumi:providers:kubernetes", "cluster-k8s")
    k8s = [r for r in _workload_resources(run) if r.type.startswith("kubernetes:") and r.custom]
    kinds = sorted(r.type.split(":")[-1] for r in k8s)
    # The debug DaemonSets are opt-in (debugTools); the workers have their own NetworkPolicy.
    assert kinds == [
        "Deployment",
        "NetworkPolicy",
        "NetworkPolicy",
        "PyTorchJob",
        "Secret",
        "Service",
    ]
    for r in k8s:
        assert r.provider.startswith(provider.urn + "::"), (r.name, r.provider)
    kustomize = run.one("kubernetes:kustomize/v2:Directory")
    assert kustomize.inputs["directory"] == str(MANIFEST_DIR)
    assert kustomize.provider.startswith(provider.urn + "::")


@pytest.mark.parametrize("stack", ["dev", "p4de-odcr", "p5-16"])
def test_job_object_is_the_rendered_spec_with_the_pushed_image(
    runs: dict[str, ProgramRun], stack: str
) -> None:
    run = runs[stack]
    job = run.one(JOB_TYPE)
    image = f"{REPO_URL}:{content_tag()}@{DIGEST}"
    cfg = load_stack_file(stack)
    w = from_stack(cfg, image=image, stack=stack)
    expected = spec.pytorchjob(w.job, w.etcd.host)
    assert job.inputs["apiVersion"] == "kubeflow.org/v1" and job.inputs["kind"] == "PyTorchJob"
    assert _same(job.inputs["spec"], expected["spec"])
    assert job.inputs["metadata"]["name"] == cfg.job.name
    assert run.outputs["rdzvId"] == expected["spec"]["elasticPolicy"]["rdzvId"]
    assert run.outputs["trainingImage"] == image
    # The job waits for the operator's install (CRDs) and for etcd (the component's children).
    deps = {run.by_urn(u).type for u in job.dependencies if run.by_urn(u)}
    assert {
        "kubernetes:kustomize/v2:Directory",
        "kubernetes:apps/v1:Deployment",
        "kubernetes:core/v1:Service",
        "kubernetes:core/v1:Secret",
    } <= deps


def _same(a: Any, b: Any) -> bool:
    """Equal up to the engine turning integers into floats."""
    if isinstance(a, dict) and isinstance(b, dict):
        return a.keys() == b.keys() and all(_same(a[k], b[k]) for k in a)
    if isinstance(a, list) and isinstance(b, list):
        return len(a) == len(b) and all(_same(x, y) for x, y in zip(a, b, strict=True))
    if isinstance(a, (int, float)) and isinstance(b, (int, float)):
        return float(a) == float(b)
    return bool(a == b)


def test_hf_token_only_in_the_secret(runs: dict[str, ProgramRun]) -> None:
    run = runs["dev"]
    holders = [r for r in run.resources if TOKEN in json.dumps(r.inputs, default=str)]
    assert [r.type for r in holders] == ["kubernetes:core/v1:Secret"]
    secret = holders[0]
    assert secret.inputs["metadata"]["name"] == "hf-token"
    env = run.one(JOB_TYPE).inputs["spec"]["pytorchReplicaSpecs"]["Worker"]["template"]["spec"][
        "containers"
    ][0]["env"]
    ref = next(e for e in env if e["name"] == "HF_TOKEN")
    assert ref["valueFrom"]["secretKeyRef"]["name"] == "hf-token"
    assert TOKEN not in json.dumps(run.outputs, default=str)
    assert not runs["no-token"].of_type("kubernetes:core/v1:Secret")


def test_training_image_is_content_tagged_in_an_immutable_repository(
    runs: dict[str, ProgramRun],
) -> None:
    run = runs["dev"]
    repo = run.one("aws:ecr/repository:Repository")
    assert repo.inputs["imageTagMutability"] == "IMMUTABLE"
    assert repo.inputs["imageScanningConfiguration"]["scanOnPush"] is True
    image = run.one("docker-build:index:Image")
    assert image.inputs["tags"] == [f"{REPO_URL}:{content_tag()}"]
    assert image.inputs["push"] is True
    assert image.inputs["platforms"] == ["linux/amd64"]
    assert image.inputs["dockerfile"]["location"].endswith("training/Dockerfile")
    for ds in run.of_type("kubernetes:apps/v1:DaemonSet"):
        assert ds.inputs["spec"]["template"]["spec"]["containers"][0]["image"].startswith(REPO_URL)


def test_pinned_image_skips_the_build_and_disabled_job_skips_the_job(
    runs: dict[str, ProgramRun],
) -> None:
    pinned = runs["pinned-image"]
    assert not pinned.of_type("docker-build:index:Image")
    assert not pinned.of_type("aws:ecr/repository:Repository")
    job = pinned.one(JOB_TYPE)
    container = job.inputs["spec"]["pytorchReplicaSpecs"]["Worker"]["template"]["spec"][
        "containers"
    ][0]
    assert container["image"] == "example.com/train:v1.2.3"
    none = runs["no-job"]
    assert not none.of_type(JOB_TYPE)
    assert none.of_type("kubernetes:apps/v1:Deployment")  # etcd and the operator stay
    assert "rdzvId" not in none.outputs


def test_component_args_are_checked_before_any_child() -> None:
    from workloads.etcd import EtcdArgs
    from workloads.pytorch_job import PyTorchJobArgs
    from workloads.training_image import TrainingImageArgs

    with pytest.raises(ValueError, match=r"EtcdArgs\.settings"):
        EtcdArgs(settings="etcd")  # type: ignore[arg-type]
    job = JobSettings(name="j", image="r/i:t", instance_type="g5.xlarge", workers=1, min_workers=1)
    with pytest.raises(ValueError, match=r"PyTorchJobArgs\.etcd_host"):
        PyTorchJobArgs(settings=job, image="r/i:t", etcd_host="")
    with pytest.raises(ValueError, match=r"TrainingImageArgs\.tag"):
        TrainingImageArgs(tag="latest")
    assert EtcdSettings().host == "etcd.default.svc.cluster.local"
