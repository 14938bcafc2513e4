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

import difflib
from collections.abc import Iterable

PROG = "eks-fsdp"
USAGE_EXIT = 2
"""argparse's own exit status for a usage error (``ArgumentParser.error``)."""


def suggest(word: str, choices: Iterable[str], *, prefix: str = "", most: int = 1) -> str:
    """`` (did you mean X?)`` for the choice ``word`` most likely meant, or ``""``: the same but
    for case, else the choices it starts (when at most ``most`` do), else the closest by difflib
    (ratio >= 0.6); ``prefix`` goes before each (``--``). The one "did you mean" of every
    command, training's flags included."""
    options = list(dict.fromkeys(choices))
    low = word.lower()
    hits = [c for c in options if c.lower() == low and c != word]
    if not hits and low:  # the choices it starts (``p5`` -> ``p5-16``)
        hits = [c for c in options if c.lower().startswith(low)]
        hits = hits if len(hits) <= most else []
    hits = hits or difflib.get_close_matches(word, options, n=1, cutoff=0.6)
    return f" (did you mean {' or '.join(prefix + h for h in hits)}?)" if hits else ""


def suggest_flag(flag: str, options: Iterable[str]) -> str:
    """``suggest`` for a ``--flag``, compared without the ``--`` every option shares (with it,
    ``--bogus`` reads as close to ``--out``)."""
    return suggest(flag.removeprefix("--"), [o.removeprefix("--") for o in options], prefix="--")


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
