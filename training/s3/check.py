"""The start-up check of every `s3://` flag, on every process before the process group exists.

For each flag it lists one key under the prefix and, for the two places the run writes to
(checkpoints, outputs), puts and deletes a zero-byte probe; `--model_name s3://...` must hold
objects, unless this node's cache already has the download (then S3 is not needed at all). A
missing region, no credentials, a bucket that does not exist, an endpoint out of reach, or
credentials that may not read or write there stop the run with one line naming the flag
(`S3AccessError`), before any step.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import TYPE_CHECKING

from training.s3.client import S3AccessError, client, describe, endpoint_url
from training.s3.transfer import DONE, cache_dir
from training.s3.uri import S3Uri, is_s3

if TYPE_CHECKING:
    from training.config import TrainConfig

WRITE_PROBE = ".write-check"
"""Zero-byte object put and deleted under a write location."""


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
        if flag == "model_name" and (cache_dir(uri) / DONE).is_file():
            continue  # downloaded on this node already
        try:
            s3 = client()
        except S3AccessError as e:
            raise S3AccessError(f"--{flag} {uri}: {e}") from None
        try:
            found = s3.list_objects_v2(Bucket=uri.bucket, Prefix=uri.prefix, MaxKeys=1)
            if not writes and not found.get("KeyCount"):
                raise S3AccessError(f"--{flag} {uri}: no objects under this prefix")
            if writes:
                probe = f"{uri.prefix}{WRITE_PROBE}"
                s3.put_object(Bucket=uri.bucket, Key=probe, Body=b"")
                s3.delete_object(Bucket=uri.bucket, Key=probe)
        except (BotoCoreError, ClientError) as e:
            where = endpoint_url()
            via = f" via {where}" if where else ""
            raise S3AccessError(f"--{flag} {uri}: {describe(e)}{via}") from None
