"""Local mode: the stack's PyTorchJob on this machine at each worker count.

``eks-fsdp local --prometheus`` runs it (real etcd, one torchrun agent per "pod", a real
Prometheus scraping every pod); after each run its Prometheus data directory is opened again by
a fresh Prometheus and queried, exactly as the cloud mode queries the cluster's.
"""

from __future__ import annotations

import contextlib
import subprocess
import tempfile
import time
import urllib.request
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path

from sweeps.common import Measurement, SweepError, save_results
from sweeps.prometheus import steady_throughput, to_measurement


@contextlib.contextmanager
def reopen_prometheus(data_dir: Path, out_dir: Path) -> Iterator[str]:
    """A Prometheus serving what an earlier one stored in ``data_dir`` (no scrape targets);
    yields its URL. The local runner stops its Prometheus when the job ends; its TSDB (head and
    WAL) stays on disk and is replayed here."""
    from localrun.prometheus import free_port, prometheus_binary

    out_dir.mkdir(parents=True, exist_ok=True)
    config = out_dir / "prometheus-readonly.yml"
    config.write_text("global:\n  scrape_interval: 1m\n")
    port = free_port()
    with (out_dir / "prometheus-readonly.log").open("wb") as log:
        proc = subprocess.Popen(
            [
                prometheus_binary(),
                f"--config.file={config}",
                f"--storage.tsdb.path={data_dir}",
                f"--web.listen-address=127.0.0.1:{port}",
                "--storage.tsdb.retention.time=1d",
            ],
            stdout=log,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
        )
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 60
        while True:
            with contextlib.suppress(OSError):
                urllib.request.urlopen(f"{url}/-/ready", timeout=2).close()
                break
            if proc.poll() is not None or time.monotonic() > deadline:
                raise SweepError(f"prometheus on {data_dir} did not start (see {log.name})")
            time.sleep(0.3)
        yield url
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(timeout=10)


def measure_local(
    workers: Sequence[int] = (1, 2, 3),
    *,
    stack: str = "dev",
    steps: int = 30,
    warmup_steps: int = 5,
    min_scrapes: int = 3,
    fp32: bool = True,
    out_dir: str | Path | None = None,
    results: str | Path | None = None,
    log: Callable[[str], None] = print,
) -> list[Measurement]:
    """Run the stack's job locally with each worker count; tokens/s from Prometheus' counters.

    ``fp32`` adds ``--mixed_precision=false``: on a CPU without native bf16 (AVX2 only), bf16
    runs about 10x slower than fp32. Each result is written to ``results`` (JSON) as soon as it
    is measured.
    """
    from jobs.build import load_example
    from localrun.options import LocalOptions
    from localrun.runner import Runner

    if steps <= warmup_steps:
        raise ValueError(f"steps: {steps} must exceed warmup_steps ({warmup_steps})")
    root = Path(out_dir) if out_dir else Path(tempfile.mkdtemp(prefix="scaling-"))
    measured: list[Measurement] = []
    for n in workers:
        out = root / f"workers-{n}"
        opts = LocalOptions(
            stack=stack,
            out=out,
            workers=n,
            min_workers=n,
            train_overrides=(
                f"--max_train_step={steps}",
                "--checkpoint_every=0",
                *(["--mixed_precision=false"] if fp32 else []),
            ),
            prometheus=True,
            timeout_s=900,
        )
        lines: list[str] = []
        log(f"{n} worker(s): running {steps} steps locally")
        _, w = load_example(stack)
        result = Runner(opts, echo=lines.append).run(w.job, w.device)
        if not result.succeeded:
            raise SweepError(f"local run with {n} workers failed:\n" + "\n".join(lines[-20:]))
        job = result.job["metadata"]["name"]
        with reopen_prometheus(out / "prometheus" / "data", out / "prometheus") as url:
            fig = steady_throughput(
                url,
                job,
                warmup_steps=warmup_steps,
                min_steps=max(1, (steps - warmup_steps) // 2),
                min_scrapes=min_scrapes,
            )
        m = to_measurement(n, job, result.wall_s, fig)
        measured.append(m)
        if results is not None:
            save_results(measured, Path(results))
        log(
            f"{n} worker(s): {m.tokens_per_s:,.0f} tokens/s (rate over steps {m.first_step}-"
            f"{m.end_step}, {m.window_s:.1f} s, {m.scrapes} scrapes, from Prometheus)"
        )
    return measured
