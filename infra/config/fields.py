"""What every section of the stack config shares: the error, the key prefix, the field readers.

Each reader takes the raw value and the key's path (``gpuNodeGroups[0].maxSize``) and returns a
typed value or raises ``ConfigError`` with one line naming ``eks-fsdp:<path>``. The underscore
names are internal to the ``infra.config`` package.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

NAMESPACE = "eks-fsdp"
"""The project's config namespace (the project name in ``Pulumi.yaml``)."""

_DNS_LABEL = re.compile(r"^[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?$")


class ConfigError(ValueError):
    """A stack config value is invalid; the message is one line naming the key. ``path`` and
    ``problem`` keep its parts (the key's path, what is wrong) for callers that place the
    error elsewhere (a job file's line), so nobody re-parses the text."""

    def __init__(self, message: str, *, path: str = "", problem: str = "") -> None:
        super().__init__(message)
        self.path = path
        self.problem = problem or message


def _k(path: str) -> str:
    return f"{NAMESPACE}:{path}"


def _fail(path: str, message: str) -> ConfigError:
    return ConfigError(f"{_k(path)}: {message}", path=path, problem=message)


def _check_keys(obj: Mapping[str, Any], known: tuple[str, ...], path: str) -> None:
    for key in obj:
        if key not in known:
            raise _fail(f"{path}.{key}", f"unknown key (known: {', '.join(known)})")


def _mapping(value: Any, path: str) -> Mapping[str, Any]:
    if not isinstance(value, Mapping):
        raise _fail(path, f"expected an object, got {value!r}")
    return value


def _str(value: Any, path: str) -> str:
    if not isinstance(value, str) or not value:
        raise _fail(path, f"expected a non-empty string, got {value!r}")
    return value


def _opt_str(value: Any, path: str) -> str | None:
    return None if value is None else _str(value, path)


def _int(value: Any, path: str, *, minimum: int | None = None) -> int:
    if isinstance(value, bool):
        raise _fail(path, f"expected an integer, got {value!r}")
    if isinstance(value, str) and re.fullmatch(r"-?\d+", value.strip()):
        value = int(value)
    if isinstance(value, float) and value.is_integer():
        value = int(value)  # Pulumi hands integers over as floats.
    if not isinstance(value, int):
        raise _fail(path, f"expected an integer, got {value!r}")
    if minimum is not None and value < minimum:
        raise _fail(path, f"{value} is below the minimum {minimum}")
    return value


def _opt_int(value: Any, path: str, *, minimum: int | None = None) -> int | None:
    return None if value is None else _int(value, path, minimum=minimum)


def _bool(value: Any, path: str) -> bool:
    if isinstance(value, str) and value.lower() in ("true", "false"):
        return value.lower() == "true"
    if not isinstance(value, bool):
        raise _fail(path, f"expected true or false, got {value!r}")
    return value


def _choice(value: Any, choices: tuple[str, ...], path: str) -> str:
    if value not in choices:
        raise _fail(path, f"{value!r} is not one of {', '.join(choices)}")
    return str(value)


def _str_list(value: Any, path: str) -> tuple[str, ...]:
    if not isinstance(value, list | tuple):
        raise _fail(path, f"expected a list, got {value!r}")
    return tuple(_str(v, f"{path}[{i}]") for i, v in enumerate(value))


# The readers other rooms use for their own files (the job schema, ``jobs.schema``), by public
# names: the underscore names stay internal to this package.
DNS_LABEL = _DNS_LABEL
read_bool, read_choice, read_int = _bool, _choice, _int
read_opt_int, read_opt_str, read_str = _opt_int, _opt_str, _str
