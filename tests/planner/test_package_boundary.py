"""The planner's package boundary: ``planner/`` imports no torch, no transformers, no Pulumi.

If this fails, the planner would stop running on a laptop or a CI machine without torch or a
Pulumi engine, and ``eks-fsdp plan`` would take seconds to start instead of being instant. The scan parses every module's source (absolute and relative
imports), so an import hidden inside a function counts too. The other packages' boundaries
(``training/`` imports no other project package, ``workloads/specs/`` no Pulumi) and the import
graph as a whole are tests/test_architecture.py's.
"""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def _imports(path: Path) -> set[str]:
    tree = ast.parse(path.read_text(), filename=str(path))
    names: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names.update(alias.name.split(".")[0] for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            names.add(node.module.split(".")[0])
    return names


def _heavy(name: str) -> bool:
    """torch, transformers, and every Pulumi SDK and provider (``pulumi``, ``pulumi_*``)."""
    return name in {"torch", "transformers"} or name == "pulumi" or name.startswith("pulumi_")


def test_planner_imports_no_torch_and_no_pulumi() -> None:
    found = {
        str(path.relative_to(ROOT)): sorted(n for n in _imports(path) if _heavy(n))
        for path in sorted((ROOT / "planner").rglob("*.py"))
    }
    assert len(found) > 10  # the package was found and read
    assert {k: v for k, v in found.items() if v} == {}
