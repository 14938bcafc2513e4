"""The workload components inside the real Pulumi program, under Pulumi's unit-test mocks.

Mocked, and why: there is no Pulumi engine, AWS account, registry or Kubernetes API server here.
``tests/pulumi_mocks.run_program`` runs ``__main__.py`` with Pulumi's mocks (providers echo their
inputs); this module adds the two computed outputs the workloads read: the ECR repository URL
and the pushed image reference (with a digest), and the ECR image lookup (``aws:ecr/getImage``)
answers "no such tag" except where a test says the tag was pushed before. The kustomize ``Directory`` is a remote
component: under mocks only its inputs are seen, nothing is fetched.

If these fail, ``pulumi up`` would prepare a different platform than jobs expect: etcd
unreachable from a job's pods, the Hugging Face token anywhere but its Secret (or a Secret
under another name than a job file's default), an image tag that is not the content hash, an
operator install that is not the pinned overlay, workloads on the wrong provider or outside
their components, or missing outputs a job is submitted with. (No stack declares a job:
``tests/jobs/test_platform_stack.py``.)
"""

from __future__ import annotations

import json
from typing import Any

import pytest

import tests.pulumi_mocks as pm
from tests.pulumi_mocks import ProgramRun, run_program
from tests.workloads.conftest import stack_workloads
from workloads.specs import pytorchjob as spec
from workloads.specs.image import CACHE_TAG, content_tag, repository_name
from workloads.specs.settings import EtcdSettings
from workloads.training_operator import MANIFEST_DIR

TOKEN = "hf_mock_secret_token_0123456789"
REGISTRY = f"{pm.ACCOUNT}.dkr.ecr.us-west-2.amazonaws.com"
DIGEST = "sha256:" + "ab" * 32
JOB_TYPE = "kubernetes:kubeflow.org/v1:PyTorchJob"
WORKLOAD_TYPES = {
    "eks-fsdp:workloads:TrainingImage",
    "eks-fsdp:workloads:TrainingOperator",
    "eks-fsdp:workloads:Etcd",
}

_plain_outputs = pm._mock_outputs


def repo_url(stack: str) -> str:
    """The stack's own ECR repository (``<project>-<stack>-training``)."""
    return f"{REGISTRY}/{repository_name(pm.PROJECT, stack)}"


def _outputs(args: Any) -> tuple[str, dict[str, Any]]:
    rid, state = _plain_outputs(args)
    if args.typ == "aws:ecr/repository:Repository":
        state["repositoryUrl"] = f"{REGISTRY}/{args.inputs['name']}"
        state["registryId"] = pm.ACCOUNT
    elif args.typ == "docker-build:index:Image":
        state["ref"] = f"{args.inputs['tags'][0]}"
        state["digest"] = DIGEST
    return rid, state


@pytest.fixture(scope="module")
def runs() -> dict[str, ProgramRun]:
    patch = pytest.MonkeyPatch()
    patch.setattr(pm, "_mock_outputs", _outputs)
    try:
        secrets = {"hfToken": TOKEN, "grafanaAdminPassword": "mock-password"}
        out = {s: run_program(s, secrets=secrets) for s in ("dev", "p4de-odcr", "p5-16")}
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
    """Every stack prepares the same platform (the shared etcd whatever a job's backend)."""
    run = runs[stack]
    assert {r.type for r in run.resources} >= WORKLOAD_TYPES
    provider = run.one("pulumi:providers:kubernetes", "cluster-k8s")
    k8s = [r for r in _workload_resources(run) if r.type.startswith("kubernetes:") and r.custom]
    kinds = sorted(r.type.split(":")[-1] for r in k8s)
    # The debug DaemonSets are opt-in (debugTools); etcd has two NetworkPolicies (its own,
    # and the one admitting any job's pods).
    etcd_kinds = ["Deployment", "NetworkPolicy", "NetworkPolicy", "PodDisruptionBudget"]
    assert kinds == sorted([*etcd_kinds, "PriorityClass", "Service"])
    for r in [*k8s, run.one("kubernetes:core/v1:Secret", "hf-token")]:
        assert r.provider.startswith(provider.urn + "::"), (r.name, r.provider)
    kustomize = run.one("kubernetes:kustomize/v2:Directory")
    assert kustomize.inputs["directory"] == str(MANIFEST_DIR)
    assert kustomize.provider.startswith(provider.urn + "::")


@pytest.mark.parametrize("stack", ["dev", "p4de-odcr", "p5-16"])
def test_outputs_are_what_a_job_is_submitted_with(runs: dict[str, ProgramRun], stack: str) -> None:
    """The example job, rendered with the stack's outputs, reaches the stack's etcd through
    its Service and mounts the claims the stack lists."""
    run = runs[stack]
    image = f"{repo_url(stack)}:{content_tag()}@{DIGEST}"
    assert run.outputs["trainingImage"] == image
    assert run.outputs["jobsNamespace"] == "default"
    assert run.outputs["hfTokenSecret"] == "hf-token"
    w = stack_workloads(stack, image=image)
    assert run.outputs["etcdEndpoint"] == f"{w.etcd.host}:{w.etcd.client_port}"
    assert w.job.namespace == run.outputs["jobsNamespace"]
    assert w.job.hf_token_secret == run.outputs["hfTokenSecret"]
    if w.job.checkpoint_claim:
        assert w.job.checkpoint_claim in run.outputs["checkpointClaims"]
    assert {"jobName", "rdzvId"}.isdisjoint(run.outputs)


def test_any_jobs_pods_may_reach_etcd(runs: dict[str, ProgramRun]) -> None:
    """The extra NetworkPolicy selects etcd's pods and admits every pod template the builders
    make (``workloads.specs.pytorchjob``), whatever the job's name."""
    run = runs["dev"]
    (policy,) = [
        r
        for r in run.of_type("kubernetes:networking.k8s.io/v1:NetworkPolicy")
        if r.inputs["metadata"]["name"] == "etcd-jobs"
    ]
    deployment = run.one("kubernetes:apps/v1:Deployment")
    etcd_labels = deployment.inputs["spec"]["template"]["metadata"]["labels"]
    assert policy.inputs["spec"]["podSelector"]["matchLabels"].items() <= etcd_labels.items()
    w = stack_workloads("dev")
    for name in ("llama-finetune-dev", "someone-elses-job"):
        job = spec.pytorchjob(w.job.replace(name=name), w.etcd.host)
        pod_labels = job["spec"]["pytorchReplicaSpecs"]["Worker"]["template"]["metadata"]["labels"]
        (rule,) = policy.inputs["spec"]["ingress"]
        (source,) = rule["from"]
        assert source["podSelector"]["matchLabels"].items() <= pod_labels.items()
        assert _same(rule["ports"], [{"protocol": "TCP", "port": w.etcd.client_port}])


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
    """The token is in the Secret the stack creates, under the name a job file's default
    ``hfTokenSecretName`` references (the example jobs' pods read it through a secretKeyRef)."""
    run = runs["dev"]
    holders = [r for r in run.resources if TOKEN in json.dumps(r.inputs, default=str)]
    assert [r.type for r in holders] == ["kubernetes:core/v1:Secret"]
    secret = holders[0]
    assert secret.inputs["metadata"]["name"] == "hf-token"
    w = stack_workloads("dev")
    env = spec.pytorchjob(w.job, w.etcd.host)["spec"]["pytorchReplicaSpecs"]["Worker"]["template"][
        "spec"
    ]["containers"][0]["env"]
    ref = next(e for e in env if e["name"] == "HF_TOKEN")
    assert ref["valueFrom"]["secretKeyRef"]["name"] == "hf-token"
    assert TOKEN not in json.dumps(run.outputs, default=str)
    assert not runs["no-token"].of_type("kubernetes:core/v1:Secret")
    assert "hfTokenSecret" not in runs["no-token"].outputs


@pytest.mark.parametrize("stack", ["dev", "p5-16"])
def test_training_image_is_content_tagged_in_the_stacks_own_repository(
    runs: dict[str, ProgramRun], stack: str
) -> None:
    """One repository per stack, immutable tags but the cache's, a lifecycle policy on it; the
    image is built under the content tag, never on preview, with a registry cache."""
    run = runs[stack]
    repo = run.one("aws:ecr/repository:Repository")
    assert repo.inputs["name"] == f"eks-fsdp-{stack}-training"
    assert repo.inputs["imageTagMutability"] == "IMMUTABLE_WITH_EXCLUSION"
    assert repo.inputs["imageTagMutabilityExclusionFilters"] == [
        {"filter": f"{CACHE_TAG}*", "filterType": "WILDCARD"}
    ]
    assert repo.inputs["imageScanningConfiguration"]["scanOnPush"] is True
    policy = run.one("aws:ecr/lifecyclePolicy:LifecyclePolicy")
    assert policy.inputs["repository"] == repo.inputs["name"]
    rules = json.loads(policy.inputs["policy"])["rules"]
    assert [r["selection"]["tagStatus"] for r in rules] == ["untagged", "tagged"]
    assert rules[1]["selection"]["tagPrefixList"] == ["sha-"]
    image = run.one("docker-build:index:Image")
    url = repo_url(stack)
    assert image.inputs["tags"] == [f"{url}:{content_tag()}"]
    assert image.inputs["push"] is True and image.inputs["buildOnPreview"] is False
    assert image.inputs["platforms"] == ["linux/amd64"]
    assert image.inputs["dockerfile"]["location"].endswith("training/Dockerfile")
    assert image.inputs["cacheFrom"] == [{"registry": {"ref": f"{url}:{CACHE_TAG}"}}]
    (cache_to,) = image.inputs["cacheTo"]
    assert cache_to["registry"]["ref"] == f"{url}:{CACHE_TAG}"
    assert cache_to["registry"]["mode"] == "max" and cache_to["registry"]["imageManifest"]
    assert run.outputs["trainingImageRepository"] == url
    for ds in run.of_type("kubernetes:apps/v1:DaemonSet"):
        ref = ds.inputs["spec"]["template"]["spec"]["containers"][0]["image"]
        assert ref == f"{url}:{content_tag()}@{DIGEST}"


def test_repositories_of_two_stacks_differ(runs: dict[str, ProgramRun]) -> None:
    stacks = ("dev", "p4de-odcr", "p5-16")
    names = {s: runs[s].one("aws:ecr/repository:Repository").inputs["name"] for s in stacks}
    assert names["dev"] != names["p5-16"] != names["p4de-odcr"] != names["dev"]


def test_a_pushed_tag_is_reused_not_rebuilt(monkeypatch: pytest.MonkeyPatch) -> None:
    """The tag is already in ECR (an earlier ``up``, another machine, a lost state): no Image
    resource is declared (an IMMUTABLE push of that tag would fail) and the stack's
    ``trainingImage`` (what jobs run by default) is the image the registry holds, by digest."""
    pushed = "sha256:" + "cd" * 32
    looked_up: list[dict[str, Any]] = []
    plain_call = pm.Mocks.call

    def call(self: pm.Mocks, args: Any) -> tuple[dict[str, Any], list[Any]]:
        if args.token == "aws:ecr/getImage:getImage":
            looked_up.append(dict(args.args))
            return {"imageDigest": pushed, "imageTags": [args.args["imageTag"]]}, []
        return plain_call(self, args)

    monkeypatch.setattr(pm, "_mock_outputs", _outputs)
    monkeypatch.setattr(pm.Mocks, "call", call)
    run = run_program("p5-16", secrets={"hfToken": TOKEN, "grafanaAdminPassword": "x"})
    assert looked_up == [{"repositoryName": "eks-fsdp-p5-16-training", "imageTag": content_tag()}]
    assert not run.of_type("docker-build:index:Image")
    assert run.one("aws:ecr/repository:Repository")  # the repository stays managed
    expected = f"{repo_url('p5-16')}:{content_tag()}@{pushed}"
    assert run.outputs["trainingImage"] == expected


def test_component_args_are_checked_before_any_child() -> None:
    from workloads.etcd import EtcdArgs
    from workloads.training_image import TrainingImageArgs

    with pytest.raises(ValueError, match=r"EtcdArgs\.settings"):
        EtcdArgs(settings="etcd")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match=r"TrainingImageArgs\.tag"):
        TrainingImageArgs(repository_name="r", tag="latest")
    with pytest.raises(ValueError, match=r"TrainingImageArgs\.tag"):
        TrainingImageArgs(repository_name="r", tag=CACHE_TAG)
    with pytest.raises(ValueError, match=r"TrainingImageArgs\.repository_name"):
        TrainingImageArgs(repository_name="")
    assert EtcdSettings().host == "etcd.default.svc.cluster.local"


def _ecr_lookup_fails(monkeypatch: pytest.MonkeyPatch, reason: str) -> list[Any]:
    """``aws:ecr/getImage`` fails with ``reason`` (the provider's error text, as the engine
    returns an invoke failure); returns the calls seen."""
    seen: list[Any] = []
    plain_call = pm.Mocks.call

    def call(self: pm.Mocks, args: Any) -> tuple[dict[str, Any], list[Any]]:
        if args.token == "aws:ecr/getImage:getImage":
            seen.append(args)
            return {}, [("", reason)]
        return plain_call(self, args)

    monkeypatch.setattr(pm, "_mock_outputs", _outputs)
    monkeypatch.setattr(pm.Mocks, "call", call)
    return seen


def test_a_throttled_ecr_lookup_fails_the_program(monkeypatch: pytest.MonkeyPatch) -> None:
    """Throttling is not "the tag is absent": read as absent, the program would rebuild and
    push a tag that may exist into an IMMUTABLE repository. It must stop the program."""
    _ecr_lookup_fails(
        monkeypatch,
        "reading ECR Image: operation error ECR: DescribeImages, https response error "
        "StatusCode: 400, ThrottlingException: Rate exceeded",
    )
    with pytest.raises(Exception, match=r"ThrottlingException"):
        run_program("p5-16", secrets={"hfToken": TOKEN, "grafanaAdminPassword": "x"})


@pytest.mark.parametrize("code", ["RepositoryNotFoundException", "ImageNotFoundException"])
def test_a_missing_repository_or_tag_means_build(
    monkeypatch: pytest.MonkeyPatch, code: str
) -> None:
    _ecr_lookup_fails(
        monkeypatch, f"reading ECR Image: operation error ECR: DescribeImages, {code}: absent"
    )
    run = run_program("p5-16", secrets={"hfToken": TOKEN, "grafanaAdminPassword": "x"})
    assert run.one("docker-build:index:Image").inputs["tags"] == [
        f"{repo_url('p5-16')}:{content_tag()}"
    ]


def test_the_ecr_lookup_is_a_child_of_the_component(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Any
) -> None:
    """``InvokeOptions(parent=self)``: the lookup uses the AWS provider the component was
    given (its region and account), not the default one."""
    seen = _ecr_lookup_fails(monkeypatch, "ImageNotFoundException: absent")
    program = tmp_path / "program.py"
    program.write_text(
        "import pulumi, pulumi_aws as aws\n"
        "from workloads.training_image import TrainingImage, TrainingImageArgs\n"
        "p = aws.Provider('other-region', region='eu-west-1')\n"
        "TrainingImage('img', TrainingImageArgs(repository_name='r', tag='sha-1'),\n"
        "              opts=pulumi.ResourceOptions(providers=[p]))\n"
    )
    run_program("p5-16", program=program, secrets={"hfToken": TOKEN})
    assert len(seen) == 1
    assert "aws::other-region" in seen[0].provider
