"""``--plot``: memory stack per GPU per node count, and the predicted scaling."""

from __future__ import annotations

from pathlib import Path
from typing import Any

GIB = 2**30
_STACK = (
    ("params", "parameters"),
    ("grads", "gradients"),
    ("optimizer", "optimizer"),
    ("activations", "activations"),
    ("gathered_peak", "gathered units"),
    ("overhead", "context/NCCL/fragmentation"),
)


def plot(rows: list[dict[str, Any]], path: Path) -> None:
    """Write a two-panel PNG (matplotlib Agg backend)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    labels = [str(r["nodes"]) for r in rows]
    fig, (ax_mem, ax_tp) = plt.subplots(1, 2, figsize=(12, 4.8))
    bottom = [0.0] * len(rows)
    for key, name in _STACK:
        values = [r["memory"][key] / GIB for r in rows]
        ax_mem.bar(labels, values, bottom=bottom, label=name)
        bottom = [b + v for b, v in zip(bottom, values, strict=True)]
    limit = rows[0]["gpu_memory_bytes"] / GIB
    ax_mem.axhline(limit, color="black", linestyle="--", linewidth=1)
    ax_mem.text(len(rows) - 0.5, limit, f" GPU {limit:.0f} GiB", va="bottom", ha="right")
    ax_mem.set_xlabel("nodes")
    ax_mem.set_ylabel("GiB per GPU")
    ax_mem.set_title(f"memory per GPU: {rows[0]['model']}, {rows[0]['sharding']}")
    ax_mem.legend(fontsize=8)

    nodes = [r["nodes"] for r in rows]
    total = [r["tokens_per_s_per_gpu"] * r["gpus"] / 1e3 for r in rows]
    ax_tp.plot(nodes, total, "o-", label="steady-state tokens/s (k)")
    ideal = [total[0] * n / nodes[0] for n in nodes]
    ax_tp.plot(nodes, ideal, ":", color="gray", label="linear from the first point")
    if rows[0]["epoch"] is not None:
        epoch_tp = [
            r["epoch"]["tokens"] / r["epoch"]["loop_s"] / 1e3 if r["epoch"]["loop_s"] else 0.0
            for r in rows
        ]
        ax_tp.plot(nodes, epoch_tp, "s-", label="epoch tokens/s (k)")
    ax_tp.set_xlabel("nodes")
    ax_tp.set_ylabel("thousand tokens/s (whole job)")
    ax_tp.set_title(f"predicted scaling on {rows[0]['instance']}")
    ax_eff = ax_tp.twinx()
    eff = [100 * (r["scaling_efficiency"] or 0.0) for r in rows]
    ax_eff.plot(nodes, eff, "d--", color="tab:red", label="scaling efficiency %")
    ax_eff.set_ylim(0, 110)
    ax_eff.set_ylabel("scaling efficiency vs 1 node (%)")
    lines = ax_tp.get_legend_handles_labels()
    lines_eff = ax_eff.get_legend_handles_labels()
    ax_tp.legend(lines[0] + lines_eff[0], lines[1] + lines_eff[1], fontsize=8, loc="lower right")
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110)
    plt.close(fig)
