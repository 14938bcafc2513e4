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
- Credentials: botocore's default chain (environment, web identity, the container provider that
  EKS Pod Identity feeds through `AWS_CONTAINER_CREDENTIALS_FULL_URI`, instance profile).

`check_locations(cfg)` runs on every process before the process group exists: for each `s3://`
flag it lists one key under the prefix and, for the two places the run writes to, puts and
deletes a zero-byte probe, so a missing region, no credentials, a bucket that does not exist or
that these credentials may not read or write stops the run with one line before any step.
"""

from __future__ import annotations

import functools
import os
from collections.abc import Iterator, Mapping
from typing import TYPE_CHECKING, Any

from training.s3.uri import S3Uri, is_s3

if TYPE_CHECKING:
    from training.config import TrainConfig

WRITE_PROBE = ".write-check"
"""Zero-byte object put and deleted under a write location by `check_locations`."""
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


def _locations(cfg: TrainConfig) -> Iterator[tuple[str, S3Uri, bool]]:
    """(flag, location, written by the run) of every s3:// flag of `cfg`."""
    if is_s3(cfg.dist_checkpoint_root_folder):
        root = S3Uri.parse(cfg.dist_checkpoint_root_folder)
        yield "dist_checkpoint_root_folder", root / cfg.dist_checkpoint_folder, True
    if is_s3(cfg.output_dir):
        yield "output_dir", S3Uri.parse(cfg.output_dir), True
    if is_s3(cfg.model_name):
        yield "model_name", S3Uri.parse(cfg.model_name), False


def check_locations(cfg: TrainConfig) -> None:
    """Stop with one line (S3AccessError) when an s3:// flag of `cfg` cannot be used."""
    from botocore.exceptions import BotoCoreError, ClientError

    for flag, uri, writes in _locations(cfg):
        try:
            s3 = client()
        except S3AccessError as e:
            raise S3AccessError(f"--{flag} {uri}: {e}") from None
        try:
            s3.list_objects_v2(Bucket=uri.bucket, Prefix=uri.prefix, MaxKeys=1)
            if writes:
                probe = f"{uri.prefix}{WRITE_PROBE}"
                s3.put_object(Bucket=uri.bucket, Key=probe, Body=b"")
                s3.delete_object(Bucket=uri.bucket, Key=probe)
        except (BotoCoreError, ClientError) as e:
            where = endpoint_url()
            via = f" via {where}" if where else ""
            raise S3AccessError(f"--{flag} {uri}: {describe(e)}{via}") from None
