"""Stack config validation (``infra.config``): pure Python, nothing mocked.

If these fail, a typo or an impossible combination in ``Pulumi.<stack>.yaml`` (EFA on a type
without it, a capacity block without a reservation, more workers than nodes...) would reach
AWS and fail there, minutes into ``pulumi up``, instead of stopping at once with one line
naming the key. They also pin that the three shipped stack files parse and that the defaults
declared in ``Pulumi.yaml`` are the parser's own.
"""

from __future__ import annotations

import copy
import shutil
from pathlib import Path
from typing import Any, Self

import pytest
import yaml

from infra import config, versions
from infra.config import ConfigError, load_stack_file, parse, project_defaults
from jobs import schema
from jobs.build import build

GROUP: dict[str, Any] = {
    "name": "gpu",
    "instanceType": "p4de.24xlarge",
    "minSize": 0,
    "desiredSize": 2,
    "maxSize": 2,
    "availabilityZone": "us-east-1a",
}
BASE: dict[str, Any] = {
    "aws:region": "us-east-1",
    "availabilityZones": ["us-east-1a", "us-east-1b"],
    "gpuNodeGroups": [GROUP],
}


def with_group(**changes: Any) -> dict[str, Any]:
    raw = copy.deepcopy(BASE)
    group = raw["gpuNodeGroups"][0]
    for key, value in changes.items():
        if value is None:
            group.pop(key, None)
        else:
            group[key] = value
    return raw


def with_top(**changes: Any) -> dict[str, Any]:
    raw = copy.deepcopy(BASE)
    raw.update(changes)
    return raw


BAD: list[tuple[str, dict[str, Any], str]] = [
    (
        "unknown-instance-type",
        with_group(instanceType="p9.huge"),
        "eks-fsdp:gpuNodeGroups[0].instanceType: unknown instance type 'p9.huge' (catalog: ",
    ),
    (
        "desired-outside-min-max",
        with_group(desiredSize=5),
        "eks-fsdp:gpuNodeGroups[0].desiredSize: 5 is outside [minSize 0, maxSize 2]",
    ),
    (
        "max-size-zero",
        with_group(minSize=0, desiredSize=0, maxSize=0),
        "eks-fsdp:gpuNodeGroups[0].maxSize: must be greater than 0",
    ),
    (
        "min-above-max",
        with_group(minSize=3, desiredSize=2, maxSize=2),
        "eks-fsdp:gpuNodeGroups[0].minSize: 3 is greater than maxSize 2",
    ),
    (
        "bad-reservation-id",
        with_group(capacityReservationId="cr-123"),
        "eks-fsdp:gpuNodeGroups[0].capacityReservationId: 'cr-123' is not shaped cr- + 17 hex",
    ),
    (
        "uppercase-reservation-id",
        with_group(capacityReservationId="cr-0123456789ABCDEF0"),
        "eks-fsdp:gpuNodeGroups[0].capacityReservationId: 'cr-0123456789ABCDEF0' is not shaped",
    ),
    (
        "efa-on-type-without-efa",
        with_group(instanceType="g5.xlarge", efa=True),
        "eks-fsdp:gpuNodeGroups[0].efa: g5.xlarge has no EFA interfaces",
    ),
    (
        "efa-without-availability-zone",
        with_group(availabilityZone=None),
        "eks-fsdp:gpuNodeGroups[0].availabilityZone: is required with efa",
    ),
    (
        "availability-zone-not-in-vpc",
        with_group(availabilityZone="us-east-1c"),
        "eks-fsdp:gpuNodeGroups[0].availabilityZone: us-east-1c is not in availabilityZones"
        " (us-east-1a, us-east-1b)",
    ),
    (
        "capacity-block-without-reservation",
        with_group(capacityType="capacity-block"),
        "eks-fsdp:gpuNodeGroups[0].capacityReservationId: is required with capacityType"
        " capacity-block",
    ),
    (
        "reservation-id-and-resource-group",
        with_group(
            capacityReservationId="cr-0123456789abcdef0",
            capacityReservationResourceGroupArn=(
                "arn:aws:resource-groups:us-east-1:123456789012:group/p4de"
            ),
        ),
        "eks-fsdp:gpuNodeGroups[0].capacityReservationResourceGroupArn: set either",
    ),
    (
        "reservation-without-availability-zone",
        with_group(
            instanceType="g5.xlarge",
            availabilityZone=None,
            capacityReservationId="cr-0123456789abcdef0",
        ),
        "eks-fsdp:gpuNodeGroups[0].availabilityZone: is required with a capacity reservation",
    ),
    (
        "capacity-block-with-placement-group",
        with_group(
            capacityType="capacity-block",
            capacityReservationId="cr-0123456789abcdef0",
            placementGroup="create",
        ),
        "eks-fsdp:gpuNodeGroups[0].placementGroup: 'create' with capacityType capacity-block:"
        " a block is already co-located; set none",
    ),
    (
        "kubernetes-version-unknown",
        with_top(kubernetesVersion="1.29"),
        "eks-fsdp:kubernetesVersion: 1.29 has no known EKS standard-support window",
    ),
    (
        "api-endpoint-open-to-the-internet",
        with_top(apiPublicAccessCidrs=["203.0.113.0/24", "0.0.0.0/0"]),
        "eks-fsdp:apiPublicAccessCidrs[1]: 0.0.0.0/0 opens the API endpoint to the internet",
    ),
    (
        "api-endpoint-cidr-not-a-network",
        with_top(apiPublicAccessCidrs=["203.0.113.7/24"]),
        "eks-fsdp:apiPublicAccessCidrs[0]: '203.0.113.7/24' is not an IPv4 network CIDR",
    ),
    (
        "bad-capacity-type",
        with_group(capacityType="spot"),
        "eks-fsdp:gpuNodeGroups[0].capacityType: 'spot' is not one of on-demand, capacity-block",
    ),
    (
        "bad-taint",
        with_group(taint="nvidia.com/gpu=true:Never"),
        "eks-fsdp:gpuNodeGroups[0].taint: 'Never' is not one of NoSchedule",
    ),
    (
        "typo-in-nodegroup-key",
        with_group(desiredsize=2),
        "eks-fsdp:gpuNodeGroups[0].desiredsize: unknown key (known: name, instanceType,",
    ),
    (
        "duplicate-nodegroup-names",
        with_top(gpuNodeGroups=[GROUP, GROUP]),
        "eks-fsdp:gpuNodeGroups[1].name: 'gpu' is used twice",
    ),
    (
        "cidr-invalid",
        with_top(vpcCidr="10.0.0.1/16"),
        "eks-fsdp:vpcCidr: '10.0.0.1/16' is not an IPv4 network CIDR",
    ),
    (
        "cidr-too-large",
        with_top(vpcCidr="10.0.0.0/8"),
        "eks-fsdp:vpcCidr: 10.0.0.0/8 has prefix /8; a VPC must be /16 to /28",
    ),
    (
        "subnets-do-not-fit",
        with_top(vpcCidr="10.0.0.0/26"),
        "eks-fsdp:vpcCidr: 10.0.0.0/26 is too small for 2 availability zones: public subnets"
        " would be /30",
    ),
    (
        "service-cidr-overlaps-vpc",
        with_top(kubernetesServiceCidr="10.0.128.0/20"),
        "eks-fsdp:kubernetesServiceCidr: 10.0.128.0/20 overlaps vpcCidr 10.0.0.0/16",
    ),
    (
        "one-availability-zone",
        with_top(availabilityZones=["us-east-1a"]),
        "eks-fsdp:availabilityZones: needs at least 2 zones for EKS, got 1",
    ),
    (
        "zone-of-another-region",
        with_top(availabilityZones=["us-east-1a", "us-west-2b"]),
        "eks-fsdp:availabilityZones[1]: us-west-2b is not in aws:region us-east-1",
    ),
    (
        "kubernetes-version-as-yaml-float",
        with_top(kubernetesVersion=1.3),
        "eks-fsdp:kubernetesVersion: '1.3' is not shaped 1.NN (quote it in YAML: '1.30')",
    ),
    (
        "bad-nat-gateways",
        with_top(natGateways="two"),
        "eks-fsdp:natGateways: 'two' is not one of single, perAz",
    ),
    (
        "unknown-top-level-key",
        with_top(clusterNmae="x"),
        "eks-fsdp:clusterNmae: unknown key (known: clusterName,",
    ),
    (
        "bad-access-entry",
        with_top(accessEntries=["alice"]),
        "eks-fsdp:accessEntries[0]: 'alice' is not an IAM role or user ARN",
    ),
    (
        "system-desired-outside",
        with_top(systemNodeGroup={"minSize": 1, "desiredSize": 9, "maxSize": 3}),
        "eks-fsdp:systemNodeGroup.desiredSize: 9 is outside [minSize 1, maxSize 3]",
    ),
    (
        "storage-unknown-type",
        with_top(sharedStorage={"type": "efs"}),
        "eks-fsdp:sharedStorage.type: 'efs' is not one of none, fsx",
    ),
    (
        "storage-typo",
        with_top(sharedStorage={"type": "fsx", "capacityGiB": 1200}),
        "eks-fsdp:sharedStorage.capacityGiB: unknown key (known: type, storageCapacityGiB,",
    ),
    (
        "storage-capacity-not-lustre-step",
        with_top(sharedStorage={"type": "fsx", "storageCapacityGiB": 2000}),
        "eks-fsdp:sharedStorage.storageCapacityGiB: 2000 is not 1200 or a multiple of 2400"
        " (FSx for Lustre SCRATCH_2)",
    ),
    (
        "storage-capacity-zero",
        with_top(sharedStorage={"type": "fsx", "storageCapacityGiB": 0}),
        "eks-fsdp:sharedStorage.storageCapacityGiB: 0 is not 1200 or a multiple of 2400",
    ),
    (
        "storage-bad-deployment-type",
        with_top(sharedStorage={"type": "fsx", "deploymentType": "SCRATCH_1"}),
        "eks-fsdp:sharedStorage.deploymentType: 'SCRATCH_1' is not one of SCRATCH_2, PERSISTENT_2",
    ),
    (
        "storage-throughput-on-scratch",
        with_top(sharedStorage={"type": "fsx", "perUnitStorageThroughput": 250}),
        "eks-fsdp:sharedStorage.perUnitStorageThroughput: only PERSISTENT_2 takes a throughput",
    ),
    (
        "storage-bad-persistent-throughput",
        with_top(
            sharedStorage={
                "type": "fsx",
                "deploymentType": "PERSISTENT_2",
                "perUnitStorageThroughput": 200,
            }
        ),
        "eks-fsdp:sharedStorage.perUnitStorageThroughput: 200 is not one of 125, 250, 500, 1000",
    ),
    (
        "storage-zone-outside-vpc",
        with_top(sharedStorage={"type": "fsx", "availabilityZone": "us-east-1c"}),
        "eks-fsdp:sharedStorage.availabilityZone: us-east-1c is not in availabilityZones",
    ),
    (
        "storage-zone-unknown",
        {
            **with_group(availabilityZone=None, efa=False, placementGroup="none"),
            "sharedStorage": {"type": "fsx"},
        },
        "eks-fsdp:sharedStorage.availabilityZone: is required with type fsx when the first GPU"
        " nodegroup is not pinned to a zone",
    ),
    (
        "storage-not-an-object",
        with_top(sharedStorage="fsx"),
        "eks-fsdp:sharedStorage: expected an object, got 'fsx'",
    ),
]


JOB_BAD: list[tuple[str, dict[str, Any], str]] = [
    (
        "job-unknown-nodegroup",
        dict(nodeGroup="nope"),
        "job.yaml: nodeGroup: 'nope' is not a GPU nodegroup (gpu)",
    ),
    (
        "job-workers-above-max-size",
        dict(workers=3),
        "job.yaml: workers: 3 is greater than maxSize 2 of nodegroup gpu",
    ),
    (
        "job-min-workers-above-workers",
        dict(workers=2, minWorkers=3),
        "job.yaml: minWorkers: 3 is greater than workers 2",
    ),
    (
        "job-bad-rdzv-backend",
        dict(rdzvBackend="zookeeper"),
        "job.yaml: rdzvBackend: 'zookeeper' is not one of etcd, c10d",
    ),
    (
        "job-bad-sharding",
        dict(shardingStrategy="ZERO3"),
        "job.yaml: shardingStrategy: 'ZERO3' is not one of FULL_SHARD",
    ),
    (
        "job-args-not-a-mapping",
        dict(args=["lr=1e-4"]),
        "job.yaml: args: expected a mapping flag: value, got ['lr=1e-4']",
    ),
    (
        "job-without-gpu-nodegroup",
        {"workers": 1, "stack": "no-gpu"},
        "job.yaml: nodeGroup: there is no GPU nodegroup to run the job on",
    ),
    (
        "job-claim-not-dns-1123",
        dict(checkpointClaim="FSx_Checkpoints"),
        "job.yaml: checkpointClaim: 'FSx_Checkpoints' is not a DNS-1123 name",
    ),
    (
        "job-bad-namespace",
        dict(namespace="Training.NS"),
        "job.yaml: namespace: 'Training.NS' is not a DNS label",
    ),
]
"""A job's keys (``jobs.schema.parse``, the schema job files share; the file's own checks,
unknown keys and lines, are ``tests/jobs``'s) on a stack of ``BASE``'s nodegroup (``no-gpu``:
one without GPU nodegroups). A job's generation is no key of the file: ``build`` takes it
(``test_a_generation_below_one_is_refused``)."""


@pytest.fixture(scope="module")
def job_root(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A folder of stack files: ``Pulumi.yaml`` (this project's), ``Pulumi.base.yaml``
    (``BASE``) and ``Pulumi.no-gpu.yaml`` (``BASE`` without GPU nodegroups)."""
    root = tmp_path_factory.mktemp("stacks")
    shutil.copy(config.REPO_ROOT / "Pulumi.yaml", root / "Pulumi.yaml")
    for stack, raw in (("base", BASE), ("no-gpu", with_top(gpuNodeGroups=[]))):
        (root / f"Pulumi.{stack}.yaml").write_text(yaml.safe_dump({"config": raw}))
    return root


def job_of(root: Path, **keys: Any) -> schema.JobSpec:
    """A job file's keys (``job.yaml``) on the ``base`` stack of ``root``, parsed."""
    values = {"name": "llama", "stack": "base", "model": "tiny-llama", **keys}
    return schema.parse(values, source="job.yaml", root=root)


@pytest.mark.parametrize(("raw", "expected"), [(r, e) for _, r, e in BAD], ids=[i for i, *_ in BAD])
def test_bad_config_stops_with_one_line_naming_the_key(raw: dict[str, Any], expected: str) -> None:
    with pytest.raises(ConfigError) as err:
        parse(raw)
    message = str(err.value)
    assert message.startswith(expected), message
    assert "\n" not in message
    assert isinstance(err.value, ValueError)


@pytest.mark.parametrize(
    ("job", "expected"), [(r, e) for _, r, e in JOB_BAD], ids=[i for i, *_ in JOB_BAD]
)
def test_bad_job_keys_stop_with_one_line_naming_the_key(
    job: dict[str, Any], expected: str, job_root: Path
) -> None:
    with pytest.raises(schema.JobFileError) as err:
        job_of(job_root, **job)
    message = str(err.value)
    assert message.startswith(expected), message
    assert "\n" not in message
    assert isinstance(err.value, ValueError)


def test_a_generation_below_one_is_refused(job_root: Path) -> None:
    """A job's generation (its n-th submission) is ``build``'s argument, not a key of the
    file; 0 stops with one line naming it."""
    assert "generation" not in schema.KEYS
    with pytest.raises(schema.JobFileError) as err:
        build(job_of(job_root), image="registry/train:1", generation=0)
    message = str(err.value)
    assert message.startswith("job.yaml: job.generation: 0"), message
    assert "\n" not in message


@pytest.mark.parametrize("stack", ["dev", "p5-16"])
def test_a_job_block_in_a_stack_is_refused_with_the_way_out(stack: str) -> None:
    """Jobs are not part of the cluster stack: a leftover ``job`` block would otherwise read as
    submitted by the next ``pulumi up`` (and that ``up`` deletes the job it created before)."""
    with pytest.raises(ConfigError) as err:
        parse(with_top(job={"name": "x", "workers": 1}), stack=stack)
    message = str(err.value)
    assert message.startswith("eks-fsdp:job: jobs are not part of the cluster stack any more")
    assert f"eks-fsdp jobs submit FILE --stack {stack}" in message and "\n" not in message
    # Pulumi.yaml still declares the key with an empty default: that one passes, binding none
    assert not hasattr(parse(with_top(job={})), "job")


def test_defaults_derive_from_the_catalog_and_the_nodegroup(job_root: Path) -> None:
    cfg = parse(BASE)
    group = cfg.gpu_node_groups[0]
    assert group.efa is True  # p4de has 4 EFA interfaces
    assert group.placement_group == "create"  # EFA, no reservation -> cluster placement group
    assert group.root_volume_gib == 500
    assert str(group.taint) == "nvidia.com/gpu=true:NoSchedule"
    assert group.usd_per_hour == pytest.approx(27.45)
    job = job_of(job_root)
    assert job.platform.gpu_node_groups == cfg.gpu_node_groups
    assert (job.node_group, job.workers, job.min_workers) == ("gpu", 2, 2)
    assert (job.rdzv_backend, job.max_restarts, job.device) == ("etcd", 3, "cuda")
    assert cfg.kubernetes_version == versions.KUBERNETES_VERSION
    assert not hasattr(cfg, "job") and not hasattr(cfg, "job_node_group")


def test_reservation_turns_the_default_placement_group_off() -> None:
    cfg = parse(with_group(capacityReservationId="cr-0123456789abcdef0"))
    assert cfg.gpu_node_groups[0].placement_group == "none"
    assert cfg.gpu_node_groups[0].has_reservation


def test_engine_shaped_values_are_accepted() -> None:
    """Pulumi hands integers over as floats, and CLI-set scalars as strings."""
    cfg = parse(with_group(minSize=0.0, desiredSize="1", maxSize=2.0, efa="false", pricePerHour=9))
    group = cfg.gpu_node_groups[0]
    assert (group.min_size, group.desired_size, group.max_size) == (0, 1, 2)
    assert group.efa is False
    assert group.usd_per_hour == 9.0


def test_a_stack_file_binds_no_job() -> None:
    assert not hasattr(parse(with_top(gpuNodeGroups=[])), "job")
    assert not hasattr(parse(BASE), "job")


def test_shipped_stack_files_parse() -> None:
    dev = load_stack_file("dev")
    p4de = load_stack_file("p4de-odcr")
    p5 = load_stack_file("p5-16")
    # dev idles at zero GPU nodes (costs nothing); no stack carries a job (jobs/examples/).
    assert [(g.instance_type, g.min_size, g.desired_size, g.efa) for g in dev.gpu_node_groups] == [
        ("g5.xlarge", 0, 0, False)
    ]
    assert not any(hasattr(cfg, "job") for cfg in (dev, p4de, p5))
    assert dev.nat_gateways == "single" and len(dev.availability_zones) == 2
    (g4,) = p4de.gpu_node_groups
    assert (g4.instance_type, g4.desired_size, g4.placement_group) == ("p4de.24xlarge", 2, "none")
    assert g4.capacity_reservation_id is not None and g4.capacity_type == "on-demand"
    (g5,) = p5.gpu_node_groups
    assert (g5.instance_type, g5.desired_size, g5.capacity_type) == (
        "p5.48xlarge",
        16,
        "capacity-block",
    )
    assert g5.placement_group == "none" and g5.efa


def test_pulumi_yaml_declares_every_key_with_a_description() -> None:
    """Every key is declared, the two secrets included. The CLI's rules (pulumi/pulumi
    ``pkg/workspace/config.go``): a declared key without a default is required, and a
    ``secret: true`` key is rejected when its value is plaintext, which a merged default is
    (pulumi/pulumi#21865). So the optional secrets are declared with ``default: ""`` and
    without ``secret: true``; the program refuses a plaintext value itself (next test)."""
    text = (config.REPO_ROOT / "Pulumi.yaml").read_text()
    project = yaml.safe_load(text)
    assert project["name"] == config.NAMESPACE
    declared = project["config"]
    for key in (*config.TOP_LEVEL_KEYS, *config.SECRET_KEYS):
        assert key in declared, key
        assert declared[key].get("description"), key
    assert set(declared) == set(config.TOP_LEVEL_KEYS) | set(config.SECRET_KEYS)
    for key in config.SECRET_KEYS:
        assert declared[key] == {
            "type": "string",
            "default": "",
            "description": declared[key]["description"],
        }
    assert not [k for k, d in declared.items() if d.get("secret") and "default" in d]


def test_a_secret_key_in_plaintext_is_refused() -> None:
    """The check ``secret: true`` would make: a non-empty plaintext ``hfToken`` in a stack
    file stops parsing with one line; the declared default "" is "not set"."""
    assert parse(with_top(hfToken="")).kubernetes_version
    with pytest.raises(ConfigError) as err:
        parse(with_top(hfToken="hf_plain"))
    assert str(err.value) == (
        "eks-fsdp:hfToken: is set in plaintext; remove it and run"
        " `pulumi config set --secret hfToken ...`"
    )


def test_pulumi_yaml_follows_the_engine_rules() -> None:
    """The CLI rejects an array type without ``items`` and a default of the wrong type, and
    treats a declared key without a default as required: only availabilityZones and
    apiPublicAccessCidrs (which each user sets) may be."""
    declared = yaml.safe_load((config.REPO_ROOT / "Pulumi.yaml").read_text())["config"]
    python_types = {"string": str, "boolean": bool, "integer": int, "array": list}
    required = sorted(k for k, d in declared.items() if "default" not in d and "value" not in d)
    assert required == ["apiPublicAccessCidrs", "availabilityZones"]
    for key, decl in declared.items():
        assert not ("default" in decl and "value" in decl), key
        if "type" not in decl:
            continue
        assert decl["type"] in python_types, key
        if decl["type"] == "array":
            assert decl.get("items", {}).get("type") in ("string", "integer", "boolean"), key
        if "default" in decl:
            assert isinstance(decl["default"], python_types[decl["type"]]), key


def test_pulumi_yaml_defaults_are_the_parser_defaults() -> None:
    """The engine applies Pulumi.yaml defaults; parse() must agree when they are absent."""
    assert parse({**project_defaults(), **BASE}) == parse(BASE)


def test_job_generation_claim_and_namespace_are_read(job_root: Path) -> None:
    """The claim and namespace are keys of the job file; the generation is ``build``'s."""
    job = job_of(job_root, checkpointClaim="shared.ckpt", namespace="train")
    settings = build(job, image="registry/train:1", generation=3).job
    assert (settings.generation, job.checkpoint_claim, job.namespace) == (
        3,
        "shared.ckpt",
        "train",
    )
    assert (settings.checkpoint_claim, settings.namespace) == ("shared.ckpt", "train")
    defaults = job_of(job_root)
    default_settings = build(defaults, image="registry/train:1").job
    assert (default_settings.generation, defaults.checkpoint_claim, defaults.namespace) == (
        1,
        None,
        "default",
    )


def test_shared_storage_defaults_follow_the_first_gpu_nodegroup() -> None:
    """fsx: the zone defaults to the first GPU nodegroup's zone (a job file's claim defaults
    to the one the stack creates: tests/jobs/test_file.py); none (the default) changes
    nothing."""
    off = parse(BASE)
    assert off.shared_storage == config.SharedStorageConfig()
    assert not off.shared_storage.is_fsx
    on = parse(with_top(sharedStorage={"type": "fsx"}))
    storage = on.shared_storage
    assert storage.is_fsx
    assert (storage.availability_zone, storage.storage_capacity_gib) == ("us-east-1a", 1200)
    assert (storage.deployment_type, storage.per_unit_storage_throughput) == ("SCRATCH_2", None)
    persistent = parse(
        with_top(
            sharedStorage={
                "type": "fsx",
                "deploymentType": "PERSISTENT_2",
                "storageCapacityGiB": 4800.0,
                "availabilityZone": "us-east-1b",
            }
        )
    ).shared_storage
    assert (persistent.storage_capacity_gib, persistent.per_unit_storage_throughput) == (4800, 125)
    assert persistent.availability_zone == "us-east-1b"


def test_api_endpoint_cidrs_and_debug_tools() -> None:
    """Absent CIDRs stay None outside Pulumi (render/local runs need none); [] is a private
    endpoint; debug tools are opt-in."""
    assert parse(BASE).api_public_access_cidrs is None
    assert parse(with_top(apiPublicAccessCidrs=[])).api_public_access_cidrs == ()
    cidrs = parse(with_top(apiPublicAccessCidrs=["203.0.113.0/24"])).api_public_access_cidrs
    assert cidrs == ("203.0.113.0/24",)
    assert parse(BASE).debug_tools is False
    assert parse(with_top(debugTools=True)).debug_tools is True


def test_standard_support_window_is_dated() -> None:
    """The default version is in standard support up to its dated end and not a day after
    (dates pinned: the answer must not change with the day the suite runs)."""
    import datetime as dt

    end = versions.EKS_STANDARD_SUPPORT_END[versions.KUBERNETES_VERSION]
    assert versions.standard_support_problem(versions.KUBERNETES_VERSION, end) is None
    late = versions.standard_support_problem(
        versions.KUBERNETES_VERSION, end + dt.timedelta(days=1)
    )
    assert late is not None and late.startswith(f"{versions.KUBERNETES_VERSION} left EKS")


def test_parsing_does_not_depend_on_the_date(monkeypatch: pytest.MonkeyPatch) -> None:
    """Stack parsing gives the same answer on any day: before, a dated check made every stack
    (and with it render, the local runner and every test) fail the day after the default
    version's standard support ended. Here the clock is moved a year past every calendar
    row, and a version already out of support parses; the policy pack refuses it at preview."""
    import datetime as dt

    class LateDate(dt.date):
        @classmethod
        def today(cls) -> Self:
            late = max(versions.EKS_STANDARD_SUPPORT_END.values()) + dt.timedelta(days=365)
            return cls(late.year, late.month, late.day)

    monkeypatch.setattr(dt, "date", LateDate)
    assert parse(BASE).kubernetes_version == versions.KUBERNETES_VERSION
    assert parse(with_top(kubernetesVersion="1.33")).kubernetes_version == "1.33"
