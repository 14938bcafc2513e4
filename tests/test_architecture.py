"""The house's rules about the shape of the code, as tests (read from the source with ``ast``).

- **No module outside tests/ over 800 lines.** If this fails, a module has grown to own more
  than one thing: it can no longer be read in one sitting or given one line in
  docs/architecture.md's code map, and changes to its parts collide. Split it by what each
  part owns (the message lists every offender with its line count).
- **No import cycle among the project's modules** (every first-party package: the ones named
  in docs/architecture.md and any top-level folder of Python files that appears; imports inside
  functions and ``if TYPE_CHECKING:`` blocks count too). If this fails, two modules need each
  other: neither can be understood, tested or replaced alone, and with both imports at the top
  the first import of either meets the other half-initialised (``cannot import name ...
  (most likely due to a circular import)``). An import moved into a function only hides that.
  Break it at the root: move what both need into a module both import, or let one depend on
  the other and not back (the message gives the cycle, each step with its file:line).
- **Package boundaries not checked elsewhere:** ``workloads/specs/`` never imports pulumi
  (the specs return plain dicts that the renderer and the local runner use without an engine;
  tests/workloads/test_specs.py checks the modules an import loads, this also the imports
  inside functions), and ``training/`` imports no other first-party package (the training
  image carries ``training/`` only, see ``training/Dockerfile.dockerignore``: such an import
  would crash in the pod; the packages are discovered, so a new one is covered the day it
  appears). The planner's own boundary (no torch, no Pulumi) is
  tests/planner/test_package_boundary.py.
"""

from __future__ import annotations

import ast
from collections import deque
from collections.abc import Iterator
from dataclasses import dataclass, field
from itertools import pairwise
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
MAX_LINES = 800
SKIP = {"tests", "docs", "node_modules"}
"""Top-level folders that hold no project modules (besides hidden ones: .venv, .git, ...)."""


@dataclass
class Tree:
    """The project's modules: dotted name -> file, and who imports whom (with the first line)."""

    root: Path
    files: dict[str, Path] = field(default_factory=dict)
    imports: dict[str, dict[str, int]] = field(default_factory=dict)
    """module -> {imported first-party module -> line of its first import}."""
    external: dict[str, dict[str, int]] = field(default_factory=dict)
    """module -> {top-level name of a module outside the project -> line of its first import}."""

    def unit(self, module: str) -> str:
        """The top-level folder (or file) a module belongs to."""
        return self.files[module].relative_to(self.root).parts[0]

    def where(self, module: str, line: int) -> str:
        return f"{self.files[module].relative_to(self.root)}:{line}"


def _module_files(root: Path) -> Iterator[tuple[str, Path]]:
    """(dotted name, path) of every project module: top-level ``*.py`` and every ``*.py`` under
    a top-level folder that is not hidden, ``tests/`` or in ``SKIP``."""
    for path in sorted(root.glob("*.py")):
        yield path.stem, path
    for top in sorted(p for p in root.iterdir() if p.is_dir()):
        if top.name.startswith((".", "_")) or top.name in SKIP:
            continue
        for path in sorted(top.rglob("*.py")):
            rel = path.relative_to(root)
            if any(part.startswith(".") or part == "__pycache__" for part in rel.parts):
                continue
            parts = list(rel.with_suffix("").parts)
            if parts[-1] == "__init__":
                parts.pop()
            yield ".".join(parts), path


def _import_names(module: str, path: Path) -> Iterator[tuple[str, str | None, int]]:
    """(absolute module name, name imported from it or None, line) of every import statement,
    at any depth (functions, ``if TYPE_CHECKING:``); relative imports made absolute."""
    tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
    package = module if path.name == "__init__.py" else module.rpartition(".")[0]
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                yield alias.name, None, node.lineno
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                parts = package.split(".") if package else []
                base = ".".join(parts[: len(parts) - (node.level - 1)])
                base = ".".join(p for p in (base, node.module or "") if p)
            else:
                base = node.module or ""
            for alias in node.names:
                yield base, None if alias.name == "*" else alias.name, node.lineno


def _resolve(tree: Tree, module: str, name: str, attr: str | None) -> str | None:
    """The project module an import names, or None. ``from a.b import c`` is ``a.b.c`` when
    that is a module, else ``a.b``; ``import a.b.c`` is the longest prefix that is a module. In a
    folder without ``__init__.py`` (scripts: policy/, benchmarks/) a sibling file shadows
    everything else, as the script's folder comes first on ``sys.path``."""
    candidates = [name]
    folder = tree.files[module].parent
    if not (folder / "__init__.py").exists() and folder != tree.root:
        prefix = ".".join(folder.relative_to(tree.root).parts)
        candidates.insert(0, f"{prefix}.{name}")
    for candidate in candidates:
        if attr is not None and f"{candidate}.{attr}" in tree.files:
            return f"{candidate}.{attr}"
        parts = candidate.split(".")
        while parts:
            if ".".join(parts) in tree.files:
                return ".".join(parts)
            parts.pop()
    return None


def build(root: Path) -> Tree:
    """Every project module under ``root`` and its imports."""
    tree = Tree(root=root, files=dict(_module_files(root)))
    for module, path in tree.files.items():
        ours: dict[str, int] = {}
        theirs: dict[str, int] = {}
        for name, attr, line in _import_names(module, path):
            target = _resolve(tree, module, name, attr) if name else None
            if target is not None:
                if target != module:
                    ours.setdefault(target, line)
            elif name:
                theirs.setdefault(name.split(".")[0], line)
        tree.imports[module] = ours
        tree.external[module] = theirs
    return tree


@dataclass(frozen=True)
class Cycle:
    """A shortest cycle through the first module of a tangle (a strongly connected component of
    the import graph), and every module of the tangle: untangling needs them all."""

    path: list[str]
    """The cycle's modules, the first repeated at the end."""
    tangle: list[str]


def cycles(tree: Tree) -> list[Cycle]:
    """One ``Cycle`` per tangle (Tarjan's strongly connected components of two modules or
    more), sorted."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    on_stack: set[str] = set()
    stack: list[str] = []
    tangles: list[set[str]] = []

    def connect(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in sorted(tree.imports[v]):
            if w not in index:
                connect(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            tangle = set()
            while True:
                w = stack.pop()
                on_stack.discard(w)
                tangle.add(w)
                if w == v:
                    break
            if len(tangle) > 1:
                tangles.append(tangle)

    for v in sorted(tree.files):
        if v not in index:
            connect(v)
    found = []
    for tangle in tangles:
        start = min(tangle)
        previous: dict[str, str] = {}
        queue = deque([start])
        while queue:  # breadth first, inside the tangle, back to start
            v = queue.popleft()
            if start in tree.imports[v]:
                back = [v]
                while back[-1] != start:
                    back.append(previous[back[-1]])
                found.append(Cycle(path=[*reversed(back), start], tangle=sorted(tangle)))
                break
            for w in sorted(tree.imports[v]):
                if w in tangle and w not in previous and w != start:
                    previous[w] = v
                    queue.append(w)
    return sorted(found, key=lambda c: c.path)


def describe(tree: Tree, cycle: Cycle) -> str:
    """``a (a.py:12) -> b (b.py:3) -> a``, and the tangle's other modules if any."""
    path = cycle.path
    steps = [f"{a} ({tree.where(a, tree.imports[a][b])})" for a, b in pairwise(path)]
    text = " -> ".join([*steps, path[-1]])
    rest = [m for m in cycle.tangle if m not in path]
    return text + (f"\n    tangled with it: {', '.join(rest)}" if rest else "")


TREE = build(ROOT)
UNITS = sorted({TREE.unit(m) for m in TREE.files})


@pytest.mark.parametrize("unit", UNITS)
def test_no_module_over_800_lines(unit: str) -> None:
    """Each top-level folder on its own, so one over-long module names its folder in the report
    and the others still pass."""
    lengths = {
        str(path.relative_to(ROOT)): len(path.read_text(encoding="utf-8").splitlines())
        for module, path in TREE.files.items()
        if TREE.unit(module) == unit
    }
    offenders = [f"{p}: {n} lines" for p, n in sorted(lengths.items()) if n > MAX_LINES]
    assert not offenders, f"over {MAX_LINES} lines:\n" + "\n".join(offenders)


@pytest.mark.parametrize("unit", UNITS)
def test_no_import_cycle(unit: str) -> None:
    """Every cycle that passes through a module of ``unit``."""
    mine = [c for c in cycles(TREE) if any(TREE.unit(m) == unit for m in c.tangle)]
    assert not mine, "import cycles:\n" + "\n".join(describe(TREE, c) for c in mine)


def test_workload_specs_never_import_pulumi() -> None:
    found = {
        str(TREE.files[m].relative_to(ROOT)): sorted(
            f"{name} (line {line})"
            for name, line in TREE.external[m].items()
            if name.startswith("pulumi")
        )
        for m in TREE.files
        if m == "workloads.specs" or m.startswith("workloads.specs.")
    }
    assert len(found) > 1  # the folder was found and read
    assert {k: v for k, v in found.items() if v} == {}


def test_training_imports_no_other_project_package() -> None:
    """``tests`` counts too: a training module must not need the test helpers. A name of a
    project package that has no module here (``import planner.gone``) counts as well."""
    others = ({m.split(".")[0] for m in TREE.files} | {"tests"}) - {"training"}
    offenders = {}
    for m in TREE.files:
        if TREE.unit(m) != "training":
            continue
        named = {**TREE.external[m], **TREE.imports[m]}
        found = sorted(
            f"{n} (line {line})" for n, line in named.items() if n.split(".")[0] in others
        )
        if found:
            offenders[str(TREE.files[m].relative_to(ROOT))] = found
    assert offenders == {}
    assert not (ROOT / "training" / "planner").exists()


# --- the checker itself -------------------------------------------------------------------


def _write(root: Path, files: dict[str, str]) -> None:
    for rel, text in files.items():
        path = root / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)


def test_the_checker_finds_hidden_relative_and_script_cycles(tmp_path: Path) -> None:
    _write(
        tmp_path,
        {
            "a/__init__.py": "",
            "a/x.py": "def f():\n    from b.y import g\n",  # inside a function
            "b/__init__.py": "",
            "b/y.py": "from a import x\nfrom .z import h\n",  # a submodule, a relative one
            "b/z.py": "import b.y\n",
            # a package re-exporting a module that imports its sibling by full name: no cycle
            "c/__init__.py": "from c.inner import k\n",
            "c/inner.py": "import os\nfrom c.sibling import q\n",
            "c/sibling.py": "",
            "d/__init__.py": "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n"
            "    import e.m\n",
            "e/__init__.py": "",
            "e/m.py": "from d import something\n",
            "scripts/run.py": "import helper\n",  # a script folder: its sibling
            "scripts/helper.py": "import run\n",
            "tests/t.py": "import a.x\n",  # tests are not project modules
        },
    )
    tree = build(tmp_path)
    assert "tests.t" not in tree.files
    found = cycles(tree)
    assert [c.path for c in found] == [
        ["a.x", "b.y", "a.x"],
        ["d", "e.m", "d"],
        ["scripts.helper", "scripts.run", "scripts.helper"],
    ]
    assert found[0].tangle == ["a.x", "b.y", "b.z"]
    assert describe(tree, found[0]) == (
        "a.x (a/x.py:2) -> b.y (b/y.py:1) -> a.x\n    tangled with it: b.z"
    )
    assert tree.imports["c.inner"] == {"c.sibling": 2}
    assert tree.external["c.inner"] == {"os": 1}
