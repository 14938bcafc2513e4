"""Offline validation of rendered objects.

Built-in kinds go through ``kubernetes-validate`` in strict mode (unknown fields fail) for the
cluster's Kubernetes version. The PyTorchJob, a custom resource that schema bundle does not
know, is round-tripped through the kubeflow-training SDK models (which also deserialise the pod
template with the Kubernetes client's models): a field the types do not know is dropped on the
way, so the round trip differs from the input and the object is rejected.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Collection, Mapping
from typing import Any

from workloads.specs.common import K8sObject


class ValidationError(ValueError):
    """An object does not match its schema; the message names the object and the problem."""


def _describe(obj: K8sObject) -> str:
    meta = obj.get("metadata", {})
    return f"{obj.get('kind')}/{meta.get('name')}"


def validate_builtin(obj: K8sObject, kubernetes_version: str) -> None:
    """Strict schema validation of a built-in kind for ``kubernetes_version`` (e.g. 1.33)."""
    import kubernetes_validate

    version = (
        kubernetes_version if kubernetes_version.count(".") == 2 else kubernetes_version + ".0"
    )
    try:
        kubernetes_validate.validate(obj, version, strict=True)
    except kubernetes_validate.ValidationError as err:
        raise ValidationError(f"{_describe(obj)}: {err.message}") from None


class _Response:
    def __init__(self, data: Any) -> None:
        self.data = json.dumps(data)


def round_trip_pytorchjob(obj: K8sObject) -> K8sObject:
    """The PyTorchJob deserialised into the SDK models and serialised again."""
    from kubeflow.training.api_client import ApiClient

    client = ApiClient()
    model = client.deserialize(_Response(obj), "KubeflowOrgV1PyTorchJob")
    return client.sanitize_for_serialization(model)  # type: ignore[no-any-return]


def validate_pytorchjob(obj: K8sObject) -> None:
    """Reject a PyTorchJob with a field the operator's types do not know (or a wrong type)."""
    if obj.get("apiVersion") != "kubeflow.org/v1" or obj.get("kind") != "PyTorchJob":
        raise ValidationError(f"{_describe(obj)}: not a kubeflow.org/v1 PyTorchJob")
    try:
        back = round_trip_pytorchjob(obj)
    except (ValueError, TypeError) as err:
        raise ValidationError(f"{_describe(obj)}: {err}") from None
    if back != obj:
        raise ValidationError(f"{_describe(obj)}: {_first_difference(obj, back)}")


def _first_difference(a: Any, b: Any, path: str = "") -> str:
    if isinstance(a, dict) and isinstance(b, dict):
        for key in a:
            if key not in b:
                return f"unknown or dropped field {path}.{key}"
            diff = _first_difference(a[key], b[key], f"{path}.{key}")
            if diff:
                return diff
        for key in b:
            if key not in a:
                return f"field {path}.{key} appeared in the round trip"
        return ""
    if isinstance(a, list) and isinstance(b, list):
        if len(a) != len(b):
            return f"{path}: list length {len(a)} != {len(b)}"
        for i, (x, y) in enumerate(zip(a, b, strict=True)):
            diff = _first_difference(x, y, f"{path}[{i}]")
            if diff:
                return diff
        return ""
    return "" if a == b else f"{path}: {a!r} != {b!r}"


def validate(obj: K8sObject, kubernetes_version: str) -> None:
    """Validate any object the project renders."""
    if obj.get("kind") == "PyTorchJob":
        validate_pytorchjob(obj)
    else:
        validate_builtin(obj, kubernetes_version)


def strict_schema(schema: Any) -> Any:
    """A CRD's OpenAPI ``schema`` with ``additionalProperties: false`` wherever it lists
    ``properties`` and keeps no unknown fields (the API server prunes them silently; here they
    fail), and int-or-string fields as either."""
    if isinstance(schema, list):
        return [strict_schema(x) for x in schema]
    if not isinstance(schema, dict):
        return schema
    out = {k: strict_schema(v) for k, v in schema.items() if not k.startswith("x-kubernetes-")}
    if (
        "properties" in schema
        and "additionalProperties" not in schema
        and not schema.get("x-kubernetes-preserve-unknown-fields")
    ):
        out["additionalProperties"] = False
    if schema.get("x-kubernetes-int-or-string"):
        out["anyOf"] = [{"type": "integer"}, {"type": "string"}]
        out.pop("type", None)
    return out


def crd_validator(crd: Mapping[str, Any], version: str) -> Any:
    """A jsonschema validator for ``version`` of ``crd`` (strict, metadata left to the server)."""
    import jsonschema

    (served,) = [v for v in crd["spec"]["versions"] if v["name"] == version]
    schema = strict_schema(served["schema"]["openAPIV3Schema"])
    schema["properties"]["metadata"] = {"type": "object"}
    return jsonschema.Draft4Validator(schema)


def validate_custom(
    obj: K8sObject,
    *,
    api_version: str,
    kinds: Collection[str],
    crd: Callable[[str], Mapping[str, Any]],
    validator: Callable[[str], Any],
) -> None:
    """Check a custom object against its vendored CRD (``crd(kind)``, ``validator(kind)``):
    ``ValidationError`` naming the object and the first field that fails."""
    kind = str(obj.get("kind"))
    name = _describe(obj)
    if obj.get("apiVersion") != api_version or kind not in kinds:
        raise ValidationError(f"{name}: not a {api_version} kind of {', '.join(kinds)}")
    namespaced = crd(kind)["spec"]["scope"] == "Namespaced"
    if namespaced != ("namespace" in obj["metadata"]):
        raise ValidationError(
            f"{name}: metadata.namespace must be {'set' if namespaced else 'absent'}"
        )
    errors = sorted(validator(kind).iter_errors(obj), key=lambda e: list(e.path))
    if errors:
        err = errors[0]
        where = ".".join(str(p) for p in err.path) or "(root)"
        raise ValidationError(f"{name}: {where}: {err.message}")
