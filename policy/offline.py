"""Run every policy of the pack on resources read from JSON, without a Pulumi engine.

    python policy/offline.py resources.json [--today YYYY-MM-DD]

``resources.json`` is a list of ``{type, name, urn, props, propertyDependencies}`` (URNs per
property); ``props`` are a resource's inputs, which is what the engine's ``Analyze`` and
``AnalyzeStack`` calls carry. Each resource goes through every ``ResourceValidationPolicy.validate``
and the whole list through every ``StackValidationPolicy.validate``, with the props prepared as
pulumi-policy's analyzer servicer prepares them (``pulumi_policy/policy.py``: a protobuf
``Struct``, so integers arrive as floats, then ``deserialize_properties`` and
``unknown_checking_proxy``); a rule that reads an unknown value is reported at ``advisory``
level, as the servicer does during a preview. The violations are printed as JSON
``[{policy, urn, message, level}]``. The test suite feeds it the resources the program registers
under Pulumi's mocks, and deliberately broken ones. What it does not reproduce: resource
options, providers, config and stack tags beyond empty defaults, and remediation.
"""

from __future__ import annotations

import datetime as dt
import json
import sys
from pathlib import Path
from typing import Any

import addon_versions
import rules
from google.protobuf import json_format, struct_pb2
from pulumi_policy import (
    PolicyCustomTimeouts,
    PolicyResource,
    PolicyResourceOptions,
    ResourceValidationArgs,
    StackValidationArgs,
)
from pulumi_policy.deserialize import deserialize_properties
from pulumi_policy.proxy import UnknownValueError, unknown_checking_proxy
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


def _as_engine_sends(props: dict[str, Any]) -> Any:
    """``props`` through the wire format and pulumi-policy's own preparation of it."""
    message = struct_pb2.Struct()
    message.update(props)
    return unknown_checking_proxy(deserialize_properties(json_format.MessageToDict(message)))


def evaluate(raw: list[dict[str, Any]]) -> list[dict[str, str]]:
    """Violations of every policy on ``raw`` resources."""
    found: list[dict[str, str]] = []

    def reporter(policy: str, default_urn: str) -> Any:
        def report(message: str, urn: str | None = None) -> None:
            found.append(
                {
                    "policy": policy,
                    "urn": urn or default_urn,
                    "message": message,
                    "level": "mandatory",
                }
            )

        return report

    def run(policy: Any, args: Any, urn: str) -> None:
        try:
            policy.validate(args, reporter(policy.name, urn))
        except UnknownValueError as e:
            found.append(
                {"policy": policy.name, "urn": urn, "message": e.message, "level": "advisory"}
            )

    for item in raw:
        args = ResourceValidationArgs(
            item["type"], _as_engine_sends(item["props"]), item["urn"], item["name"], _opts(), None
        )
        for policy in RESOURCE_POLICIES:
            run(policy, args, item["urn"])
    by_urn: dict[str, PolicyResource] = {}
    for item in raw:
        by_urn[item["urn"]] = PolicyResource(
            item["type"],
            _as_engine_sends(item["props"]),
            item["urn"],
            item["name"],
            _opts(),
            None,
            None,
            [],
            {},
        )
    for item in raw:
        resource = by_urn[item["urn"]]
        resource.property_dependencies = {
            prop: [by_urn[u] for u in urns if u in by_urn]
            for prop, urns in (item.get("propertyDependencies") or {}).items()
        }
    stack = StackValidationArgs(list(by_urn.values()), {})
    for policy in STACK_POLICIES:
        run(policy, stack, "")
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
                    "addonSeries": addon_versions.SERIES,
                }
            )
        )
        return 0
    if len(argv) == 4 and argv[2] == "--today":
        day = dt.date.fromisoformat(argv[3])
        rules.clock = lambda: day
    raw = json.loads(Path(argv[1]).read_text())
    print(json.dumps(evaluate(raw)))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
