"""A job file's ``preflight`` key: ``true`` / ``false``, or a mapping that turns the gate on
with more thresholds (``{expect: "efa=32,gpus=8"}``).

The gate itself is ``training.finetune --preflight`` (``training.preflight.gate``): every start
of the workers measures the nodes before the trainer is built and stops with one line naming
the node and the failed check. Node tainting is deliberately not a key (docs/node-health.md).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from infra.config.fields import _bool, _fail, _str

PREFLIGHT_KEYS = ("expect",)
"""Keys of the mapping form."""


def preflight_key(value: Any, path: str) -> dict[str, Any]:
    """``JobConfig`` fields (``preflight``, ``preflight_expect``) from the key's value."""
    if not isinstance(value, Mapping):
        return {"preflight": _bool(value, path), "preflight_expect": ""}
    unknown = sorted(str(k) for k in value if k not in PREFLIGHT_KEYS)
    if unknown:
        hint = (
            " (tainting a failed node is not supported: docs/node-health.md)"
            if "taint" in unknown
            else ""
        )
        raise _fail(
            f"{path}.{unknown[0]}",
            f"unknown key; the mapping takes {', '.join(PREFLIGHT_KEYS)}{hint}",
        )
    expect = _str(value.get("expect", ""), f"{path}.expect") if "expect" in value else ""
    if expect:
        # stdlib only at import (training.preflight imports torch inside functions)
        from training.preflight.verdict import parse_expect

        try:
            parse_expect(expect)
        except ValueError as err:
            raise _fail(f"{path}.expect", str(err)) from None
    return {"preflight": True, "preflight_expect": expect}
