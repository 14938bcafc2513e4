"""Package boundaries: ``training/`` imports nothing outside itself; ``planner/`` needs no torch.

If this fails, the training image (which carries ``training/`` only, see
``training/Dockerfile.dockerignore``) would crash on an import of ``infra``, ``workloads`` or
``planner`` at run time, or the planner would stop running on a laptop without torch. The scan
parses every module's source (absolute and relative imports), so an import hidden inside a
function counts too.
"""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
OURS = {"training", "infra", "workloads", "planner", "notebooks", "benchmarks", "tests"}


def _imports(path: Path) -> set[str]:
    tree = ast.parse(path.read_text(), filename=str(path))
    names: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names.update(alias.name.split(".")[0] for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            names.add(node.module.split(".")[0])
    return names


def test_training_imports_only_itself_among_the_project_packages() -> None:
    offenders = {
        str(path.relative_to(ROOT)): sorted((_imports(path) & OURS) - {"training"})
        for path in sorted((ROOT / "training").rglob("*.py"))
    }
    offenders = {k: v for k, v in offenders.items() if v}
    assert offenders == {}
    assert not (ROOT / "training" / "planner").exists()


def test_planner_imports_no_torch_and_no_pulumi() -> None:
    heavy = {"torch", "pulumi", "pulumi_aws", "pulumi_eks", "pulumi_kubernetes", "transformers"}
    found = {
        str(path.relative_to(ROOT)): sorted(_imports(path) & heavy)
        for path in sorted((ROOT / "planner").rglob("*.py"))
    }
    assert {k: v for k, v in found.items() if v} == {}
