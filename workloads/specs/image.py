"""The training image's name and tag: what goes into it, and nothing else.

**The tag** is ``sha-<16 hex>`` over exactly what makes the image: the Docker build context as
pulumi-docker-build hashes it, plus the build arguments and the platform. The provider decides
to rebuild when its ``contextHash`` changes (``provider/internal/context.go``,
``hashBuildContext``): SHA-256 over the Dockerfile's bytes, then, for every regular file the
context's ignore file admits, in walk order, its bytes, its slash-separated relative path and its
Go ``FileMode.String()`` (``-rw-r--r--``: *every* permission bit, so a ``chmod`` or another
umask changes it; pulumi-docker-build#222, #358, #979). :func:`context_hash` computes the same
value, so the tag changes exactly when the provider would rebuild and push: a new image always
gets a new tag, and the IMMUTABLE repository never sees a second digest under one tag.

Never in the tag: ``infra/versions.py`` as a file (only the pins the Dockerfile takes, as build
arguments, from :func:`build_args`), so bumping a chart or an add-on leaves the image alone.

**The name**: one ECR repository per stack, ``<project>-<stack>-training``
(:func:`repository_name`); rendering for a GPU stack requires a registry in the reference
(:func:`has_registry`); the local runner and the CPU dev path use :data:`LOCAL_REPOSITORY`.

    python -m workloads.specs.image               # the tag
    python -m workloads.specs.image --build-args  # flags for a manual docker build
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import stat
import sys
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path

from eks_fsdp_cli.paths import REPO_ROOT
from infra import versions

DOCKERFILE = "training/Dockerfile"
"""Dockerfile path relative to the context (the repository root)."""
IGNORE_FILE = f"{DOCKERFILE}.dockerignore"
"""BuildKit and the provider read ``<Dockerfile>.dockerignore`` before the root ``.dockerignore``."""
PLATFORM = "linux/amd64"
"""The only platform built (p4de, p5 and g5 are x86_64)."""
TAG_PREFIX = "sha-"
"""Every content tag starts with this (the ECR lifecycle policy keeps the newest of them)."""
CACHE_TAG = "buildcache"
"""Tag of the BuildKit registry cache in the stack's repository (exempt from immutability)."""
LOCAL_REPOSITORY = "eks-fsdp-training"
"""Registry-less name of a local build (local runner, CPU dev path): never pushed, never pulled."""
_ECR_NAME = re.compile(r"^(?:[a-z0-9]+(?:[._-][a-z0-9]+)*/)*[a-z0-9]+(?:[._-][a-z0-9]+)*$")


def repository_name(project: str, stack: str) -> str:
    """The stack's ECR repository: ``<project>-<stack>-training`` (one per stack and account)."""
    name = f"{project}-{stack}-training".lower()
    if not 2 <= len(name) <= 256 or not _ECR_NAME.match(name):
        raise ValueError(f"image.repository: {name!r} is not a valid ECR repository name")
    return name


def has_registry(image: str) -> bool:
    """Whether ``image`` names a registry host (``host.domain/...``, ``host:port/...``,
    ``localhost/...``), as Docker's reference grammar decides; else it means Docker Hub."""
    first, sep, _rest = image.partition("/")
    return bool(sep) and ("." in first or ":" in first or first == "localhost")


# --- the build context, as pulumi-docker-build and BuildKit see it ---------------------------


def ignore_patterns(path: Path) -> list[str]:
    """Patterns of a ``.dockerignore`` file, as moby's ``ignorefile.ReadAll`` returns them:
    blank lines and ``#`` comments dropped, whitespace trimmed, paths cleaned, a leading ``/``
    removed; a ``!`` prefix is kept (an exception)."""
    out = []
    for raw in path.read_text().splitlines():
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        neg = line.startswith("!")
        body = line[1:].strip() if neg else line
        body = os.path.normpath(body).lstrip("/") if body not in ("", "/") else "."
        out.append(("!" if neg else "") + body.replace(os.sep, "/"))
    return out


def _pattern_regex(pattern: str) -> re.Pattern[str]:
    """moby patternmatcher: ``**`` spans directories, ``*`` and ``?`` stay within one."""
    out, i = "^", 0
    while i < len(pattern):
        c = pattern[i]
        if pattern.startswith("**", i):
            i += 2
            if pattern.startswith("/", i):  # "**/" matches zero or more directories
                i += 1
                out += "(?:.*/)?"
            else:
                out += ".*"
            continue
        out += {"*": "[^/]*", "?": "[^/]"}.get(c, re.escape(c))
        i += 1
    return re.compile(out + "$")


def is_ignored(rel: str, patterns: Sequence[str]) -> bool:
    """Whether ``rel`` (slash-separated, relative to the context) is left out of the context.

    The last pattern matching the path or one of its parent directories wins (moby's
    ``MatchesOrParentMatches``); a ``!`` pattern brings a path back.
    """
    parts = rel.split("/")
    prefixes = ["/".join(parts[: i + 1]) for i in range(len(parts))]
    ignored = False
    for pattern in patterns:
        neg = pattern.startswith("!")
        rx = _pattern_regex(pattern[1:] if neg else pattern)
        if any(rx.match(p) for p in prefixes):
            ignored = not neg
    return ignored


def _may_reinclude(rel_dir: str, patterns: Sequence[str]) -> bool:
    """Whether a ``!`` pattern could bring back something under the ignored ``rel_dir``."""
    for pattern in patterns:
        if pattern.startswith("!"):
            literal = re.split(r"[*?\[]", pattern[1:], maxsplit=1)[0]
            if not literal or literal.startswith(rel_dir + "/") or rel_dir.startswith(literal):
                return True
    return False


def _walk(root: Path, here: Path, patterns: Sequence[str]) -> Iterator[Path]:
    """Files under ``here`` in Go's ``filepath.WalkDir`` order (entries sorted by name),
    skipping ignored directories nothing can bring back (as fsutil's filter does)."""
    for entry in sorted(here.iterdir(), key=lambda p: p.name.encode()):
        if entry.is_dir() and not entry.is_symlink():
            rel = entry.relative_to(root).as_posix()
            if not is_ignored(rel, patterns) or _may_reinclude(rel, patterns):
                yield from _walk(root, entry, patterns)
        else:
            yield entry


def context_files(root: Path = REPO_ROOT) -> list[Path]:
    """Every file the build context holds after the ignore file, in the provider's walk order."""
    patterns = ignore_patterns(root / IGNORE_FILE)
    files = []
    for path in _walk(root, root, patterns):
        rel = path.relative_to(root).as_posix()
        mode = path.lstat().st_mode
        if (stat.S_ISREG(mode) or stat.S_ISLNK(mode)) and not is_ignored(rel, patterns):
            files.append(path)
    return files


def go_file_mode(mode: int) -> str:
    """Go's ``fs.FileMode.String()`` for an ``lstat`` mode (regular files and symlinks)."""
    kind = ""
    if stat.S_ISLNK(mode):
        kind += "L"
    if mode & stat.S_ISUID:
        kind += "u"
    if mode & stat.S_ISGID:
        kind += "g"
    if mode & stat.S_ISVTX:
        kind += "t"
    perms = "".join(ch if mode & (1 << (8 - i)) else "-" for i, ch in enumerate("rwxrwxrwx"))
    return (kind or "-") + perms


def context_hash(root: Path = REPO_ROOT) -> str:
    """pulumi-docker-build's ``contextHash`` of the training image's context (hex SHA-256)."""
    h = hashlib.sha256()
    h.update((root / DOCKERFILE).read_bytes())
    for path in context_files(root):
        try:
            data = path.read_bytes()
        except IsADirectoryError:
            # A symlink to a directory: the provider's hashFile skips it (io.Copy fails with
            # EISDIR: "Ignore symlinks to directories"), neither path nor mode is hashed.
            continue
        h.update(data)
        h.update(path.relative_to(root).as_posix().encode())
        h.update(go_file_mode(path.lstat().st_mode).encode())
    return h.hexdigest()


def build_args() -> dict[str, str]:
    """The Dockerfile's build arguments, from ``infra.versions`` (the Dockerfile pins nothing)."""
    return {
        "CUDA_BASE_IMAGE": versions.CUDA_BASE_IMAGE,
        "EFA_INSTALLER_VERSION": versions.EFA_INSTALLER_VERSION,
        "TORCH_CUDA_VERSION": versions.TORCH_CUDA_VERSION,
    }


def content_tag(root: Path = REPO_ROOT, args: Mapping[str, str] | None = None) -> str:
    """``sha-<16 hex>`` over the provider's context hash, the build arguments and the platform."""
    payload = {
        "context": context_hash(root),
        "build_args": dict(sorted((build_args() if args is None else args).items())),
        "platform": PLATFORM,
    }
    digest = hashlib.sha256(json.dumps(payload, sort_keys=True).encode()).hexdigest()
    return f"{TAG_PREFIX}{digest[:16]}"


def local_reference(repository: str = LOCAL_REPOSITORY, root: Path = REPO_ROOT) -> str:
    """``<repository>:<content tag>``: the image a build of this tree would carry."""
    return f"{repository}:{content_tag(root)}"


if __name__ == "__main__":
    if sys.argv[1:] == ["--build-args"]:
        print(" ".join(f"--build-arg {k}={v}" for k, v in build_args().items()))
    else:
        print(content_tag())
