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
stack would pay for an FSx file system it does not use. The PERSISTENT_2 tests: a file system
that does not write through to the data bucket (so ``pulumi destroy`` would lose its
checkpoints), a bad storage value reaching AWS instead of one line naming the key, workers each
downloading the weights again, or a planner that sizes both deployment types alike.
"""

from __future__ import annotations

from typing import Any

import pytest

from infra import outputs, versions
from infra.cluster import FSX_CSI_SERVICE_ACCOUNT
from infra.config import DEFAULT_CHECKPOINT_CLAIM, ConfigError, load_stack_file, parse
from infra.shared_storage import DATA_REPOSITORY_EVENTS, LUSTRE_PORTS, SharedStorageArgs
from jobs.build import load_example
from planner.storage import Storage as PlannerStorage
from planner.storage import checkpoint_bytes, checkpoint_seconds, fsx_capacity_for
from tests.pulumi_mocks import ProgramRun, RecordedResource, run_program, stack_config
from workloads.specs.pytorchjob import HF_HOME_DIR, pytorchjob
from workloads.specs.stack import JOBS_NAMESPACE

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
    """The pod spec of the stack's example job, as ``eks-fsdp jobs submit`` creates it."""
    _, w = load_example(stack, image=IMAGE)
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
    assert load_example(stack, image=IMAGE)[1].job.namespace == pvc.inputs["metadata"]["namespace"]
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


# --- PERSISTENT_2 writing through to the data bucket -----------------------------------------

PERSISTENT = {
    "type": "fsx",
    "storageCapacityGiB": 2400,
    "deploymentType": "PERSISTENT_2",
    "perUnitStorageThroughput": 250,
    "dataRepositoryPrefix": "training/fsx",
}
DRA = "aws:fsx/dataRepositoryAssociation:DataRepositoryAssociation"


def test_persistent_2_links_the_whole_file_system_to_the_bucket_prefix() -> None:
    """PERSISTENT_2 at 250 MB/s/TiB, encrypted with the component's rotating key, and one
    data repository association from ``/`` to ``s3://<data bucket>/training/fsx/`` that
    imports and exports new, changed and deleted files and keeps the bucket's data when it is
    removed (FSx for Lustre user guide, "Linking your file system to an Amazon S3 bucket")."""
    run = run_program("p5-16", overrides={"sharedStorage": PERSISTENT}, secrets=SECRETS)
    fs = run.one(LUSTRE)
    assert fs.inputs["deploymentType"] == "PERSISTENT_2"
    assert fs.inputs["perUnitStorageThroughput"] == 250
    assert fs.inputs["storageCapacity"] == 2400
    key = run.one("aws:kms/key:Key", "shared-storage-key")
    assert key.inputs["enableKeyRotation"] is True
    assert fs.inputs["kmsKeyId"] == key.outputs["arn"]
    dra = run.one(DRA)
    assert _component_of(run, dra) == "eks-fsdp:infra:SharedStorage"
    bucket = run.outputs[outputs.DATA_BUCKET_NAME]
    assert dra.inputs == {
        "fileSystemId": fs.id,
        "fileSystemPath": "/",
        "dataRepositoryPath": f"s3://{bucket}/training/fsx/",
        "batchImportMetaDataOnCreate": True,
        "deleteDataInFilesystem": False,
        "s3": {
            "autoImportPolicy": {"events": ["NEW", "CHANGED", "DELETED"]},
            "autoExportPolicy": {"events": ["NEW", "CHANGED", "DELETED"]},
        },
        "tags": {"eks-fsdp/cluster": load_stack_file("p5-16").cluster_name},
    }
    assert DATA_REPOSITORY_EVENTS == ("NEW", "CHANGED", "DELETED")
    # The jobs' role reaches what the file system exports (it is under dataBucket.prefix).
    assert "training/fsx/".startswith(run.outputs[outputs.DATA_BUCKET_PREFIX] + "/")
    # The program gives the bucket the linked prefix: the checkpoints FSx exports there (each
    # save re-exported on rename and prune) lose their old versions after a day.
    lifecycle = run.one("aws:s3/bucketLifecycleConfiguration:BucketLifecycleConfiguration")
    (rule,) = [r for r in lifecycle.inputs["rules"] if r["filter"] == {"prefix": "training/fsx/"}]
    assert rule["noncurrentVersionExpiration"] == {"noncurrentDays": 1}
    unlinked = run_program("p5-16", secrets=SECRETS)
    lifecycle = unlinked.one("aws:s3/bucketLifecycleConfiguration:BucketLifecycleConfiguration")
    assert "training/fsx/" not in str(lifecycle.inputs["rules"])


@pytest.mark.parametrize("stack", FSX_STACKS)
def test_scratch_2_stacks_stay_unlinked(runs: dict[str, ProgramRun], stack: str) -> None:
    assert not runs[stack].of_type(DRA)
    assert load_stack_file(stack).shared_storage.data_repository_prefix is None


def _stack_with(**shared: Any) -> dict[str, Any]:
    raw = stack_config("p5-16")
    return {**raw, "sharedStorage": {**raw["sharedStorage"], **shared}}


BAD_STORAGE: list[tuple[str, dict[str, Any], str]] = [
    (
        "unknown-deployment-type",
        {"deploymentType": "PERSISTENT_1"},
        "eks-fsdp:sharedStorage.deploymentType: 'PERSISTENT_1' is not one of SCRATCH_2, "
        "PERSISTENT_2",
    ),
    (
        "throughput-not-for-persistent-2",
        {"deploymentType": "PERSISTENT_2", "perUnitStorageThroughput": 200},
        "eks-fsdp:sharedStorage.perUnitStorageThroughput: 200 is not one of 125, 250, 500, 1000"
        " (MB/s/TiB)",
    ),
    (
        "throughput-on-scratch-2",
        {"perUnitStorageThroughput": 125},
        "eks-fsdp:sharedStorage.perUnitStorageThroughput: only PERSISTENT_2 takes a throughput;"
        " SCRATCH_2 has a fixed one",
    ),
    (
        "persistent-capacity-step",
        {"deploymentType": "PERSISTENT_2", "storageCapacityGiB": 3600},
        "eks-fsdp:sharedStorage.storageCapacityGiB: 3600 is not 1200 or a multiple of 2400"
        " (FSx for Lustre PERSISTENT_2)",
    ),
    (
        "link-on-scratch-2",
        {"dataRepositoryPrefix": "training/fsx"},
        "eks-fsdp:sharedStorage.dataRepositoryPrefix: a data repository association is linked"
        " here only on PERSISTENT_2, not SCRATCH_2",
    ),
    (
        "link-outside-the-jobs-prefix",
        {**PERSISTENT, "dataRepositoryPrefix": "elsewhere"},
        "eks-fsdp:sharedStorage.dataRepositoryPrefix: 'elsewhere' is not under"
        " dataBucket.prefix 'training'",
    ),
    (
        "link-not-a-prefix",
        {**PERSISTENT, "dataRepositoryPrefix": "training/ fsx"},
        "eks-fsdp:sharedStorage.dataRepositoryPrefix: 'training/ fsx' is not a key prefix",
    ),
]


@pytest.mark.parametrize(
    ("case", "change", "message"), BAD_STORAGE, ids=[b[0] for b in BAD_STORAGE]
)
def test_bad_storage_config_is_one_line(case: str, change: dict[str, Any], message: str) -> None:
    with pytest.raises(ConfigError) as err:
        parse(_stack_with(**change))
    assert "\n" not in str(err.value)
    assert str(err.value).startswith(message), str(err.value)


def test_a_link_needs_the_data_bucket() -> None:
    raw = {**_stack_with(**PERSISTENT), "dataBucket": {"enabled": False}}
    with pytest.raises(ConfigError, match=r"^eks-fsdp:sharedStorage.dataRepositoryPrefix: needs"):
        parse(raw)
    cfg = parse(_stack_with(**PERSISTENT)).shared_storage
    with pytest.raises(ValueError, match=r"^SharedStorageArgs\.data_bucket_name: required"):
        SharedStorageArgs(
            storage=cfg,
            cluster_name="c",
            vpc_id="vpc-1",
            subnet_id="subnet-1",
            client_security_group_ids=["sg-1"],
        )


@pytest.mark.parametrize("stack", FSX_STACKS)
def test_hf_home_on_the_shared_claim(stack: str) -> None:
    """``HF_HOME`` on the claim every worker mounts: the first node's download (or ``s3://``
    weights copy) serves the others and every restart. Without a claim it is left to the
    image's default (an emptyDir per pod would share nothing)."""
    (container,) = _example_pod(stack)["containers"]
    env = {e["name"]: e.get("value") for e in container["env"]}
    assert env["HF_HOME"] == f"/checkpoints/{HF_HOME_DIR}"
    mounts = {m["mountPath"] for m in container["volumeMounts"]}
    assert env["HF_HOME"].startswith(tuple(f"{m}/" for m in mounts))
    (dev,) = _example_pod("dev")["containers"]
    assert "HF_HOME" not in {e["name"] for e in dev["env"]}


# --- the planner's sizing for both deployment types --------------------------------------------


def test_checkpoint_time_and_sizing_know_both_deployment_types() -> None:
    """A 7B model's checkpoint with fp32 AdamW state (84 GB): on 2400 GiB, SCRATCH_2 writes
    100 MB/s/TiB, PERSISTENT_2 its provisioned 125-1000 (capped by the 320-2600 MB/s/TiB of
    network); the smallest file system that writes one in 5 minutes and holds three (two kept,
    one being written) follows ("Amazon FSx for Lustre performance")."""
    size = checkpoint_bytes(7_000_000_000, 4, 4)
    assert size == 84_000_000_000
    tib = 2400 / 1024
    for deployment, unit, mb_per_tib in (
        ("SCRATCH_2", None, 100),
        ("PERSISTENT_2", 125, 125),
        ("PERSISTENT_2", 1000, 1000),
    ):
        storage = PlannerStorage(
            kind="fsx", deployment_type=deployment, capacity_gib=2400, per_unit_throughput=unit
        )
        assert storage.write_bytes_per_s(nodes=16) == pytest.approx(mb_per_tib * 1e6 * tib)
        seconds = checkpoint_seconds(size, storage, nodes=16)
        assert seconds == pytest.approx(size / (mb_per_tib * 1e6 * tib))
    sized = {
        (d, u): fsx_capacity_for(size, write_s=300, deployment_type=d, per_unit_throughput=u)
        for d, u in (("SCRATCH_2", None), ("PERSISTENT_2", 125), ("PERSISTENT_2", 1000))
    }
    # 84 GB in 300 s needs 280 MB/s: 2.8 TiB of SCRATCH_2 (4800 GiB is the next valid size),
    # 2.24 TiB of PERSISTENT_2-125 (2400 GiB); at 1000 MB/s/TiB the three checkpoints (252 GB)
    # decide, and 1200 GiB holds them.
    assert {k: s.capacity_gib for k, s in sized.items()} == {
        ("SCRATCH_2", None): 4800,
        ("PERSISTENT_2", 125): 2400,
        ("PERSISTENT_2", 1000): 1200,
    }
    for storage in sized.values():
        assert checkpoint_seconds(size, storage, nodes=1) <= 300
        assert storage.capacity_gib * 2**30 >= 3 * size
        smaller = storage.capacity_gib - (1200 if storage.capacity_gib == 2400 else 2400)
        if smaller >= 1200:
            below = PlannerStorage(
                kind="fsx",
                deployment_type=storage.deployment_type,
                capacity_gib=smaller,
                per_unit_throughput=storage.per_unit_throughput,
            )
            assert checkpoint_seconds(size, below, nodes=1) > 300
    with pytest.raises(ValueError, match="write_s"):
        fsx_capacity_for(size, write_s=0)
