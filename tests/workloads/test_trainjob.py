"""``api: v2``: the Trainer v2 TrainJob and the project's ClusterTrainingRuntime.

Checked offline: both objects against the CRDs of Kubeflow Trainer ``TRAINER_V2_VERSION``
(vendored from ``manifests/base/crds`` at the tag), strictly; the TrainJob runs the v1 job's
image, training flags and environment; and torchrun, given the TrainJob's command and the
variables Trainer's torch plugin injects (``pkg/runtime/framework/plugins/torch/torch.go`` at
v2.3.0: PET_NNODES, PET_NPROC_PER_NODE, PET_NODE_RANK, PET_MASTER_ADDR, PET_MASTER_PORT),
forms a fixed-size static rendezvous at the master (torch's own ``parse_args`` and
``config_from_args``). The Trainer controller itself does not run here. The TrainJob is also
checked against the TrainJob CRD of Trainer v2.2.0, the types Kueue v0.17.0 writes it back with
(``github.com/kubeflow/trainer/v2 v2.2.0`` in sigs.k8s.io/kueue's ``go.mod``; checked against
the module when Go's cache has it).

If this fails, an ``api: v2`` job would be refused by the API server, train something other
than its v1 twin, start torchrun with an elastic or wrong-sized world, an elastic job file
would silently lose its elasticity on v2, or Kueue's admission would silently strip a field
of the job's runtime patch (the pods' grace period: SIGKILL 30 s after a preemption's SIGTERM,
before the emergency checkpoint is written).
"""

from __future__ import annotations

import copy
import os
import re
import subprocess
from pathlib import Path
from typing import Any

import pytest

from infra import versions
from jobs import schema as jobfile
from jobs.build import build
from workloads.specs import preemption
from workloads.specs import pytorchjob as pj
from workloads.specs import trainjob as tj
from workloads.specs.validate import ValidationError

REPO = Path(__file__).resolve().parents[2]
EXAMPLES = REPO / "jobs" / "examples"
IMAGE = "123456789012.dkr.ecr.us-east-1.amazonaws.com/eks-fsdp:sha-1"


def _v2(example: str) -> tuple[dict[str, Any], dict[str, Any], Any]:
    """The example as a fixed-size ``api: v2`` job: its TrainJob, its v1 PyTorchJob, settings."""
    job = jobfile.load(EXAMPLES / f"{example}.yaml", sets=["api=v2", "minWorkers=2", "workers=2"])
    assert job.api == "v2"
    w = build(job, image=IMAGE)
    return tj.trainjob(w.job), pj.pytorchjob(w.job, w.etcd.host), w.job


def test_the_crds_are_the_pinned_releases() -> None:
    assert versions.TRAINER_V2_VERSION == "v2.3.0"
    for kind in tj.KINDS:
        crd = tj.crd(kind)
        assert crd["spec"]["group"] == tj.GROUP
        assert [v["name"] for v in crd["spec"]["versions"]] == ["v1alpha1"]
    spec = tj.crd("TrainJob")["spec"]["versions"][0]["schema"]["openAPIV3Schema"]
    assert "runtimePatches" in spec["properties"]["spec"]["properties"]


def _pod_spec_patch_fields(crd: dict[str, Any]) -> set[str]:
    """The JSON fields of ``PodSpecPatch`` in a TrainJob CRD's schema."""
    props = crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]
    for key in (
        "spec", "runtimePatches", "trainingRuntimeSpec", "template", "spec", "replicatedJobs",
        "template", "spec", "template", "spec",
    ):  # fmt: skip
        node = props[key]
        node = node.get("items", node)
        props = node["properties"]
    return set(props)


def test_the_patch_uses_only_fields_kueues_trainer_types_keep() -> None:
    """Kueue v0.17.0 admits a TrainJob by an ``Update`` of Trainer v2.2.0's Go types
    (``pkg/controller/jobs/trainjob/trainjob_controller.go``, ``RunWithPodSetsInfo``): a field
    v2.2.0's ``PodSpecPatch`` lacks is dropped. v2.3.0 has one more (the grace period)."""
    v22, v23 = (
        _pod_spec_patch_fields(tj.kueue_crd("TrainJob")),
        _pod_spec_patch_fields(tj.crd("TrainJob")),
    )
    assert v23 - v22 == {"terminationGracePeriodSeconds"}
    assert set(tj.PATCH_POD_FIELDS) <= v22
    for example in ("dev", "p4de-odcr", "p5-16"):
        train, _, _ = _v2(example)
        pod = tj.pod_spec_patch(train)["spec"]
        assert set(pod) <= v22, set(pod) - v22
        tj.validate(train)  # both CRDs, strictly
    bad = copy.deepcopy(train)
    tj.pod_spec_patch(bad)["spec"]["terminationGracePeriodSeconds"] = 75
    assert not list(tj._validator("TrainJob").iter_errors(bad))  # v2.3.0 alone takes it
    with pytest.raises(ValidationError, match=r"terminationGracePeriodSeconds.*v2\.2\.0: Kueue"):
        tj.validate(bad)
    runtime = tj.cluster_training_runtime()
    (node,) = runtime["spec"]["template"]["spec"]["replicatedJobs"]
    pod = node["template"]["spec"]["template"]["spec"]
    pod["schedulingGroup"] = {"podGroupName": "g"}  # in v2.3.0's CRD, not in v2.2.0's
    assert not list(tj._validator("ClusterTrainingRuntime").iter_errors(runtime))
    with pytest.raises(ValidationError, match=r"schedulingGroup.*pod sets without the field"):
        tj.validate(runtime)


def test_the_runtime_carries_the_grace_period_every_job_asks_for() -> None:
    """The grace period moved to the runtime's pod template; every example's preemption budget
    (``grace_period_s``) fits in it, and a job asking for more is refused in one line."""
    runtime = tj.cluster_training_runtime()
    (node,) = runtime["spec"]["template"]["spec"]["replicatedJobs"]
    grace = node["template"]["spec"]["template"]["spec"]["terminationGracePeriodSeconds"]
    assert grace == tj.RUNTIME_GRACE_S == preemption.MAX_GRACE_S
    for example in ("dev", "p4de-odcr", "p5-16"):
        _, v1, s = _v2(example)
        v1_pod = v1["spec"]["pytorchReplicaSpecs"]["Worker"]["template"]["spec"]
        assert 1 <= pj.grace_period_s(s) == v1_pod["terminationGracePeriodSeconds"] <= grace
    _, _, s = _v2("p5-16")
    with pytest.raises(ValueError) as err:
        tj.trainjob(s.replace(termination_grace_s=grace + 1))
    assert str(err.value).count("\n") == 0
    assert f"{grace + 1} s is more than the {grace} s of ClusterTrainingRuntime" in str(err.value)


def test_the_kueue_crd_is_trainers_at_the_version_kueue_requires() -> None:
    """When Go's module cache holds Kueue and Trainer at those versions: Kueue's ``go.mod``
    names ``KUEUE_TRAINER_VERSION`` and the vendored CRD is the module's, byte for byte."""
    root = _gomodcache()
    kueue_mod = root / "sigs.k8s.io" / f"kueue@{versions.KUEUE_VERSION}" / "go.mod"
    trainer = root / "github.com" / "kubeflow" / "trainer" / f"v2@{tj.KUEUE_TRAINER_VERSION}"
    if not kueue_mod.is_file() or not trainer.is_dir():
        pytest.skip("Kueue or Trainer module not in Go's module cache")
    required = re.search(r"github\.com/kubeflow/trainer/v2 (v\S+)", kueue_mod.read_text())
    assert required and required.group(1) == tj.KUEUE_TRAINER_VERSION
    vendored = sorted(p.name for p in tj.KUEUE_CRD_DIR.iterdir())
    assert vendored == sorted(f"{tj.GROUP}_{plural}.yaml" for plural in tj.KINDS.values())
    for name in vendored:
        upstream = trainer / "manifests" / "base" / "crds" / name
        assert (tj.KUEUE_CRD_DIR / name).read_bytes() == upstream.read_bytes(), name


def _gomodcache() -> Path:
    try:
        out = subprocess.run(
            ["go", "env", "GOMODCACHE"], capture_output=True, text=True, timeout=30, check=False
        )
        root = out.stdout.strip() if out.returncode == 0 else ""
    except (OSError, subprocess.TimeoutExpired):
        root = ""
    return Path(root or os.path.expanduser("~/go/pkg/mod"))


@pytest.mark.parametrize("example", ["dev", "p4de-odcr", "p5-16"])
def test_runtime_and_trainjobs_are_valid_and_run_the_v1_jobs_container(example: str) -> None:
    tj.validate(tj.cluster_training_runtime())
    train, v1, s = _v2(example)
    tj.validate(train)
    container = v1["spec"]["pytorchReplicaSpecs"]["Worker"]["template"]["spec"]["containers"][0]
    trainer = train["spec"]["trainer"]
    assert trainer["image"] == container["image"] == IMAGE
    assert pj.finetune_flags(trainer["command"]) == pj.finetune_flags(container["command"])
    assert trainer["command"][:5] == ["python", "-m", "training.launch", "-m", "training.finetune"]
    v1_env = {e["name"]: e for e in container["env"]}
    v2_env = {e["name"]: e for e in trainer["env"]}
    assert {k: v for k, v in v1_env.items() if k != "TORCH_DISABLE_SHARE_RDZV_TCP_STORE"} == {
        k: v for k, v in v2_env.items() if k != "TORCH_DISABLE_SHARE_RDZV_TCP_STORE"
    }
    assert not set(v2_env) & tj.RESERVED_ENV
    assert trainer["numNodes"] == 2 and trainer["numProcPerNode"] == pj.nproc_per_node(s)
    assert trainer["resourcesPerNode"] == container["resources"]
    pod = tj.pod_spec_patch(train)["spec"]
    v1_pod = v1["spec"]["pytorchReplicaSpecs"]["Worker"]["template"]["spec"]
    assert pod["volumes"] == v1_pod["volumes"]
    assert pod.get("nodeSelector") == v1_pod.get("nodeSelector")
    assert "terminationGracePeriodSeconds" not in pod  # the runtime's (below)


def test_broken_objects_fail_naming_the_field() -> None:
    train, _, _ = _v2("p5-16")
    bad = copy.deepcopy(train)
    bad["spec"]["trainer"]["numNodez"] = 2
    with pytest.raises(ValidationError, match=r"TrainJob/.*: spec.trainer: .*numNodez"):
        tj.validate(bad)
    bad = copy.deepcopy(train)
    bad["spec"]["runtimePatches"][0].pop("manager")
    with pytest.raises(ValidationError, match="manager"):
        tj.validate(bad)
    runtime = tj.cluster_training_runtime()
    runtime["metadata"]["namespace"] = "default"
    with pytest.raises(ValidationError, match=r"metadata\.namespace must be absent"):
        tj.validate(runtime)


def test_torchrun_under_the_v2_env_forms_a_fixed_static_world(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from torch.distributed.run import config_from_args, parse_args

    train, _, s = _v2("p4de-odcr")
    name = train["metadata"]["name"]
    injected = {  # what torch.go injects for numNodes 2 on the 8-GPU node, node 1
        "PET_NNODES": "2",
        "PET_NPROC_PER_NODE": str(train["spec"]["trainer"]["numProcPerNode"]),
        "PET_NODE_RANK": "1",
        "PET_MASTER_ADDR": f"{name}-node-0-0.{name}",
        "PET_MASTER_PORT": "29500",
    }
    for key in [k for k in os.environ if k.startswith("PET_")]:
        monkeypatch.delenv(key)
    for key, value in injected.items():
        monkeypatch.setenv(key, value)
    command = train["spec"]["trainer"]["command"]
    args = parse_args(command[command.index("training.launch") + 1 :])
    config, _, cmd_args = config_from_args(args)
    assert (config.min_nodes, config.max_nodes) == (2, 2)
    assert config.nproc_per_node == 8 == pj.nproc_per_node(s)
    assert config.rdzv_backend == "static"
    assert config.rdzv_endpoint == f"{name}-node-0-0.{name}:29500"
    assert config.rdzv_configs["rank"] == 1
    assert cmd_args[cmd_args.index("-m") + 1] == "training.finetune"


def test_elastic_or_unknown_api_is_one_line(tmp_path: Path) -> None:
    with pytest.raises(jobfile.JobFileError) as err:
        jobfile.load(EXAMPLES / "p5-16.yaml", sets=["api=v2"])
    assert str(err.value).count("\n") == 0
    assert "api: v2 (Trainer v2) has no elastic policy: minWorkers 14 < workers 16" in str(
        err.value
    )
    with pytest.raises(jobfile.JobFileError, match="api: 'v3' is not v1 or v2"):
        jobfile.load(EXAMPLES / "p5-16.yaml", sets=["api=v3"])
    job = jobfile.load(EXAMPLES / "p5-16.yaml")
    assert job.api == "v1"


def test_the_install_manifests_are_the_specs() -> None:
    """``workloads/manifests/trainer`` (what the ``TrainerV2`` component applies) is what the
    spec functions write: the upstream overlay at the pin and the runtime, which is valid."""
    for name, text in tj.manifest_files().items():
        assert (tj.MANIFEST_DIR / name).read_text() == text, name
    assert versions.TRAINER_V2_VERSION in tj.kustomization()["resources"][0]
    import yaml

    tj.validate(yaml.safe_load((tj.MANIFEST_DIR / "runtime.yaml").read_text()))
