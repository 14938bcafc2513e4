"""The preflight gate's line for ``eks-fsdp jobs status``.

A worker whose preflight gate fails exits with one line, ``preflight failed on node
ip-10-1-2-3: EFA devices 0/32`` (``training.preflight.gate``), written as its container's
termination message: Kubernetes copies ``terminationMessagePath`` (default
``/dev/termination-log``) into ``status.containerStatuses[].state.terminated.message`` (and
``lastState`` once the container restarted; Kubernetes docs, "Determine the Reason for Pod
Failure"). A local job keeps the report in its output folder (``preflight.json``, whose
``failures`` are the same checks). Either way ``status`` shows the line as the last failure.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from pathlib import Path
from typing import Any

PREFIX = "preflight failed on "
"""How the gate's line starts (``training.preflight.verdict.Problem.line``)."""
REPORT = "preflight.json"
"""The gate's report in the job's output folder (``training.preflight.gate``)."""


def from_pods(pods: Iterable[dict[str, Any]], container: str) -> str:
    """The gate's line from the first pod whose ``container`` ended with one; "" if none."""
    for pod in pods:
        for status in (pod.get("status") or {}).get("containerStatuses") or []:
            if status.get("name") != container:
                continue
            for state in (status.get("state"), status.get("lastState")):
                message = str(((state or {}).get("terminated") or {}).get("message") or "")
                line = message.strip().splitlines()[0] if message.strip() else ""
                if line.startswith(PREFIX):
                    return line
    return ""


def from_output(folder: Path) -> str:
    """The gate's line from a failed report in ``folder``; "" when it passed or is absent."""
    try:
        report = json.loads((folder / REPORT).read_text())
    except (OSError, ValueError):
        return ""
    found = report.get("failures") or []
    if report.get("passed", True) or not found:
        return ""
    more = len(found) - 1
    return PREFIX + str(found[0]) + (f" (+{more} more in {REPORT})" if more else "")
