"""What a team's job pods mount and read exists in the team's namespace, as data and in the program.

A pod of a job submitted with ``--team T`` runs in namespace ``T`` and names, by name, the
checkpoint claim (fsx stacks), the Secret ``hf-token`` (stacks with ``hfToken``) and the
capacity-block ConfigMaps: none of them can be reached across namespaces (a claim binds to a
volume reserved for it, ``claimRef``; ``secretKeyRef``/``configMapKeyRef`` read the pod's own
namespace). If this fails, a team's job would stay Pending on a claim that does not exist (Kueue
holding its quota meanwhile), start without the token it needs for a hub model, or never learn
when its capacity block ends; or two teams' volumes would share a name and one ``pulumi up``
would fail.

The specs are plain dicts validated strictly against the stack's Kubernetes version; the
program runs under Pulumi's mocks (no engine, no AWS, no cluster here:
``tests/pulumi_mocks.py``).
"""

from __future__ import annotations

from typing import Any

import pytest

from infra.capacity_schedule import output_value
from infra.config import DEFAULT_CHECKPOINT_CLAIM, parse, project_defaults, stack_file_values
from tests.pulumi_mocks import USER_SET, ProgramRun, RecordedResource, run_program
from workloads.specs import capacity, pytorchjob, storage, teams
from workloads.specs.settings import HF_TOKEN_KEY
from workloads.specs.stack import platform
from workloads.specs.validate import validate

ARN = "arn:aws:iam::123456789012:role/{}"
TEAMS = [
    {"name": "nlp", "principalArns": [ARN.format("nlp")]},
    {"name": "vision", "principalArns": [ARN.format("vision")]},
]
SECRETS = {"hfToken": "hf_mock", "grafanaAdminPassword": "mock-password"}
FS = storage.FileSystemRef(
    file_system_id="fs-0123456789abcdef0",
    dns_name="fs-0123456789abcdef0.fsx.us-east-2.amazonaws.com",
    mount_name="abcdefgh",
)
PV = "kubernetes:core/v1:PersistentVolume"
PVC = "kubernetes:core/v1:PersistentVolumeClaim"
SECRET = "kubernetes:core/v1:Secret"
CONFIGMAP = "kubernetes:core/v1:ConfigMap"
SECRET_SIG = "4dabf18193072939515e22adb298388d"
"""The key marking a secret value in the engine's protocol (pulumi ``runtime/rpc.py``
``_special_sig_key``)."""


def stack(name: str, **overrides: Any) -> Any:
    raw = {**project_defaults(), **USER_SET, **stack_file_values(name), **overrides}
    return parse(raw, stack=name)


def test_each_team_gets_its_own_volume_of_the_same_file_system() -> None:
    cfg = stack("p5-16", teams=TEAMS)
    jobs_volume = platform(cfg, image="")["checkpoint_volume"]
    pvs: dict[str, dict[str, Any]] = {}
    for team in cfg.teams:
        pv, pvc = teams.storage_objects(team, cfg, FS)
        for obj in (pv, pvc):
            validate(obj, cfg.kubernetes_version)
        assert pvc["metadata"]["namespace"] == team.namespace
        assert pvc["metadata"]["name"] == DEFAULT_CHECKPOINT_CLAIM
        # bound to each other, and to nothing else
        assert pvc["spec"]["volumeName"] == pv["metadata"]["name"]
        assert pv["spec"]["claimRef"] == {"namespace": team.namespace, "name": "fsx-checkpoints"}
        assert pvc["spec"]["storageClassName"] == pv["spec"]["storageClassName"] == ""
        assert pv["spec"]["csi"]["volumeHandle"] == FS.file_system_id
        assert pv["spec"]["csi"]["volumeAttributes"]["mountname"] == FS.mount_name
        assert pv["spec"]["capacity"] == {"storage": f"{jobs_volume.capacity_gib}Gi"}
        pvs[pv["metadata"]["name"]] = pv
    assert set(pvs) == {"nlp-fsx-checkpoints", "vision-fsx-checkpoints"}
    assert jobs_volume.volume_name not in pvs  # default-fsx-checkpoints stays the jobs'
    default_pv, _ = storage.objects(jobs_volume, FS)
    for pv in pvs.values():
        assert pv["spec"]["csi"] == default_pv["spec"]["csi"]
        assert pv["spec"]["mountOptions"] == default_pv["spec"]["mountOptions"]


def test_a_stack_without_shared_storage_gives_teams_no_volume() -> None:
    cfg = stack("dev", teams=TEAMS)
    assert all(teams.checkpoint_volume(t, cfg) is None for t in cfg.teams)
    assert all(teams.storage_objects(t, cfg, FS) == [] for t in cfg.teams)


def test_the_capacity_block_end_and_the_token_are_in_the_teams_namespace() -> None:
    cfg = stack("p5-16", teams=TEAMS)
    (group,) = cfg.gpu_node_groups
    assert group.capacity_block is not None
    for team in cfg.teams:
        objs = teams.objects(team, cfg)
        (cm,) = [o for o in objs if o["kind"] == "ConfigMap"]
        validate(cm, cfg.kubernetes_version)
        # what the stack exports and the jobs namespace's ConfigMap holds, in this namespace
        assert cm == capacity.capacity_block_configmap(
            group.name, output_value(group), team.namespace
        )
        assert cm["metadata"]["name"] == capacity.configmap_name(group.name)
        secret = teams.hf_token_secret(team, "hf_x")
        validate(secret, cfg.kubernetes_version)
        assert secret["metadata"] == {**secret["metadata"], "namespace": team.namespace}
        assert secret["stringData"] == {HF_TOKEN_KEY: "hf_x"}
    # the names a job's pod asks for are these
    assert cfg.teams[0].name == "nlp"
    no_block = stack("p4de-odcr", teams=TEAMS)
    assert not [o for o in teams.objects(no_block.teams[0], no_block) if o["kind"] == "ConfigMap"]


def test_a_team_jobs_pod_names_exactly_these_objects() -> None:
    """The PyTorchJob of a team's job names the claim, Secret and ConfigMap the team has."""
    from tests.workloads.conftest import stack_workloads

    w = stack_workloads("p5-16")
    cfg = stack("p5-16", teams=TEAMS)
    team = cfg.teams[0]
    job = pytorchjob.pytorchjob(w.job, w.etcd.host)
    pod = job["spec"]["pytorchReplicaSpecs"]["Worker"]["template"]["spec"]
    claims = {
        v["persistentVolumeClaim"]["claimName"]
        for v in pod["volumes"]
        if "persistentVolumeClaim" in v
    }
    env = pod["containers"][0]["env"]
    secrets = {
        e["valueFrom"]["secretKeyRef"]["name"]
        for e in env
        if "secretKeyRef" in e.get("valueFrom", {})
    }
    maps = {
        e["valueFrom"]["configMapKeyRef"]["name"]
        for e in env
        if "configMapKeyRef" in e.get("valueFrom", {})
    }
    made = {
        (o["kind"], o["metadata"]["name"])
        for o in [
            *teams.objects(team, cfg),
            *teams.storage_objects(team, cfg, FS),
            teams.hf_token_secret(team, "x"),
        ]
    }
    assert claims and {("PersistentVolumeClaim", c) for c in claims} <= made
    assert secrets and {("Secret", s) for s in secrets} <= made
    assert maps and {("ConfigMap", m) for m in maps} <= made


@pytest.fixture(scope="module")
def run() -> ProgramRun:
    return run_program("p5-16", overrides={"teams": TEAMS}, secrets=SECRETS)


def _descendants(run: ProgramRun, parent: RecordedResource) -> list[RecordedResource]:
    out = []
    for child in run.children_of(parent):
        out += [child, *_descendants(run, child)]
    return out


def test_the_program_gives_each_team_its_claim_token_and_capacity_end(run: ProgramRun) -> None:
    (fsx,) = run.of_type("aws:fsx/lustreFileSystem:LustreFileSystem")
    jobs_secret = next(
        r for r in run.of_type(SECRET) if r.inputs["metadata"]["namespace"] == "default"
    )
    for name in ("nlp", "vision"):
        comp = run.one("eks-fsdp:workloads:Team", f"team-{name}")
        below = _descendants(run, comp)
        (ns,) = [c for c in below if c.type == "kubernetes:core/v1:Namespace"]
        (pv,) = [c for c in below if c.type == PV]
        (pvc,) = [c for c in below if c.type == PVC]
        (secret,) = [c for c in below if c.type == SECRET]
        (cm,) = [c for c in below if c.type == CONFIGMAP]
        assert all(c.name.startswith(f"team-{name}-") for c in below)
        # the team's volume names the stack's file system, reserved for the team's claim
        assert pv.inputs["spec"]["csi"]["volumeHandle"] == fsx.id
        assert pv.inputs["spec"]["claimRef"] == {"namespace": name, "name": "fsx-checkpoints"}
        assert pvc.inputs["metadata"]["namespace"] == name
        assert pvc.inputs["spec"]["volumeName"] == pv.inputs["metadata"]["name"]
        assert pv.urn in pvc.dependencies
        # the same token as the jobs namespace's Secret, in the team's namespace
        assert secret.inputs["metadata"]["name"] == teams.HF_TOKEN_SECRET
        assert secret.inputs["metadata"]["namespace"] == name
        assert secret.inputs["stringData"] == jobs_secret.inputs["stringData"]
        # kept secret: the engine gets it wrapped in Pulumi's secret signature
        data = secret.inputs["stringData"]
        assert SECRET_SIG in data and data["value"] == {HF_TOKEN_KEY: SECRETS["hfToken"]}
        assert cm.inputs["metadata"]["namespace"] == name
        for obj in (pvc, secret, cm):
            assert ns.urn in obj.dependencies


def test_no_token_no_shared_storage_no_copies() -> None:
    run = run_program("dev", overrides={"teams": TEAMS[:1]})
    comp = run.one("eks-fsdp:workloads:Team", "team-nlp")
    kinds = {c.type for c in _descendants(run, comp)}
    assert not kinds & {PV, PVC, SECRET}
