"""The comparison: measured tokens/s and scaling efficiency per node count next to the
planner's prediction (and its calibrated curve), as a table and a PNG chart."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

from sweeps.common import Measurement


def scaling_table(
    measured: Sequence[Measurement],
    predicted: Sequence[dict[str, Any]] = (),
    calibrated: Sequence[dict[str, Any]] = (),
) -> list[dict[str, Any]]:
    """One row per node count: measured tokens/s and efficiency vs the planner's (and, with
    ``calibrated`` from :func:`planner_before_after`, the calibrated planner's tokens/s)."""
    if not measured:
        return []
    base = min(measured, key=lambda m: m.nodes)
    per_node_base = base.tokens_per_s / base.nodes
    pred = {int(p["nodes"]): p for p in predicted}
    after = {int(c["nodes"]): float(c["after"]) for c in calibrated}
    rows = []
    for m in sorted(measured, key=lambda m: m.nodes):
        p = pred.get(m.nodes, {})
        predicted_tps = (
            p["tokens_per_s_per_gpu"] * p["gpus"] if "tokens_per_s_per_gpu" in p else None
        )
        rows.append(
            {
                "nodes": m.nodes,
                "tokens_per_s": m.tokens_per_s,
                "efficiency": m.tokens_per_s / (per_node_base * m.nodes),
                "source": m.source,
                "predicted_tokens_per_s": predicted_tps,
                "predicted_efficiency": p.get("scaling_efficiency"),
                "calibrated_tokens_per_s": after.get(m.nodes),
            }
        )
    return rows


def plot_scaling(
    rows: Sequence[dict[str, Any]], png: str | Path, *, title: str, predicted_label: str = "planner"
) -> Path:
    """Throughput and scaling efficiency vs node count (measured, ideal, planner) as a PNG."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    nodes = [r["nodes"] for r in rows]
    fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(10, 4))
    tps = [r["tokens_per_s"] for r in rows]
    ax1.plot(nodes, tps, "o-", label="measured")
    ax1.plot(nodes, [tps[0] / nodes[0] * n for n in nodes], "k--", label="linear")
    handles, labels = ax1.get_legend_handles_labels()
    if all(r["predicted_tokens_per_s"] is not None for r in rows):
        ax1b = ax1.twinx()
        (line,) = ax1b.plot(
            nodes,
            [r["predicted_tokens_per_s"] for r in rows],
            "s:",
            color="tab:orange",
            label=f"{predicted_label} (right axis)",
        )
        ax1b.set_ylabel(f"{predicted_label} tokens/s", color="tab:orange")
        handles, labels = [*handles, line], [*labels, line.get_label()]
    if rows and all(r.get("calibrated_tokens_per_s") is not None for r in rows):
        # after calibration the prediction is in the measured units: same (left) axis
        (cal,) = ax1.plot(
            nodes,
            [r["calibrated_tokens_per_s"] for r in rows],
            "^-.",
            color="tab:green",
            label=f"{predicted_label}, calibrated",
        )
        handles, labels = [*handles, cal], [*labels, cal.get_label()]
    ax1.set_xlabel("nodes")
    ax1.set_ylabel("tokens/s (job)")
    ax1.set_title("Throughput")
    ax1.legend(handles, labels, loc="upper left")
    ax2.plot(nodes, [r["efficiency"] for r in rows], "o-", label="measured")
    if all(r["predicted_efficiency"] is not None for r in rows):
        ax2.plot(nodes, [r["predicted_efficiency"] for r in rows], "s:", label=predicted_label)
    ax2.axhline(1.0, color="k", ls="--", lw=0.8)
    ax2.set_ylim(0, 1.1)
    ax2.set_xlabel("nodes")
    ax2.set_ylabel("scaling efficiency vs 1 node")
    ax2.set_title("Efficiency")
    ax2.legend()
    for ax in (ax1, ax2):
        ax.set_xticks(nodes)
    fig.suptitle(title)
    fig.tight_layout()
    path = Path(png)
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=100)
    plt.close(fig)
    return path
