"""Run every policy of the pack on resources read from JSON, without a Pulumi engine.

    python policy/offline.py resources.json

``resources.json`` is a list of ``{type, name, urn, props, propertyDependencies}`` (URNs per
property). Each resource goes through every ``ResourceValidationPolicy.validate`` and the whole
list through every ``StackValidationPolicy.validate``, exactly the calls the engine makes; the
violations are printed as JSON ``[{policy, urn, message}]``. The test suite feeds it the
resources the program registers under Pulumi's mocks, and deliberately broken ones.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

from pulumi_policy import (
    PolicyCustomTimeouts,
    PolicyResource,
    PolicyResourceOptions,
    ResourceValidationArgs,
    StackValidationArgs,
)
from rules import (
    CONTROL_PLANE_LOG_TYPES,
    EKS_STANDARD_SUPPORT_END,
    POLICIES,
    RESOURCE_POLICIES,
    STACK_POLICIES,
)


def _opts() -> PolicyResourceOptions:
    return PolicyResourceOptions(
        protect=False,
        ignore_changes=[],
        delete_before_replace=None,
        aliases=[],
        custom_timeouts=PolicyCustomTimeouts(0, 0, 0),
        additional_secret_outputs=[],
    )


def evaluate(raw: list[dict[str, Any]]) -> list[dict[str, str]]:
    """Violations of every policy on ``raw`` resources."""
    found: list[dict[str, str]] = []

    def reporter(policy: str, default_urn: str) -> Any:
        def report(message: str, urn: str | None = None) -> None:
            found.append({"policy": policy, "urn": urn or default_urn, "message": message})

        return report

    for item in raw:
        args = ResourceValidationArgs(
            item["type"], item["props"], item["urn"], item["name"], _opts(), None
        )
        for policy in RESOURCE_POLICIES:
            policy.validate(args, reporter(policy.name, item["urn"]))
    by_urn: dict[str, PolicyResource] = {}
    for item in raw:
        by_urn[item["urn"]] = PolicyResource(
            item["type"], item["props"], item["urn"], item["name"], _opts(), None, None, [], {}
        )
    for item in raw:
        resource = by_urn[item["urn"]]
        resource.property_dependencies = {
            prop: [by_urn[u] for u in urns if u in by_urn]
            for prop, urns in (item.get("propertyDependencies") or {}).items()
        }
    stack = StackValidationArgs(list(by_urn.values()), {})
    for policy in STACK_POLICIES:
        policy.validate(stack, reporter(policy.name, ""))
    return found


def main(argv: list[str]) -> int:
    if len(argv) == 2 and argv[1] == "--facts":
        print(
            json.dumps(
                {
                    "policies": [p.name for p in POLICIES],
                    "standardSupportEnd": {
                        v: d.isoformat() for v, d in EKS_STANDARD_SUPPORT_END.items()
                    },
                    "logTypes": list(CONTROL_PLANE_LOG_TYPES),
                }
            )
        )
        return 0
    raw = json.loads(Path(argv[1]).read_text())
    print(json.dumps(evaluate(raw)))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
