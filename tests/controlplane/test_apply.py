"""Every stack's rendered objects meet a real API server: server-side apply, dry-run then for
real, with the PyTorchJob CRD and the admission webhooks at their pins; a second apply
changes nothing.

Schemas (kubernetes-validate, the CRDs' OpenAPI) check shapes; a real API server also runs
defaulting, CRD structural pruning (``fieldValidation=Strict`` turns a pruned field into an
error), CEL rules, the training operator's validating webhook and Kueue's mutating one, and
server-side-apply ownership. If this fails, ``pulumi up`` (or ``kubectl apply`` of
``workloads.render``'s output) would be refused, or would store something other than what we
render, on a real cluster.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from controlplane.__main__ import all_stacks
from controlplane.client import ApiError, Client
from controlplane.cluster import ControlPlane
from tests.controlplane.helpers import (
    delete_and_wait,
    namespaces_of,
    quantity,
    relocate,
    rendered_objects,
)

pytestmark = pytest.mark.controlplane
MANAGER = "eks-fsdp-test"


def _strict_apply(client: Client, obj: dict[str, Any], *, dry_run: bool) -> dict[str, Any]:
    query = {"fieldManager": MANAGER, "fieldValidation": "Strict"}
    if dry_run:
        query["dryRun"] = "All"
    return dict(
        client.request(
            "PATCH", client.path(obj), obj, query=query, content_type="application/apply-patch+yaml"
        )
    )


def _contains(got: Any, sent: Any, path: str = "") -> list[str]:
    """Where ``sent`` is not part of ``got`` (a field dropped or changed by the server); a
    zero value sent (``false``, ``0``, ``""``, ``{}``) may come back omitted, as Go's
    ``omitempty`` writes it."""
    if got is None and sent in (False, 0, "", {}, []):
        return []
    if isinstance(sent, dict):
        if not isinstance(got, dict):
            return [path]
        return [p for k, v in sent.items() for p in _contains(got.get(k), v, f"{path}.{k}")]
    if isinstance(sent, list):
        if not isinstance(got, list) or len(got) != len(sent):
            return [path]
        return [
            p
            for i, (g, s) in enumerate(zip(got, sent, strict=True))
            for p in _contains(g, s, f"{path}[{i}]")
        ]
    same = got == sent or str(got) == str(sent)  # '8' and 8
    if not same and quantity(got) is not None:
        same = quantity(got) == quantity(sent)  # '2048Gi' stored as '2Ti'
    return [] if same else [f"{path}: sent {sent!r}, stored {got!r}"]


def _spec(obj: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in obj.items() if k not in ("metadata", "status")}


@pytest.mark.parametrize("stack", all_stacks())
def test_rendered_objects_pass_server_side_apply(
    control_plane: ControlPlane, stack: str, tmp_path: Path
) -> None:
    client = control_plane.client
    objs = relocate(rendered_objects(stack, tmp_path / "render"), f"apply-{stack}")
    objs = namespaces_of(objs) + objs
    try:
        for obj in objs:
            what = f"{obj['kind']} {obj['metadata']['name']}"
            try:
                dry = _strict_apply(client, obj, dry_run=True)
            except ApiError as err:
                raise AssertionError(f"{stack}: dry-run apply of {what} refused: {err}") from None
            assert not _contains(dry, obj), f"{stack}: {what}: {_contains(dry, obj)}"
            stored = _strict_apply(client, obj, dry_run=False)
            assert not _contains(stored, obj), f"{stack}: {what}: {_contains(stored, obj)}"
        for obj in objs:
            before = client.read(obj)
            again = _strict_apply(client, obj, dry_run=False)
            what = f"{stack}: {obj['kind']} {obj['metadata']['name']}"
            assert again["metadata"].get("generation") == before["metadata"].get("generation"), what
            assert _spec(again) == _spec(before), what
            if obj["kind"] not in (
                "PyTorchJob",
                "PersistentVolume",
                "PersistentVolumeClaim",
                "Deployment",
                "Namespace",
            ):
                # nothing else writes these: the same resourceVersion proves a no-op
                assert (
                    again["metadata"]["resourceVersion"] == before["metadata"]["resourceVersion"]
                ), what
    finally:
        delete_and_wait(client, objs)
