"""Shared checkpoint storage (``sharedStorage``) in the real Pulumi program, under Pulumi mocks.

Mocked, and why: there is no Pulumi CLI/engine, no AWS account and no Kubernetes API server
here, so ``tests/pulumi_mocks.run_program`` replaces the engine's resource monitor with Pulumi's
unit-test mocks. Providers echo their inputs plus made-up ids; the mocked FSx for Lustre file
system returns an ``fs-`` id, a DNS name and a mount name as AWS would compute them, so the
wiring from the file system to the PersistentVolume can be followed. The stacks declare no job:
the example jobs (``jobs/examples/<stack>.yaml``) are rendered by the pure builders and must
mount the claim the program creates. Everything else is the real program.

If these fail, ``pulumi up`` on p4de-odcr / p5-16 would leave multi-node jobs unable to resume:
no file system, one in another zone than the GPU nodes (or unreachable on the Lustre ports), no
CSI driver to mount it (or one holding AmazonFSxFullAccess it never needs), a PersistentVolume
naming another file system, a claim bound to nothing or under another name than the jobs
mount, or an example job that does not mount it or does not pass ``--resume``; and the dev
stack would pay for an FSx file system it does not use.
"""

from __future__ import annotations

from typing import Any

import pytest

from infra import outputs, versions
from infra.cluster import FSX_CSI_SERVICE_ACCOUNT
from infra.config import DEFAULT_CHECKPOINT_CLAIM, load_stack_file
from infra.shared_storage import LUSTRE_PORTS, SharedStorageArgs
from tests.pulumi_mocks import ProgramRun, RecordedResource, run_program
from workloads.specs.pytorchjob import pytorchjob
from workloads.specs.stack import JOBS_NAMESPACE, load

FSX_STACKS = ("p4de-odcr", "p5-16")
LUSTRE = "aws:fsx/lustreFileSystem:LustreFileSystem"
ADDON = "aws:eks/addon:Addon"
PV = "kubernetes:core/v1:PersistentVolume"
PVC = "kubernetes:core/v1:PersistentVolumeClaim"
INGRESS = "aws:vpc/securityGroupIngressRule:SecurityGroupIngressRule"
SECRETS = {"hfToken": "hf_mock", "grafanaAdminPassword": "mock-password"}
IMAGE = "example.com/train:v1.2.3"


def _run(stack: str) -> ProgramRun:
    return run_program(stack, secrets=SECRETS)


def _example_pod(stack: str) -> dict[str, Any]:
    """The pod spec of the stack's example job, as ``python -m jobs submit`` creates it."""
    w = load(stack, image=IMAGE)
    job = pytorchjob(w.job, w.etcd.host)
    return job["spec"]["pytorchReplicaSpecs"]["Worker"]["template"]["spec"]  # type: ignore[no-any-return]


@pytest.fixture(scope="module")
def runs() -> dict[str, ProgramRun]:
    return {stack: _run(stack) for stack in ("dev", *FSX_STACKS)}


def _component_of(run: ProgramRun, resource: RecordedResource) -> str:
    parent = run.by_urn(resource.parent)
    assert parent is not None
    return parent.type


@pytest.mark.parametrize("stack", FSX_STACKS)
def test_one_lustre_file_system_in_the_jobs_zone(runs: dict[str, ProgramRun], stack: str) -> None:
    run, cfg = runs[stack], load_stack_file(stack)
    fs = run.one(LUSTRE)
    assert _component_of(run, fs) == "eks-fsdp:infra:SharedStorage"
    zone = cfg.gpu_node_groups[0].availability_zone  # the example job's nodegroup (one per stack)
    assert cfg.shared_storage.availability_zone == zone
    subnet = run.one("aws:ec2/subnet:Subnet", f"network-private-{zone}")
    assert subnet.inputs["availabilityZone"] == zone
    assert fs.inputs["subnetIds"] == subnet.id
    assert fs.inputs["storageCapacity"] == cfg.shared_storage.storage_capacity_gib
    # sized for the checkpoint: ~84 GB (7B) / ~156 GB (13B) at 200 MB/s per TiB of SCRATCH_2
    assert cfg.shared_storage.storage_capacity_gib == {"p5-16": 4800, "p4de-odcr": 2400}[stack]
    assert fs.inputs["deploymentType"] == "SCRATCH_2"
    assert fs.inputs["fileSystemTypeVersion"] == versions.FSX_LUSTRE_VERSION
    assert "perUnitStorageThroughput" not in fs.inputs
    sg = run.one("aws:ec2/securityGroup:SecurityGroup", "shared-storage-sg")
    assert fs.inputs["securityGroupIds"] == [sg.id]
    assert run.outputs[outputs.SHARED_FILE_SYSTEM_ID] == fs.id
    assert run.outputs[outputs.SHARED_FILE_SYSTEM_DNS_NAME] == fs.outputs["dnsName"]
    assert run.outputs[outputs.SHARED_FILE_SYSTEM_MOUNT_NAME] == fs.outputs["mountName"]


@pytest.mark.parametrize("stack", FSX_STACKS)
def test_lustre_ports_open_to_the_nodes_and_between_servers(
    runs: dict[str, ProgramRun], stack: str
) -> None:
    run = runs[stack]
    sg = run.one("aws:ec2/securityGroup:SecurityGroup", "shared-storage-sg")
    cluster_sg = run.one("eks:index:Cluster").outputs["clusterSecurityGroupId"]
    rules = [r for r in run.of_type(INGRESS) if r.inputs["securityGroupId"] == sg.id]
    opened = sorted(
        (r.inputs["fromPort"], r.inputs["toPort"], r.inputs["referencedSecurityGroupId"])
        for r in rules
    )
    assert all(r.inputs["ipProtocol"] == "tcp" for r in rules)
    assert opened == sorted(
        (low, high, source) for low, high in LUSTRE_PORTS for source in (cluster_sg, sg.id)
    )
    assert LUSTRE_PORTS == ((988, 988), (1018, 1023))
    # ...and the clients admit the file servers on the same ports (Lustre servers connect back).
    to_clients = sorted(
        (r.inputs["fromPort"], r.inputs["toPort"], r.inputs["referencedSecurityGroupId"])
        for r in run.of_type(INGRESS)
        if r.inputs["securityGroupId"] == cluster_sg
    )
    assert to_clients == sorted((low, high, sg.id) for low, high in LUSTRE_PORTS)
    # SCRATCH_2 is encrypted at rest with an AWS-owned key and takes no kms_key_id.
    assert "kmsKeyId" not in run.one(LUSTRE).inputs
    # The GPU nodes carry the cluster security group the rules admit.
    for lt in run.of_type("aws:ec2/launchTemplate:LaunchTemplate"):
        if lt.name == "cluster-system-lt":  # no EFA interfaces listed: the default ENI
            continue
        assert all(cluster_sg in n["securityGroups"] for n in lt.inputs["networkInterfaces"])


@pytest.mark.parametrize("stack", FSX_STACKS)
def test_fsx_csi_addon_without_an_iam_role(runs: dict[str, ProgramRun], stack: str) -> None:
    """The FSx CSI add-on is installed with no IAM role: volumes are static (a PV naming the
    file system, reclaim policy Retain), so its controller never calls the FSx API
    (aws-fsx-csi-driver ``pkg/driver/controller.go``: only Create/Delete/Expand/Validate
    volume do). Before, it assumed an IRSA role holding AmazonFSxFullAccess."""
    run = runs[stack]
    (addon,) = [a for a in run.of_type(ADDON) if a.inputs["addonName"] == "aws-fsx-csi-driver"]
    assert _component_of(run, addon) == "eks-fsdp:infra:Cluster"
    assert addon.inputs["addonVersion"] == versions.FSX_CSI_ADDON_VERSION
    assert "serviceAccountRoleArn" not in addon.inputs
    system = run.one("aws:eks/nodeGroup:NodeGroup", "cluster-system")
    assert system.urn in set(addon.dependencies)
    roles = [r.inputs.get("assumeRolePolicy", "") for r in run.of_type("aws:iam/role:Role")]
    assert not any(FSX_CSI_SERVICE_ACCOUNT in str(policy) for policy in roles)
    attachments = run.of_type("aws:iam/rolePolicyAttachment:RolePolicyAttachment")
    assert not any(a.inputs["policyArn"].endswith("FullAccess") for a in attachments)
    pv = run.one(PV)
    assert pv.inputs["spec"]["persistentVolumeReclaimPolicy"] == "Retain"
    assert pv.inputs["spec"]["csi"]["driver"] == "fsx.csi.aws.com"


@pytest.mark.parametrize("stack", FSX_STACKS)
def test_volume_and_claim_name_the_file_system(runs: dict[str, ProgramRun], stack: str) -> None:
    run, cfg = runs[stack], load_stack_file(stack)
    fs, pv, pvc = run.one(LUSTRE), run.one(PV), run.one(PVC)
    provider = run.one("pulumi:providers:kubernetes", "cluster-k8s")
    for r in (pv, pvc):
        assert _component_of(run, r) == "eks-fsdp:workloads:CheckpointVolume"
        assert r.provider.startswith(provider.urn + "::")
    csi = pv.inputs["spec"]["csi"]
    assert csi["driver"] == "fsx.csi.aws.com"
    assert csi["volumeHandle"] == fs.id
    assert csi["volumeAttributes"] == {
        "dnsname": fs.outputs["dnsName"],
        "mountname": fs.outputs["mountName"],
    }
    assert pv.inputs["spec"]["accessModes"] == ["ReadWriteMany"]
    assert pv.inputs["spec"]["capacity"] == {
        "storage": f"{cfg.shared_storage.storage_capacity_gib}Gi"
    }
    assert pvc.inputs["metadata"]["name"] == DEFAULT_CHECKPOINT_CLAIM
    assert pvc.inputs["metadata"]["namespace"] == JOBS_NAMESPACE
    assert run.outputs["checkpointClaims"] == [DEFAULT_CHECKPOINT_CLAIM]
    assert pvc.inputs["spec"]["storageClassName"] == ""
    assert pvc.inputs["spec"]["volumeName"] == pv.inputs["metadata"]["name"]
    assert pv.inputs["spec"]["claimRef"] == {
        "namespace": JOBS_NAMESPACE,
        "name": DEFAULT_CHECKPOINT_CLAIM,
    }
    assert pv.urn in pvc.dependencies


@pytest.mark.parametrize("stack", FSX_STACKS)
def test_the_example_job_mounts_the_claim_and_resumes(
    runs: dict[str, ProgramRun], stack: str
) -> None:
    run = runs[stack]
    pvc = run.one(PVC)
    pod = _example_pod(stack)
    assert load(stack, image=IMAGE).job.namespace == pvc.inputs["metadata"]["namespace"]
    (volume,) = [v for v in pod["volumes"] if v["name"] == "checkpoints"]
    assert volume == {
        "name": "checkpoints",
        "persistentVolumeClaim": {"claimName": pvc.inputs["metadata"]["name"]},
    }
    (container,) = pod["containers"]
    assert "--resume" in container["command"]
    mounts = {m["name"]: m["mountPath"] for m in container["volumeMounts"]}
    assert mounts["checkpoints"] == "/checkpoints"
    assert "--dist_checkpoint_root_folder=/checkpoints" in container["command"]


def test_dev_has_no_shared_storage(runs: dict[str, ProgramRun]) -> None:
    run = runs["dev"]
    assert not load_stack_file("dev").shared_storage.is_fsx
    types = {r.type for r in run.resources}
    assert not types & {
        LUSTRE,
        PV,
        PVC,
        "eks-fsdp:infra:SharedStorage",
        "eks-fsdp:workloads:CheckpointVolume",
    }
    assert "aws-fsx-csi-driver" not in {a.inputs["addonName"] for a in run.of_type(ADDON)}
    assert outputs.SHARED_FILE_SYSTEM_ID not in run.outputs
    assert run.outputs["checkpointClaims"] == []
    (container,) = _example_pod("dev")["containers"]
    assert "--resume" not in container["command"]  # two workers, one emptyDir each


def test_shared_storage_args_validate_at_construction() -> None:
    cfg = load_stack_file("p5-16")
    ok: dict[str, Any] = {
        "storage": cfg.shared_storage,
        "cluster_name": "c",
        "vpc_id": "vpc-1",
        "subnet_id": "subnet-1",
        "client_security_group_ids": ["sg-1"],
    }
    SharedStorageArgs(**ok)
    for change, field in (
        ({"storage": load_stack_file("dev").shared_storage}, "storage"),
        ({"cluster_name": "bad name"}, "cluster_name"),
        ({"client_security_group_ids": []}, "client_security_group_ids"),
    ):
        with pytest.raises(ValueError, match=f"SharedStorageArgs.{field}"):
            SharedStorageArgs(**{**ok, **change})
