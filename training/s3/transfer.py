"""Files to and from S3: exports and run outputs up, model weights down.

- Weights (`--model_name s3://bucket/prefix`): every process asks `local_model`, which
  downloads the prefix once into `$HF_HOME/s3/<bucket>/<prefix>` and returns that folder for
  `from_pretrained`. The first process of a node to take the folder's lock downloads into a
  temporary folder of its own and renames it into place; the others wait on the lock and find it
  there. With `HF_HOME` on shared storage (FSx), the first node's download serves every node,
  and later runs download nothing. A folder is taken only with its `.complete` marker, so a
  download cut off halfway is never used.
- Outputs (`--output_dir s3://...`): `OutputDir` keeps the run's metrics in a local staging
  folder (`$TMPDIR/eks-fsdp/s3/<bucket>/<prefix>`) and uploads them at the end; a resumed run
  starts from the uploaded ones when its staging folder is gone (a new pod or cluster).
  Exports are uploaded file by file as they are written (`training.export`).

Transfers use boto3's managed transfer (`upload_file` / `download_file`: multipart and
concurrent ranged GETs above 8 MB; boto3 guide "File transfer configuration").
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import shutil
import socket
import tempfile
from collections.abc import Iterable
from pathlib import Path

from training.s3.client import client
from training.s3.uri import S3Uri, is_s3

DONE = ".complete"
"""Marker of a finished download in the weights cache."""
OUTPUTS = ("metrics.jsonl", "goodput.json", "summary.json", "metrics.png", "preflight.json")
"""Run outputs that `OutputDir.push` uploads (those that exist)."""


def hf_home(env: dict[str, str] | None = None) -> Path:
    """Hugging Face's cache root: $HF_HOME, else $XDG_CACHE_HOME/huggingface, else
    ~/.cache/huggingface (huggingface_hub's `constants.HF_HOME`)."""
    env = dict(os.environ) if env is None else env
    if env.get("HF_HOME"):
        return Path(env["HF_HOME"]).expanduser()
    xdg = env.get("XDG_CACHE_HOME") or str(Path("~/.cache").expanduser())
    return Path(xdg) / "huggingface"


def cache_dir(uri: S3Uri) -> Path:
    return hf_home() / "s3" / uri.bucket / (uri.key or "_")


def upload_file(path: Path, uri: S3Uri) -> None:
    client().upload_file(str(path), uri.bucket, uri.key)


def upload_folder(folder: Path, uri: S3Uri, last: Iterable[str] = ()) -> list[str]:
    """Upload every file under `folder` to `uri/`, the names in `last` after the rest; the
    relative names uploaded."""
    tail = list(last)
    names = sorted(str(p.relative_to(folder)) for p in folder.rglob("*") if p.is_file())
    ordered = [n for n in names if n not in tail] + [n for n in tail if n in names]
    for name in ordered:
        upload_file(folder / name, uri / name)
    return ordered


def list_keys(uri: S3Uri) -> list[tuple[str, int]]:
    """(name relative to `uri`, size) of every object under `uri/`."""
    out = []
    pages = client().get_paginator("list_objects_v2")
    for page in pages.paginate(Bucket=uri.bucket, Prefix=uri.prefix):
        for obj in page.get("Contents", []):
            rel = obj["Key"][len(uri.prefix) :]
            if rel and not rel.endswith("/"):
                out.append((rel, int(obj["Size"])))
    return out


def delete_keys(uri: S3Uri, names: Iterable[str]) -> None:
    keys = [{"Key": f"{uri.prefix}{n}"} for n in names]
    for i in range(0, len(keys), 1000):
        client().delete_objects(
            Bucket=uri.bucket, Delete={"Objects": keys[i : i + 1000], "Quiet": True}
        )


def download_prefix(uri: S3Uri, dest: Path) -> Path:
    """Download everything under `uri/` into `dest` once (see the module docstring)."""
    if (dest / DONE).is_file():
        return dest
    dest.parent.mkdir(parents=True, exist_ok=True)
    with open(dest.parent / f".{dest.name}.lock", "a+") as lock:
        with contextlib.suppress(OSError):  # no locks there: racing downloads, one rename wins
            fcntl.flock(lock, fcntl.LOCK_EX)
        if (dest / DONE).is_file():
            return dest
        tmp = Path(tempfile.mkdtemp(prefix=f".{dest.name}.", dir=dest.parent))
        try:
            s3 = client()
            objects = list_keys(uri)
            if not objects:
                raise FileNotFoundError(f"{uri}: no objects under this prefix")
            for name, _size in objects:
                target = tmp / name
                target.parent.mkdir(parents=True, exist_ok=True)
                s3.download_file(uri.bucket, f"{uri.prefix}{name}", str(target))
            (tmp / DONE).write_text(f"{uri} {socket.gethostname()}\n", encoding="utf-8")
            if (dest / DONE).is_file():
                return dest  # another node (no lock across nodes) finished first
            if dest.exists():
                shutil.rmtree(dest)  # an earlier download without its marker
            tmp.rename(dest)
        finally:
            shutil.rmtree(tmp, ignore_errors=True)
    return dest


def local_model(name: str) -> str:
    """--model_name as `from_pretrained` takes it: an s3:// prefix downloaded to the local
    cache (its folder), anything else unchanged."""
    if not is_s3(name):
        return name
    uri = S3Uri.parse(name)
    return str(download_prefix(uri, cache_dir(uri)))


class OutputDir:
    """--output_dir: a local folder, or an s3:// prefix staged in a local folder."""

    def __init__(self, output_dir: str) -> None:
        self.uri = S3Uri.parse(output_dir) if is_s3(output_dir) else None
        if self.uri is None:
            self.local = Path(output_dir)
        else:
            root = Path(tempfile.gettempdir()) / "eks-fsdp" / "s3" / self.uri.bucket
            self.local = root / (self.uri.key or "_")

    def prepare(self, resume: bool) -> Path:
        """Make the local folder; when resuming, fetch the earlier start's outputs (rank 0)."""
        self.local.mkdir(parents=True, exist_ok=True)
        if resume:
            self.pull()
        return self.local

    def pull(self, names: Iterable[str] = OUTPUTS) -> list[str]:
        """Download the outputs of an earlier start that the staging folder lacks (rank 0)."""
        if self.uri is None:
            return []
        have = dict(list_keys(self.uri))
        got = []
        for name in names:
            if name in have and not (self.local / name).exists():
                self.local.mkdir(parents=True, exist_ok=True)
                client().download_file(
                    self.uri.bucket, f"{self.uri.prefix}{name}", str(self.local / name)
                )
                got.append(name)
        return got

    def push(self, names: Iterable[str] = OUTPUTS) -> list[str]:
        """Upload the run outputs that exist to the s3:// prefix (rank 0)."""
        if self.uri is None:
            return []
        sent = []
        for name in names:
            if (self.local / name).is_file():
                upload_file(self.local / name, self.uri / name)
                sent.append(name)
        return sent

    def __str__(self) -> str:
        return str(self.uri) if self.uri is not None else str(self.local)
