"""The one error line of every ``eks-fsdp`` command: ``eks-fsdp <command>: error: <message>``,
folded onto one line, exit status 2 for bad input.

Here, in ``training/``, because the training image carries ``training/`` alone
(``training/Dockerfile.dockerignore``): ``training.finetune`` (``eks-fsdp train``) prints it in
the pods, and ``eks_fsdp_cli.errors`` (every other command, its "did you mean" hints) takes the
format from this module, so both read the same. Standard library only.
"""

from __future__ import annotations

PROG = "eks-fsdp"
USAGE_EXIT = 2
"""argparse's own exit status for a usage error (``ArgumentParser.error``)."""


def line(command: str | None, message: object) -> str:
    """``eks-fsdp <command>: error: <message>``, the message folded onto one line."""
    text = " ".join(str(message).split())
    return f"{PROG} {command}: error: {text}" if command else f"{PROG}: error: {text}"
