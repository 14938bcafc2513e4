"""The layering between the project's rooms, as docs/architecture.md writes it ("Layers").

Each module belongs to one room (the longest path of the table that holds it); a room may
import its own modules and those of rooms on lower levels, never a room on its own level or
above. Imports inside functions and ``if TYPE_CHECKING:`` blocks count (the import graph is
``tests/test_architecture.py``'s). If this fails, a lower room has come to need a higher one:
the pure data (stack config, instance catalog, pins) would need the Pulumi components, the spec
builders the job CLI, or the planner the job schema, and the rooms could no longer be read,
tested or shipped alone (the deploy venv without torch, the training image with ``training/``
only). The message names each import that goes the wrong way, with its file and line. Room
cycles cannot exist while this passes: every allowed import goes strictly down.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from tests.test_architecture import ROOT, TREE

DOC = ROOT / "docs" / "architecture.md"
_BLOCK = re.compile(r"```layers\n(.*?)```", re.S)
_LEVEL = re.compile(r"^level (\d+)\s+(.*)$")


def layers(text: str) -> dict[str, tuple[int, tuple[str, ...]]]:
    """room -> (level, its paths) from the ``layers`` block of the architecture doc."""
    block = _BLOCK.search(text)
    assert block is not None, "docs/architecture.md has no ```layers block"
    rooms: dict[str, tuple[int, tuple[str, ...]]] = {}
    for line in block.group(1).splitlines():
        if not line.strip():
            continue
        m = _LEVEL.match(line.strip())
        assert m is not None, f"not 'level N room: paths | room: paths': {line!r}"
        for part in m.group(2).split(" | "):
            name, _, paths = part.partition(":")
            rooms[name.strip()] = (int(m.group(1)), tuple(paths.split()))
    return rooms


ROOMS = layers(DOC.read_text(encoding="utf-8"))


def room_of(path: str) -> str | None:
    """The room whose path (a file, or a folder ending in ``/``) is the longest that holds
    ``path``."""
    best, length = None, -1
    for name, (_, paths) in ROOMS.items():
        for p in paths:
            if (path == p or (p.endswith("/") and path.startswith(p))) and len(p) > length:
                best, length = name, len(p)
    return best


def _path(module: str) -> str:
    return TREE.files[module].relative_to(ROOT).as_posix()


def test_every_module_has_a_room() -> None:
    lost = sorted(_path(m) for m in TREE.files if room_of(_path(m)) is None)
    assert len(TREE.files) > 100  # the tree was read
    assert not lost, "modules in no room of docs/architecture.md's layers:\n" + "\n".join(lost)


@pytest.mark.parametrize("room", sorted(ROOMS))
def test_imports_go_down_the_layers(room: str) -> None:
    level = ROOMS[room][0]
    wrong = []
    for module, imports in TREE.imports.items():
        if room_of(_path(module)) != room:
            continue
        for target, line in imports.items():
            other = room_of(_path(target))
            if other is None or other == room:
                continue
            if ROOMS[other][0] >= level:
                wrong.append(
                    f"{_path(module)}:{line} imports {target} ({other}, level "
                    f"{ROOMS[other][0]}; {room} is level {level})"
                )
    assert not wrong, "imports against the layers:\n" + "\n".join(wrong)


def test_every_path_of_the_table_exists() -> None:
    missing = sorted(
        p for _, paths in ROOMS.values() for p in paths if not (ROOT / p.rstrip("/")).exists()
    )
    assert not missing, f"paths in docs/architecture.md's layers that do not exist: {missing}"


def test_the_job_path_imports_no_doctor_and_no_pulumi_component() -> None:
    """Within the commands room anything goes, so the job path's own rule is written here: no
    module under ``jobs/`` imports ``doctor`` (the fit check is the planner's), a Pulumi
    component (``infra/`` outside its data, ``workloads/`` outside ``specs``), or the other
    backend's room (``jobs/cluster`` and ``jobs/local`` apart)."""
    wrong = []
    for module, imports in TREE.imports.items():
        path = _path(module)
        if not path.startswith("jobs/"):
            continue
        for target, line in imports.items():
            room, tpath = room_of(_path(target)), _path(target)
            other_backend = (
                path.startswith("jobs/cluster/") and tpath.startswith("jobs/local/")
            ) or (path.startswith("jobs/local/") and tpath.startswith("jobs/cluster/"))
            if target.split(".")[0] == "doctor" or room in ("infra", "workloads") or other_backend:
                wrong.append(f"{path}:{line} imports {target}")
    assert not wrong, "\n".join(wrong)


def test_the_checker_sees_a_wrong_way_import() -> None:
    """The rule itself: the spec builders (level 4) importing the job schema (level 6) is
    refused, the job schema importing the spec builders is not."""
    specs, jobs = ROOMS["specs"][0], ROOMS["jobs"][0]
    assert room_of("workloads/specs/stack.py") == "specs"
    assert room_of("jobs/schema.py") == "jobs"
    assert room_of("jobs/cli.py") == "commands"
    assert specs < jobs
    assert Path(DOC).is_file()
