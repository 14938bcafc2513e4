"""`python -m training` is `python -m training.finetune`."""

import sys

from training.finetune import main

sys.exit(main(freeze_libraries=True))
