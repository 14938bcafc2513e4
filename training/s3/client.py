"""The S3 client of the training package, from the standard AWS variables, and its start check.

One boto3 client per process (boto3 clients are thread-safe: boto3 guide "Multithreading or
multiprocessing with clients"), so a background checkpoint write shares it with the loop.

- Endpoint: `AWS_ENDPOINT_URL_S3`, else `AWS_ENDPOINT_URL` (the SDKs' service-specific endpoint
  variables; boto3 guide "Service-specific endpoints", botocore `configprovider.py`), unless
  `AWS_IGNORE_CONFIGURED_ENDPOINT_URLS` is true. With an endpoint of its own (MinIO, moto, a VPC
  interface endpoint URL) requests use path-style addressing: a loopback address cannot take the
  bucket as a host name.
- Region: `AWS_REGION`, else `AWS_DEFAULT_REGION`, else the profile's `region` (botocore reads
  only the last two; the AWS SDKs and Tools reference guide, "AWS Region", gives AWS_REGION
  precedence). None of them is a one-line error naming the flag.
- Credentials: botocore's default chain: environment, profile, web identity, the container
  provider (which EKS Pod Identity feeds from boto3/botocore 1.34.41 on: EKS User Guide, "Use
  pod identity with the AWS SDK"; the pin is 1.44.8), instance profile.

The start-up check of every `s3://` flag is `training.s3.check`.
"""

from __future__ import annotations

import functools
import os
from collections.abc import Mapping
from typing import Any

MAX_ATTEMPTS = 10
"""Attempts per request (throttling, 5xx, connection resets) unless AWS_MAX_ATTEMPTS is set;
the retry mode is `standard` unless AWS_RETRY_MODE is set (boto3 guide "Retries")."""

_TRUE = ("true", "1", "yes", "on")


class S3AccessError(ValueError):
    """An S3 location this process cannot use; str(err) is one line naming the flag."""


def endpoint_url(env: Mapping[str, str] | None = None) -> str | None:
    """The S3 endpoint override from the environment, or None for AWS's own endpoints."""
    env = os.environ if env is None else env
    if env.get("AWS_IGNORE_CONFIGURED_ENDPOINT_URLS", "").strip().lower() in _TRUE:
        return None
    return env.get("AWS_ENDPOINT_URL_S3") or env.get("AWS_ENDPOINT_URL") or None


def region(env: Mapping[str, str] | None = None) -> str | None:
    """AWS_REGION, AWS_DEFAULT_REGION, then the profile's region; None when none is set."""
    env = os.environ if env is None else env
    found = env.get("AWS_REGION") or env.get("AWS_DEFAULT_REGION")
    if found:
        return found
    import boto3

    return boto3.session.Session().region_name or None


def client() -> Any:
    """This process's boto3 S3 client (built once per endpoint and region)."""
    where = region()
    if where is None:
        raise S3AccessError(
            "no AWS region: set AWS_REGION (or AWS_DEFAULT_REGION, or region in the profile)"
        )
    env = os.environ
    retries = (env.get("AWS_RETRY_MODE"), env.get("AWS_MAX_ATTEMPTS"))
    return _client(where, endpoint_url(), retries, os.getpid())


@functools.cache
def _client(where: str, endpoint: str | None, env_retries: tuple[Any, Any], _pid: int) -> Any:
    import boto3
    from botocore.config import Config

    retries: dict[str, Any] = {}  # only what the environment does not set (botocore reads it)
    if not env_retries[0]:
        retries["mode"] = "standard"
    if not env_retries[1]:
        retries["total_max_attempts"] = MAX_ATTEMPTS
    config = Config(
        region_name=where,
        retries=retries,
        max_pool_connections=32,
        s3={"addressing_style": "path"} if endpoint else None,
    )
    return boto3.session.Session().client("s3", endpoint_url=endpoint, config=config)


def describe(err: BaseException) -> str:
    """One line for a botocore error: the S3 error code and message, or the failure's text."""
    from botocore.exceptions import ClientError, NoCredentialsError, NoRegionError

    if isinstance(err, ClientError):
        info = err.response.get("Error", {})
        code = str(info.get("Code", "")) or "error"
        status = err.response.get("ResponseMetadata", {}).get("HTTPStatusCode")
        text = {
            "NoSuchBucket": "the bucket does not exist",
            "404": "the bucket does not exist",
            "AccessDenied": "access denied for these credentials",
            "403": "access denied for these credentials",
            "InvalidAccessKeyId": "the access key is not known to S3",
            "SignatureDoesNotMatch": "the secret key does not match the access key",
        }.get(code, str(info.get("Message") or code))
        return f"{text} ({code}{f', HTTP {status}' if status else ''})"
    if isinstance(err, NoCredentialsError):
        return (
            "no AWS credentials found (environment, profile, web identity, "
            "EKS Pod Identity or instance profile)"
        )
    if isinstance(err, NoRegionError):
        return "no AWS region: set AWS_REGION"
    first = str(err).strip().splitlines()[0] if str(err).strip() else type(err).__name__
    return first
