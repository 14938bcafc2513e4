"""The scaling notebook runs end to end in local mode and charts what Prometheus measured.

If this fails, ``notebooks/scaling.ipynb`` would break for users (an exception in a cell, no
chart, no papermill parameters cell), or its local mode would report a throughput that is not the
runs' own steady state: the notebook is executed for real with nbclient on the venv's Python
kernel, driving two real local runs (1 and 2 worker pods on CPU, real etcd, real Prometheus) of
the dev stack's tiny model. Its figures come from Prometheus only (there is no other source in
the code); the test proves they are the runs' own by matching the counter's increase over the
measured window, token for token, with the sum of the tokens the run logged in ``metrics.jsonl``
for the same steps, and the rate with that increase over the window.
"""

from __future__ import annotations

import ast
import json
from pathlib import Path

import nbformat
import pytest
from nbclient import NotebookClient

pytestmark = [pytest.mark.slow, pytest.mark.integration]

NOTEBOOK = Path(__file__).resolve().parents[2] / "notebooks" / "scaling.ipynb"
STEPS, WARMUP = 16, 4


def test_parameters_cell_is_papermills() -> None:
    """papermill injects its values after the cell tagged ``parameters``: it must hold only
    plain assignments (and the import they use), before any cell that reads them."""
    nb = nbformat.read(NOTEBOOK, as_version=4)
    code = [c for c in nb.cells if c.cell_type == "code"]
    tagged = [c for c in code if "parameters" in c.metadata.get("tags", [])]
    assert len(tagged) == 1 and tagged[0] is code[0]
    tree = ast.parse(tagged[0].source)
    assert all(isinstance(n, ast.Assign | ast.Import) for n in tree.body)
    names = {
        t.id
        for n in tree.body
        if isinstance(n, ast.Assign)
        for t in n.targets
        if isinstance(t, ast.Name)
    }
    assert {"MODE", "STACK", "NODES", "STEPS", "WARMUP_STEPS", "OUT", "DESTROY"} <= names


def test_notebook_local_mode(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("SCALING_MODE", "local")
    monkeypatch.setenv("SCALING_NODES", "1,2")
    monkeypatch.setenv("SCALING_STEPS", str(STEPS))
    monkeypatch.setenv("SCALING_WARMUP_STEPS", str(WARMUP))
    monkeypatch.setenv("SCALING_OUT", str(tmp_path))
    monkeypatch.setenv("OMP_NUM_THREADS", "1")
    nb = nbformat.read(NOTEBOOK, as_version=4)
    NotebookClient(
        nb,
        timeout=900,
        kernel_name="python3",
        resources={"metadata": {"path": str(NOTEBOOK.parent)}},
    ).execute()

    measured = json.loads((tmp_path / "measured.json").read_text())
    assert [m["nodes"] for m in measured] == [1, 2]
    for m in measured:
        assert m["source"] == "prometheus" and m["steps"] == STEPS
        assert WARMUP <= m["first_step"] < m["end_step"] <= STEPS
        assert m["steps_measured"] == m["end_step"] - m["first_step"] >= (STEPS - WARMUP) // 2
        run = tmp_path / f"workers-{m['nodes']}"
        (jsonl,) = run.glob("shared/*/output/metrics.jsonl")
        logged = {r["step"]: r["tokens"] for r in map(json.loads, jsonl.read_text().splitlines())}
        window = range(m["first_step"] + 1, m["end_step"] + 1)
        assert m["tokens_measured"] == pytest.approx(sum(logged[s] for s in window), rel=1e-6)
        assert m["tokens_per_s"] == pytest.approx(m["tokens_measured"] / m["window_s"], rel=1e-6)
        assert m["scrapes"] >= 3
    png = tmp_path / "scaling.png"
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and png.stat().st_size > 10_000
    outputs = "".join(
        o.get("text", "") for c in nb.cells if c.cell_type == "code" for o in c.get("outputs", [])
    )
    assert "nodes   tokens/s" in outputs.replace("  nodes", "nodes")
    assert "from Prometheus" in outputs
    assert any("image/png" in o.get("data", {}) for c in nb.cells for o in c.get("outputs", []))


@pytest.mark.parametrize(("mode", "expected"), [("cloud", (200, 20)), ("local", (30, 5))])
def test_mode_defaults_and_cloud_steps_span_enough_scrapes(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, mode: str, expected: tuple[int, int]
) -> None:
    """The notebook's first two cells (parameters, then the mode's defaults) as the kernel runs
    them; in cloud mode the default measured steps times the planner's p5 step time span at
    least 8 scrapes of the cluster's Prometheus, which the old 30/5 did not."""
    import sys

    monkeypatch.syspath_prepend(str(NOTEBOOK.parent))
    monkeypatch.chdir(NOTEBOOK.parent)
    import scaling

    for var in ("SCALING_STEPS", "SCALING_WARMUP_STEPS"):
        monkeypatch.delenv(var, raising=False)
    monkeypatch.setenv("SCALING_MODE", mode)
    monkeypatch.setenv("SCALING_OUT", str(tmp_path))
    cells = [c.source for c in nbformat.read(NOTEBOOK, as_version=4).cells if c.cell_type == "code"]
    ns: dict[str, object] = {}
    for source in cells[:2]:
        exec(compile(source, str(NOTEBOOK), "exec"), ns)
    assert (ns["STEPS"], ns["WARMUP_STEPS"]) == expected
    assert "scaling" in sys.modules
    if mode == "cloud":
        times = scaling.planner_step_times([1, 2, 4, 8], "p5-16")
        need = 8 * scaling._scrape_interval_s()
        assert need == 120
        assert all((200 - 20) * t >= need for t in times.values()), times
        assert all((30 - 5) * t < need for t in times.values()), times
