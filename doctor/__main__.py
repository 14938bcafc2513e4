"""``eks-fsdp doctor``: see ``doctor.cli``."""

import sys

from doctor.cli import main

sys.exit(main())
