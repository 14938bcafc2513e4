"""``eks-fsdp local`` is :func:`localrun.cli.main`."""

import sys

from localrun.cli import main

sys.exit(main())
