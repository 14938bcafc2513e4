"""Where the raw values come from: the stack files (no Pulumi engine, no CLI) or the running
Pulumi program (``pulumi`` imported inside ``from_pulumi`` only)."""

from __future__ import annotations

import json
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from eks_fsdp_cli.errors import read_text
from eks_fsdp_cli.paths import REPO_ROOT
from infra.config.fields import NAMESPACE, ConfigError, _fail, _k
from infra.config.nodegroups import capacity_block_warnings
from infra.config.observability import SECRET_RECEIVERS
from infra.config.stack import (
    _PLAINTEXT_SECRET,
    SECRET_KEYS,
    STRUCTURED_KEYS,
    TOP_LEVEL_KEYS,
    Secrets,
    StackConfig,
    parse,
)


def _strip_namespace(key: str) -> str | None:
    """``eks-fsdp:x`` -> ``x``; ``aws:region`` stays; bare keys are ours; others -> None."""
    if ":" not in key:
        return key
    ns, _, name = key.partition(":")
    if ns == NAMESPACE:
        return name
    return key


def project_defaults(root: Path = REPO_ROOT) -> dict[str, Any]:
    """The ``default`` of every key declared under ``config:`` in ``Pulumi.yaml``."""
    import yaml

    project = yaml.safe_load((root / "Pulumi.yaml").read_text())
    out: dict[str, Any] = {}
    for key, decl in (project.get("config") or {}).items():
        name = _strip_namespace(key)
        if name is not None and isinstance(decl, Mapping) and "default" in decl:
            out[name] = decl["default"]
    return out


def stack_file_values(stack: str, root: Path = REPO_ROOT) -> dict[str, Any]:
    """The plain values of ``Pulumi.<stack>.yaml`` (secure values left out), namespace stripped."""
    import yaml

    path = root / f"Pulumi.{stack}.yaml"
    if not path.is_file():
        raise ConfigError(f"{path.name}: no such stack file")
    try:
        text = read_text(path)  # the one reader of every command (a UTF-16 file: one line)
    except ValueError as err:
        raise ConfigError(f"{path.name}: {err}") from None
    try:
        data = yaml.safe_load(text) or {}
    except yaml.YAMLError as err:
        mark = getattr(err, "problem_mark", None)
        where = f"{path.name}:{mark.line + 1}" if mark is not None else path.name
        problem = getattr(err, "problem", None) or str(err).splitlines()[0]
        raise ConfigError(f"{where}: not valid YAML: {problem}") from None
    if not isinstance(data, Mapping):
        raise ConfigError(f"{path.name}: expected a mapping with a config: key")
    out: dict[str, Any] = {}
    for key, value in (data.get("config") or {}).items():
        name = _strip_namespace(key)
        if name is None or (isinstance(value, Mapping) and "secure" in value):
            continue
        out[name] = value
    return out


def load_stack_file(stack: str, root: Path = REPO_ROOT) -> StackConfig:
    """``Pulumi.<stack>.yaml`` over the ``Pulumi.yaml`` defaults, parsed; no Pulumi engine."""
    raw = {**project_defaults(root), **stack_file_values(stack, root)}
    return parse(raw, stack=stack)


def _decode(value: str, key: str) -> Any:
    if key in STRUCTURED_KEYS:
        try:
            return json.loads(value)
        except json.JSONDecodeError:
            raise _fail(key, f"expected a structured (JSON) value, got {value!r}") from None
    return value


def _require_alerts_secret(cfg: StackConfig) -> None:
    """A receiver that reads a URL or key has the ``alertsSecret`` secret, before any resource
    (a stack file never holds it, so ``load_stack_file`` cannot check this)."""
    receiver = cfg.observability.alerts.receiver
    if (
        cfg.observability.enabled
        and receiver in SECRET_RECEIVERS
        and cfg.secrets.alerts_secret is None
    ):
        raise _fail(
            "alertsSecret",
            f"is required by observability.alerts.receiver {receiver}; run"
            f" `pulumi config set --secret alertsSecret <{SECRET_RECEIVERS[receiver]}>`",
        )


def from_pulumi() -> StackConfig:
    """Read the running Pulumi program's config once (call it from ``__main__.py`` only)."""
    import pulumi
    from pulumi.runtime import config as runtime_config

    cfg = pulumi.Config(NAMESPACE)
    raw: dict[str, Any] = {}
    for full_key in runtime_config.CONFIG.get():
        ns, _, name = full_key.partition(":")
        if ns == NAMESPACE and name not in TOP_LEVEL_KEYS and name not in SECRET_KEYS:
            raise _fail(name, f"unknown key (known: {', '.join(TOP_LEVEL_KEYS + SECRET_KEYS)})")
    for key in TOP_LEVEL_KEYS:
        value = cfg.get(key)
        if value is not None:
            raw[key] = _decode(value, key)
    region = pulumi.Config("aws").get("region")
    if region is not None:
        raw["aws:region"] = region
    for key in SECRET_KEYS:
        if runtime_config.get_config(_k(key)) and not runtime_config.is_config_secret(_k(key)):
            raise _fail(key, _PLAINTEXT_SECRET.format(key=key))
    secrets = Secrets(
        **{
            field_name: cfg.get_secret(key) if runtime_config.get_config(_k(key)) else None
            for key, field_name in (
                ("hfToken", "hf_token"),
                ("grafanaAdminPassword", "grafana_admin_password"),
                ("alertsSecret", "alerts_secret"),
            )
        }
    )
    parsed = parse(raw, stack=pulumi.get_stack(), secrets=secrets)
    _require_alerts_secret(parsed)
    for line in capacity_block_warnings(parsed.gpu_node_groups):
        pulumi.log.warn(f"{NAMESPACE}:{line}")
    if parsed.api_public_access_cidrs is None:
        raise _fail(
            "apiPublicAccessCidrs",
            "is required: the CIDRs that may reach the public API endpoint (your egress"
            " address /32), or [] for a private endpoint only",
        )
    return parsed
