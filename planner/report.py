"""Human-readable table of a plan."""

from __future__ import annotations

from typing import Any

GIB = 2**30


def _gib(n: float) -> str:
    return f"{n / GIB:.1f}"


def _pct(x: float | None) -> str:
    return "-" if x is None else f"{100 * x:.0f}%"


def _ac(fraction: float, mode: str = "full") -> str:
    if fraction <= 0:
        return "off"
    how = "" if mode == "full" else f" ({mode})"
    return f"on{how}" if fraction >= 1 else f"on {fraction:.0%} of layers{how}"


def _lora(lora: dict[str, Any] | None) -> str:
    if not lora:
        return ""
    dropout = "" if lora["dropout"] else ", no dropout"
    return (
        f", LoRA r {lora['r']} on {','.join(lora['targets'])}{dropout} "
        f"({lora['adapter_params'] / 1e6:.1f} M trainable)"
    )


def table(rows: list[dict[str, Any]]) -> str:
    """The plan as aligned text: memory, time, throughput, scaling, cost, recommendation."""
    if not rows:
        return ""
    r0 = rows[0]
    lines = [
        f"{r0['model']} ({r0['n_params'] / 1e9:.2f} B params) on {r0['instance']}: "
        f"{r0['sharding']}, AC {_ac(r0['ac_fraction'], r0.get('ac_mode', 'full'))}, "
        f"micro-batch {r0['micro_batch']} x {r0['seq']} tokens, {r0['precision']} precision"
        + _lora(r0.get("lora")),
        "",
    ]
    head = (
        "nodes",
        "gpus",
        "fits",
        "GiB/GPU",
        "params",
        "grads",
        "optim",
        "act",
        "act(noAC)",
        "gathered",
        "other",
        "step s",
        "tok/s/GPU",
        "MFU",
        "NVLink s",
        "EFA s",
        "exposed s",
        "eff",
        "job eff",
        "$/epoch",
    )
    body = []
    for r in rows:
        m = r["memory"]
        body.append(
            (
                str(r["nodes"]),
                str(r["gpus"]),
                "yes" if r["fits"] else "NO",
                f"{_gib(r['mem_per_gpu_bytes'])}/{_gib(r['gpu_memory_bytes'])}",
                _gib(m["params"]),
                _gib(m["grads"]),
                _gib(m["optimizer"]),
                _gib(m["activations"]),
                _gib(m["activations_no_ac"]),
                _gib(m["gathered_peak"]),
                _gib(m["overhead"]),
                f"{r['step_time_s']:.2f}",
                f"{r['tokens_per_s_per_gpu']:.0f}",
                _pct(r["mfu"]),
                f"{r['comm_s']['nvlink']:.2f}",
                f"{r['comm_s']['efa']:.2f}",
                f"{r['comm_s']['exposed'] + r['comm_s']['interference']:.2f}",
                _pct(r["scaling_efficiency"]),
                _pct(r["job_scaling_efficiency"]),
                "-" if r["cost_per_epoch_usd"] is None else f"{r['cost_per_epoch_usd']:.2f}",
            )
        )
    widths = [max(len(h), *(len(b[i]) for b in body)) for i, h in enumerate(head)]
    lines.append("  ".join(h.rjust(w) for h, w in zip(head, widths, strict=True)))
    lines.extend("  ".join(c.rjust(w) for c, w in zip(b, widths, strict=True)) for b in body)
    lines.append("")
    if any(r["cost_per_epoch_usd"] is not None for r in rows):
        lines.append(f"$/epoch at ${r0['usd_per_hour']:,.2f} per node-hour ({r0['price_basis']})")
    unit = r0["memory"]["gathered_unit_name"]
    lines.append(
        f"largest FSDP unit: {unit}, {_gib(r0['memory']['gathered_unit'])} GiB unsharded; "
        f"FLOPs/token {r0['flops_per_token']:.3g} "
        f"({'4N + 6 N_adapters' if r0.get('lora') else '6N'} + 12 L h s)"
    )
    if "checkpoint_s" in r0:
        lines.append(
            f"checkpoint: {r0['checkpoint_bytes'] / 1e9:.1f} GB "
            f"({'adapters' if r0.get('lora') else 'model'} + AdamW state) to "
            f"{r0['storage']}: "
            + ", ".join(f"{r['checkpoint_s']:.0f} s @ {r['nodes']} nodes" for r in rows)
        )
    if r0["epoch"] is not None:
        for r in rows:
            e = r["epoch"]
            lines.append(
                f"epoch @ {r['nodes']} nodes: {e['steps']} step{'' if e['steps'] == 1 else 's'}, loop {e['loop_s']:.0f} s, "
                f"eval {e['eval_s']:.0f} s, checkpoint {e['checkpoint_s']:.0f} s, "
                f"start-up {e['startup_s']:.0f} s"
            )
        lines.append(
            "eff = epoch-loop throughput vs 1 node; job eff includes eval, checkpoint and start-up"
        )
    if not r0["scaling_baseline_fits"]:
        lines.append(
            "note: one node does not fit this configuration; efficiencies compare "
            "against a hypothetical one-node run"
        )
    for r in rows:
        rec = r["recommendation"]
        if rec is None:
            lines.append(
                f"recommend @ {r['nodes']} nodes: nothing fits (micro-batch 1, AC, "
                "any sharding, even pure bf16); use more nodes or a GPU with more memory"
            )
            continue
        group = f" group {rec['hsdp_group']}" if rec["hsdp_group"] else ""
        lines.append(
            f"recommend @ {r['nodes']} nodes: {rec['sharding']}{group}, AC "
            f"{'on' if rec['activation_checkpointing'] else 'off'}, micro-batch "
            f"{rec['micro_batch']} -> {rec['tokens_per_s_per_gpu']:.0f} tok/s/GPU, "
            f"{_gib(rec['mem_per_gpu_bytes'])} GiB/GPU, MFU {_pct(rec['mfu'])}"
            + (
                ""
                if rec["precision"] == r["precision"]
                else f" (needs --precision {rec['precision']})"
            )
        )
    return "\n".join(lines)
