"""torch.distributed.checkpoint on S3: a `FileSystemBase` over the boto3 client.

DCP's `FileSystemWriter` / `FileSystemReader` (torch/distributed/checkpoint/filesystem.py at
v2.13.0) do all their I/O through `self.fs`, a `FileSystemBase` (`create_stream`, `concat_path`,
`rename`, `exists`, `rm_file`, ...); s3torchconnector's `S3StorageWriter` is built the same way
(s3torchconnector/dcp/s3_file_system.py at v1.5.0). Each rank streams its shard file as a
multipart upload of `PART_BYTES` parts (larger after every `GROW_EVERY` parts, within S3's
10,000): a write is cut into parts as it comes (a tensor's storage arrives as one write of its
whole size), at most `PARTS_IN_FLIGHT` parts are uploading at once, and the part being filled
is below its size, so a stream holds at most `(PARTS_IN_FLIGHT + 1) * PART_BYTES` bytes for
its first `GROW_EVERY` parts whatever its size (tests/training/test_s3_dcp_stream.py counts
them). A failed part stops the next write. A failed write aborts the upload only after the
parts in flight have returned: S3 may still store a part that was uploading when the abort
came (S3 API Reference, AbortMultipartUpload), and the bucket's lifecycle removes what an
upload killed with its process leaves (`infra.data_bucket.ABORT_MULTIPART_DAYS`). Reads ask
for each file's items in offset order, and each item is cut from a window of at least
`WINDOW_BYTES`, but never past the last item the load needs from that file, fetched by one
ranged GET: DCP writes a rank's items back to back, so a window serves many small tensors, and
`torch.load`'s seeks within an item (to its zip directory and back) cost no request. botocore
retries a request until its response starts, not the reading of a streamed body
(`botocore/response.py` `StreamingBody.read` at 1.44.8 raises `ReadTimeoutError` /
`ResponseStreamingError`, and `IncompleteReadError` on a short body): a ranged GET whose body
breaks off is asked again, `BODY_READ_ATTEMPTS` times at most.

What makes a save complete is not here: DCP writes `.metadata` last (after gathering every
rank's write results), and `training.checkpoint` then writes the `COMPLETE` marker
(`training.s3.checkpoints`). A save cut off at any point leaves no marker.
"""

from __future__ import annotations

import io
import os
from collections.abc import Generator
from concurrent.futures import FIRST_COMPLETED, Future, ThreadPoolExecutor, wait
from contextlib import contextmanager
from typing import IO, Any

from torch.distributed.checkpoint.filesystem import (
    FileSystemBase,
    FileSystemReader,
    FileSystemWriter,
)
from torch.distributed.checkpoint.planner import LoadPlan

from training.s3.client import client
from training.s3.uri import S3Uri, is_s3

PART_BYTES = 32 * 2**20
"""Size of the first `GROW_EVERY` parts of a multipart upload."""
MAX_PARTS = 10_000
"""Parts of one upload at most, each 5 MiB to 5 GiB but the last, and parts may differ in size
(Amazon S3 User Guide, "Amazon S3 multipart upload limits")."""
GROW_EVERY = 1_000
"""The part size doubles after this many parts (`part_bytes`): 32 GiB in 32 MiB parts, then 64
GiB more in 64 MiB parts, ...; 10,000 parts then hold far more than a rank's shard."""
MAX_PART_BYTES = 5 * 2**30
"""S3's largest part."""
PARTS_IN_FLIGHT = 4
"""Parts uploaded concurrently per stream (memory: this many parts plus the one filling)."""
BODY_READ_ATTEMPTS = 5
"""Ranged GETs of the same bytes when reading the response body fails part-way."""
READ_BUFFER_BYTES = 8 * 2**20
"""Buffer of a sequential read stream (DCP's `.metadata`)."""
WINDOW_BYTES = 32 * 2**20
"""Smallest ranged GET of the item reads (a larger item is fetched whole)."""


def part_bytes(number: int) -> int:
    """Size of part `number` (1-based) of a multipart upload."""
    return min(MAX_PART_BYTES, PART_BYTES * 2 ** ((number - 1) // GROW_EVERY))


class _MultipartWriter(io.RawIOBase):
    """A write-only stream that uploads to one key: a single PUT when it stays under one
    part, else a multipart upload; aborted when closed after an error (`abort`)."""

    def __init__(self, s3: Any, bucket: str, key: str) -> None:
        self.s3, self.bucket, self.key = s3, bucket, key
        self._buf = bytearray()
        self._pos = 0
        self._upload_id: str | None = None
        self._parts: list[Future[dict[str, Any]]] = []
        self._pool: ThreadPoolExecutor | None = None
        self._failed = False

    def writable(self) -> bool:
        return True

    def tell(self) -> int:
        return self._pos

    def write(self, b: Any) -> int:
        view = memoryview(b).cast("B")
        done = 0
        while done < len(view):  # never more than a part in the buffer, however large `b` is
            size = part_bytes(len(self._parts) + 1)
            take = min(size - len(self._buf), len(view) - done)
            self._buf += view[done : done + take]
            done += take
            if len(self._buf) == size:
                part, self._buf = bytes(self._buf), bytearray()
                self._send(part)
        self._pos += len(view)
        return len(view)

    def _send(self, part: bytes) -> None:
        if self._upload_id is None:
            created = self.s3.create_multipart_upload(Bucket=self.bucket, Key=self.key)
            self._upload_id = created["UploadId"]
            self._pool = ThreadPoolExecutor(PARTS_IN_FLIGHT, thread_name_prefix="s3-part")
        assert self._pool is not None
        pending = {f for f in self._parts if not f.done()}
        while len(pending) >= PARTS_IN_FLIGHT:
            _, pending = wait(pending, return_when=FIRST_COMPLETED)
        for f in self._parts:  # a failed part stops the stream now, not at close()
            if f.done() and f.exception() is not None:
                raise f.exception()  # type: ignore[misc]
        number = len(self._parts) + 1
        if number > MAX_PARTS:
            raise OSError(
                f"s3://{self.bucket}/{self.key}: over {MAX_PARTS} parts of up to "
                f"{part_bytes(MAX_PARTS)} bytes (S3's limit); raise training.s3.dcp.PART_BYTES"
            )
        self._parts.append(self._pool.submit(self._upload_part, number, part))

    def _upload_part(self, number: int, part: bytes) -> dict[str, Any]:
        out = self.s3.upload_part(
            Bucket=self.bucket,
            Key=self.key,
            UploadId=self._upload_id,
            PartNumber=number,
            Body=part,
        )
        return {"PartNumber": number, "ETag": out["ETag"]}

    def abort(self) -> None:
        self._failed = True

    def close(self) -> None:
        if self.closed:
            return
        try:
            if self._failed:
                self._abort()
            elif self._upload_id is None:
                self.s3.put_object(Bucket=self.bucket, Key=self.key, Body=bytes(self._buf))
            else:
                if self._buf:
                    self._send(bytes(self._buf))
                parts = [f.result() for f in self._parts]
                self.s3.complete_multipart_upload(
                    Bucket=self.bucket,
                    Key=self.key,
                    UploadId=self._upload_id,
                    MultipartUpload={"Parts": parts},
                )
        except BaseException:
            self._abort()
            raise
        finally:
            self._buf = bytearray()
            if self._pool is not None:
                self._pool.shutdown(wait=True)
            super().close()

    def _abort(self) -> None:
        """Cancel the parts not started, wait for those uploading, then abort the upload (an
        abort while a part uploads may leave that part stored)."""
        if self._upload_id is not None:
            for f in self._parts:
                f.cancel()
            if self._pool is not None:
                self._pool.shutdown(wait=True)
            self.s3.abort_multipart_upload(
                Bucket=self.bucket, Key=self.key, UploadId=self._upload_id
            )
            self._upload_id = None


class _RangedReader(io.RawIOBase):
    """A seekable read stream over one object: each read is a ranged GET."""

    def __init__(self, s3: Any, bucket: str, key: str) -> None:
        self.s3, self.bucket, self.key = s3, bucket, key
        self.size = int(s3.head_object(Bucket=bucket, Key=key)["ContentLength"])
        self._pos = 0
        self._win, self._win_start = b"", 0

    def readable(self) -> bool:
        return True

    def seekable(self) -> bool:
        return True

    def tell(self) -> int:
        return self._pos

    def seek(self, offset: int, whence: int = os.SEEK_SET) -> int:
        base = {os.SEEK_SET: 0, os.SEEK_CUR: self._pos, os.SEEK_END: self.size}[whence]
        self._pos = max(0, base + offset)
        return self._pos

    def readinto(self, b: Any) -> int:
        view = memoryview(b).cast("B")
        end = min(self._pos + len(view), self.size)
        if end <= self._pos:
            return 0
        data = self._get(self._pos, end)
        view[: len(data)] = data
        self._pos = end
        return len(data)

    def readall(self) -> bytes:
        """The rest of the object in one GET (RawIOBase's would read 8 KiB at a time)."""
        data = self._get(self._pos, self.size) if self._pos < self.size else b""
        self._pos = max(self._pos, self.size)
        return data

    def _get(self, start: int, end: int) -> bytes:
        """Bytes [start, end) by one ranged GET, asked again when its body breaks off."""
        from botocore.exceptions import (
            IncompleteReadError,
            ReadTimeoutError,
            ResponseStreamingError,
        )

        where = f"s3://{self.bucket}/{self.key}"
        for attempt in range(1, BODY_READ_ATTEMPTS + 1):
            body = self.s3.get_object(
                Bucket=self.bucket, Key=self.key, Range=f"bytes={start}-{end - 1}"
            )
            try:
                data = body["Body"].read()
            except (IncompleteReadError, ReadTimeoutError, ResponseStreamingError) as e:
                if attempt == BODY_READ_ATTEMPTS:
                    raise OSError(
                        f"{where}: reading bytes {start}-{end - 1} failed {attempt} times: {e}"
                    ) from e
                continue
            if len(data) == end - start:
                return data
            if attempt == BODY_READ_ATTEMPTS:
                raise OSError(f"{where}: {len(data)} bytes at {start}, not {end - start}")
        raise AssertionError("unreachable")

    def window(self, offset: int, length: int, limit: int | None = None) -> memoryview:
        """Bytes [offset, offset + length), from the current window or a new one that ends at
        `limit` at most (the end of the last item the load needs from this file)."""
        start = self._win_start
        if not (start <= offset and offset + length <= start + len(self._win)):
            last = self.size if limit is None else min(self.size, limit)
            end = min(last, offset + WINDOW_BYTES)
            end = max(end, min(self.size, offset + length))
            self._win, self._win_start = self._get(offset, end), offset
        at = offset - self._win_start
        return memoryview(self._win)[at : at + length]


def _split(path: str | os.PathLike[str]) -> tuple[str, str]:
    uri = S3Uri.parse(os.fspath(path))
    return uri.bucket, uri.key


class S3FileSystem(FileSystemBase):
    """DCP's file-system interface on S3 keys (`s3://bucket/prefix/file`)."""

    def __init__(self) -> None:
        self.s3 = client()

    @contextmanager
    def create_stream(
        self, path: str | os.PathLike[str], mode: str
    ) -> Generator[io.IOBase, None, None]:
        bucket, key = _split(path)
        if mode == "wb":
            writer = _MultipartWriter(self.s3, bucket, key)
            try:
                yield writer
            except BaseException:
                writer.abort()
                raise
            finally:
                writer.close()
        elif mode == "rb":
            with io.BufferedReader(
                _RangedReader(self.s3, bucket, key), READ_BUFFER_BYTES
            ) as reader:
                yield reader
        else:
            raise ValueError(f"create_stream: mode {mode!r} (rb or wb)")

    def concat_path(self, path: str | os.PathLike[str], suffix: str) -> str:
        return str(S3Uri.parse(os.fspath(path)) / suffix)

    def rename(self, path: str | os.PathLike[str], new_path: str | os.PathLike[str]) -> None:
        """S3 has no rename: copy, then delete (DCP renames only its small `.metadata`)."""
        bucket, key = _split(path)
        new_bucket, new_key = _split(new_path)
        self.s3.copy_object(
            Bucket=new_bucket, Key=new_key, CopySource={"Bucket": bucket, "Key": key}
        )
        self.s3.delete_object(Bucket=bucket, Key=key)

    def init_path(self, path: str | os.PathLike[str]) -> str:
        return str(S3Uri.parse(os.fspath(path)))

    def mkdir(self, path: str | os.PathLike[str]) -> None:
        """Nothing to make: S3 has no folders."""

    @classmethod
    def validate_checkpoint_id(cls, checkpoint_id: str | os.PathLike[str]) -> bool:
        return is_s3(os.fspath(checkpoint_id))

    def exists(self, path: str | os.PathLike[str]) -> bool:
        """Whether the key exists, by listing it (ListObjectsV2 with the key as prefix).

        Not HeadObject: DCP's writer asks for `.metadata` before every save (torch
        2.13 `FileSystemWriter._metadata_exists`, on every rank), where it does not exist yet,
        and HEAD of a missing key answers 403, not 404, unless the caller may ListBucket for
        that request (S3 API Reference, HeadObject, "Permissions"); the jobs' role may list only
        with an `s3:prefix` under its prefix (`infra.pod_identity.bucket_policy_document`), a
        condition key a HEAD request does not carry. A listing with the key itself as
        `Prefix` is one the role may make for every key under its prefix."""
        bucket, key = _split(path)
        found = self.s3.list_objects_v2(Bucket=bucket, Prefix=key, MaxKeys=1)
        return any(obj["Key"] == key for obj in found.get("Contents", []))

    def rm_file(self, path: str | os.PathLike[str]) -> None:
        bucket, key = _split(path)
        self.s3.delete_object(Bucket=bucket, Key=key)


class S3Writer(FileSystemWriter):
    """DCP storage writer to an `s3://` checkpoint location (one file per rank)."""

    def __init__(self, path: str) -> None:
        # sync_files: there is no file descriptor to fsync; an upload is durable once S3 answers.
        super().__init__(path, sync_files=False)
        self.fs = S3FileSystem()  # type: ignore[assignment]  # DCP's own writers swap it too
        self.path = self.fs.init_path(path)

    @classmethod
    def validate_checkpoint_id(cls, checkpoint_id: str | os.PathLike[str]) -> bool:
        return S3FileSystem.validate_checkpoint_id(checkpoint_id)


class S3Reader(FileSystemReader):
    """DCP storage reader from an `s3://` checkpoint location."""

    def __init__(self, path: str) -> None:
        super().__init__(path)
        self.fs = S3FileSystem()  # type: ignore[assignment]
        self.path = self.fs.init_path(path)
        self._ends: dict[str, int] = {}
        """{file: end of the last item the load in progress reads from it}"""

    def _slice_file(self, file: Any, sinfo: Any) -> IO[bytes]:
        """One item's bytes in memory, cut from the stream's window (see the module docstring)."""
        raw = file.raw if isinstance(file, io.BufferedReader) else file
        limit = self._ends.get(sinfo.relative_path)
        return io.BytesIO(raw.window(sinfo.offset, sinfo.length, limit))

    def read_data(self, plan: LoadPlan, planner: Any) -> Any:
        """DCP's reads, with each file's windows ending where its last planned item does (a
        load of part of a file fetches no bytes past what it asked for)."""
        self._ends = {}
        for item in plan.items:
            info = self.storage_data[item.storage_index]
            end = info.offset + info.length
            self._ends[info.relative_path] = max(self._ends.get(info.relative_path, 0), end)
        return super().read_data(plan, planner)

    def prepare_local_plan(self, plan: LoadPlan) -> LoadPlan:
        """Each file's items in offset order, so its windows move forward through the file."""
        plan.items.sort(key=lambda item: self.storage_data[item.storage_index].offset)
        return plan

    @classmethod
    def validate_checkpoint_id(cls, checkpoint_id: str | os.PathLike[str]) -> bool:
        return S3FileSystem.validate_checkpoint_id(checkpoint_id)
