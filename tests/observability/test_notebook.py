"""The scaling notebook runs end to end in local mode and charts what it measured.

If this fails, ``notebooks/scaling.ipynb`` would break for users (an exception in a cell, no
chart), or its local mode would report throughput that is not the runs' own: the notebook is
executed for real with nbclient on the venv's Python kernel, driving three real local runs (1, 2
and 3 worker pods on CPU, real etcd, real Prometheus) of the dev stack's tiny model.
"""

from __future__ import annotations

import json
import statistics
from pathlib import Path

import nbformat
import pytest
from nbclient import NotebookClient

pytestmark = [pytest.mark.slow, pytest.mark.integration]

NOTEBOOK = Path(__file__).resolve().parents[2] / "notebooks" / "scaling.ipynb"


def test_notebook_local_mode(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("SCALING_MODE", "local")
    monkeypatch.setenv("SCALING_NODES", "1,2,3")
    monkeypatch.setenv("SCALING_STEPS", "8")
    monkeypatch.setenv("SCALING_OUT", str(tmp_path))
    monkeypatch.setenv("OMP_NUM_THREADS", "1")
    nb = nbformat.read(NOTEBOOK, as_version=4)
    NotebookClient(
        nb,
        timeout=600,
        kernel_name="python3",
        resources={"metadata": {"path": str(NOTEBOOK.parent)}},
    ).execute()

    measured = json.loads((tmp_path / "measured.json").read_text())
    assert [m["nodes"] for m in measured] == [1, 2, 3]
    for m in measured:
        assert m["tokens_per_s"] > 0 and m["steps"] == 8
        run = tmp_path / f"workers-{m['nodes']}"
        (jsonl,) = run.glob("shared/*/output/metrics.jsonl")
        logged = [json.loads(x)["tokens_per_s"] for x in jsonl.read_text().splitlines()]
        if m["source"] == "metrics.jsonl":
            assert m["tokens_per_s"] == pytest.approx(statistics.median(logged))
        else:  # the median of what Prometheus scraped lies within what the run logged
            assert m["source"] == "prometheus"
            assert min(logged) <= m["tokens_per_s"] <= max(logged)
    png = tmp_path / "scaling.png"
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and png.stat().st_size > 10_000
    outputs = "".join(
        o.get("text", "") for c in nb.cells if c.cell_type == "code" for o in c.get("outputs", [])
    )
    assert "nodes   tokens/s" in outputs.replace("  nodes", "nodes")
    assert any("image/png" in o.get("data", {}) for c in nb.cells for o in c.get("outputs", []))
