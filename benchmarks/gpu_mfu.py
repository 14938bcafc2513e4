"""Throughput and MFU of one GPU training a Llama-2-7B-shaped model with our FSDP2 setup.

Random init (no download), FSDP2 via `training.parallelize` (bf16 parameters in compute, fp32
reduction and master weights, activation checkpointing per decoder layer), sequence 4096,
AdamW; times STEPS optimizer steps after WARMUP and prints tokens/s and MFU against the device's
dense bf16 peak (989 TFLOP/s for H100/H200). FLOPs per token = 6 N + 12 L d S (PaLM's MFU
formula; recomputation from activation checkpointing is not counted).

    python benchmarks/gpu_mfu.py                  # on a CUDA machine (torchrun not needed)
    python benchmarks/gpu_mfu.py --tiny           # a tiny shape on CPU: checks the script runs
    python benchmarks/gpu_mfu.py --no-ac --pure-bf16   # variants (memory permitting)

Memory of the default on one GPU: 7B x (4 B fp32 param + 4 B grad + 8 B Adam) ~ 108 GB plus
activations; it fits an H200 (141 GB), not an 80 GB H100 (use --pure-bf16 there: ~54 GB).
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

LLAMA2_7B = {
    "hidden_size": 4096,
    "intermediate_size": 11008,
    "num_hidden_layers": 32,
    "num_attention_heads": 32,
    "num_key_value_heads": 32,
    "vocab_size": 32000,
    "max_position_embeddings": 4096,
}
TINY = {
    "hidden_size": 64,
    "intermediate_size": 176,
    "num_hidden_layers": 2,
    "num_attention_heads": 4,
    "num_key_value_heads": 4,
    "vocab_size": 512,
    "max_position_embeddings": 256,
}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--tiny", action="store_true", help="tiny shape on CPU (a smoke check)")
    ap.add_argument("--seq", type=int, default=None, help="sequence length (4096; tiny: 128)")
    ap.add_argument("--batch", type=int, default=1, help="sequences per step")
    ap.add_argument("--steps", type=int, default=20)
    ap.add_argument("--warmup", type=int, default=3)
    ap.add_argument("--no-ac", dest="ac", action="store_false", help="no activation checkpointing")
    ap.add_argument("--pure-bf16", action="store_true", help="bf16 params/grads/optimizer")
    ap.add_argument("--json", type=Path, default=None, help="also write the figures here")
    a = ap.parse_args()

    import torch
    from transformers import LlamaConfig

    from training.config import TrainConfig
    from training.dist import device_type, distributed
    from training.finetune import token_loss_sum
    from training.metrics import peak_flops
    from training.model import ModelSpec, build_empty, flops_per_token, restore_buffers
    from training.parallelize import ParallelDims, build_mesh, parallelize

    if not a.tiny and not torch.cuda.is_available():
        sys.exit("error: no CUDA device (use --tiny for a CPU smoke check)")
    seq = a.seq or (128 if a.tiny else 4096)
    shape = TINY if a.tiny else LLAMA2_7B
    config = LlamaConfig(**shape, rms_norm_eps=1e-5, tie_word_embeddings=False)
    cfg = TrainConfig(
        enable_fsdp=True,
        mixed_precision=not a.pure_bf16,
        pure_bf16=a.pure_bf16,
        fsdp_activation_checkpointing=a.ac,
        context_length=seq,
    )
    dtype = torch.bfloat16 if a.pure_bf16 else torch.float32
    with distributed() as env:
        dims = ParallelDims.from_config(cfg, env.world_size, env.local_world_size)
        spec = ModelSpec(name="llama2-7b-shape", config=config, is_preset=True, dtype=dtype)
        model = build_empty(spec)
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
        n_params = sum(p.numel() for p in model.parameters())
        opt = torch.optim.AdamW(model.parameters(), lr=1e-5, weight_decay=0.0)
        g = torch.Generator().manual_seed(0)
        ids = torch.randint(0, config.vocab_size, (a.batch, seq), generator=g).to(env.device)
        batch = {"input_ids": ids, "attention_mask": torch.ones_like(ids), "labels": ids}

        def step() -> float:
            loss = token_loss_sum(model, batch) / ids.numel()
            loss.backward()
            torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
            opt.step()
            opt.zero_grad(set_to_none=True)
            return float(loss.detach())

        sync = torch.cuda.synchronize if env.device.type == "cuda" else (lambda: None)
        for _ in range(a.warmup):
            step()
        sync()
        if env.device.type == "cuda":
            torch.cuda.reset_peak_memory_stats()
        t0 = time.perf_counter()
        for _ in range(a.steps):
            loss = step()
        sync()
        elapsed = time.perf_counter() - t0

        tokens_per_s = a.batch * seq * a.steps / elapsed
        fpt = flops_per_token(config, seq)
        peak = peak_flops(env.device)
        mfu = tokens_per_s * fpt / (peak * env.world_size) if peak else None
        mem = torch.cuda.max_memory_allocated() if env.device.type == "cuda" else 0
        device_name = torch.cuda.get_device_name() if env.device.type == "cuda" else "cpu"
        figures = {
            "device": device_name,
            "params": n_params,
            "seq": seq,
            "batch": a.batch,
            "steps": a.steps,
            "activation_checkpointing": a.ac,
            "pure_bf16": a.pure_bf16,
            "step_time_s": elapsed / a.steps,
            "tokens_per_s": tokens_per_s,
            "tflops_per_s": tokens_per_s * fpt / 1e12,
            "mfu": mfu,
            "peak_mem_gib": mem / 2**30,
            "final_loss": loss,
        }
        if env.is_main:
            print(
                f"{device_name}: {n_params / 1e6:,.1f} M params, seq {seq} x batch {a.batch}, "
                f"AC {'on' if a.ac else 'off'}, {'pure bf16' if a.pure_bf16 else 'bf16 mixed'}\n"
                f"{a.steps} steps after {a.warmup} warm-up: {elapsed / a.steps:.3f} s/step, "
                f"{tokens_per_s:,.0f} tokens/s, {figures['tflops_per_s']:.1f} TFLOP/s, "
                f"MFU {'-' if mfu is None else f'{100 * mfu:.1f}%'}, "
                f"peak memory {figures['peak_mem_gib']:.1f} GiB, loss {loss:.3f}"
            )
            if a.json:
                a.json.write_text(json.dumps(figures, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
