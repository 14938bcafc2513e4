"""The one error format of every command: ``eks-fsdp <command>: error: <message>`` on one line,
exit status 2 for bad input, with "did you mean" for flags, verbs and stack names.

Standard library only, so any command imports it without cost. The line itself is
``training.errors.line`` (``training/`` imports no other first-party package: the training image
carries ``training/`` alone, and ``training.finetune`` prints the same line in the pods). Python 3.11's argparse has no ``suggest_on_error`` (added in 3.14,
https://docs.python.org/3.14/library/argparse.html#suggest-on-error): ``hint`` does it here,
for unrecognized flags too, which 3.14 does not cover.
"""

from __future__ import annotations

import argparse
import codecs
import functools
import re
import sys
from pathlib import Path
from typing import Any, NoReturn

from training.errors import PROG, USAGE_EXIT, line, suggest, suggest_flag

__all__ = [
    "PROG",
    "USAGE_EXIT",
    "Parser",
    "fail",
    "hint",
    "line",
    "plain",
    "read_text",
    "stacks",
    "suggest",
]

from eks_fsdp_cli.paths import REPO_ROOT


def fail(command: str | None, message: object, status: int = USAGE_EXIT) -> int:
    """Print the error line on stderr (a stack-name hint added) and return ``status``."""
    print(line(command, stack_hint(str(message))), file=sys.stderr, flush=True)
    return status


def read_text(path: Path) -> str:
    """The text of a file every command reads (a job file, a stack file, a CSV), as UTF-8 (a
    byte-order mark is dropped). ``OSError`` as ``open`` raises it; ``ValueError`` with one line
    for text in another encoding: YAML 1.2 streams may be UTF-16, but PyYAML and Pulumi read
    UTF-8, and a UTF-16 file from a Windows editor otherwise ends in a traceback."""
    data = path.read_bytes()
    if data.startswith((codecs.BOM_UTF16_LE, codecs.BOM_UTF16_BE)) or b"\x00" in data[:64]:
        raise ValueError("is UTF-16 text, not UTF-8: save it as UTF-8 (or convert it with iconv)")
    try:
        return data.decode("utf-8-sig")
    except UnicodeDecodeError as err:
        raise ValueError(
            f"is not UTF-8 text (byte 0x{data[err.start]:02x} at offset {err.start}): save it "
            "as UTF-8"
        ) from None


def option_strings(parser: argparse.ArgumentParser) -> list[str]:
    """Every ``--flag`` of ``parser`` and of its subcommands (argparse keeps them in
    ``_actions``; ``_SubParsersAction.choices`` maps each verb to its parser)."""
    found: list[str] = []
    for action in parser._actions:
        found += [s for s in action.option_strings if s.startswith("--")]
        if isinstance(action, argparse._SubParsersAction):
            for sub in action.choices.values():
                found += option_strings(sub)
    return list(dict.fromkeys(found))


_UNRECOGNIZED = "unrecognized arguments: "
_CHOICE = re.compile(r"invalid choice: '([^']*)' \(choose from (.*)\)$")


def hint(message: str, parser: argparse.ArgumentParser) -> str:
    """argparse's error message with a "did you mean" for the first unrecognized flag (against
    every flag of the parser and its verbs) or an invalid choice."""
    if message.startswith(_UNRECOGNIZED):
        for token in message[len(_UNRECOGNIZED) :].split():
            if token.startswith("--"):
                return message + suggest_flag(token.partition("=")[0], option_strings(parser))
        return message
    if m := _CHOICE.search(message):
        choices = re.findall(r"'([^']*)'", m.group(2))
        return message + suggest(m.group(1), choices)
    return message


def stacks(root: Path = REPO_ROOT) -> list[str]:
    """The stacks of a checkout: each ``Pulumi.<stack>.yaml``, sorted."""
    return sorted(p.name[len("Pulumi.") : -len(".yaml")] for p in root.glob("Pulumi.*.yaml"))


_NO_STACK = re.compile(r"Pulumi\.(\S+)\.yaml: no such stack file")


def stack_hint(message: str, root: Path = REPO_ROOT) -> str:
    """A missing stack file's message (``infra.config.sources``: ``Pulumi.X.yaml: no such stack
    file``) with the closest stack and the list of stacks; other messages unchanged."""
    m = _NO_STACK.search(message)
    names = stacks(root)
    if m is None or not names or "(stacks:" in message:
        return message
    guess = suggest(m.group(1), names).strip(" ()?")
    said = f"{guess}? " if guess else ""
    return f"{message} ({said}stacks: {', '.join(names)})"


_LITERAL = re.compile(r"``([^`]+)``")
_ROLE = re.compile(r":(?:func|class|mod|meth|attr|data|ref):`~?([^`]+)`")


def plain(text: str | None) -> str | None:
    """``text`` (often a module docstring) as a terminal shows it: reStructuredText's inline
    literals (````x````) and roles (``:func:`x```) become ``x``."""
    if text is None:
        return None
    return _ROLE.sub(r"\1", _LITERAL.sub(r"\1", text))


class Parser(argparse.ArgumentParser):
    """An ArgumentParser whose usage errors are the one error line (no usage block), with a
    "did you mean"; its subcommands' parsers are the same class, for the same ``command``.
    Its description and epilog are shown without reStructuredText markup (``plain``)."""

    def __init__(self, *args: Any, command: str | None = None, **kwargs: Any) -> None:
        for key in ("description", "epilog"):
            kwargs[key] = plain(kwargs.get(key))
        super().__init__(*args, **kwargs)
        self.command = command
        self._argv: list[str] = []

    def add_subparsers(self, **kwargs: Any) -> Any:
        kwargs.setdefault("parser_class", functools.partial(type(self), command=self.command))
        return super().add_subparsers(**kwargs)

    def parse_known_args(self, args: Any = None, namespace: Any = None) -> Any:
        self._argv = list(sys.argv[1:] if args is None else args)
        return super().parse_known_args(args, namespace)

    def explain(self, message: str) -> str:
        """argparse's message, made to name the culprit: a misspelt flag first (argparse
        reports ``--stak p5-16`` as a missing ``--stack``), with a "did you mean"."""
        if message.startswith("the following arguments are required"):
            unknown = [t for t in self._argv if _unknown_flag(t, self)]
            if unknown:
                message = _UNRECOGNIZED + " ".join(unknown)
        return stack_hint(hint(message, self))

    def error(self, message: str) -> NoReturn:
        print(line(self.command, self.explain(message)), file=sys.stderr, flush=True)
        sys.exit(USAGE_EXIT)


def _unknown_flag(token: str, parser: argparse.ArgumentParser) -> bool:
    """Whether ``token`` is a ``--flag`` neither ``parser`` nor its verbs know (nor abbreviate)."""
    if not token.startswith("--") or token == "--":
        return False
    name = token.partition("=")[0]
    return not any(known.startswith(name) for known in option_strings(parser))
