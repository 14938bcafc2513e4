"""``eks-fsdp plan`` is :func:`planner.cli.main`."""

import sys

from planner.cli import main

sys.exit(main())
