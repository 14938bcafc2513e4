"""Karpenter's CRDs at the pin and every stack's pools as Karpenter objects meet a real API server.

The vendored CRDs (``workloads/manifests/karpenter/crds``: aws/karpenter-provider-aws
``pkg/apis/crds`` at ``versions.KARPENTER_VERSION``) are installed, then each shipped stack's
GPU pools, switched to ``provisioner: karpenter``, are applied server-side with strict field
validation, dry-run then for real. The API server runs what the offline JSON-schema check
cannot: the CRDs' CEL rules (``x-kubernetes-validations``: the EFA primary interface, one EFA
device per card, the restricted label domains, ...), defaulting and structural pruning. If this
fails, ``pulumi up`` (or ``kubectl apply`` of ``workloads.render``'s ``karpenter.yaml``) would be
refused on a cluster running the pinned Karpenter, or would store something else. Two broken
objects show the CEL rules are enforced here at all.

Nothing is mocked: a local kube-apiserver built from ``k8s.io/kubernetes`` (ADR 0009). No
Karpenter controller runs (it would call EC2): only the API objects are checked.
"""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import pytest
import yaml

from controlplane.client import ApiError
from controlplane.cluster import ControlPlane
from infra.config import parse
from tests.pulumi_mocks import stack_config
from workloads.specs import karpenter

pytestmark = pytest.mark.controlplane
MANAGER = "eks-fsdp-test"
STACKS = ("dev", "p4de-odcr", "p5-16")


def _pool_objects(stack: str) -> list[dict[str, Any]]:
    raw = copy.deepcopy(stack_config(stack))
    raw["gpuNodeGroups"] = [
        {**g, "provisioner": "karpenter", "minSize": 0} for g in raw["gpuNodeGroups"]
    ]
    return karpenter.stack_objects(parse(raw, stack=stack))


def _strict_apply(plane: ControlPlane, obj: dict[str, Any], *, dry_run: bool) -> Any:
    query = {"fieldManager": MANAGER, "fieldValidation": "Strict"}
    if dry_run:
        query["dryRun"] = "All"
    return plane.client.request(
        "PATCH",
        plane.client.path(obj),
        obj,
        query=query,
        content_type="application/apply-patch+yaml",
    )


@pytest.fixture(scope="module")
def with_crds(control_plane: ControlPlane) -> ControlPlane:
    crds = [
        yaml.safe_load(Path(karpenter.CRD_DIR / name).read_text())
        for name in sorted(p.name for p in karpenter.CRD_DIR.glob("*.yaml"))
    ]
    control_plane._install_crds(crds)
    return control_plane


@pytest.mark.parametrize("stack", STACKS)
def test_every_pool_is_accepted_as_rendered(with_crds: ControlPlane, stack: str) -> None:
    objs = _pool_objects(stack)
    assert objs
    for obj in objs:
        _strict_apply(with_crds, obj, dry_run=True)
        stored = _strict_apply(with_crds, obj, dry_run=False)
        assert stored["spec"] | obj["spec"] == stored["spec"], obj["metadata"]["name"]
    for obj in reversed(objs):
        with_crds.client.delete(obj)


def test_the_crds_cel_rules_are_enforced(with_crds: ControlPlane) -> None:
    nodeclass, nodepool = _pool_objects("p4de-odcr")
    no_primary = copy.deepcopy(nodeclass)
    no_primary["spec"]["networkInterfaces"] = [
        n for n in no_primary["spec"]["networkInterfaces"] if n["interfaceType"] == "efa-only"
    ]
    with pytest.raises(ApiError, match="must include a primary interface") as err:
        _strict_apply(with_crds, no_primary, dry_run=True)
    assert err.value.status == 422
    restricted = copy.deepcopy(nodepool)
    restricted["spec"]["template"]["metadata"]["labels"]["karpenter.sh/nodepool"] = "x"
    with pytest.raises(ApiError, match=r'label "karpenter\.sh/nodepool" is restricted'):
        _strict_apply(with_crds, restricted, dry_run=True)
