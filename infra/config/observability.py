"""The observability section (``observability``): Prometheus/Grafana/DCGM switches."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from infra.config.fields import _bool, _check_keys, _mapping

_OBSERVABILITY_KEYS = ("enabled", "dcgm")


@dataclass(frozen=True, kw_only=True)
class ObservabilityConfig:
    """Prometheus/Grafana/DCGM switches (consumed by the observability workloads)."""

    enabled: bool = False
    """Deploy the observability stack."""
    dcgm: bool = True
    """Deploy the DCGM exporter on GPU nodes (only when ``enabled``)."""


def _parse_observability(value: Any) -> ObservabilityConfig:
    path = "observability"
    obj = _mapping(value if value is not None else {}, path)
    _check_keys(obj, _OBSERVABILITY_KEYS, path)
    return ObservabilityConfig(
        enabled=_bool(obj.get("enabled", False), f"{path}.enabled"),
        dcgm=_bool(obj.get("dcgm", True), f"{path}.dcgm"),
    )
