"""Run the real Pulumi program (``__main__.py``) for a stack under Pulumi's unit-test mocks.

What is mocked and why: there is no Pulumi CLI/engine and no AWS here. ``pulumi.runtime.set_mocks``
replaces the engine's resource monitor; ``Mocks`` below plays the providers, returning the
inputs plus plausible computed outputs (ids, ARNs, the EKS kubeconfig). Remote components
(``eks:index:Cluster``) run nothing inside: their outputs are whatever ``Mocks`` returns.

``MockMonitor`` is subclassed to strip resource references from RegisterResource requests
(replaced by the referenced id or URN) before the stock monitor deserialises them: rehydrating
a reference constructs a resource on the monitor's thread, which flakes with "Task got Future
attached to a different loop" or hangs. The subclass also records each resource's parent,
provider and dependencies so tests can assert parent chains and provider wiring.

Each ``run_program`` call uses a fresh event loop, fresh runtime settings and a fresh config,
and executes ``__main__.py`` with ``runpy`` (a new module namespace), so stacks do not leak into
one another.
"""

from __future__ import annotations

import asyncio
import json
import runpy
import zlib
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pulumi
from google.protobuf import struct_pb2
from pulumi.runtime import mocks as pulumi_mocks
from pulumi.runtime import rpc
from pulumi.runtime import settings as runtime_settings
from pulumi.runtime.config import set_all_config
from pulumi.runtime.sync_await import _sync_await

from infra import config as infra_config

REPO_ROOT = Path(__file__).resolve().parent.parent
PROJECT = infra_config.NAMESPACE
ACCOUNT = "123456789012"
_SIG_KEY = rpc._special_sig_key
_RESOURCE_SIG = rpc._special_resource_sig


@dataclass
class RecordedResource:
    """One registered resource as the mocks saw it."""

    type: str
    """Type token, e.g. ``aws:eks/nodeGroup:NodeGroup``."""
    name: str
    """Logical name."""
    urn: str
    """URN (the parent type chain is encoded in it)."""
    id: str
    """Physical id the mock gave it ('' for components)."""
    inputs: dict[str, Any]
    """Inputs (camelCase keys, resource references replaced by id/URN, ints as floats)."""
    outputs: dict[str, Any] = field(default_factory=dict)
    """What the mock returned."""
    custom: bool = True
    """False for component resources."""
    parent: str = ""
    """URN of the parent ('' for the stack)."""
    provider: str = ""
    """Provider reference ``<urn>::<id>`` ('' for the default provider)."""
    dependencies: tuple[str, ...] = ()
    """URNs this resource explicitly or implicitly depends on."""
    ignore_changes: tuple[str, ...] = ()
    """Property paths of its ``ignore_changes`` option."""
    property_dependencies: dict[str, tuple[str, ...]] = field(default_factory=dict)
    """For each input property, the URNs of the resources it came from."""


@dataclass
class ProgramRun:
    """The outcome of one program run under mocks."""

    stack: str
    resources: list[RecordedResource]
    outputs: dict[str, Any]
    """Stack outputs, resolved."""
    secret_outputs: set[str]
    """Names of the stack outputs that are secrets."""

    def of_type(self, type_: str) -> list[RecordedResource]:
        """All resources of a type token."""
        return [r for r in self.resources if r.type == type_]

    def one(self, type_: str, name: str | None = None) -> RecordedResource:
        """The single resource of a type (and name); AssertionError otherwise."""
        found = [r for r in self.of_type(type_) if name is None or r.name == name]
        assert len(found) == 1, f"expected one {type_} {name or ''}, found {len(found)}"
        return found[0]

    def by_urn(self, urn: str) -> RecordedResource | None:
        """The resource with this URN (None for the stack)."""
        return next((r for r in self.resources if r.urn == urn), None)

    def children_of(self, parent: RecordedResource) -> list[RecordedResource]:
        """Direct children of a resource."""
        return [r for r in self.resources if r.parent == parent.urn]


def _mock_outputs(args: pulumi_mocks.MockResourceArgs) -> tuple[str, dict[str, Any]]:
    """The id and state a provider would return (inputs plus computed properties)."""
    typ, name, inputs = args.typ, args.name, dict(args.inputs)
    rid = f"{name}-id"
    state: dict[str, Any] = {**inputs}
    if typ == "eks:index:Cluster":
        cluster = inputs.get("name", name)
        issuer = f"oidc.eks.us-west-2.amazonaws.com/id/{cluster.upper()}"
        kubeconfig = {
            "apiVersion": "v1",
            "kind": "Config",
            "clusters": [
                {"name": cluster, "cluster": {"server": f"https://{cluster}.eks.example"}}
            ],
            "contexts": [{"name": "aws", "context": {"cluster": cluster, "user": "aws"}}],
            "current-context": "aws",
            "users": [{"name": "aws", "user": {"exec": {"command": "aws"}}}],
        }
        state = {
            "kubeconfig": kubeconfig,
            "kubeconfigJson": json.dumps(kubeconfig),
            "core": {"clusterName": cluster},
            "clusterSecurityGroupId": f"sg-{cluster}-cluster",
            "nodeSecurityGroupId": "",
            "oidcProviderArn": f"arn:aws:iam::{ACCOUNT}:oidc-provider/{issuer}",
            "oidcProviderUrl": f"https://{issuer}",
            "oidcIssuer": issuer,
        }
    elif typ == "aws:eks/nodeGroup:NodeGroup":
        state.setdefault("nodeGroupName", name)
        state["arn"] = f"arn:aws:eks:us-west-2:{ACCOUNT}:nodegroup/{name}"
        state["status"] = "ACTIVE"
        # EKS returns the Auto Scaling group it made for the managed node group
        # (DescribeNodegroup: nodegroup.resources.autoScalingGroups[].name); capacity-block
        # schedules target it (infra.capacity_schedule).
        state["resources"] = [
            {"autoscalingGroups": [{"name": f"eks-{name}-asg"}], "remoteAccessSecurityGroupId": ""}
        ]
    elif typ == "aws:ec2/launchTemplate:LaunchTemplate":
        rid = f"lt-{zlib.crc32(name.encode()):017x}"
        state["latestVersion"] = 1
        state["defaultVersion"] = 1
    elif typ == "aws:ec2/placementGroup:PlacementGroup":
        state.setdefault("name", f"{name}-mock")
        state["placementGroupId"] = f"pg-{name}"
    elif typ == "aws:iam/role:Role":
        state.setdefault("name", f"{name}-mock")
        state["arn"] = f"arn:aws:iam::{ACCOUNT}:role/{state['name']}"
    elif typ == "aws:iam/policy:Policy":
        state.setdefault("name", f"{name}-mock")
        state["arn"] = f"arn:aws:iam::{ACCOUNT}:policy/{state['name']}"
    elif typ == "aws:sqs/queue:Queue":
        state.setdefault("name", f"{name}-mock")
        state["arn"] = f"arn:aws:sqs:us-west-2:{ACCOUNT}:{state['name']}"
        state["url"] = f"https://sqs.us-west-2.amazonaws.com/{ACCOUNT}/{state['name']}"
    elif typ == "aws:cloudwatch/eventRule:EventRule":
        state.setdefault("name", f"{name}-mock")
        state["arn"] = f"arn:aws:events:us-west-2:{ACCOUNT}:rule/{state['name']}"
    elif typ == "aws:fsx/lustreFileSystem:LustreFileSystem":
        rid = f"fs-{zlib.crc32(name.encode()):017x}"
        state["dnsName"] = f"{rid}.fsx.us-west-2.amazonaws.com"
        state["mountName"] = f"m{zlib.crc32(rid.encode()) % 10**7:07d}"
        state["arn"] = f"arn:aws:fsx:us-west-2:{ACCOUNT}:file-system/{rid}"
    elif typ == "aws:kms/key:Key":
        rid = f"{zlib.crc32(name.encode()):08x}-key"
        state["arn"] = f"arn:aws:kms:us-west-2:{ACCOUNT}:key/{rid}"
    elif typ.startswith("aws:ec2/"):
        state.setdefault("arn", f"arn:aws:ec2:us-west-2:{ACCOUNT}:{name}")
    elif typ == "kubernetes:helm.sh/v3:Release":
        state["status"] = {"status": "deployed", "version": inputs.get("version")}
    return rid, state


class Mocks(pulumi_mocks.Mocks):
    """Providers played by plain Python: inputs echoed, computed properties made up."""

    def new_resource(self, args: pulumi_mocks.MockResourceArgs) -> tuple[str, dict[str, Any]]:
        rid, state = _mock_outputs(args)
        return rid, state

    def call(self, args: pulumi_mocks.MockCallArgs) -> tuple[dict[str, Any], list[Any]]:
        if args.token == "aws:index/getPartition:getPartition":
            return {"partition": "aws", "dnsSuffix": "amazonaws.com", "id": "aws"}, []
        if args.token == "aws:index/getCallerIdentity:getCallerIdentity":
            return {"accountId": ACCOUNT, "arn": f"arn:aws:iam::{ACCOUNT}:user/test"}, []
        return {}, []  # (result, check failures): the monitor iterates the failures


def _strip_refs(value: struct_pb2.Value) -> None:
    """Replace every resource reference inside ``value`` with its id (custom) or URN."""
    kind = value.WhichOneof("kind")
    if kind == "struct_value":
        fields = value.struct_value.fields
        sig = fields.get(_SIG_KEY)
        if sig is not None and sig.string_value == _RESOURCE_SIG:
            rid = fields["id"].string_value if "id" in fields else ""
            urn = fields["urn"].string_value if "urn" in fields else ""
            value.string_value = rid or urn
            return
        for item in fields.values():
            _strip_refs(item)
    elif kind == "list_value":
        for item in value.list_value.values:
            _strip_refs(item)


class RecordingMockMonitor(pulumi_mocks.MockMonitor):
    """MockMonitor that strips resource references and records the resource graph."""

    def __init__(self, mocks: Mocks) -> None:
        super().__init__(mocks)
        self.recorded: list[RecordedResource] = []

    def RegisterResource(self, request: Any) -> Any:
        for item in request.object.fields.values():
            _strip_refs(item)
        response = super().RegisterResource(request)
        if request.type == "pulumi:pulumi:Stack":
            return response
        inputs = rpc.deserialize_properties(request.object)
        urn = self.make_urn(request.parent, request.type, request.name)
        deps = set(request.dependencies)
        prop_deps = {
            key: tuple(sorted(prop.urns)) for key, prop in request.propertyDependencies.items()
        }
        for prop in request.propertyDependencies.values():
            deps.update(prop.urns)
        self.recorded.append(
            RecordedResource(
                type=request.type,
                name=request.name,
                urn=urn,
                id=response.id,
                inputs=inputs,
                outputs=self.resources[urn].state if urn in self.resources else {},
                custom=bool(request.custom),
                parent=request.parent,
                provider=request.provider,
                dependencies=tuple(sorted(deps)),
                ignore_changes=tuple(request.ignoreChanges),
                property_dependencies=prop_deps,
            )
        )
        return response


USER_SET: dict[str, Any] = {"apiPublicAccessCidrs": ["198.51.100.7/32"]}
"""Required keys the stack files leave to each user (``pulumi config set``): here a
documentation address (RFC 5737) stands in for the user's egress address."""


def stack_config(stack: str, root: Path = REPO_ROOT) -> dict[str, Any]:
    """``Pulumi.yaml`` defaults overlaid by ``Pulumi.<stack>.yaml`` (namespace stripped), plus
    ``USER_SET`` for required keys the stack file leaves out."""
    return {
        **infra_config.project_defaults(root),
        **USER_SET,
        **infra_config.stack_file_values(stack, root),
    }


def _engine_config(values: Mapping[str, Any]) -> dict[str, str]:
    """Config as the engine hands it to the program: full keys, strings, objects as JSON."""
    out: dict[str, str] = {}
    for key, value in values.items():
        full = key if ":" in key else f"{PROJECT}:{key}"
        if isinstance(value, str):
            out[full] = value
        else:
            out[full] = json.dumps(value)
    return out


def run_program(
    stack: str,
    *,
    overrides: Mapping[str, Any] | None = None,
    secrets: Mapping[str, str] | None = None,
    program: Path = REPO_ROOT / "__main__.py",
) -> ProgramRun:
    """Execute ``program`` for ``stack`` under mocks; return its resources and outputs.

    ``overrides`` replace top-level config keys (without the ``eks-fsdp:`` prefix);
    ``secrets`` are set as secret config values (e.g. ``{"hfToken": "hf_x"}``).
    """
    values = {**stack_config(stack), **(overrides or {})}
    config = _engine_config(values)
    secret_keys = []
    for key, value in (secrets or {}).items():
        full = f"{PROJECT}:{key}"
        config[full] = value
        secret_keys.append(full)

    old_loop = None
    try:
        old_loop = asyncio.get_event_loop_policy().get_event_loop()
    except RuntimeError:
        old_loop = None
    loop = asyncio.new_event_loop()
    asyncio.set_event_loop(loop)
    try:
        runtime_settings.reset_options(project=PROJECT, stack=stack, preview=False)
        set_all_config(config, secret_keys)
        mocks = Mocks()
        monitor = RecordingMockMonitor(mocks)
        pulumi.runtime.set_mocks(
            mocks, project=PROJECT, stack=stack, preview=False, monitor=monitor
        )
        runtime_settings.SETTINGS.outputs.clear()

        from pulumi.runtime.stack import run_pulumi_func

        def execute() -> None:
            runpy.run_path(str(program), run_name="__main__")

        _sync_await(run_pulumi_func(execute))
        root = runtime_settings.get_root_resource()
        exported: dict[str, Any] = {}
        secret_outputs: set[str] = set()
        for key, value in dict(root.outputs).items():  # type: ignore[union-attr]
            out = pulumi.Output.from_input(value)
            exported[key] = _sync_await(out.future())
            if _sync_await(out.is_secret()):
                secret_outputs.add(key)
        return ProgramRun(
            stack=stack,
            resources=list(monitor.recorded),
            outputs=exported,
            secret_outputs=secret_outputs,
        )
    finally:
        runtime_settings.reset_options()
        set_all_config({}, [])
        loop.close()
        asyncio.set_event_loop(
            old_loop if old_loop is not None and not old_loop.is_closed() else None
        )
