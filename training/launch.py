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

A bad ``store_outage_timeout`` in ``--rdzv-conf`` / ``PET_RDZV_CONF`` stops here with one line
and status 2, before any rendezvous (torchrun would print the handler's traceback).
"""

from __future__ import annotations

import sys
from collections.abc import Sequence

BAD_INPUT = 2
"""Exit status for a bad rendezvous option."""


def check_rdzv_conf(argv: Sequence[str]) -> str | None:
    """The problem with the store-tolerant handlers' options on this torchrun command line (one
    line), or None. Parsed as torchrun parses them (``torch.distributed.run.parse_args``, then
    ``elastic/rendezvous/utils.py``, ``_parse_rendezvous_config``)."""
    from torch.distributed.elastic.rendezvous import RendezvousParameters
    from torch.distributed.elastic.rendezvous.utils import _parse_rendezvous_config
    from torch.distributed.run import parse_args

    from training.rendezvous import HANDLERS, outage_budget

    args = parse_args(list(argv))
    if args.rdzv_backend not in HANDLERS:
        return None
    try:
        conf = _parse_rendezvous_config(args.rdzv_conf)
        outage_budget(
            RendezvousParameters(args.rdzv_backend, args.rdzv_endpoint, args.rdzv_id, 1, 1, **conf)
        )
    except ValueError as err:
        return f"--rdzv-conf (PET_RDZV_CONF): {err}"
    return None


def main(argv: Sequence[str] | None = None, *, freeze_libraries: bool = False) -> None:
    """Check the options, register the handlers, then run torchrun on ``argv`` (default: the
    command line). ``freeze_libraries`` (the program's entry point): torch's objects go to
    Python's permanent generation first (``training.gc_policy.freeze_libraries``), 0.4 s less
    at the agent's exit."""
    from torch.distributed.run import main as torchrun_main

    from training.gc_policy import freeze_libraries as freeze
    from training.rendezvous import register

    if freeze_libraries:
        freeze(())  # what the two imports above brought in

    args = list(argv) if argv is not None else sys.argv[1:]
    problem = check_rdzv_conf(args)
    if problem is not None:
        print(f"training.launch: {problem}", file=sys.stderr)
        sys.exit(BAD_INPUT)
    register()
    torchrun_main(args)


if __name__ == "__main__":
    main(freeze_libraries=True)
