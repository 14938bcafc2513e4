"""Throughput, MFU and peak memory of one GPU training a Llama-2-7B-shaped model, as users run it.

What a user's job does, on one device: random init (no download), `training.parallelize` (FSDP2
with bf16 compute and fp32 master weights and reduction, activation checkpointing per decoder
layer: `--ac selective` by default, torchtitan's usual pairing with compile; `full`, `none`),
the chunked loss of `training.loss`, fused AdamW (`training.step.build_optimizer`), the
trainer's gradient clipping (`training.step.clip_grads`), sequence 4,096, batch 2 (2-4 is what
fits next to fp32 master weights). Each variant (torch.compile per block off, then on) runs
WARMUP steps, then STEPS timed steps with no host sync inside (the loss is read once at the
end; on CUDA `torch.cuda.set_sync_debug_mode("error")` makes any sync in them an error).
Prints tokens/s, TFLOP/s, MFU against the device's dense bf16 peak (989 TFLOP/s for H100/H200; FLOPs per token = 6 N + 12 L h_q S as PaLM (h_q = heads × head_dim), recomputation not counted) and the peak
allocated and reserved memory.

    python benchmarks/gpu_mfu.py                       # CUDA: compile off and on, batch 2
    python benchmarks/gpu_mfu.py --batch 4 --ac full --compile on
    python benchmarks/gpu_mfu.py --tiny                # a tiny shape on CPU: checks the script

Memory on one GPU: 7B x (4 B fp32 param + 4 B grad + 8 B Adam) ~ 108 GB plus activations; it
fits an H200 (141 GB), not an 80 GB H100 (use --pure-bf16 there: ~54 GB); a state that cannot
fit stops before the model is built, with that advice (`state_check`). Target: >= 50% MFU for
this shape on one H100/H200-class GPU.

Each step copies its batch from host memory as the trainer does (`training.data.to_device`:
pinned, non-blocking on CUDA). Under torchrun every rank trains its own batch: tokens/s is
global (all ranks), MFU is against the peak of all ranks.
"""

from __future__ import annotations

import argparse
import gc
import json
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

LLAMA2_7B: dict[str, Any] = {
    "hidden_size": 4096,
    "intermediate_size": 11008,
    "num_hidden_layers": 32,
    "num_attention_heads": 32,
    "num_key_value_heads": 32,
    "vocab_size": 32000,
    "max_position_embeddings": 4096,
}
TINY: dict[str, Any] = {
    "hidden_size": 64,
    "intermediate_size": 176,
    "num_hidden_layers": 2,
    "num_attention_heads": 4,
    "num_key_value_heads": 4,
    "vocab_size": 512,
    "max_position_embeddings": 256,
}


STATE_FRACTION = 0.9
"""Share of a GPU's memory the weights, gradients and AdamW state may take (the rest: activations)."""


def state_check(n_params: int, pure_bf16: bool, world: int, total_bytes: int) -> str | None:
    """One line when the sharded training state cannot fit a GPU of `total_bytes`, else None.

    Per parameter, the planner's precisions (`planner.memory.PRECISIONS`): fp32 master weight,
    fp32 gradient and two fp32 AdamW moments (16 B) with bf16 mixed precision; bf16 everything
    (8 B) with --pure-bf16 (the moments take the parameter's dtype). FSDP shards it over
    `world` GPUs.
    """
    from planner.memory import PRECISIONS

    def state(precision: str) -> float:
        p = PRECISIONS[precision]
        return n_params * (p.param + p.grad + 2 * p.optim) / world

    limit, gib = STATE_FRACTION * total_bytes, 2**30
    bf16 = state("pure_bf16")
    need = bf16 if pure_bf16 else state("mixed")
    if need <= limit:
        return None
    if pure_bf16 or bf16 > limit:
        hint = "shard it over more GPUs (torchrun --nproc_per_node N)"
    else:
        hint = f"run with --pure-bf16 (~{bf16 / gib:.1f} GiB)"
    what = "bf16" if pure_bf16 else "fp32 master"
    return (
        f"{n_params / 1e9:.2f} B parameters need ~{need / gib:.1f} GiB per GPU of {what} "
        f"weights, gradients and AdamW state, more than {STATE_FRACTION:.0%} of this GPU's "
        f"{total_bytes / gib:.1f} GiB; {hint}"
    )


def run_variant(a: argparse.Namespace, env: Any, compile_on: bool) -> dict[str, Any]:
    import torch
    from transformers import LlamaConfig

    from training.config import TrainConfig
    from training.data import to_device
    from training.dist import device_type
    from training.metrics import peak_flops
    from training.model import ModelSpec, build_empty, flops_per_token, restore_buffers
    from training.parallelize import ParallelDims, build_mesh, parallelize, resolve_precision
    from training.step import build_optimizer, clip_grads, token_loss_sum

    seq = a.seq or (128 if a.tiny else 4096)
    config = LlamaConfig(
        **(TINY if a.tiny else LLAMA2_7B), rms_norm_eps=1e-5, tie_word_embeddings=False
    )
    cfg = TrainConfig(
        enable_fsdp=True,
        mixed_precision=not a.pure_bf16,
        pure_bf16=a.pure_bf16,
        fsdp_activation_checkpointing=a.ac != "none",
        ac_mode=a.ac,
        compile=compile_on,
        context_length=seq,
        lr=1e-5,
        gradient_clipping=True,
    )
    cfg, note = resolve_precision(cfg, env.device)  # fp32 on a CPU that only emulates bf16
    dtype = torch.bfloat16 if a.pure_bf16 else torch.float32
    dims = ParallelDims.from_config(cfg, env.world_size, env.local_world_size)
    spec = ModelSpec(name="llama2-7b-shape", config=config, is_preset=True, dtype=dtype)
    model = build_empty(spec)
    n_params = sum(p.numel() for p in model.parameters())  # on the meta device
    if env.device.type == "cuda":  # before anything is allocated
        total = torch.cuda.get_device_properties(env.device).total_memory
        if (problem := state_check(n_params, a.pure_bf16, env.world_size, total)) is not None:
            raise SystemExit(f"error: {problem}")
    parallelize(model, build_mesh(dims, device_type()), cfg, dims)
    model.to_empty(device=env.device)
    torch.manual_seed(0)
    with torch.no_grad():  # random init of the local shards, no full copy anywhere
        for name, p in model.named_parameters():
            if name.endswith("norm.weight"):
                p.fill_(1.0)
            else:
                p.normal_(0.0, 0.02)
    restore_buffers(model, spec)
    opt = build_optimizer(model, cfg)
    g = torch.Generator().manual_seed(0)
    host_ids = torch.randint(0, config.vocab_size, (a.batch, seq), generator=g)
    scored = a.batch * (seq - 1)  # labels are the inputs shifted by one

    def step() -> torch.Tensor:
        ids = to_device(host_ids, env.device)  # every step, as the trainer's batches
        loss = token_loss_sum(model, {"input_ids": ids, "labels": ids}) / scored
        loss.backward()
        clip_grads(model, cfg.gradient_clipping_threshold)  # the trainer's path
        opt.step()
        opt.zero_grad(set_to_none=True)
        return loss.detach()

    cuda = env.device.type == "cuda"
    sync = torch.cuda.synchronize if cuda else (lambda: None)
    t_compile = time.perf_counter()
    for _ in range(a.warmup):
        step()
    sync()
    warmup_s = time.perf_counter() - t_compile
    if cuda:
        torch.cuda.reset_peak_memory_stats()
    # On CUDA the timed steps run under torch's sync debug mode: a host sync in them (a scalar
    # read, a data-dependent size, a device -> cpu copy) raises instead of skewing the figure.
    debug = torch.cuda.get_sync_debug_mode() if cuda else 0
    if cuda and a.sync_debug != "off":
        torch.cuda.set_sync_debug_mode(a.sync_debug)
    try:
        t0 = time.perf_counter()
        losses = [step() for _ in range(a.steps)]
    finally:
        if cuda:
            torch.cuda.set_sync_debug_mode(debug)
    sync()
    elapsed = time.perf_counter() - t0
    loss = float(torch.stack(losses)[-1])

    tokens_per_s = a.batch * seq * a.steps * env.world_size / elapsed  # every rank's batch
    fpt = flops_per_token(config, seq)
    peak = peak_flops(env.device)
    out = {
        "device": torch.cuda.get_device_name() if cuda else "cpu",
        "params": n_params,
        "seq": seq,
        "batch": a.batch,
        "steps": a.steps,
        "compile": compile_on,
        "ac": a.ac,
        "precision": "pure bf16"
        if a.pure_bf16
        else ("bf16 mixed" if cfg.mixed_precision else "fp32"),
        "precision_note": note,
        "optimizer": "fused AdamW" if opt.defaults.get("fused") else "foreach AdamW",
        "warmup_s": warmup_s,
        "step_time_s": elapsed / a.steps,
        "tokens_per_s": tokens_per_s,
        "tflops_per_s": tokens_per_s * fpt / 1e12,
        "mfu": tokens_per_s * fpt / (peak * env.world_size) if peak else None,
        "peak_allocated_gib": torch.cuda.max_memory_allocated() / 2**30 if cuda else None,
        "peak_reserved_gib": torch.cuda.max_memory_reserved() / 2**30 if cuda else None,
        "final_loss": loss,
    }
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--tiny", action="store_true", help="tiny shape on CPU (a smoke check)")
    ap.add_argument("--seq", type=int, default=None, help="sequence length (4096; tiny: 128)")
    ap.add_argument("--batch", type=int, default=2, help="sequences per step (2-4)")
    ap.add_argument("--steps", type=int, default=10)
    ap.add_argument("--warmup", type=int, default=3, help="untimed steps (compilation included)")
    ap.add_argument(
        "--ac",
        choices=("full", "selective", "none"),
        default="selective",
        help="activation checkpointing (torchtitan's usual: compile + op-level selective)",
    )
    ap.add_argument("--compile", choices=("off", "on", "both"), default="both")
    ap.add_argument("--pure-bf16", action="store_true", help="bf16 params/grads/optimizer")
    ap.add_argument(
        "--sync-debug",
        choices=("error", "warn", "off"),
        default="error",
        help="torch.cuda.set_sync_debug_mode for the timed steps (CUDA)",
    )
    ap.add_argument("--json", type=Path, default=None, help="also write the figures here")
    a = ap.parse_args()

    import torch

    from training.dist import distributed

    if not a.tiny and not torch.cuda.is_available():
        sys.exit("error: no CUDA device (use --tiny for a CPU smoke check)")
    variants = {"off": [False], "on": [True], "both": [False, True]}[a.compile]
    rows = []
    with distributed() as env:
        for compile_on in variants:
            rows.append(run_variant(a, env, compile_on))
            gc.collect()  # the variant's model and optimizer go before the next one
            if torch.cuda.is_available():
                torch.cuda.empty_cache()
        if env.is_main:
            r0 = rows[0]
            print(
                f"{r0['device']}: {r0['params'] / 1e6:,.1f} M params, seq {r0['seq']} x batch "
                f"{r0['batch']}, AC {r0['ac']}, {r0['precision']}, {r0['optimizer']}, "
                f"{a.steps} steps after {a.warmup} warm-up"
                + (f"\n{r0['precision_note']}" if r0["precision_note"] else "")
            )
            print(
                f"{'compile':<8} {'s/step':>8} {'tokens/s':>10} {'TFLOP/s':>8} {'MFU':>6} "
                f"{'alloc GiB':>10} {'resv GiB':>9} {'warm-up s':>10} {'loss':>7}"
            )
            for r in rows:

                def num(v: float | None, fmt: str) -> str:
                    return "-" if v is None else format(v, fmt)

                mfu = "-" if r["mfu"] is None else f"{100 * r['mfu']:.1f}%"
                print(
                    f"{'on' if r['compile'] else 'off':<8} {r['step_time_s']:8.3f} "
                    f"{r['tokens_per_s']:10,.0f} {r['tflops_per_s']:8.1f} {mfu:>6} "
                    f"{num(r['peak_allocated_gib'], '10.1f'):>10} "
                    f"{num(r['peak_reserved_gib'], '9.1f'):>9} {r['warmup_s']:10.1f} "
                    f"{r['final_loss']:7.3f}"
                )
            if a.json:
                a.json.write_text(json.dumps(rows, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
