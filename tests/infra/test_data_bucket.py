"""The data bucket (``dataBucket``, ``infra.data_bucket``) in the real Pulumi program, under mocks.

Mocked, and why: there is no Pulumi CLI/engine and no AWS account here, so
``tests/pulumi_mocks.run_program`` replaces the engine's resource monitor with Pulumi's unit-test
mocks (providers echo their inputs; ``getCallerIdentity`` answers account 123456789012 and
``getPartition`` ``aws``). The registration requests are also read for the ``protect`` and
``retainOnDelete`` options, which is what the engine would act on at ``pulumi destroy``.
Everything else is the real program: config parsing, the component, resource inputs.

If these fail, the results of a paid training run are at risk: a ``pulumi destroy`` between
reservations could delete the bucket or the key its objects are encrypted with, the bucket
could accept unencrypted, public or plain-HTTP access, old checkpoints would pile up (or expire
at a different age than the stack says), or a stack with a bad ``dataBucket`` value would reach
AWS instead of stopping on one line naming the key.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from typing import Any

import pytest
import yaml

from infra import outputs
from infra.config import ConfigError, bucket_name_problem, load_stack_file, parse
from infra.data_bucket import (
    ABORT_MULTIPART_DAYS,
    CHECKPOINT_NONCURRENT_VERSION_DAYS,
    NONCURRENT_VERSION_DAYS,
    DataBucketArgs,
    bucket_name,
)
from tests import pulumi_mocks
from tests.pulumi_mocks import ACCOUNT, ProgramRun, RecordedResource, run_program

STACKS = ("dev", "p4de-odcr", "p5-16")
SECRETS = {"hfToken": "hf_mock", "grafanaAdminPassword": "mock-password"}
COMPONENT = "eks-fsdp:infra:DataBucket"
BUCKET = "aws:s3/bucket:Bucket"
KEY = "aws:kms/key:Key"
Options = dict[str, tuple[bool, bool]]


@pytest.fixture(scope="module")
def recorded_options() -> Iterator[Options]:
    """{resource name: (protect, retainOnDelete)} as the program asks the engine for them."""
    seen: Options = {}
    original = pulumi_mocks.RecordingMockMonitor.RegisterResource

    def register(self: Any, request: Any) -> Any:
        seen[request.name] = (bool(request.protect), bool(request.retainOnDelete))
        return original(self, request)

    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(pulumi_mocks.RecordingMockMonitor, "RegisterResource", register)
        yield seen


def _run(
    recorded_options: Options, stack: str, data_bucket: dict[str, Any] | None = None
) -> tuple[ProgramRun, Options]:
    recorded_options.clear()
    overrides = None
    if data_bucket is not None:
        overrides = {
            "dataBucket": {**pulumi_mocks.stack_config(stack)["dataBucket"], **data_bucket}
        }
    run = run_program(stack, overrides=overrides, secrets=SECRETS)
    return run, dict(recorded_options)


@pytest.fixture(scope="module")
def runs(recorded_options: Options) -> dict[str, tuple[ProgramRun, Options]]:
    return {stack: _run(recorded_options, stack) for stack in STACKS}


def _children(run: ProgramRun) -> list[RecordedResource]:
    return run.children_of(run.one(COMPONENT))


def _region(stack: str) -> str:
    region = load_stack_file(stack).region
    assert region is not None
    return region


@pytest.mark.parametrize("stack", STACKS)
def test_bucket_encrypted_with_its_own_rotating_key(
    runs: dict[str, tuple[ProgramRun, Options]], stack: str
) -> None:
    run, _ = runs[stack]
    cfg = load_stack_file(stack)
    bucket = run.one(BUCKET)
    name = bucket_name(cfg.cluster_name, ACCOUNT, _region(stack))
    assert bucket.inputs["bucket"] == name
    assert bucket_name_problem(name) is None
    assert bucket.inputs["forceDestroy"] is False
    key = run.one(KEY, "data-bucket-key")
    assert key.inputs["enableKeyRotation"] is True
    (sse,) = run.of_type(
        "aws:s3/bucketServerSideEncryptionConfiguration:BucketServerSideEncryptionConfiguration"
    )
    assert sse.inputs["bucket"] == bucket.id
    (rule,) = sse.inputs["rules"]
    assert rule["applyServerSideEncryptionByDefault"] == {
        "sseAlgorithm": "aws:kms",
        "kmsMasterKeyId": key.outputs["arn"],
    }
    assert rule["bucketKeyEnabled"] is True
    # The key lets the account delegate through IAM and the FSx S3-access roles use it through
    # S3 on this bucket only (FSx for Lustre user guide, server-side encrypted buckets).
    statements = {s["Sid"]: s for s in json.loads(key.inputs["policy"])["Statement"]}
    assert statements["AccountAdministersThroughIam"]["Principal"] == {
        "AWS": f"arn:aws:iam::{ACCOUNT}:root"
    }
    fsx = statements["FsxLinkedFileSystemsThroughS3"]["Condition"]
    assert fsx["StringEquals"] == {
        "kms:CallerAccount": ACCOUNT,
        "kms:ViaService": f"s3.{_region(stack)}.amazonaws.com",
    }
    assert fsx["StringLike"] == {"kms:EncryptionContext:aws:s3:arn": f"arn:aws:s3:::{name}"}
    assert fsx["ArnLike"]["aws:PrincipalArn"].endswith("/AWSServiceRoleForFSxS3Access_*")
    assert run.outputs[outputs.DATA_BUCKET_NAME] == name
    assert run.outputs[outputs.DATA_BUCKET_KMS_KEY_ARN] == key.outputs["arn"]
    assert run.outputs[outputs.DATA_BUCKET_URI] == f"s3://{name}/{cfg.data_bucket.prefix}"


@pytest.mark.parametrize("stack", STACKS)
def test_public_access_blocked_and_tls_only(
    runs: dict[str, tuple[ProgramRun, Options]], stack: str
) -> None:
    run, _ = runs[stack]
    bucket = run.one(BUCKET)
    block = run.one("aws:s3/bucketPublicAccessBlock:BucketPublicAccessBlock")
    assert block.inputs == {
        "bucket": bucket.id,
        "blockPublicAcls": True,
        "blockPublicPolicy": True,
        "ignorePublicAcls": True,
        "restrictPublicBuckets": True,
    }
    ownership = run.one("aws:s3/bucketOwnershipControls:BucketOwnershipControls")
    assert ownership.inputs["rule"] == {"objectOwnership": "BucketOwnerEnforced"}
    policy = run.one("aws:s3/bucketPolicy:BucketPolicy")
    assert policy.inputs["bucket"] == bucket.id
    assert block.urn in policy.dependencies
    (deny,) = json.loads(policy.inputs["policy"])["Statement"]
    arn = f"arn:aws:s3:::{bucket.inputs['bucket']}"
    assert deny == {
        "Sid": "DenyInsecureTransport",
        "Effect": "Deny",
        "Principal": "*",
        "Action": "s3:*",
        "Resource": [arn, f"{arn}/*"],
        "Condition": {"Bool": {"aws:SecureTransport": "false"}},
    }


@pytest.mark.parametrize("stack", STACKS)
def test_protected_and_retained_unless_the_stack_says_otherwise(
    runs: dict[str, tuple[ProgramRun, Options]], recorded_options: Options, stack: str
) -> None:
    """By default every resource of the bucket (the bucket, its key, its settings) asks the
    engine for ``protect`` and ``retainOnDelete``; nothing else of the stack is protected, so
    ``pulumi destroy --exclude-protected`` removes the cluster and keeps the data.
    ``dataBucket.protect: false`` clears both (next test)."""
    run, options = runs[stack]
    kept = {r.name for r in _children(run)}
    assert {"data-bucket-bucket", "data-bucket-key"} <= kept and len(kept) == 8
    assert {name: options[name] for name in kept} == dict.fromkeys(kept, (True, True))
    others = {r.name for r in run.resources} - kept
    assert not [name for name in others if options[name][0]]  # only the data is protected


def test_protect_false_lets_the_stack_delete_the_data(
    runs: dict[str, tuple[ProgramRun, Options]], recorded_options: Options
) -> None:
    kept = {r.name for r in _children(runs["p5-16"][0])}
    loose_run, loose = _run(recorded_options, "p5-16", {"protect": False})
    names = {r.name for r in _children(loose_run)}
    assert names == kept
    assert {name: loose[name] for name in names} == dict.fromkeys(names, (False, False))


def test_lifecycle_and_versioning_follow_the_config(recorded_options: Options) -> None:
    run, _ = _run(
        recorded_options,
        "p5-16",
        {"checkpointPrefix": "training/ckpt", "checkpointExpirationDays": 9},
    )
    bucket = run.one(BUCKET)
    versioning = run.one("aws:s3/bucketVersioning:BucketVersioning")
    assert versioning.inputs["versioningConfiguration"] == {"status": "Enabled"}
    lifecycle = run.one("aws:s3/bucketLifecycleConfiguration:BucketLifecycleConfiguration")
    assert lifecycle.inputs["bucket"] == bucket.id
    assert versioning.urn in lifecycle.dependencies
    rules = {r["id"]: r for r in lifecycle.inputs["rules"]}
    assert rules["expire-old-checkpoints"] == {
        "id": "expire-old-checkpoints",
        "status": "Enabled",
        "filter": {"prefix": "training/ckpt/"},
        "expiration": {"days": 9},
        # re-saved and pruned shards are not billed for the week-long undo window
        "noncurrentVersionExpiration": {"noncurrentDays": CHECKPOINT_NONCURRENT_VERSION_DAYS},
    }
    assert CHECKPOINT_NONCURRENT_VERSION_DAYS == 1 < NONCURRENT_VERSION_DAYS
    rest = rules["noncurrent-versions-and-torn-uploads"]
    assert rest["filter"] == {"prefix": ""}
    assert rest["noncurrentVersionExpiration"] == {"noncurrentDays": NONCURRENT_VERSION_DAYS}
    assert rest["abortIncompleteMultipartUpload"] == {"daysAfterInitiation": ABORT_MULTIPART_DAYS}


def test_an_adopted_bucket_is_named_not_declared(recorded_options: Options) -> None:
    key = f"arn:aws:kms:us-east-2:{ACCOUNT}:key/1234abcd-12ab-34cd-56ef-1234567890ab"
    run, _ = _run(recorded_options, "p5-16", {"name": "team-results.archive", "kmsKeyArn": key})
    assert not run.of_type(BUCKET)
    assert not [r for r in run.resources if r.type.startswith("aws:s3/")]
    assert not _children(run)
    assert run.outputs[outputs.DATA_BUCKET_NAME] == "team-results.archive"
    assert run.outputs[outputs.DATA_BUCKET_KMS_KEY_ARN] == key
    policy = json.loads(run.one("aws:iam/rolePolicy:RolePolicy").inputs["policy"])
    assert policy["Statement"][0]["Resource"] == "arn:aws:s3:::team-results.archive"
    assert policy["Statement"][-1]["Resource"] == key


def test_disabled_means_no_bucket_and_no_identity(recorded_options: Options) -> None:
    run, _ = _run(recorded_options, "dev", {"enabled": False})
    types = {r.type for r in run.resources}
    assert not types & {COMPONENT, "eks-fsdp:infra:PodIdentity", BUCKET}
    assert "eks-pod-identity-agent" not in {
        a.inputs["addonName"] for a in run.of_type("aws:eks/addon:Addon")
    }
    assert not {outputs.DATA_BUCKET_NAME, outputs.JOBS_ROLE_ARN} & set(run.outputs)


def _dev(**data_bucket: Any) -> dict[str, Any]:
    raw = pulumi_mocks.stack_config("dev")
    return {**raw, "dataBucket": {**raw["dataBucket"], **data_bucket}}


BAD: list[tuple[str, dict[str, Any], str]] = [
    ("unknown-key", {"versioned": True}, "eks-fsdp:dataBucket.versioned: unknown key"),
    ("days-zero", {"checkpointExpirationDays": 0}, "checkpointExpirationDays: 0 is below 1"),
    ("days-negative", {"checkpointExpirationDays": -3}, "checkpointExpirationDays: -3 is below 1"),
    ("name-uppercase", {"name": "Results"}, "dataBucket.name: 'Results' may hold only lowercase"),
    ("name-too-short", {"name": "ab"}, "dataBucket.name: 'ab' is not 3 to 63 characters long"),
    ("name-too-long", {"name": "a" * 64}, "is not 3 to 63 characters long"),
    ("name-underscore", {"name": "my_bucket"}, "may hold only lowercase letters"),
    ("name-ends-hyphen", {"name": "results-"}, "must begin and end with a letter or number"),
    ("name-two-periods", {"name": "my..bucket"}, "'my..bucket' contains two adjacent periods"),
    ("name-ip", {"name": "192.168.5.4"}, "'192.168.5.4' is formatted as an IP address"),
    ("name-xn", {"name": "xn--results"}, "starts with the reserved prefix xn--"),
    ("name-sthree", {"name": "sthree-results"}, "starts with the reserved prefix sthree-"),
    ("name-alias", {"name": "results-s3alias"}, "ends with the reserved suffix -s3alias"),
    ("name-ol", {"name": "results--ol-s3"}, "ends with the reserved suffix --ol-s3"),
    (
        "kms-without-name",
        {"kmsKeyArn": "arn:aws:kms:us-west-2:123456789012:key/abc"},
        "only for an adopted bucket",
    ),
    ("kms-not-arn", {"name": "results", "kmsKeyArn": "alias/x"}, "'alias/x' is not a KMS key ARN"),
    ("prefix-bad", {"prefix": "a//b"}, "dataBucket.prefix: 'a//b' is not a key prefix"),
    ("checkpoints-outside", {"checkpointPrefix": "other/ckpt"}, "is not under dataBucket.prefix"),
    ("enabled-not-bool", {"enabled": "yes"}, "dataBucket.enabled: expected true or false"),
]


@pytest.mark.parametrize(("case", "change", "message"), BAD, ids=[b[0] for b in BAD])
def test_bad_data_bucket_config_is_one_line(
    case: str, change: dict[str, Any], message: str
) -> None:
    with pytest.raises(ConfigError) as err:
        parse(_dev(**change))
    text = str(err.value)
    assert "\n" not in text and text.startswith("eks-fsdp:dataBucket.")
    assert message in text, text


def test_data_bucket_args_validate_at_construction() -> None:
    cfg = load_stack_file("p5-16").data_bucket
    ok: dict[str, Any] = {"bucket": cfg, "cluster_name": "eks-fsdp-p5", "region": "us-east-2"}
    DataBucketArgs(**ok)
    disabled = type(cfg)(enabled=False)
    for change, field in (
        ({"bucket": disabled}, "bucket"),
        ({"cluster_name": "bad name"}, "cluster_name"),
        ({"region": ""}, "region"),
        ({"region": "Ohio"}, "region"),
    ):
        with pytest.raises(ValueError, match=f"^DataBucketArgs.{field}"):
            DataBucketArgs(**{**ok, **change})


@pytest.mark.parametrize(
    ("cluster", "region"),
    [
        ("eks-fsdp", "us-west-2"),
        ("My_Cluster", "eu-central-1"),
        ("x" * 100, "ap-southeast-2"),
    ],
)
def test_derived_bucket_names_follow_the_s3_rules(cluster: str, region: str) -> None:
    name = bucket_name(cluster, ACCOUNT, region)
    assert bucket_name_problem(name) is None, name
    assert name.endswith(f"-data-{ACCOUNT}-{region}") and len(name) <= 63


def test_the_documented_settings_are_valid_stack_config() -> None:
    """docs/durable-data.md's YAML blocks, placed in the p5-16 stack, parse to the behaviour the
    page describes (its commented-out adoption keys are left out, as the reader would)."""
    doc = (pulumi_mocks.REPO_ROOT / "docs" / "durable-data.md").read_text()
    blocks = re.findall(r"```yaml\n(.*?)```", doc, re.S)
    assert len(blocks) == 2
    raw = pulumi_mocks.stack_config("p5-16")
    for block in blocks:
        for key, value in yaml.safe_load(block).items():
            raw[key.removeprefix("eks-fsdp:")] = value
    cfg = parse(raw)
    assert cfg.data_bucket == type(cfg.data_bucket)()  # the documented values are the defaults
    assert cfg.shared_storage.links_data_bucket
    assert cfg.shared_storage.data_repository_prefix == "training/fsx"
    assert (cfg.shared_storage.deployment_type, cfg.shared_storage.per_unit_storage_throughput) == (
        "PERSISTENT_2",
        250,
    )
    assert "pulumi destroy --exclude-protected" in doc
    assert f"`{outputs.DATA_BUCKET_URI}`" in doc and f"`{outputs.JOBS_SERVICE_ACCOUNT}`" in doc


def test_scratch_file_system_linked_to_the_bucket_is_one_line_naming_the_docs() -> None:
    """FSx allows a data repository association on SCRATCH_2 with Lustre 2.12/2.15 (FSx for
    Lustre user guide, "Overview of data repositories"); the stack links PERSISTENT_2 only and
    its refusal says so, and why, instead of claiming FSx forbids it."""
    raw = pulumi_mocks.stack_config("p5-16")
    storage = {**raw["sharedStorage"], "dataRepositoryPrefix": "training/fsx"}
    with pytest.raises(ConfigError) as err:
        parse({**raw, "sharedStorage": storage})
    text = str(err.value)
    assert "\n" not in text and text.startswith("eks-fsdp:sharedStorage.dataRepositoryPrefix: ")
    assert "only on PERSISTENT_2, not SCRATCH_2" in text
    assert "any Lustre 2.12/2.15 file system but SCRATCH_1" in text
    assert text.endswith("set deploymentType PERSISTENT_2")
    ok = parse({**raw, "sharedStorage": {**storage, "deploymentType": "PERSISTENT_2"}})
    assert ok.shared_storage.links_data_bucket


def test_write_through_prefix_gets_the_short_noncurrent_expiry(tmp_path: Any) -> None:
    """``DataBucketArgs.write_through_prefix`` (the stack's ``sharedStorage.
    dataRepositoryPrefix``): a rule expires noncurrent versions there after a day, as under the
    checkpoint prefix, and expires no current object (that prefix holds outputs too). The
    component is built by a two-line program under the same mocks as the stack's."""
    program = tmp_path / "program.py"
    program.write_text(
        "from infra.config import from_pulumi\n"
        "from infra.data_bucket import DataBucket, DataBucketArgs\n"
        "cfg = from_pulumi()\n"
        "DataBucket('data-bucket', DataBucketArgs(bucket=cfg.data_bucket, "
        "cluster_name=cfg.cluster_name, region=cfg.region or '', "
        "write_through_prefix='training/fsx'))\n",
        encoding="utf-8",
    )
    run = run_program("p5-16", secrets=SECRETS, program=program)
    lifecycle = run.one("aws:s3/bucketLifecycleConfiguration:BucketLifecycleConfiguration")
    rules = {r["id"]: r for r in lifecycle.inputs["rules"]}
    assert rules["write-through-noncurrent-versions"] == {
        "id": "write-through-noncurrent-versions",
        "status": "Enabled",
        "filter": {"prefix": "training/fsx/"},
        "noncurrentVersionExpiration": {"noncurrentDays": CHECKPOINT_NONCURRENT_VERSION_DAYS},
    }
    assert set(rules) == {
        "expire-old-checkpoints",
        "write-through-noncurrent-versions",
        "noncurrent-versions-and-torn-uploads",
    }
    cfg = parse(pulumi_mocks.stack_config("p5-16"), stack="p5-16", secrets=SECRETS)
    for bad in ("", "/training/fsx", "training/fsx/"):
        with pytest.raises(ValueError, match="write_through_prefix"):
            DataBucketArgs(
                bucket=cfg.data_bucket,
                cluster_name="c",
                region="us-east-1",
                write_through_prefix=bad,
            )
