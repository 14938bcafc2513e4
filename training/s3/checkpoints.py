"""Checkpoints under an S3 prefix: which are complete, which is newest, which to delete.

S3 has no rename (a copy of every shard), so a save is not written aside and renamed as on a
file system: it is written in place, `<root>/step-000123/`, and is complete only once rank 0 has
put `meta.json` and then the `COMPLETE` marker, after DCP's `.metadata`, which DCP writes only
after every rank's shards are uploaded. A save cut off at any point (a SIGKILL, a lost node,
a failed upload) leaves no marker: `latest_complete` never takes it and `prune` deletes it.
meta.json holds the manifest of the files (`MANIFEST`: name and size), and a marked folder
whose listing lacks one of them, or has it at another size (objects expired one by one by the
lifecycle rule, or copied there out of order), is not complete either (`intact`).

Re-saving a step that has a complete checkpoint (the end of an epoch after a periodic save)
writes a new generation `step-000123.1/` (then `.2`, ...) beside it; the highest complete
(step, generation) is the newest, and the older generation is deleted only after the new one is
complete, so there is no moment without a complete newest checkpoint.
"""

from __future__ import annotations

import json
import re
import time
from typing import Any

from training.s3.client import client
from training.s3.uri import S3Uri

MARKER = "COMPLETE"  # training.checkpoint.MARKER
META = "meta.json"
MANIFEST = "files"
"""meta.json's key for {file name relative to the checkpoint folder: size in bytes} of every
file DCP wrote (shards and `.metadata`), recorded before the marker."""
_NAME = re.compile(r"^step-(\d{6,})(?:\.(\d+))?$")


def intact(listing: dict[str, int], meta: dict[str, Any]) -> bool:
    """Whether a checkpoint folder holding `listing` ({name: size}) has every file of its
    manifest at its recorded size. A checkpoint saved before manifests existed (no `files` key
    in meta.json) counts as intact when DCP's last file, `.metadata`, is there (torch's
    `FileSystemWriter.finish` writes it after every shard). A marker without meta.json is never
    intact: every publisher writes meta.json before the marker, so the pair was torn apart.

    Needed because a marker is not enough where files reach storage in no particular order:
    an FSx for Lustre data repository association exports changed files to S3 asynchronously
    and unordered (FSx for Lustre User Guide, "Exporting changes to the data repository"), so
    a new cluster may import `COMPLETE` before a shard; and a lifecycle rule expires objects one
    by one (S3 User Guide, "Managing the lifecycle of objects")."""
    if not meta:  # the marker arrived without meta.json (unordered export, lifecycle expiry)
        return False
    files = meta.get(MANIFEST)
    if not isinstance(files, dict):
        return ".metadata" in listing
    return all(listing.get(name) == size for name, size in files.items())


def _folders(root: S3Uri) -> dict[str, dict[str, int]]:
    """{checkpoint folder name: {file name in it: size}} of every step-* under `root`."""
    out: dict[str, dict[str, int]] = {}
    pages = client().get_paginator("list_objects_v2")
    for page in pages.paginate(Bucket=root.bucket, Prefix=root.prefix):
        for obj in page.get("Contents", []):
            rest = obj["Key"][len(root.prefix) :]
            folder, _, name = rest.partition("/")
            if _NAME.match(folder) and name:
                out.setdefault(folder, {})[name] = int(obj["Size"])
    return out


def _listing(location: S3Uri) -> dict[str, int]:
    """{name relative to `location`: size} of every object under it."""
    out: dict[str, int] = {}
    pages = client().get_paginator("list_objects_v2")
    for page in pages.paginate(Bucket=location.bucket, Prefix=location.prefix):
        for obj in page.get("Contents", []):
            out[obj["Key"][len(location.prefix) :]] = int(obj["Size"])
    return out


def _intact_names(root: S3Uri, folders: dict[str, dict[str, int]]) -> list[str]:
    """Names of the folders with a marker whose listing matches their manifest, newest
    last (one meta.json GET per marked folder)."""
    marked = sorted((n for n, files in folders.items() if MARKER in files), key=_order)
    return [n for n in marked if intact(folders[n], _meta(root / n, META in folders[n]))]


def _order(name: str) -> tuple[int, int]:
    m = _NAME.match(name)
    assert m is not None
    return int(m.group(1)), int(m.group(2) or 0)


def complete(root: S3Uri) -> list[tuple[int, int, S3Uri]]:
    """(step, generation, location) of every complete checkpoint under `root`: a marker, and
    every file of its manifest at its size (`intact`)."""
    return [(*_order(name), root / name) for name in _intact_names(root, _folders(root))]


def latest_complete(root: S3Uri) -> S3Uri | None:
    """The complete checkpoint with the highest (step, generation), or None: candidates with a
    marker are tried newest first, and the first whose files match its manifest wins."""
    folders = _folders(root)
    for name in sorted((n for n, f in folders.items() if MARKER in f), key=_order, reverse=True):
        if intact(folders[name], _meta(root / name, META in folders[name])):
            return root / name
    return None


def next_target(root: S3Uri, step: int) -> S3Uri:
    """Where a save of `step` goes: `step-N`, or the next generation when one is complete."""
    gens = [gen for s, gen, _ in complete(root) if s == step]
    name = f"step-{step:06d}"
    return root / (name if not gens else f"{name}.{max(gens) + 1}")


def delete(location: S3Uri) -> int:
    """Delete every object under `location/`; the number deleted."""
    s3 = client()
    n = 0
    pages = s3.get_paginator("list_objects_v2")
    for page in pages.paginate(Bucket=location.bucket, Prefix=location.prefix):
        keys = [{"Key": obj["Key"]} for obj in page.get("Contents", [])]
        for i in range(0, len(keys), 1000):  # at most 1,000 keys (S3 API Reference, DeleteObjects)
            s3.delete_objects(
                Bucket=location.bucket, Delete={"Objects": keys[i : i + 1000], "Quiet": True}
            )
        n += len(keys)
    return n


def publish(location: S3Uri, meta: dict[str, Any]) -> None:
    """Mark a fully written checkpoint complete: meta.json with the manifest of the files
    there (`MANIFEST`), then the marker (rank 0)."""
    s3 = client()
    files = {n: size for n, size in _listing(location).items() if n not in (META, MARKER)}
    body = (json.dumps({**meta, MANIFEST: files}, indent=2) + "\n").encode()
    s3.put_object(Bucket=location.bucket, Key=f"{location.prefix}{META}", Body=body)
    stamp = f"{time.strftime('%Y-%m-%dT%H:%M:%SZ', time.gmtime())}\n".encode()
    s3.put_object(Bucket=location.bucket, Key=f"{location.prefix}{MARKER}", Body=stamp)


def read_meta(location: S3Uri) -> dict[str, Any]:
    """A checkpoint's meta.json ({} when it has none). Whether it exists is asked by a listing
    (a GET of a missing key answers 403 to the jobs' role: see `training.s3.dcp.S3FileSystem.
    exists`)."""
    key = f"{location.prefix}{META}"
    found = client().list_objects_v2(Bucket=location.bucket, Prefix=key, MaxKeys=1)
    there = any(obj["Key"] == key for obj in found.get("Contents", []))
    return _meta(location, there)


def _meta(location: S3Uri, there: bool) -> dict[str, Any]:
    if not there:
        return {}
    body = client().get_object(Bucket=location.bucket, Key=f"{location.prefix}{META}")
    return json.loads(body["Body"].read().decode("utf-8"))


def prune(root: S3Uri, keep: int, in_flight: S3Uri | None = None) -> list[S3Uri]:
    """Delete complete checkpoints beyond the newest `keep` steps, older generations of a kept
    step, and every folder that is not complete (no marker, or not `intact`), except
    `in_flight`; the locations deleted.

    Call on one rank only, when no other write is in flight (or name it in `in_flight`)."""
    folders = _folders(root)
    done = [(_order(n), n) for n in _intact_names(root, folders)]
    newest: dict[int, str] = {}
    for (step, _gen), name in done:
        newest[step] = name  # ascending: the last one per step wins
    kept_steps = sorted(newest)[-keep:] if keep else []
    kept = {newest[s] for s in kept_steps}
    if in_flight is not None:
        kept.add(in_flight.name)
    removed = [root / name for name in sorted(folders) if name not in kept]
    for location in removed:
        delete(location)
    return removed
