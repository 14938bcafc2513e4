"""The one error line of every ``eks-fsdp`` command: ``eks-fsdp <command>: error: <message>``,
folded onto one line, exit status 2 for bad input.

Here, in ``training/``, because the training image carries ``training/`` alone
(``training/Dockerfile.dockerignore``): ``training.finetune`` (``eks-fsdp train``) prints it in
the pods, and ``eks_fsdp_cli.errors`` (every other command, its "did you mean" hints) takes the
format from this module, so both read the same. ``ConfigError`` is training's bad-input error
(``training.config`` raises it; it keeps the flag it names apart from its message). Standard
library only.
"""

from __future__ import annotations

PROG = "eks-fsdp"
USAGE_EXIT = 2
"""argparse's own exit status for a usage error (``ArgumentParser.error``)."""


def line(command: str | None, message: object) -> str:
    """``eks-fsdp <command>: error: <message>``, the message folded onto one line."""
    text = " ".join(str(message).split())
    return f"{PROG} {command}: error: {text}" if command else f"{PROG}: error: {text}"


class ConfigError(ValueError):
    """Bad input. str(err) is ONE line naming the culprit, e.g. "--batch_size_training: must be >= 1, got 0".

    ``flag`` is the flag it is about (None when it is about no single flag) and ``problem`` the
    message without the ``--flag: `` prefix, for callers that place the error elsewhere (a job
    file's key) without re-parsing its text."""

    def __init__(self, message: str, *, flag: str | None = None) -> None:
        super().__init__(message)
        self.flag = flag
        prefix = f"--{flag}: "
        self.problem = message[len(prefix) :] if flag and message.startswith(prefix) else message
