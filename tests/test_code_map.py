"""docs/architecture.md's code map matches the tree.

If this fails, the map a newcomer reads first is wrong: either a module exists that the map
does not place (so nobody knows which room owns it, or it was added without saying what it
owns), or the map names a path that no longer exists (a module moved or was deleted and the
map kept the old name). Fix the map in the same change as the tree.

A module counts as placed when the map names its path (``infra/network.py``), a folder above
it (``infra/config/``, ``localrun/``) or a brace form (``workloads/{etcd,program}.py``).
Package ``__init__.py`` / ``__main__.py`` files are placed by their folder.
"""

from __future__ import annotations

import itertools
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
MAP = ROOT / "docs" / "architecture.md"
NOT_CODE = {"tests", "docs", "notebooks", "scripts"}
"""Top-level folders whose files the map describes as a whole (or that hold no modules)."""

_PATH = re.compile(r"`([A-Za-z_][\w.-]*/[\w./{},*-]*)`")
"""A backticked repository path: ``dir/...``; the first component is a top-level folder."""


def _expand(path: str) -> list[str]:
    """``a/{b,c}.py`` -> ``a/b.py``, ``a/c.py`` (any number of brace groups)."""
    parts = re.split(r"\{([^}]*)\}", path)
    fixed, choices = parts[0::2], [p.split(",") for p in parts[1::2]]
    out = []
    for combo in itertools.product(*choices):
        out.append("".join(f + c for f, c in itertools.zip_longest(fixed, combo, fillvalue="")))
    return out


def named_paths(text: str) -> set[str]:
    """Every repository path the map names, braces expanded."""
    found: set[str] = set()
    for match in _PATH.finditer(text):
        raw = match.group(1)
        if raw.split("/")[0] not in _top_level():
            continue  # e.g. `torch.distributed/...`, `~/.cache/...`: not a path of this tree
        found.update(_expand(raw))
    return found


def _top_level() -> set[str]:
    return {p.name for p in ROOT.iterdir() if p.is_dir() and not p.name.startswith(".")}


def project_modules() -> list[str]:
    """Python files outside tests/docs and hidden folders, relative to the root."""
    out = []
    for path in ROOT.rglob("*.py"):
        rel = path.relative_to(ROOT)
        if rel.parts[0].startswith(".") or rel.parts[0] in NOT_CODE or len(rel.parts) == 1:
            continue
        if any(part.startswith(".") or part == "__pycache__" for part in rel.parts):
            continue
        out.append(rel.as_posix())
    return sorted(out)


def placed(module: str, names: set[str]) -> bool:
    if module in names:
        return True
    parts = module.split("/")
    return any("/".join(parts[:i]) + "/" in names for i in range(1, len(parts)))


def test_every_module_is_placed_in_the_code_map() -> None:
    names = named_paths(MAP.read_text())
    missing = [m for m in project_modules() if not placed(m, names)]
    assert not missing, "docs/architecture.md's code map does not place: " + ", ".join(missing)


def test_every_path_the_code_map_names_exists() -> None:
    names = named_paths(MAP.read_text())
    gone = sorted(n for n in names if "*" not in n and not (ROOT / n).exists())
    assert not gone, "docs/architecture.md names paths that do not exist: " + ", ".join(gone)


def test_the_checker_expands_braces_and_places_by_folder() -> None:
    """The rules above on a small example, so a broken checker cannot pass silently."""
    names = named_paths("`infra/{network,cluster}.py` and `localrun/` but `~/.cache/x/`")
    assert {"infra/network.py", "infra/cluster.py", "localrun/"} <= names
    assert not any(n.startswith("~") for n in names)
    assert placed("localrun/pods.py", names)
    assert placed("infra/cluster.py", names)
    assert not placed("infra/gpu_nodegroup.py", names)
