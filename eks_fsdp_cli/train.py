"""``eks-fsdp train FLAGS``: ``python -m training.finetune FLAGS`` (one process; torchrun starts
the module itself), its flags checked first with the one error line.

``training.finetune`` prints the same ``eks-fsdp train: error: ...`` line itself
(``training.errors``: the training image carries ``training/`` alone); the flags are parsed here
first by the same parser, ``training.config.parse_args`` (pure Python, no torch), so a bad flag
is answered before torch is imported.
"""

from __future__ import annotations

from collections.abc import Sequence

from eks_fsdp_cli.errors import fail

COMMAND = "train"


def main(argv: Sequence[str]) -> int:
    from training.config import ConfigError, parse_args

    try:
        parse_args(list(argv))
    except ConfigError as err:
        return fail(COMMAND, err)
    from training.finetune import main as finetune

    return finetune(list(argv), freeze_libraries=True)
