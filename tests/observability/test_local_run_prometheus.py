"""A real local training run is scraped by a real Prometheus; its numbers come back exactly.

If this fails, ``python -m workloads.local --prometheus`` (and the scaling notebook, which reads the
same snapshot) would report training figures that differ from what the run logged, or none at all:
the exporter, the per-pod metrics ports, the relabelling and the local Prometheus must carry each
step's tokens/s and loss unchanged. No mocks: real etcd, two torchrun agents training the tiny
model on CPU, Debian's prometheus 2.42, its HTTP API.
"""

from __future__ import annotations

import json
import statistics
from pathlib import Path

import pytest

from workloads.local import LocalOptions, Runner
from workloads.local_prometheus import SAMPLES_PNG, SNAPSHOT_FILE

pytestmark = [pytest.mark.slow, pytest.mark.integration]


def test_local_run_read_back_from_prometheus(tmp_path: Path) -> None:
    lines: list[str] = []
    opts = LocalOptions(
        stack="dev",
        out=tmp_path,
        workers=2,
        train_overrides=("--max_train_step=16", "--checkpoint_every=0"),
        prometheus=True,
        timeout_s=400,
    )
    result = Runner(opts, echo=lines.append).run()
    assert result.succeeded, "\n".join(lines)
    logged = {int(m["step"]): m for m in result.metrics}
    snap = json.loads((tmp_path / "prometheus" / SNAPSHOT_FILE).read_text())

    samples = snap["samples"]
    steps_seen = sorted({int(s["step"]) for s in samples})
    # 1 s scrapes over a training phase of several seconds: live values, not one final dump
    # (how many steps a scrape catches depends on the machine's speed, so no more is asserted)
    assert len(steps_seen) >= 2, steps_seen
    for s in samples:  # every scraped (step, tokens/s, loss) triple is what the run logged
        row = logged[int(s["step"])]
        assert s["tokens_per_s"] == pytest.approx(row["tokens_per_s"], rel=1e-9)
        assert s["loss"] == pytest.approx(row["loss"], rel=1e-9)

    last = int(snap["step_last"])
    assert last == steps_seen[-1] and last >= 12
    assert snap["tokens_per_second_last"] == pytest.approx(logged[last]["tokens_per_s"], rel=1e-9)
    assert snap["loss_last"] == pytest.approx(logged[last]["loss"], rel=1e-9)
    assert snap["world_size_last"] == 2.0
    assert snap["restarts_max"] == 0.0
    tps = [m["tokens_per_s"] for m in logged.values()]
    assert min(tps) <= snap["tokens_per_second_median"] <= max(tps)
    seen_tps = [logged[s]["tokens_per_s"] for s in steps_seen]
    assert snap["tokens_per_second_step_median"] == pytest.approx(statistics.median(seen_tps))
    assert snap["scrapes_up"] >= 2 * len(steps_seen)
    # The plots land next to the metrics: the run's own, and what Prometheus saw.
    png_magic = b"\x89PNG\r\n\x1a\n"
    assert (result.metrics_path.parent / "metrics.png").read_bytes()[:8] == png_magic
    assert (tmp_path / "prometheus" / SAMPLES_PNG).read_bytes()[:8] == png_magic
    print(
        f"steps logged {len(logged)}, steps seen by Prometheus {len(steps_seen)} "
        f"(last {last}); tokens/s last {snap['tokens_per_second_last']:.1f}, median "
        f"{snap['tokens_per_second_step_median']:.1f} (median over steps seen); loss last {snap['loss_last']:.4f}; "
        f"wall {result.wall_s:.1f}s"
    )
