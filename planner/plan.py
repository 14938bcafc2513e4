"""A plan: one JSON-ready row per node count, with its scaling against one node and the
recommended configuration.

It sits above both modules it calls: ``planner.recommend`` searches with ``planner.predict``,
and ``planner.predict`` imports neither.
"""

from __future__ import annotations

from typing import Any

from planner.assumptions import generation
from planner.lora import adapter_params
from planner.predict import PlanInput, Prediction, checkpoint_size, checkpoint_time, predict
from planner.recommend import recommend


def plan(
    inp: PlanInput, node_counts: list[int], min_nodes: int | None = None
) -> list[dict[str, Any]]:
    """One JSON-ready row per node count, with scaling efficiencies against one node. The
    one-node reference of an HSDP plan whose shard group spans several nodes shards over its
    one node (the group cannot be larger than the world); a node count the group does not
    divide is bad input (``UsageError``, naming both). ``min_nodes``: an elastic job's minimum,
    which the recommendation's HSDP group divides too (``planner.recommend.candidates``)."""
    from dataclasses import replace

    from planner.args import UsageError

    one = inp
    if inp.hsdp_group is not None and inp.hsdp_group > inp.instance.gpus:
        one = replace(inp, hsdp_group=inp.instance.gpus)
    base = predict(one, 1)
    rows = []
    for n in node_counts:
        try:
            pr = predict(inp, n)
        except ValueError as err:
            raise UsageError(f"--nodes {n}: {err}") from None
        rows.append(row(inp, pr, base, min_nodes))
    return rows


def _ratio(value: float, base: float, nodes: int) -> float | None:
    return value / (nodes * base) if base > 0 else None


def row(
    inp: PlanInput, pr: Prediction, base: Prediction, min_nodes: int | None = None
) -> dict[str, Any]:
    """The JSON object of one prediction (``base``: the same plan on one node)."""
    it = inp.instance
    return {
        "nodes": pr.nodes,
        "gpus": pr.gpus,
        "instance": it.name,
        "model": inp.shape.name,
        "n_params": inp.shape.n_params,
        "sharding": pr.layout.strategy,
        "shard_group": pr.layout.shard,
        "replicas": pr.layout.replicas,
        "activation_checkpointing": inp.ac > 0,
        "ac_fraction": float(inp.ac),
        "ac_mode": inp.ac_mode if inp.ac > 0 else "none",
        "micro_batch": inp.batch,
        "seq": inp.seq,
        "precision": inp.precision.name,
        "lora": None
        if inp.lora is None
        else {
            "r": inp.lora.r,
            "targets": list(inp.lora.targets),
            "dropout": inp.lora.dropout,
            "adapter_params": adapter_params(inp.shape, inp.lora),
        },
        "fits": pr.fits,
        "mem_per_gpu_bytes": pr.memory.total,
        "gpu_memory_bytes": it.gpu_memory_bytes,
        "memory": pr.memory.as_dict(),
        "flops_per_token": pr.flops_per_token,
        "step_time_s": pr.step_time_s,
        "compute_s": {
            "gemm": pr.compute.gemm_s,
            "attention": pr.compute.attention_s,
            "elementwise": pr.compute.elementwise_s,
            "optimizer": pr.compute.optimizer_s,
            "total": pr.compute.total_s,
        },
        "comm_s": {
            "nvlink": pr.comm.nvlink_s,
            "efa": pr.comm.network_s,
            "exposed": pr.comm.exposed_s,
            "interference": pr.comm.interference_s,
        },
        "tokens_per_s_per_gpu": pr.tokens_per_s_per_gpu,
        "mfu": pr.mfu,
        "step_scaling_efficiency": pr.tokens_per_s_per_gpu / base.tokens_per_s_per_gpu,
        "scaling_efficiency": _ratio(pr.epoch_tokens_per_s, base.epoch_tokens_per_s, pr.nodes)
        if pr.epoch is not None
        else pr.tokens_per_s_per_gpu / base.tokens_per_s_per_gpu,
        "job_scaling_efficiency": _ratio(pr.job_tokens_per_s, base.job_tokens_per_s, pr.nodes),
        "scaling_baseline_fits": base.fits,
        "checkpoint_bytes": checkpoint_size(inp),
        "checkpoint_s": checkpoint_time(inp, pr.nodes),
        "storage": inp.storage.describe(),
        "epoch": pr.epoch.as_dict() if pr.epoch is not None else None,
        "cost_per_epoch_usd": pr.cost_per_epoch_usd,
        "usd_per_hour": inp.usd_per_hour if inp.usd_per_hour is not None else it.usd_per_hour,
        "price_basis": inp.price_basis,
        "recommendation": recommend(
            inp, pr.nodes, min_nodes=min_nodes if min_nodes and min_nodes < pr.nodes else None
        ),
        "assumptions": assumptions_used(inp),
    }


def assumptions_used(inp: PlanInput) -> dict[str, Any]:
    """The values behind a prediction: generation row, constants, dataset and dtypes."""
    gen = inp.gpu or generation(inp.instance.gpu_model)
    return {
        "gpu_generation": vars(gen).copy(),
        "instance": {
            "gpu_model": inp.instance.gpu_model,
            "peak_bf16_tflops": inp.instance.peak_bf16_tflops,
            "nvlink_gbytes_per_s": inp.instance.nvlink_gbytes_per_s,
            "network_gbps": inp.instance.network_gbps,
        },
        "precision": vars(inp.precision).copy(),
        "dataset_tokens": inp.dataset_tokens,
        "epochs": inp.epochs,
        "sampler": inp.sampler,
        "grad_accum": inp.grad_accum,
        **inp.assumptions.as_dict(),
    }
