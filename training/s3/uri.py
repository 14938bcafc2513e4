"""`s3://bucket/prefix` locations: parsed and checked with the standard library only.

Bucket names follow Amazon S3's general purpose bucket naming rules (Amazon S3 User Guide,
"General purpose bucket naming rules"): 3 to 63 characters of lowercase letters, digits, dots and
hyphens, beginning and ending with a letter or digit, no two adjacent dots, not formatted as an
IP address. `training.config` refuses a flag that breaks them before anything starts.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

SCHEME = "s3://"
_BUCKET = re.compile(r"^[a-z0-9][a-z0-9.-]{1,61}[a-z0-9]$")
_IP = re.compile(r"^\d{1,3}(\.\d{1,3}){3}$")


class S3UriError(ValueError):
    """A malformed `s3://` location; str(err) is one line."""


def is_s3(text: object) -> bool:
    """Whether `text` names an S3 location (`s3://...`, any case of the scheme)."""
    return isinstance(text, str) and text[: len(SCHEME)].lower() == SCHEME


@dataclass(frozen=True)
class S3Uri:
    """A bucket and a key prefix (no leading or trailing slash; empty for the bucket's root)."""

    bucket: str
    key: str = ""

    @classmethod
    def parse(cls, text: str) -> S3Uri:
        """`s3://bucket[/prefix[/]]` -> S3Uri; S3UriError names what is wrong."""
        if not is_s3(text):
            raise S3UriError(f"{text!r} is not an s3:// location")
        rest = text[len(SCHEME) :]
        bucket, _, key = rest.partition("/")
        if not bucket:
            raise S3UriError(f"{text!r} names no bucket (s3://BUCKET/prefix)")
        problem = bucket_problem(bucket)
        if problem:
            raise S3UriError(f"{text!r}: bucket name {bucket!r} {problem}")
        parts = key.strip("/").split("/") if key.strip("/") else []
        if any(p in ("", ".", "..") for p in parts):
            raise S3UriError(f"{text!r}: empty, '.' or '..' path segments are not allowed")
        return cls(bucket, "/".join(parts))

    def __truediv__(self, name: str) -> S3Uri:
        name = name.strip("/")
        return S3Uri(self.bucket, f"{self.key}/{name}" if self.key else name)

    def __str__(self) -> str:
        return f"{SCHEME}{self.bucket}/{self.key}" if self.key else f"{SCHEME}{self.bucket}"

    @property
    def name(self) -> str:
        """The last path segment (as `Path.name`)."""
        return self.key.rsplit("/", 1)[-1]

    @property
    def prefix(self) -> str:
        """The key prefix of everything under this location ('' or 'a/b/')."""
        return f"{self.key}/" if self.key else ""


def bucket_problem(bucket: str) -> str:
    """Why `bucket` is not a valid general purpose bucket name ('' when it is)."""
    if not 3 <= len(bucket) <= 63:
        return f"must be 3 to 63 characters long, it has {len(bucket)}"
    if not _BUCKET.match(bucket):
        return (
            "may hold only lowercase letters, digits, dots and hyphens, "
            "and must begin and end with a letter or digit"
        )
    if ".." in bucket:
        return "must not hold two adjacent dots"
    if _IP.match(bucket):
        return "must not be formatted as an IP address"
    return ""


def check_flag(flag: str, text: str) -> str:
    """The one-line problem of an `s3://` value of `--flag` ('' when fine or not s3)."""
    if not is_s3(text):
        return ""
    try:
        S3Uri.parse(text)
    except S3UriError as e:
        return f"--{flag}: {e}"
    return ""
