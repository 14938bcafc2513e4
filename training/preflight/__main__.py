"""``eks-fsdp preflight`` (and ``torchrun ... -m training.preflight``)."""

from __future__ import annotations

import sys

from training.preflight.cli import main

if __name__ == "__main__":
    sys.exit(main())
