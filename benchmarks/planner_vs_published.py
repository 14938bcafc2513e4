"""Print the capacity planner's predictions next to published FSDP-class figures.

    .venv/bin/python benchmarks/planner_vs_published.py

No GPU, no torch: the planner is pure arithmetic. The points, their sources and the planner
setup used for each live in planner/published.py; the assumptions are the planner's
defaults for all of them (nothing is tuned per point).
"""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from planner.plan import plan
from planner.published import POINTS, seed_input, seed_sensitivity


def _fmt(metric: str, value: float) -> str:
    if metric in ("scaling_efficiency", "mfu"):
        return f"{100 * value:.1f}%"
    return f"{value:,.0f}"


def main() -> int:
    print(f"{'point':<52} {'metric':<22} {'published':>10} {'planner':>10} {'delta':>9}  in band")
    for p in POINTS:
        got = p.predict()
        delta = got - p.published
        d = (
            f"{100 * delta:+.1f} pt"
            if p.metric == "scaling_efficiency"
            else f"{delta / p.published:+.0%}"
        )
        ok = "yes" if abs(delta) <= p.tolerance else "NO"
        print(
            f"{p.name:<52} {p.metric:<22} {_fmt(p.metric, p.published):>10} "
            f"{_fmt(p.metric, got):>10} {d:>9}  {ok}"
        )
        print(f"    setup: {p.setup}")
        print(f"    source: {p.source}")
    print()
    print(
        "seed scaling curve (llama2-13b, p5.48xlarge, epoch-loop / steady-step / job efficiency):"
    )
    for r in plan(seed_input("llama2-13b"), [1, 2, 4, 8, 16]):
        e = r["epoch"]
        print(
            f"  {r['nodes']:>2} nodes: {e['steps']:>2} steps, loop {e['loop_s']:6.1f} s, "
            f"eff {100 * r['scaling_efficiency']:5.1f}%, step eff "
            f"{100 * r['step_scaling_efficiency']:5.1f}%, job eff "
            f"{100 * r['job_scaling_efficiency']:5.1f}%, MFU {100 * r['mfu']:.1f}%"
        )
    print()
    print(
        "seed sensitivity (16 vs 1 p5.48xlarge, published 87%): what the source leaves open -- "
        "model size, samsum tokens per example, train-loop fixed cost"
    )
    print(f"  {'model':<11} {'tok/example':>11} {'fixed s':>8} {'steps 1/16':>11} {'eff':>7}")
    for r in seed_sensitivity():
        print(
            f"  {r['model']:<11} {r['tokens_per_example']:>11} {r['fixed_cost_s']:>8.2f} "
            f"{r['steps_1_node']:>5}/{r['steps_16_nodes']:<5} {100 * float(r['scaling_efficiency']):6.1f}%"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
