"""``python -m training.launch``: torchrun with the project's store-tolerant rendezvous handlers.

The same command line and ``PET_*`` environment as ``torchrun`` (it is torch's
``torch.distributed.run.main``), after registering ``etcd-ft`` and ``etcd-v2-ft``
(``training.rendezvous``) in ``rendezvous_handler_registry``. The PyTorchJob's command runs it
with ``--rdzv-backend=etcd-ft`` (or ``etcd-v2-ft``) next to the operator's
``PET_RDZV_BACKEND=etcd``: torchrun reads every option from ``PET_<OPTION>`` only when the flag
is absent (``torch/distributed/argparse_util.py``, ``env``), so the explicit flag wins.

Registered here rather than through torchrun's ``torchrun.handlers`` entry points
(``rendezvous/registry.py``, ``_register_out_of_tree_handlers``) because the image carries the
``training/`` folder, not an installed distribution with entry-point metadata.
"""

from __future__ import annotations

import sys
from collections.abc import Sequence


def main(argv: Sequence[str] | None = None) -> None:
    """Register the handlers, then run torchrun on ``argv`` (default: the command line)."""
    from torch.distributed.run import main as torchrun_main

    from training.rendezvous import register

    register()
    torchrun_main(list(argv) if argv is not None else sys.argv[1:])


if __name__ == "__main__":
    main()
