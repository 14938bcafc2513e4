"""The training image's content tag: a hash of every file the Dockerfile copies.

The stack tags the image it builds with this value, so an unchanged tree never rebuilds or
re-pulls, and a changed one can never be mistaken for the old image (no ``latest``).
"""

from __future__ import annotations

import hashlib
import sys
from pathlib import Path

from infra import versions

REPO_ROOT = Path(__file__).resolve().parents[2]
DOCKERFILE = "training/Dockerfile"
CONTEXT_PATHS = (
    DOCKERFILE,
    "training/Dockerfile.dockerignore",
    "training/requirements.txt",
)
"""Files (besides ``training/``'s sources) whose content defines the image."""
_SKIP_PARTS = {"__pycache__", ".pytest_cache"}


def context_files(root: Path = REPO_ROOT) -> list[Path]:
    """Every file that goes into the image, sorted by path relative to ``root``."""
    files = {root / p for p in CONTEXT_PATHS if (root / p).is_file()}
    for path in (root / "training").rglob("*"):
        if path.is_file() and not _SKIP_PARTS & set(path.parts) and path.suffix != ".pyc":
            files.add(path)
    return sorted(files, key=lambda p: p.relative_to(root).as_posix())


def content_tag(root: Path = REPO_ROOT) -> str:
    """``sha-<16 hex>`` over the paths and bytes of ``context_files``."""
    digest = hashlib.sha256()
    for path in context_files(root):
        digest.update(path.relative_to(root).as_posix().encode() + b"\0")
        digest.update(path.read_bytes() + b"\0")
    return f"sha-{digest.hexdigest()[:16]}"


def local_reference(repository: str, root: Path = REPO_ROOT) -> str:
    """``<repository>:<content tag>``: the image the stack would push, for rendering."""
    return f"{repository}:{content_tag(root)}"


def build_args() -> dict[str, str]:
    """The Dockerfile's build arguments, from ``infra.versions`` (the Dockerfile pins nothing)."""
    return {
        "CUDA_BASE_IMAGE": versions.CUDA_BASE_IMAGE,
        "EFA_INSTALLER_VERSION": versions.EFA_INSTALLER_VERSION,
        "NCCL_VERSION": versions.NCCL_VERSION,
        "AWS_OFI_NCCL_VERSION": versions.AWS_OFI_NCCL_VERSION,
    }


if __name__ == "__main__":
    if sys.argv[1:] == ["--build-args"]:
        print(" ".join(f"--build-arg {k}={v}" for k, v in build_args().items()))
    else:
        print(content_tag())
