"""One check's result, and the table and JSON every ``doctor`` run prints."""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import asdict, dataclass

OK = "ok"
FAIL = "fail"
WARN = "warn"
SKIP = "skip"
STATUSES = (OK, FAIL, WARN, SKIP)


@dataclass(frozen=True, kw_only=True)
class Result:
    """What one check found: a status, what it saw, and for a failure the fix."""

    check: str
    """Short name of the check, with its subject (``reservation p5-block``)."""
    status: str
    """``ok`` | ``fail`` (exit 1) | ``warn`` (shown, exit 0) | ``skip`` (not checkable here)."""
    detail: str
    """What was seen, one line (a capacity block's start and end, a quota's value, ...)."""
    fix: str = ""
    """What to do, one line (failures and warnings)."""

    def __post_init__(self) -> None:
        if self.status not in STATUSES:
            raise ValueError(f"status {self.status!r} is not one of {', '.join(STATUSES)}")


def failed(results: Sequence[Result]) -> bool:
    """True when any check failed (the command then exits 1)."""
    return any(r.status == FAIL for r in results)


def table(results: Sequence[Result]) -> str:
    """One aligned line per check: CHECK, STATUS, DETAIL, and ``fix: ...`` beside a problem."""
    head = ("CHECK", "STATUS", "DETAIL")
    rows = [
        (r.check, r.status.upper(), r.detail + (f"  fix: {r.fix}" if r.fix else ""))
        for r in results
    ]
    width = [max(len(row[i]) for row in (head, *rows)) for i in range(2)]
    lines = [f"{a:<{width[0]}}  {b:<{width[1]}}  {c}".rstrip() for a, b, c in (head, *rows)]
    counts = {s: sum(r.status == s for r in results) for s in STATUSES}
    summary = ", ".join(f"{n} {s}" for s, n in counts.items() if n)
    return "\n".join([*lines, "", summary or "no checks"])


def to_json(results: Sequence[Result]) -> str:
    """``{"ok": bool, "checks": [{check, status, detail, fix}, ...]}``."""
    return json.dumps({"ok": not failed(results), "checks": [asdict(r) for r in results]}, indent=2)
