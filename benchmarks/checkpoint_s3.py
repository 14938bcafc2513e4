"""Checkpoints to S3 against local disk, the bytes against the planner, and S3 clients compared.

Starts moto's S3 server (`python -m moto.server`, moto[server]) on a free loopback port in a
process of its own and, for the same state (a preset model and its AdamW state, one process),
times:

1. a synchronous DCP save and a load through `training.checkpoint` to local disk and to
   `s3://` (the trainer's own code: DCP's file-system writer on `training.s3.dcp`), the median
   of --repeat runs each, and prints the S3 / local ratios;
2. the bytes the S3 checkpoint holds (its objects, listed) against the planner's prediction
   (`planner.storage.checkpoint_bytes`: parameters plus AdamW's two moments);
3. one --object_mb object put and got by each client: boto3 `put_object` (one request),
   boto3 managed transfer (`upload_fileobj`/`download_fileobj`: multipart, concurrent),
   the DCP stream of `training.s3.dcp`, and s3torchconnector's CRT client (endpoint override,
   path-style addressing, no TLS). s3fs is not installed and not measured.

The server is a Python process on the same (small) machine: the figures rank the clients and
show the S3 path's overhead here; they are not S3's throughput.

    python benchmarks/checkpoint_s3.py [--model tiny-llama] [--repeat 3] [--object_mb 32]
"""

from __future__ import annotations

import argparse
import io
import os
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))
REGION = "us-east-1"


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def start_server() -> tuple[subprocess.Popen[bytes], str]:
    port = _free_port()
    proc = subprocess.Popen(
        [sys.executable, "-m", "moto.server", "-H", "127.0.0.1", "-p", str(port)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        with socket.socket() as s:
            if s.connect_ex(("127.0.0.1", port)) == 0:
                return proc, f"http://127.0.0.1:{port}"
        time.sleep(0.1)
    proc.kill()
    raise RuntimeError("moto server did not start")


def median_s(fn: Callable[[], Any], repeat: int) -> float:
    times = []
    for _ in range(repeat):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return statistics.median(times)


def build_state(model_name: str) -> tuple[dict[str, Any], int]:
    """A preset model after one AdamW step, as the trainer checkpoints it; its parameter count."""
    import torch
    from transformers import AutoModelForCausalLM

    from training.checkpoint import ModelOptimizerState
    from training.data import load_tokenizer
    from training.model import model_spec

    spec = model_spec(model_name, len(load_tokenizer(model_name)), 128)
    torch.manual_seed(0)
    model = AutoModelForCausalLM.from_config(spec.config)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4)
    ids = torch.randint(0, spec.config.vocab_size, (2, 64))
    model(input_ids=ids, labels=ids).loss.backward()
    opt.step()
    n_params = sum(p.numel() for p in model.parameters())
    return {"app": ModelOptimizerState(model, opt)}, n_params


def checkpoint_times(state: dict[str, Any], root: Any, repeat: int) -> tuple[float, float]:
    from training import checkpoint

    saver = checkpoint.Checkpointer(root, state, use_async=False)
    step = iter(range(1, 1000))
    save = median_s(lambda: saver.save(next(step), {}), repeat)
    latest = checkpoint.latest_complete(root)
    assert latest is not None
    load = median_s(lambda: checkpoint.load(latest, state), repeat)
    return save, load


def client_rows(s3: Any, endpoint: str, bucket: str, mb: int, repeat: int) -> None:
    from training.s3.dcp import S3FileSystem

    data = os.urandom(mb * 2**20)
    fs = S3FileSystem()

    def dcp_put() -> None:
        with fs.create_stream(f"s3://{bucket}/dcp", "wb") as w:
            w.write(data)

    def dcp_get() -> None:
        with fs.create_stream(f"s3://{bucket}/dcp", "rb") as r:
            r.read()

    rows = [
        (
            "boto3 put_object / get_object (one request)",
            lambda: s3.put_object(Bucket=bucket, Key="one", Body=data),
            lambda: s3.get_object(Bucket=bucket, Key="one")["Body"].read(),
        ),
        (
            "boto3 managed transfer (multipart, concurrent)",
            lambda: s3.upload_fileobj(io.BytesIO(data), bucket, "managed"),
            lambda: s3.download_fileobj(bucket, "managed", io.BytesIO()),
        ),
        ("training.s3.dcp stream (multipart / ranged GET)", dcp_put, dcp_get),
    ]
    try:
        from s3torchconnector._s3client import S3Client, S3ClientConfig

        crt = S3Client(
            REGION, endpoint=endpoint, s3client_config=S3ClientConfig(force_path_style=True)
        )

        def crt_put() -> None:
            with crt.put_object(bucket, "crt") as w:
                w.write(data)

        rows.append(
            (
                "s3torchconnector 1.5.0 CRT client",
                crt_put,
                lambda: crt.get_object(bucket, "crt").read(),
            )
        )
    except ImportError as e:
        print(f"s3torchconnector: not importable ({e}), not measured")
    for name, put, get in rows:
        up = mb / median_s(put, repeat)
        down = mb / median_s(get, repeat)
        print(f"  {name:50s} put {up:7.1f} MiB/s   get {down:7.1f} MiB/s", flush=True)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--model", default="tiny-llama")
    p.add_argument("--repeat", type=int, default=3)
    p.add_argument("--object_mb", type=int, default=32)
    args = p.parse_args()
    os.environ.setdefault("OMP_NUM_THREADS", "1")
    server, endpoint = start_server()
    try:
        os.environ.update(
            AWS_ENDPOINT_URL_S3=endpoint,
            AWS_ACCESS_KEY_ID="benchmark",
            AWS_SECRET_ACCESS_KEY="benchmark",
            AWS_REGION=REGION,
            AWS_EC2_METADATA_DISABLED="true",
        )
        from planner.storage import checkpoint_bytes
        from training.s3.client import client
        from training.s3.uri import S3Uri

        s3 = client()
        bucket = "benchmark-checkpoints"
        s3.create_bucket(Bucket=bucket)
        state, n_params = build_state(args.model)
        with tempfile.TemporaryDirectory() as tmp:
            local = checkpoint_times(state, Path(tmp) / "run", args.repeat)
        root = S3Uri(bucket, "run")
        remote = checkpoint_times(state, root, args.repeat)
        print(
            f"model {args.model}: {n_params / 1e6:.2f} M parameters, fp32 + AdamW, 1 process, "
            f"median of {args.repeat}"
        )
        for what, i in (("save", 0), ("load", 1)):
            print(
                f"  {what}: local disk {local[i]:.3f} s, S3 (moto) {remote[i]:.3f} s, "
                f"ratio S3/local {remote[i] / local[i]:.1f}x"
            )
        from training.checkpoint import latest_complete

        latest = latest_complete(root)
        assert isinstance(latest, S3Uri)
        objects = s3.list_objects_v2(Bucket=bucket, Prefix=latest.prefix)["Contents"]
        shards = sum(o["Size"] for o in objects if o["Key"].endswith(".distcp"))
        total = sum(o["Size"] for o in objects)
        predicted = checkpoint_bytes(n_params, 4, 4)
        print(
            f"  bytes: shards {shards:,} ({shards / predicted:.4f} of the planner's "
            f"{predicted:,}), all objects {total:,} ({total / predicted:.4f})"
        )
        print(f"clients, one {args.object_mb} MiB object, median of {args.repeat}:")
        client_rows(s3, endpoint, bucket, args.object_mb, args.repeat)
        print("  s3fs: not installed, not measured")
    finally:
        server.terminate()
        server.wait(timeout=30)


if __name__ == "__main__":
    main()
