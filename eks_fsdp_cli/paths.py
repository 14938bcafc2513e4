"""Where this checkout is: ``REPO_ROOT``, the folder of ``Pulumi.yaml``, the stack files, the
example jobs and the training package (one definition; every room reads it from here)."""

from __future__ import annotations

from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[1]
