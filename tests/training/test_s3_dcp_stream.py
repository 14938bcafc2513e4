"""The S3 streams under DCP (``training/s3/dcp.py``): memory bound, failed uploads, broken reads.

Against moto's S3 server on loopback (tests/training/conftest.py ``s3_env``); the only stand-in
is a thin wrapper around the real boto3 client that counts the bytes of the parts being
uploaded, fails one part, or breaks a response body the way botocore reports a dropped
connection (``botocore/response.py`` at 1.44.8: ``ResponseStreamingError``), since a real
network fault cannot be made on demand here. Parts are 5 MiB, the smallest S3 (and moto)
accepts but for the last (Amazon S3 User Guide, "Amazon S3 multipart upload limits").

If these fail, a rank writing one large tensor would hold the whole of it in memory on top of
the parts in flight (the bound the module states would be false), a failed checkpoint save
would leave a multipart upload (billed storage) behind or abort it while parts were still
being uploaded (S3 may then keep them: S3 API Reference, AbortMultipartUpload), or a body cut
off mid-read would fail a resume that a second GET would have completed.
"""

from __future__ import annotations

import hashlib
import io
import itertools
import threading
import time
from typing import Any

import pytest
from botocore.exceptions import ResponseStreamingError

from tests.training.conftest import S3Server
from training.s3 import dcp

PART = 5 * 2**20


class _Counting:
    """The real client; ``upload_part`` counts the part bytes uploading at once (with the
    writer's own buffer at that moment), and records when parts end and the abort comes."""

    def __init__(self, real: Any, fail_part: int | None = None) -> None:
        self.real, self.fail_part = real, fail_part
        self.writer: Any = None
        self.lock = threading.Lock()
        self.in_flight = 0
        self.peak_in_flight = 0
        self.peak_held = 0
        self.seq = itertools.count()
        self.part_ends: list[int] = []
        self.abort_at: int | None = None

    def __getattr__(self, name: str) -> Any:
        return getattr(self.real, name)

    def upload_part(self, **kw: Any) -> Any:
        size = len(kw["Body"])
        with self.lock:
            self.in_flight += size
            buffered = len(self.writer._buf) if self.writer is not None else 0
            self.peak_in_flight = max(self.peak_in_flight, self.in_flight)
            self.peak_held = max(self.peak_held, self.in_flight + buffered)
        try:
            time.sleep(0.05)  # keep parts overlapping, as a real network would
            if kw["PartNumber"] == self.fail_part:
                raise OSError(f"part {self.fail_part}: connection reset")
            return self.real.upload_part(**kw)
        finally:
            with self.lock:
                self.in_flight -= size
                self.part_ends.append(next(self.seq))

    def abort_multipart_upload(self, **kw: Any) -> Any:
        with self.lock:
            self.abort_at = next(self.seq)
        return self.real.abort_multipart_upload(**kw)


@pytest.fixture
def small_parts(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(dcp, "PART_BYTES", PART)


def _fs(s3: S3Server, wrapper: _Counting) -> dcp.S3FileSystem:
    fs = dcp.S3FileSystem()
    fs.s3 = wrapper
    return fs


def test_a_large_write_holds_at_most_the_parts_in_flight_and_one_filling(
    s3_env: S3Server, small_parts: None
) -> None:
    bucket = s3_env.bucket("dcp-stream")
    wrapper = _Counting(s3_env.client())
    payload = bytes(range(256)) * (23 * PART // 2 // 256) + b"tail"  # 11.5 parts and 4 bytes
    fs = _fs(s3_env, wrapper)
    with fs.create_stream(f"s3://{bucket}/ckpt/__0_0.distcp", "wb") as stream:
        wrapper.writer = stream
        stream.write(payload[:100])
        stream.write(memoryview(payload)[100:])  # a tensor's storage: one write of its size
        assert len(stream._buf) < PART
    got = s3_env.client().get_object(Bucket=bucket, Key="ckpt/__0_0.distcp")["Body"].read()
    assert hashlib.sha256(got).digest() == hashlib.sha256(payload).digest()
    assert len(wrapper.part_ends) == len(payload) // PART + 1
    assert wrapper.peak_in_flight <= dcp.PARTS_IN_FLIGHT * PART
    assert wrapper.peak_held <= (dcp.PARTS_IN_FLIGHT + 1) * PART, wrapper.peak_held


def test_a_failed_save_aborts_after_its_parts_return_and_leaves_no_upload(
    s3_env: S3Server, small_parts: None
) -> None:
    bucket = s3_env.bucket("dcp-abort")
    wrapper = _Counting(s3_env.client(), fail_part=3)
    fs = _fs(s3_env, wrapper)
    with (
        pytest.raises(OSError, match="part 3: connection reset"),
        fs.create_stream(f"s3://{bucket}/ckpt/__1_0.distcp", "wb") as stream,
    ):
        for _ in range(9):
            stream.write(b"\x01" * PART)
    assert wrapper.abort_at is not None
    assert wrapper.part_ends and max(wrapper.part_ends) < wrapper.abort_at
    client = s3_env.client()
    assert "Uploads" not in client.list_multipart_uploads(Bucket=bucket)
    assert "Contents" not in client.list_objects_v2(Bucket=bucket)


class _Breaking:
    """The real client; the body of the first ``breaks`` GETs raises as a dropped connection."""

    def __init__(self, real: Any, breaks: int) -> None:
        self.real, self.breaks, self.gets = real, breaks, 0

    def __getattr__(self, name: str) -> Any:
        return getattr(self.real, name)

    def get_object(self, **kw: Any) -> Any:
        self.gets += 1
        out = self.real.get_object(**kw)
        if self.gets <= self.breaks:
            out["Body"].close()
            out["Body"] = _BrokenBody()
        return out


class _BrokenBody(io.RawIOBase):
    def read(self, size: int = -1) -> bytes:
        raise ResponseStreamingError(error="Connection broken: IncompleteRead(1 bytes read)")


def test_a_body_cut_off_is_read_again_a_bounded_number_of_times(s3_env: S3Server) -> None:
    bucket = s3_env.bucket("dcp-read")
    data = bytes(range(256)) * 4096
    s3_env.client().put_object(Bucket=bucket, Key="ckpt/__0_0.distcp", Body=data)
    real = s3_env.client()
    flaky = _Breaking(real, breaks=dcp.BODY_READ_ATTEMPTS - 1)
    reader = dcp._RangedReader(flaky, bucket, "ckpt/__0_0.distcp")
    assert bytes(reader.window(1000, 5000)) == data[1000:6000]
    assert flaky.gets == dcp.BODY_READ_ATTEMPTS
    broken = _Breaking(real, breaks=10**6)
    reader = dcp._RangedReader(broken, bucket, "ckpt/__0_0.distcp")
    with pytest.raises(OSError) as err:
        reader.window(0, 10)
    assert broken.gets == dcp.BODY_READ_ATTEMPTS
    text = str(err.value)
    assert "\n" not in text and text.startswith(f"s3://{bucket}/ckpt/__0_0.distcp: reading bytes")
    assert f"failed {dcp.BODY_READ_ATTEMPTS} times" in text


def test_a_failed_part_stops_the_writes_before_close(s3_env: S3Server, small_parts: None) -> None:
    """Part 2 fails: a later write raises it (the stream does not go on uploading parts until
    close), and the upload is aborted."""
    bucket = s3_env.bucket("dcp-fail2")
    wrapper = _Counting(s3_env.client(), fail_part=2)
    fs = _fs(s3_env, wrapper)
    written = 0
    with (
        pytest.raises(OSError, match="part 2: connection reset"),
        fs.create_stream(f"s3://{bucket}/ckpt/__0_0.distcp", "wb") as stream,
    ):
        for _ in range(40):
            stream.write(b"\x02" * PART)
            written += 1
    assert written < 40  # raised by a write, not by close()
    assert "Uploads" not in s3_env.client().list_multipart_uploads(Bucket=bucket)


def test_parts_grow_and_the_part_limit_fails_in_one_line(
    s3_env: S3Server, small_parts: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    """With the size doubling after every part (GROW_EVERY 1) parts are 5, 10, 20 MiB: a
    35 MiB stream is 3 parts and round-trips; with 3 parts allowed, a fourth fails in one line
    naming the key before it is sent, and the upload is aborted."""
    monkeypatch.setattr(dcp, "GROW_EVERY", 1)
    monkeypatch.setattr(dcp, "MAX_PARTS", 3)
    assert [dcp.part_bytes(n) for n in (1, 2, 3)] == [PART, 2 * PART, 4 * PART]
    bucket = s3_env.bucket("dcp-grow")
    wrapper = _Counting(s3_env.client())
    fs = _fs(s3_env, wrapper)
    payload = bytes(range(256)) * (7 * PART // 256)  # 35 MiB: exactly the three parts
    with fs.create_stream(f"s3://{bucket}/g/__0_0.distcp", "wb") as stream:
        stream.write(payload)
    got = s3_env.client().get_object(Bucket=bucket, Key="g/__0_0.distcp")["Body"].read()
    assert got == payload and len(wrapper.part_ends) == 3
    with (
        pytest.raises(OSError, match=r"__1_0.distcp: over 3 parts") as err,
        fs.create_stream(f"s3://{bucket}/g/__1_0.distcp", "wb") as stream,
    ):
        stream.write(payload + b"x")
    assert "\n" not in str(err.value)
    assert "Uploads" not in s3_env.client().list_multipart_uploads(Bucket=bucket)


def test_a_partial_load_fetches_no_bytes_past_its_last_item(
    s3_env: S3Server, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Loading one of 40 small tensors of a shard fetches that item's bytes and no more (the
    window would otherwise run 32 MiB, here to the end of the file)."""
    import torch
    import torch.distributed.checkpoint as dist_cp

    from training.s3 import client as s3_client

    bucket = s3_env.bucket("dcp-window")
    state = {f"t{i:02d}": torch.full((16 * 1024,), float(i)) for i in range(40)}  # 64 KiB each
    uri = f"s3://{bucket}/w/step-000001"
    fetched: list[tuple[str, int]] = []

    class _Ranges:
        def __init__(self, real: Any) -> None:
            self.real = real

        def __getattr__(self, name: str) -> Any:
            return getattr(self.real, name)

        def get_object(self, **kw: Any) -> Any:
            out = self.real.get_object(**kw)
            fetched.append((kw["Key"], int(out["ContentLength"])))
            return out

    wrapper = _Ranges(s3_env.client())
    monkeypatch.setattr(s3_client, "_client", lambda *a: wrapper)
    with pytest.warns(UserWarning, match="torch.distributed is disabled"):
        dist_cp.save(state, checkpoint_id=uri, storage_writer=dcp.S3Writer(uri))
    reader = dcp.S3Reader(uri)
    want = {"t07": torch.zeros(16 * 1024)}
    fetched.clear()
    with pytest.warns(UserWarning, match="torch.distributed is disabled"):
        dist_cp.load(want, checkpoint_id=uri, storage_reader=reader)
    assert torch.equal(want["t07"], state["t07"])
    item = next(
        info for idx, info in reader.storage_data.items() if idx.fqn == "t07"
    )  # where t07 lies in its file
    shard = [size for key, size in fetched if key.endswith(".distcp")]
    assert shard == [item.length], (shard, item.length)
