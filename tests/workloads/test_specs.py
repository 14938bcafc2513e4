"""Spec builders of the workloads: what the cluster would receive, checked offline.

Nothing is mocked. If these fail, a rendered object would be rejected by the API server (strict
schemas for the stack's Kubernetes version; the PyTorchJob against the operator's SDK types), or
the job would break in the known ways: ``--nnodes`` overriding the elastic range, a reused
rendezvous id (RendezvousClosedError for 2 hours), a Hugging Face token in plain text, pods
without their EFA devices (silent TCP fallback), FI_* on p5, unpinned images, etcd without the
v2 API, or the spec modules pulling in pulumi/torch.
"""

from __future__ import annotations

import json
import math
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml

from infra import versions
from infra.instances import lookup
from jobs.build import build, check_train_flags
from localrun.operator_env import operator_env
from tests.workloads.conftest import STACKS, job_stack, stack_workloads
from workloads.specs import debug, etcd, operator, pytorchjob
from workloads.specs.settings import EtcdSettings, JobSettings, OperatorSettings
from workloads.specs.validate import ValidationError, validate, validate_pytorchjob

REPO = Path(__file__).resolve().parents[2]


def _job(objs: list[dict[str, Any]]) -> dict[str, Any]:
    return next(o for o in objs if o["kind"] == "PyTorchJob")


def _container(job: dict[str, Any]) -> dict[str, Any]:
    return job["spec"]["pytorchReplicaSpecs"]["Worker"]["template"]["spec"]["containers"][0]


def _env(job: dict[str, Any]) -> dict[str, Any]:
    return {e["name"]: e for e in _container(job)["env"]}


def _containers(obj: dict[str, Any]) -> list[dict[str, Any]]:
    spec = obj.get("spec", {})
    if obj["kind"] == "PyTorchJob":
        spec = spec["pytorchReplicaSpecs"]["Worker"]
    pod = spec.get("template", {}).get("spec", {})
    return list(pod.get("containers", [])) + list(pod.get("initContainers", []))


def _settings(**kw: Any) -> JobSettings:
    base: dict[str, Any] = {
        "name": "llama",
        "image": "repo/train:sha-1234",
        "instance_type": "p5.48xlarge",
        "workers": 4,
        "min_workers": 2,
        "train_args": ("--enable_fsdp", "--model_name=tiny-llama"),
        "hf_token_secret": "hf-token",
    }
    return JobSettings(**{**base, **kw})


# --- invariants of the package --------------------------------------------------------------


def test_spec_modules_import_neither_pulumi_nor_torch() -> None:
    code = (
        "import importlib, pkgutil, sys, json\n"
        "import workloads.specs as pkg\n"
        "for m in pkgutil.iter_modules(pkg.__path__):\n"
        "    importlib.import_module(f'workloads.specs.{m.name}')\n"
        "import workloads.render, localrun.cli\n"
        "print(json.dumps(sorted(m for m in sys.modules if m.split('.')[0] in "
        "('pulumi', 'pulumi_kubernetes', 'pulumi_aws', 'torch'))))\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True, check=True
    )
    assert json.loads(out.stdout) == []


# --- every object of every stack validates ----------------------------------------------------


def test_every_object_validates_strictly(stack_objects: Any) -> None:
    stack, _, objs = stack_objects
    spec = job_stack(stack)
    cfg = spec.platform
    version = cfg.kubernetes_version
    kinds = sorted(o["kind"] for o in objs)
    storage = ["PersistentVolume", "PersistentVolumeClaim"] if cfg.shared_storage.is_fsx else []
    # etcd (when a backend uses it), the job, its ServiceAccount and its workers' NetworkPolicy; the debug
    # DaemonSets are opt-in (debugTools) and validated in their own test.
    etcd_kinds = ["Deployment", "NetworkPolicy", "PodDisruptionBudget", "PriorityClass", "Service"]
    assert not hasattr(cfg, "job")  # the stack file carries no job: the job file does
    rendezvous = etcd_kinds if spec.rdzv_backend != "c10d" else []
    assert kinds == sorted(["NetworkPolicy", "PyTorchJob", "ServiceAccount", *rendezvous, *storage])
    for obj in objs:
        validate(obj, version)


def test_strict_validation_rejects_unknown_fields() -> None:
    s = EtcdSettings()
    dep = etcd.deployment(s)
    dep["spec"]["template"]["spec"]["containers"][0]["imagePullPolicyy"] = "Always"
    with pytest.raises(ValidationError, match="Deployment/etcd"):
        validate(dep, versions.KUBERNETES_VERSION)
    job = pytorchjob.pytorchjob(_settings(), "etcd")
    job["spec"]["elasticPolicy"]["nnodes"] = "1:2"
    with pytest.raises(ValidationError, match=r"elasticPolicy\.nnodes"):
        validate_pytorchjob(job)
    job = pytorchjob.pytorchjob(_settings(), "etcd")
    _container(job)["resourcez"] = {}
    with pytest.raises(ValidationError, match="resourcez"):
        validate_pytorchjob(job)


@pytest.mark.parametrize("stack", STACKS)
def test_stack_training_flags_parse_with_the_training_cli(stack: str) -> None:
    spec = job_stack(stack)
    check_train_flags(spec, build(spec).job)


# --- the PyTorchJob ---------------------------------------------------------------------------


def test_command_is_the_launcher_without_nnodes(stack_objects: Any) -> None:
    """torchrun via ``training.launch``; an etcd backend adds the one rendezvous flag, which
    beats the operator's PET_RDZV_BACKEND (torch ``argparse_util.env``) while
    ``elasticPolicy.rdzvBackend`` keeps the operator's name."""
    _, w, objs = stack_objects
    job = _job(objs)
    cmd = _container(job)["command"]
    backend = job["spec"]["elasticPolicy"]["rdzvBackend"]
    assert backend == w.job.rdzv_backend
    flag = {"etcd": ["--rdzv-backend=etcd-ft"], "etcd-v2": ["--rdzv-backend=etcd-v2-ft"]}
    assert cmd == [
        "python",
        "-m",
        "training.launch",
        *flag.get(backend, []),
        "-m",
        "training.finetune",
        *pytorchjob.finetune_flags(cmd),
    ]
    conf = {c["key"]: c["value"] for c in job["spec"]["elasticPolicy"]["rdzvConf"]}
    budget = str(w.job.store_outage_timeout_s) if backend in flag else None
    assert conf.get("store_outage_timeout") == budget  # the handlers' etcd outage budget
    assert not any(a.startswith(("--nnodes", "--nproc_per_node", "--nproc-per-node")) for a in cmd)
    assert "--enable_fsdp" in cmd
    # An emptyDir per pod cannot be resumed from; a shared claim (the fsx stacks) can.
    assert ("--resume" in cmd) is (w.job.workers == 1 or bool(w.job.checkpoint_claim))
    assert f"--dist_checkpoint_root_folder={w.job.checkpoint_mount}" in cmd
    assert _container(job)["name"] == "pytorch"
    with pytest.raises(ValueError, match=r"job\.extra_args"):
        _settings(train_args=("--nnodes=2",))


@pytest.mark.parametrize(
    ("stack", "gpus", "efa"),
    [("dev", 1, None), ("p4de-odcr", 8, 4), ("p5-16", 8, 32)],
)
def test_devices_and_fi_env_per_instance_type(stack: str, gpus: int, efa: int | None) -> None:
    w = stack_workloads(stack)
    job = pytorchjob.pytorchjob(w.job, w.etcd.host)
    res = _container(job)["resources"]
    devices = {k: v for k, v in res["requests"].items() if k not in ("cpu", "memory")}
    assert res["limits"] == devices  # extended resources: limit = request
    it = lookup(w.job.instance_type)
    # Burstable QoS: cpu and memory requested (85% of the node), no cpu/memory limit
    assert res["requests"]["cpu"] == str(int(0.85 * it.vcpus))
    assert res["requests"]["memory"] == f"{int(0.85 * it.memory_gib)}Gi"
    assert res["limits"]["nvidia.com/gpu"] == str(gpus)
    assert res["limits"].get("vpc.amazonaws.com/efa") == (str(efa) if efa else None)
    assert job["spec"]["nprocPerNode"] == str(gpus)
    env = _env(job)
    # Obsolete on every type, p4de included (aws-ofi-nccl doc/efa-env-var.md: FI_PROVIDER for
    # plugin <= 1.5.0 only, FI_EFA_USE_DEVICE_RDMA "Do not set"; the plugin picks efa itself).
    assert "FI_PROVIDER" not in env and "FI_EFA_USE_DEVICE_RDMA" not in env
    # On EFA types NCCL must use the OFI plugin or fail (no silent TCP fallback).
    assert env.get("NCCL_NET", {}).get("value") == ("OFI" if efa else None)
    assert env["NCCL_DEBUG"]["value"] == "WARN"  # INFO on request (ncclDebug: INFO)
    assert env["TORCH_NCCL_ASYNC_ERROR_HANDLING"]["value"] == "1"
    assert "LOGLEVEL" in env


def test_elastic_policy_points_at_the_rendezvous(stack_objects: Any) -> None:
    """etcd backend: the etcd Service; c10d (the GPU stacks, docs/adr/0005): worker 0's
    Service, which the operator creates for every replica."""
    stack, w, objs = stack_objects
    job = _job(objs)
    ep = job["spec"]["elasticPolicy"]
    job_cfg = job_stack(stack)
    assert ep["rdzvBackend"] == job_cfg.rdzv_backend
    if ep["rdzvBackend"] == "c10d":
        assert stack != "dev"
        assert (ep["rdzvHost"], ep["rdzvPort"]) == (f"{w.job.name}-worker-0", 29400)
        assert not any(o["kind"] == "Service" for o in objs)  # no etcd at all
        assert _env(job)["TORCH_DISABLE_SHARE_RDZV_TCP_STORE"]["value"] == "1"
    else:
        svc = next(o for o in objs if o["kind"] == "Service")
        assert (
            ep["rdzvHost"]
            == f"{svc['metadata']['name']}.{svc['metadata']['namespace']}.svc.cluster.local"
        )
        assert ep["rdzvPort"] == svc["spec"]["ports"][0]["port"] == 2379
    assert ep["minReplicas"] == w.job.min_workers <= ep["maxReplicas"] == w.job.workers
    assert job["spec"]["pytorchReplicaSpecs"]["Worker"]["replicas"] == w.job.workers
    assert ep["maxRestarts"] == w.job.max_restarts
    assert {"key": "last_call_timeout", "value": "5"} in ep["rdzvConf"]
    assert "Master" not in job["spec"]["pytorchReplicaSpecs"]


def test_rdzv_id_unique_per_generation_and_per_change() -> None:
    s = _settings()
    ids = {
        pytorchjob.rdzv_id(s),
        pytorchjob.rdzv_id(s.replace(generation=2)),
        pytorchjob.rdzv_id(s.replace(generation=3)),
        pytorchjob.rdzv_id(s.replace(train_args=(*s.train_args, "--max_train_step=9"))),
        pytorchjob.rdzv_id(s.replace(workers=8)),
        pytorchjob.rdzv_id(s.replace(image="repo/train:sha-5678")),
    }
    assert len(ids) == 6
    assert pytorchjob.rdzv_id(s) == pytorchjob.rdzv_id(_settings())  # deterministic
    assert pytorchjob.rdzv_id(s.replace(generation=7)).startswith("llama-g7-")
    job = pytorchjob.pytorchjob(s.replace(generation=2), "etcd")
    assert job["spec"]["elasticPolicy"]["rdzvId"] == pytorchjob.rdzv_id(s.replace(generation=2))
    assert job["metadata"]["labels"]["eks-fsdp/generation"] == "2"


def test_preemption_budget_derives_grace_shutdown_and_checkpoints_together() -> None:
    """Llama-2-7b (~84 GB with AdamW state) on the p5-16 stack's 4.8 TiB of SCRATCH_2 (469 MB/s);
    1.2 TiB (117 MB/s) is too slow for a 13B emergency checkpoint."""
    from dataclasses import replace

    from workloads.specs.preemption import (
        AGENT_EXIT_S,
        MAX_GRACE_S,
        MIN_CHECKPOINT_EVERY_S,
        STEP_ALLOWANCE_S,
        preemption_budget,
        storage_mb_per_s,
    )

    cfg = job_stack("p5-16").platform
    mbps = storage_mb_per_s(replace(cfg.shared_storage, storage_capacity_gib=1200))
    # SCRATCH_2 writes are bound by the file servers' disk: 100 MB/s per TiB (planner.storage)
    assert mbps == 100 * 1200 / 1024
    assert storage_mb_per_s(cfg.shared_storage) == 100 * 4800 / 1024 == 4 * mbps
    b = preemption_budget("p5.48xlarge", "meta-llama/Llama-2-7b-hf", 4 * mbps, 16)
    assert b.checkpoint_bytes == 84_000_000_000
    assert b.write_s == math.ceil(1.25 * 84e9 / (4 * mbps * 1e6) + 10) == 234
    assert b.emergency_checkpoint
    assert b.shutdown_timeout_s == STEP_ALLOWANCE_S + b.write_s
    assert b.grace_period_s == b.shutdown_timeout_s + AGENT_EXIT_S <= MAX_GRACE_S
    assert b.checkpoint_every_s == max(MIN_CHECKPOINT_EVERY_S, 2 * b.write_s) == 600
    # 13B on 1.2 TiB does not fit the longest grace period: no emergency checkpoint, only the
    # step in flight; the periodic checkpoint bounds the loss
    big = preemption_budget("p4de.24xlarge", "meta-llama/Llama-2-13b-hf", mbps, 2)
    assert not big.emergency_checkpoint
    assert big.shutdown_timeout_s == STEP_ALLOWANCE_S
    assert big.checkpoint_every_s == 2 * big.write_s
    # faster storage: a shorter write, a shorter grace period
    fast = preemption_budget("p5.48xlarge", "meta-llama/Llama-2-7b-hf", 8 * mbps, 16)
    assert fast.write_s < b.write_s and fast.grace_period_s < b.grace_period_s


def _survives(workers: int, max_restarts: int, backend: str, limit: int, events: list[str]) -> int:
    """Replay ``events`` under the counting rules; the number of events before the job fails.

    A model of what cannot run here (no API server, no kubelet), rule by rule from the sources
    named in ``backoff_limit``: torchrun spends one of maxRestarts per FAILED group and, out of
    them, exits so that the kubelet restarts the container with a fresh agent; a preempted pod
    is replaced (restartCount 0, fresh agent) and stops every other rank with exit 143; with
    c10d, losing pod 0 fails every other agent outright; the operator fails the job when the
    sum of restartCount reaches backoffLimit (at the first restart when it is 0).
    """
    left = [max_restarts] * workers
    count = [0] * workers

    def fail(i: int) -> None:
        if left[i] > 0:
            left[i] -= 1
        else:
            count[i], left[i] = count[i] + 1, max_restarts

    for n, event in enumerate(events):
        kind, _, pod = event.partition("@")
        i = int(pod)
        if kind == "drain":
            count[i], left[i] = 0, max_restarts
            for j in range(workers):
                if j != i and backend == "c10d" and i == 0:
                    count[j], left[j] = count[j] + 1, max_restarts
                elif j != i:
                    fail(j)
        else:  # a crash: every rank's collective fails, every agent sees a FAILED group
            for j in range(workers):
                fail(j)
        total = sum(count)
        if total >= limit if limit else total > 0:
            return n
    return len(events)


@pytest.mark.parametrize("backend", ["etcd", "c10d"])
@pytest.mark.parametrize(("workers", "max_restarts"), [(2, 3), (16, 3), (16, 1), (4, 6)])
def test_backoff_limit_survives_a_rolling_replacement_and_max_restarts_crashes(
    workers: int, max_restarts: int, backend: str
) -> None:
    """Every node drained once (pod 0 too: the c10d store) plus maxRestarts crashes: the job
    goes on. A crash on every attempt (a bug) still fails it after a bounded number of tries.
    p5-16's job gets 81 (16 workers, maxRestarts 3, c10d), the dev job 3."""
    from workloads.specs.preemption import backoff_limit

    limit = backoff_limit(workers, max_restarts, backend)
    rolling = [f"drain@{i}" for i in range(workers)] + ["crash@1"] * max_restarts
    for order in (rolling, rolling[::-1], rolling[1:] + rolling[:1]):
        assert _survives(workers, max_restarts, backend, limit, order) == len(order), order
    bug = ["crash@0"] * 1000
    tries = _survives(workers, max_restarts, backend, limit, bug) + 1
    assert tries <= (limit // workers + 2) * (max_restarts + 1)
    # maxRestarts 0 asks to fail fast: the first container restart ends the job
    assert backoff_limit(workers, 0, backend) == 0
    assert _survives(workers, 0, backend, 0, ["crash@0"]) == 0
    assert backoff_limit(16, 3, "c10d") == 81 and backoff_limit(2, 3, "etcd") == 3


def test_rendered_jobs_carry_the_derived_backoff_limit() -> None:
    from workloads.specs.preemption import backoff_limit

    for stack in STACKS:
        w = stack_workloads(stack)
        job = pytorchjob.pytorchjob(w.job, w.etcd.host)
        want = backoff_limit(w.job.workers, w.job.max_restarts, w.job.rdzv_backend)
        assert job["spec"]["runPolicy"]["backoffLimit"] == want


def test_docs_carry_the_budget_table_the_function_renders() -> None:
    """docs/workloads.md shows each stack's grace period, shutdown timeout and checkpoint
    budget; they must be what the PyTorchJob gets (the same function renders both)."""
    from workloads.specs.preemption import budget_table

    rows = []
    for stack in ("dev", "p4de-odcr", "p5-16"):
        job = stack_workloads(stack).job
        rows.append(
            (
                stack,
                job.instance_type,
                pytorchjob.model_name(job),
                job.checkpoint_mb_per_s,
                job.workers,
            )
        )
    text = (REPO / "docs" / "workloads.md").read_text(encoding="utf-8")
    begin, end = "<!-- preemption-budget:begin -->\n", "\n<!-- preemption-budget:end -->"
    documented = text[text.index(begin) + len(begin) : text.index(end)]
    assert documented == budget_table(rows)


def test_pods_run_as_the_jobs_service_account_the_platform_creates(stack_objects: Any) -> None:
    """Worker pods name the ServiceAccount EKS Pod Identity gives the data bucket's role
    (infra.pod_identity); the rendered objects create it in the job's namespace, as a team's
    objects do in theirs. Without the name the pods would run as ``default`` and get no S3
    credentials; without the object the API server refuses every pod (kubernetes
    plugin/pkg/admission/serviceaccount/admission.go)."""
    from workloads.specs import teams

    _, w, objs = stack_objects
    for spec in _job(objs)["spec"]["pytorchReplicaSpecs"].values():
        pod = spec["template"]["spec"]
        assert pod["serviceAccountName"] == pytorchjob.SERVICE_ACCOUNT == teams.SERVICE_ACCOUNT
        assert pod["automountServiceAccountToken"] is False
    (account,) = [o for o in objs if o["kind"] == "ServiceAccount"]
    assert account["metadata"]["name"] == pytorchjob.SERVICE_ACCOUNT
    assert (
        account["metadata"]["namespace"] == w.job.namespace == _job(objs)["metadata"]["namespace"]
    )
    assert account["automountServiceAccountToken"] is False


def test_hf_token_only_through_a_secret_key_ref(stack_objects: Any) -> None:
    _, w, objs = stack_objects
    job = _job(objs)
    ref = _env(job)["HF_TOKEN"]
    assert "value" not in ref
    # the stacks' Llama models come from the hub (gated): a missing Secret must block the pod
    # (CreateContainerConfigError), not start it without a token and burn backoffLimit
    assert ref["valueFrom"]["secretKeyRef"] == {
        "name": w.job.hf_token_secret,
        "key": "token",
        "optional": not pytorchjob.needs_token(pytorchjob.model_name(w.job)),
    }
    assert pytorchjob.needs_token("meta-llama/Llama-2-7b-hf")
    assert not pytorchjob.needs_token("tiny-llama") and not pytorchjob.needs_token("/models/x")
    text = json.dumps(objs)
    # flags (--hf_dataset, --dataset=hf_dataset) and HF_HOME are not tokens
    for name in ("hf_token", "hf_home", "--hf_", "=hf_dataset"):
        text = text.lower().replace(name, "")
    assert "hf_" not in text
    assert not any(o["kind"] == "Secret" for o in objs)
    assert not any("token" in a.lower() for a in _container(job)["command"])


def test_rdzv_store_sharing_disabled_only_where_needed() -> None:
    for backend, expected in (("etcd", False), ("etcd-v2", True), ("c10d", True)):
        job = pytorchjob.pytorchjob(_settings(rdzv_backend=backend), "etcd.default")
        assert ("TORCH_DISABLE_SHARE_RDZV_TCP_STORE" in _env(job)) is expected
    c10d = pytorchjob.pytorchjob(_settings(rdzv_backend="c10d"), "etcd.default")
    assert c10d["spec"]["elasticPolicy"]["rdzvHost"] == "llama-worker-0"
    assert c10d["spec"]["elasticPolicy"]["rdzvPort"] == 29400


def test_pod_template_shm_checkpoints_scheduling(stack_objects: Any) -> None:
    stack, w, objs = stack_objects
    pod = _job(objs)["spec"]["pytorchReplicaSpecs"]["Worker"]["template"]["spec"]
    vols = {v["name"]: v for v in pod["volumes"]}
    assert vols["dshm"]["emptyDir"]["medium"] == "Memory"
    assert "emptyDir" in vols["checkpoints"] or "persistentVolumeClaim" in vols["checkpoints"]
    mounts = {m["name"]: m["mountPath"] for m in _container(_job(objs))["volumeMounts"]}
    assert mounts == {"dshm": "/dev/shm", "checkpoints": w.job.checkpoint_mount}
    group = job_stack(stack).group
    assert pod["nodeSelector"]["eks-fsdp/nodegroup"] == group.name
    assert pod["nodeSelector"]["node.kubernetes.io/instance-type"] == group.instance_type
    assert {"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"} in pod[
        "tolerations"
    ]
    b = pytorchjob.budget(w.job)
    assert pod["terminationGracePeriodSeconds"] == b.grace_period_s
    env = _env(_job(objs))
    assert env["TORCH_ELASTIC_SHUTDOWN_TIMEOUT"]["value"] == str(b.shutdown_timeout_s)
    assert b.grace_period_s > b.shutdown_timeout_s  # the kubelet's SIGKILL comes after torchrun's
    cmd = _container(_job(objs))["command"]
    assert f"--checkpoint_every_s={b.checkpoint_every_s}" in cmd
    assert f"--checkpoint_write_estimate_s={b.write_s}" in cmd
    # GPU jobs fetch metrics every 10 steps (torchtitan's log_freq), not every step
    assert [a for a in cmd if a.startswith("--log_every")] == ["--log_every=10"]
    size = vols["dshm"]["emptyDir"]["sizeLimit"]
    assert size.endswith("Gi") and 1 <= int(size[:-2]) <= 64
    run_policy = _job(objs)["spec"]["runPolicy"]
    assert run_policy["cleanPodPolicy"] == "Running"
    assert run_policy["ttlSecondsAfterFinished"] == w.job.ttl_after_finished_s
    claim = pytorchjob.pytorchjob(_settings(checkpoint_claim="fsx-checkpoints"), "etcd")
    vol = claim["spec"]["pytorchReplicaSpecs"]["Worker"]["template"]["spec"]["volumes"][1]
    assert vol == {"name": "checkpoints", "persistentVolumeClaim": {"claimName": "fsx-checkpoints"}}
    assert "--resume" in _container(claim)["command"]
    one = pytorchjob.pytorchjob(_settings(workers=1, min_workers=1), "etcd")
    assert "--resume" in _container(one)["command"]
    many = pytorchjob.pytorchjob(_settings(), "etcd")  # 4 pods, 4 emptyDirs
    assert "--resume" not in _container(many)["command"]


def test_nodegroup_label_matches_the_infra() -> None:
    from infra.config.nodegroups import NODEGROUP_LABEL
    from workloads.specs.settings import NODEGROUP_LABEL as OURS

    assert OURS == NODEGROUP_LABEL


def test_operator_env_is_what_torchrun_reads() -> None:
    job = pytorchjob.pytorchjob(_settings(generation=3), "etcd.default.svc.cluster.local")
    env = operator_env(job)
    assert env == {
        "PYTHONUNBUFFERED": "1",
        "PET_RDZV_ENDPOINT": "etcd.default.svc.cluster.local:2379",
        "PET_RDZV_BACKEND": "etcd",
        "PET_NNODES": "2:4",
        "PET_MAX_RESTARTS": "3",
        "PET_RDZV_ID": pytorchjob.rdzv_id(_settings(generation=3)),
        "PET_RDZV_CONF": "last_call_timeout=5,store_outage_timeout=300",
        "PET_NPROC_PER_NODE": "8",
    }


# --- images, etcd, operator, debug --------------------------------------------------------------


def test_every_image_is_pinned(stack_objects: Any) -> None:
    _, w, objs = stack_objects
    images = [c["image"] for o in objs for c in _containers(o)]
    assert len(images) == (2 if w.job.uses_etcd else 1)  # (etcd,) pytorch; debug tools opt-in
    for image in images:
        name, _, tag = image.rpartition("/")[2].partition(":")
        assert name and tag and tag != "latest", image
    k = operator.kustomization(OperatorSettings())
    assert k["resources"][0].endswith(f"?ref={versions.TRAINING_OPERATOR_VERSION}")
    assert k["images"] == [
        {"name": "ghcr.io/kubeflow/training-v1/training-operator", "newTag": "v1-93c5489"}
    ]
    with pytest.raises(ValueError, match=r"operator\.kustomize_url"):
        OperatorSettings(kustomize_url="https://github.com/kubeflow/trainer.git/x?ref=master")
    with pytest.raises(ValueError, match=r"job\.image"):
        _settings(image="repo/train:latest")
    with pytest.raises(ValueError, match=r"job\.image"):
        _settings(image="repo/train")


def test_committed_operator_kustomization_matches_the_spec() -> None:
    path = REPO / "workloads/manifests/training-operator/kustomization.yaml"
    assert yaml.safe_load(path.read_text()) == operator.kustomization(OperatorSettings())


def test_etcd_serves_v2_on_3_5_and_only_to_the_job() -> None:
    s = EtcdSettings(client_job_names=("llama",), storage_size="2Gi", storage_class="gp3")
    objs = {o["kind"]: o for o in etcd.objects(s)}
    c = objs["Deployment"]["spec"]["template"]["spec"]["containers"][0]
    assert c["image"] == versions.ETCD_IMAGE and ":v3.5." in c["image"]
    assert "--enable-v2=true" in c["command"]
    assert c["readinessProbe"]["httpGet"] == {"path": "/health", "port": 2379}
    assert c["resources"]["requests"]["cpu"]
    assert objs["Deployment"]["spec"]["strategy"]["type"] == "Recreate"
    vol = objs["Deployment"]["spec"]["template"]["spec"]["volumes"][0]
    assert (
        vol["persistentVolumeClaim"]["claimName"]
        == objs["PersistentVolumeClaim"]["metadata"]["name"]
    )
    assert objs["PersistentVolumeClaim"]["spec"]["storageClassName"] == "gp3"
    assert objs["Service"]["spec"]["ports"][0]["port"] == 2379
    # an etcd restart fails the job on the etcd backends: no voluntary eviction, high priority
    pdb = objs["PodDisruptionBudget"]
    assert pdb["spec"] == {
        "minAvailable": 1,
        "selector": objs["Deployment"]["spec"]["selector"],
    }
    pc = objs["PriorityClass"]
    pod = objs["Deployment"]["spec"]["template"]["spec"]
    assert pod["priorityClassName"] == pc["metadata"]["name"]
    assert 0 < pc["value"] < 2_000_000_000 and pc["globalDefault"] is False
    for obj in objs.values():
        validate(obj, versions.KUBERNETES_VERSION)  # strict: PDB and PriorityClass too
    ingress = objs["NetworkPolicy"]["spec"]["ingress"]
    assert ingress == [
        {
            "from": [
                {
                    "podSelector": {
                        "matchExpressions": [
                            {
                                "key": "training.kubeflow.org/job-name",
                                "operator": "In",
                                "values": ["llama"],
                            }
                        ]
                    }
                }
            ],
            "ports": [{"protocol": "TCP", "port": 2379}],
        }
    ]
    for obj in objs.values():
        validate(obj, versions.KUBERNETES_VERSION)
    with pytest.raises(ValueError, match=r"etcd\.image"):
        EtcdSettings(image="quay.io/coreos/etcd:v3.6.0")
    assert "PersistentVolumeClaim" not in {o["kind"] for o in etcd.objects(EtcdSettings())}


def test_debug_daemonsets_tolerate_gpus_and_see_host_processes(stack_objects: Any) -> None:
    """Opt-in (absent unless debugTools); when on: host PIDs but otherwise unprivileged, and a
    deny-all NetworkPolicy."""
    import dataclasses

    from workloads.specs.stack import objects_by_component

    stack, w, default_objs = stack_objects
    assert not w.debug_tools and "DaemonSet" not in {o["kind"] for o in default_objs}
    objs = objects_by_component(dataclasses.replace(w, debug_tools=True))["debug-tools"]
    for obj in objs:
        validate(obj, versions.KUBERNETES_VERSION)
    (policy,) = [o for o in objs if o["kind"] == "NetworkPolicy"]
    assert policy["spec"]["policyTypes"] == ["Ingress", "Egress"]
    assert "ingress" not in policy["spec"] and "egress" not in policy["spec"]
    sets = {o["metadata"]["name"]: o for o in objs if o["kind"] == "DaemonSet"}
    assert sorted(sets) == list(debug.TOOLS)
    for ds in sets.values():
        pod = ds["spec"]["template"]["spec"]
        assert pod["automountServiceAccountToken"] is False
        sc = pod["containers"][0]["securityContext"]
        assert (sc["runAsNonRoot"], sc["runAsUser"], sc["allowPrivilegeEscalation"]) == (
            True,
            65534,
            False,
        )
        assert sc["capabilities"] == {"drop": ["ALL"]} and sc["readOnlyRootFilesystem"] is True
        labels = ds["spec"]["template"]["metadata"]["labels"]
        assert all(
            labels.get(k) == v for k, v in policy["spec"]["podSelector"]["matchLabels"].items()
        )
    types_ = sorted({g.instance_type for g in job_stack(stack).platform.gpu_node_groups})
    for ds in sets.values():
        pod = ds["spec"]["template"]["spec"]
        assert pod["hostPID"] is True
        assert {"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"} in pod[
            "tolerations"
        ]
        term = pod["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]
        assert term["nodeSelectorTerms"][0]["matchExpressions"][0]["values"] == types_
        assert "nvidia.com/gpu" not in json.dumps(pod["containers"][0]["resources"])
    nv_env = {e["name"] for e in sets["nvtop"]["spec"]["template"]["spec"]["containers"][0]["env"]}
    assert "NVIDIA_VISIBLE_DEVICES" in nv_env


@pytest.mark.parametrize(
    ("change", "field"),
    [
        ({"name": "Llama_2"}, "job.name"),
        ({"workers": 0}, "job.workers"),
        ({"min_workers": 5}, "job.min_workers"),
        ({"rdzv_backend": "zookeeper"}, "job.rdzv_backend"),
        ({"instance_type": "p9.huge"}, "job.instance_type"),
        ({"generation": 0}, "job.generation"),
        ({"store_outage_timeout_s": 0}, "job.store_outage_timeout_s"),
        ({"rdzv_conf": (("store_outage_timeout", "60"),)}, "job.rdzv_conf"),
        ({"rdzv_conf": (("timeout", "1,2"),)}, "job.rdzv_conf"),
        ({"train_args": ("model=x",)}, "job.extra_args"),
        ({"metrics_port": 70000}, "job.metrics_port"),
    ],
)
def test_bad_settings_name_the_field(change: dict[str, Any], field: str) -> None:
    with pytest.raises(ValueError, match=field.replace(".", r"\.")):
        _settings(**change)


def test_observability_makes_training_pods_scrapable() -> None:
    """With observability on, the pods carry the exporter flag, port and scrape annotations the
    cluster Prometheus relabels on (same port everywhere); with it off, none of them."""
    from dataclasses import replace

    from workloads.specs.prometheus_files import TRAINING_METRICS_PORT, training_pod_annotations

    spec = job_stack("p5-16")
    cfg = spec.platform
    for enabled in (False, True):
        stack_cfg = replace(cfg, observability=replace(cfg.observability, enabled=enabled))
        job_spec = replace(spec, platform=stack_cfg)
        w = build(job_spec, image="repo/train:sha-1234")
        job = pytorchjob.pytorchjob(w.job, w.etcd.host)
        validate_pytorchjob(job)
        template = job["spec"]["pytorchReplicaSpecs"]["Worker"]["template"]
        ports = {p["name"]: p["containerPort"] for p in _container(job)["ports"]}
        flag = f"--metrics_port={TRAINING_METRICS_PORT}"
        if enabled:
            annotations = template["metadata"]["annotations"]
            assert {k: annotations[k] for k in training_pod_annotations()} == (
                training_pod_annotations()
            )
            assert ports["metrics"] == TRAINING_METRICS_PORT
            assert _container(job)["command"].count(flag) == 1
            check_train_flags(job_spec, w.job)
        else:
            assert not set(training_pod_annotations()) & set(template["metadata"]["annotations"])
            assert "metrics" not in ports
            assert not any(a.startswith("--metrics_port") for a in _container(job)["command"])


def test_max_restarts_zero_is_kept() -> None:
    """maxRestarts: 0 (fail fast) must reach the elastic policy, not fall back to 3."""
    from dataclasses import replace

    spec = job_stack("p4de-odcr")
    assert spec.max_restarts != 0  # the example keeps the default; 0 is set here
    w = build(replace(spec, max_restarts=0), image="repo/train:sha-1234")
    assert w.job.max_restarts == 0
    assert pytorchjob.pytorchjob(w.job, w.etcd.host)["spec"]["elasticPolicy"]["maxRestarts"] == 0
