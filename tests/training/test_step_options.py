"""Precision per device, the fused optimizer and the FSDP unit layout of `training.parallelize`.

If these fail: a CPU that only emulates bf16 trains in bf16 again (a step ~10x slower: 228 vs
2,098 tokens/s measured on a 2-core AVX2 EPYC), or --force_bf16 / --pure_bf16 / CUDA stop
being honoured; /proc/cpuinfo flags are misread (x86 "flags", aarch64 "Features"); AdamW falls
back to the foreach kernel, or the fused one no longer gives foreach's update; the token
embedding and `[norm, lm_head]` stop being their own FSDP units (torchtitan's layout: the
head's all-gather then sits exposed in the root), the head is resharded after forward (gathered
twice per step), or the prefetch chain embedding -> blocks -> head is broken; a compiled
block with a graph break runs partly eager again instead of stopping the run.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any

import pytest
import torch

from training.config import ConfigError, TrainConfig, parse_args
from training.model import cpu_flags, native_low_precision
from training.parallelize import resolve_precision


def _tiny_llama(**overrides: Any) -> Any:
    """A 32-wide LlamaConfig for layer-level checks (GQA 4:2, SDPA); `overrides` on top."""
    from transformers import LlamaConfig

    base: dict[str, Any] = {
        "vocab_size": 64,
        "hidden_size": 32,
        "intermediate_size": 64,
        "num_hidden_layers": 2,
        "num_attention_heads": 4,
        "num_key_value_heads": 2,
        "attn_implementation": "sdpa",
    }
    return LlamaConfig(**{**base, **overrides})


X86 = "processor\t: 0\nvendor_id\t: AuthenticAMD\nflags\t\t: fpu sse2 avx2 fma\n"
ARM = "processor\t: 0\nFeatures\t: fp asimd bf16 i8mm\nCPU implementer\t: 0x41\n"


def test_cpu_flags_x86_and_aarch64(tmp_path: Path) -> None:
    (tmp_path / "x86").write_text(X86)
    (tmp_path / "arm").write_text(ARM)
    assert cpu_flags(str(tmp_path / "x86")) == {"fpu", "sse2", "avx2", "fma"}
    assert "bf16" in cpu_flags(str(tmp_path / "arm"))
    assert cpu_flags(str(tmp_path / "missing")) == set()


def test_precision_follows_the_cpu() -> None:
    """On this machine's CPU: fp32 unless it has native bf16; one line says why."""
    cfg = TrainConfig(enable_fsdp=True)
    assert cfg.mixed_precision
    got, note = resolve_precision(cfg, torch.device("cpu"))
    if native_low_precision(torch.device("cpu"), torch.bfloat16):
        assert got == cfg and note is None
    else:
        assert not got.mixed_precision
        assert note is not None and "\n" not in note
        assert "fp32" in note and "--force_bf16" in note
        assert dataclasses.replace(got, mixed_precision=True) == cfg  # nothing else changed


@pytest.mark.parametrize(
    "flags",
    [["--force_bf16"], ["--pure_bf16"], ["--mixed_precision=False"], []],
)
def test_explicit_choices_and_cuda_are_kept(flags: list[str]) -> None:
    cfg = parse_args(["--enable_fsdp", *flags])
    assert resolve_precision(cfg, torch.device("cuda", 0)) == (cfg, None)
    if flags:
        assert resolve_precision(cfg, torch.device("cpu")) == (cfg, None)


def test_ac_mode_flag() -> None:
    assert parse_args(["--ac_mode", "selective"]).ac_mode == "selective"
    with pytest.raises(ConfigError, match="--ac_mode: must be one of full, selective, none"):
        parse_args(["--ac_mode", "op"])
    with pytest.raises(ConfigError, match="--ac_mode: selective needs"):
        parse_args(["--ac_mode=selective", "--fsdp_activation_checkpointing=False"])


def test_selective_ac_without_fsdp_stops_before_the_process_group() -> None:
    """AC is part of the FSDP setup (llama-recipes' --fsdp_activation_checkpointing): without
    --enable_fsdp the default full AC is off, and an explicit selective stops in one line
    (checked in `main` before the process group starts) instead of being dropped."""
    from training.parallelize import ParallelDims, ParallelError

    with pytest.raises(ParallelError, match=r"^--ac_mode selective: .* pass --enable_fsdp"):
        ParallelDims.from_config(parse_args(["--ac_mode=selective"]), world_size=1)
    for flags in ([], ["--ac_mode=none"], ["--ac_mode=full"]):
        assert not ParallelDims.from_config(parse_args(flags), world_size=1).enable_fsdp
    sharded = ParallelDims.from_config(parse_args(["--enable_fsdp", "--ac_mode=selective"]), 2)
    assert (sharded.strategy, sharded.shard) == ("FULL_SHARD", 2)


def test_fused_adamw_matches_foreach() -> None:
    from training.step import build_optimizer

    torch.manual_seed(0)
    a = torch.nn.Linear(32, 16)
    b = torch.nn.Linear(32, 16)
    b.load_state_dict(a.state_dict())
    cfg = TrainConfig(lr=1e-2, weight_decay=0.1)
    fused = build_optimizer(a, cfg)
    assert fused.defaults["fused"] is True
    ref = torch.optim.AdamW(b.parameters(), lr=1e-2, weight_decay=0.1, foreach=True)
    x = torch.randn(8, 32)
    for _ in range(5):
        for model, opt in ((a, fused), (b, ref)):
            model(x).square().sum().backward()
            opt.step()
            opt.zero_grad(set_to_none=True)
    for p, q in zip(a.parameters(), b.parameters(), strict=True):
        assert (p - q).abs().max() < 1e-6


def test_fsdp_units_as_torchtitan() -> None:
    """A world of one (gloo): embedding, each block and [norm, lm_head] are units; the head
    keeps its parameters after forward; prefetch runs embedding -> blocks -> head and back."""
    from torch.distributed.fsdp import FSDPModule
    from transformers import LlamaForCausalLM

    from training.dist import distributed
    from training.model import build_empty, decoder_layers, model_spec
    from training.parallelize import ParallelDims, build_mesh, parallelize

    cfg = TrainConfig(enable_fsdp=True, model_name="tiny-llama-2l", context_length=64)
    with distributed() as env:
        dims = ParallelDims.from_config(cfg, env.world_size)
        model = build_empty(model_spec(cfg.model_name, 512, cfg.context_length))
        assert isinstance(model, LlamaForCausalLM)
        layers = decoder_layers(model)  # by class name, so before FSDP renames the classes
        assert len(layers) == 2
        parallelize(model, build_mesh(dims, "cpu"), cfg, dims)
        embed, head = model.get_input_embeddings(), model.get_output_embeddings()
        norm = model.model.norm
        units = [embed, *layers, head]
        assert all(isinstance(u, FSDPModule) for u in [*units, norm, model])

        def group(m: torch.nn.Module):  # type: ignore[no-untyped-def]
            return m._get_fsdp_state()._fsdp_param_group  # type: ignore[operator]

        assert group(head) is group(norm)  # one unit, one all-gather
        assert group(head).post_forward_mesh_info is None  # not resharded after forward
        assert group(layers[0]).post_forward_mesh_info is not None  # FULL_SHARD blocks are
        assert group(model) is None  # the root owns no parameter of its own
        for i, unit in enumerate(units):
            state = unit._get_fsdp_state()  # type: ignore[operator]
            fwd = [m._get_fsdp_state() for m in units[i + 1 : i + 2]]  # type: ignore[operator]
            bwd = [m._get_fsdp_state() for m in units[max(i - 1, 0) : i]]  # type: ignore[operator]
            assert state._states_to_forward_prefetch == fwd
            assert state._states_to_backward_prefetch == bwd


@pytest.mark.parametrize("ac_mode", ["full", "selective"])
@pytest.mark.parametrize("padded", [True, False])
def test_activation_checkpointing_replays_without_the_kv_cache(ac_mode: str, padded: bool) -> None:
    """AC gives the gradients of the plain model, also when the caller leaves use_cache on.

    transformers builds a DynamicCache whenever use_cache is on (the config default), in train
    mode too, and each decoder layer appends its keys to it. The recompute in backward replays
    the layer, so without the fix the keys are appended twice: 128 keys for 64 queries, a shape
    error against a padding mask ("The size of tensor a (128) must match ... (64)"), and
    selective AC's replay check fails ("... encountered during backward but not found in
    storage") with or without one; only full AC without a mask got through, because the causal
    kernel read the first copy alone. transformers' GradientCheckpointingLayer drops the cache
    for that reason (modeling_layers.py); `training.parallelize` must too. Two widths in a row,
    as padded micro-batches have.
    """
    from transformers import AutoModelForCausalLM

    from training.model import decoder_layers
    from training.parallelize import _wrap_layer_forward

    cfg = _tiny_llama(vocab_size=256, max_position_embeddings=128)
    assert cfg.use_cache  # the default the failure needs
    torch.manual_seed(0)
    plain = AutoModelForCausalLM.from_config(cfg).train()
    wrapped = AutoModelForCausalLM.from_config(cfg).train()
    wrapped.load_state_dict(plain.state_dict())
    for layer in decoder_layers(wrapped):
        _wrap_layer_forward(layer, ac_mode, compile_layer=False)
    for width in (64, 23):
        ids = torch.randint(0, cfg.vocab_size, (2, width))
        mask = torch.ones_like(ids)
        if padded:
            mask[1, width // 2 :] = 0  # a right-padded row
        for model in (plain, wrapped):
            model.zero_grad()
            model(input_ids=ids, attention_mask=mask).logits.float().square().mean().backward()
        worst = max(
            (a.grad - b.grad).abs().max().item()  # type: ignore[operator]
            for a, b in zip(plain.parameters(), wrapped.parameters(), strict=True)
        )
        assert worst < 1e-6, f"width {width}: AC gradients differ by {worst:.3g}"


@pytest.mark.parametrize("bias", [False, True])
def test_selective_ac_saves_what_torchtitan_saves(bias: bool) -> None:
    """The op-level SAC policy's decisions on a real decoder layer, forward and replay.

    torchtitan's `SelectiveAC` (torchtitan/distributed/activation_checkpoint.py) saves the
    outputs of torch's compute-intensive ops (`get_default_op_list`: mm, addmm, ...), SDPA and
    the reduce-scatter, recomputes every second `mm`, and recomputes everything else. On a
    Llama layer without bias (q k v o gate up down, all `mm`) that saves q, v, gate, down and
    attention and recomputes k, o, up (what the planner's selective AC model assumes,
    planner.shapes); with biased projections (attention_bias: q k v o through `addmm`) those
    four are saved and not counted, so only up is recomputed. torch 2.13 stores each op
    call's decision in forward and replays from it (torch/utils/checkpoint.py,
    `_CachedTorchDispatchMode` no longer consults the policy); the input gradient must equal
    the plain layer's."""
    from torch.utils.checkpoint import checkpoint, create_selective_checkpoint_contexts
    from transformers import AutoModelForCausalLM

    from training.model import decoder_layers
    from training.parallelize import sac_policy

    cfg = _tiny_llama(
        intermediate_size=48, num_hidden_layers=1, num_key_value_heads=4, attention_bias=bias
    )
    model = AutoModelForCausalLM.from_config(cfg).train()
    (layer,) = decoder_layers(model)
    seen: dict[bool, list[tuple[str, str]]] = {False: [], True: []}
    inner = sac_policy()

    def recording(ctx: Any, func: Any, *args: Any, **kwargs: Any) -> Any:
        decision = inner(ctx, func, *args, **kwargs)
        name = str(func.overloadpacket.__name__)
        if name in ("mm", "addmm", "bmm") or "scaled_dot_product" in name:
            seen[ctx.is_recompute].append((name, decision.name))
        return decision

    forward = layer.forward
    hidden = torch.randn(2, 8, cfg.hidden_size, requires_grad=True)
    pos = model.model.rotary_emb(hidden, torch.arange(8)[None])

    def run(h: torch.Tensor) -> Any:
        return forward(h, position_embeddings=pos, attention_mask=None)

    out = checkpoint(
        run,
        hidden,
        use_reentrant=False,
        context_fn=lambda: create_selective_checkpoint_contexts(recording),
    )
    out = out[0] if isinstance(out, tuple) else out
    out.square().sum().backward()
    save, again = "MUST_SAVE", "PREFER_RECOMPUTE"
    proj = "addmm" if bias else "mm"
    sdpa = seen[False][3][0]
    if bias:  # q k v, sdpa, o saved (addmm: not counted); gate up down are mm 1..3
        expected = [(proj, save)] * 3 + [(sdpa, save), (proj, save)]
        expected += [("mm", save), ("mm", again), ("mm", save)]
    else:  # mm 1..7: q k v, sdpa, o gate up down; every second mm recomputed
        expected = [("mm", save), ("mm", again), ("mm", save), (sdpa, save), ("mm", again)]
        expected += [("mm", save), ("mm", again), ("mm", save)]
    assert seen[False] == expected
    assert "scaled_dot_product" in sdpa
    assert seen[True] == []  # decided once, in forward
    plain_in = hidden.detach().clone().requires_grad_(True)
    plain = run(plain_in)
    (plain[0] if isinstance(plain, tuple) else plain).square().sum().backward()
    assert torch.equal(hidden.grad, plain_in.grad)  # type: ignore[arg-type]

    # SDPA's math fallback decomposes into bmm: its B x H x S x S scores are recomputed
    from torch.nn.attention import SDPBackend, sdpa_kernel

    seen[False].clear()
    with sdpa_kernel(SDPBackend.MATH):
        math_out = checkpoint(
            run,
            hidden,
            use_reentrant=False,
            context_fn=lambda: create_selective_checkpoint_contexts(recording),
        )
    bmm = [d for n, d in seen[False] if n == "bmm"]
    assert bmm and set(bmm) == {again}, seen[False]
    del math_out


def test_peak_flops_per_h100_variant() -> None:
    """MFU's denominator by device name: torchtitan's get_peak_flops figures (NVIDIA's H100
    datasheet, dense bf16): SXM 989, NVL 835, PCIe 756 TFLOP/s; H200 989; A100 312; unknown
    devices give no MFU rather than a wrong one. If this fails, MFU on an H100 PCIe or NVL is
    understated by 24% or 16% (the SXM figure was used for every H100)."""
    from training.metrics import peak_flops, peak_flops_of

    names = {
        "NVIDIA H100 80GB HBM3": 989e12,
        "NVIDIA H100 NVL": 835e12,
        "NVIDIA H100 PCIe": 756e12,
        "NVIDIA H200": 989e12,
        "NVIDIA A100-SXM4-80GB": 312e12,
        "NVIDIA GeForce RTX 4090": None,
    }
    assert {n: peak_flops_of(n) for n in names} == names
    assert peak_flops(torch.device("cpu")) is None


def test_host_to_device_copy_is_pinned_on_cuda() -> None:
    """`training.data.to_device`: on CUDA the batch is copied from pinned memory, non-blocking
    (from pageable memory the driver may first wait for the stream's queued kernels: CUDA's
    "API synchronization behavior"); elsewhere it moves as it is. No CUDA device exists here,
    so a recording stand-in takes the tensor's place for the CUDA case (the real copy runs in
    benchmarks/gpu_mfu.py on a GPU); the CPU case is the real tensor."""
    from training.data import to_device

    calls: list[tuple[str, Any]] = []

    class Recorder:
        device = torch.device("cpu")

        def pin_memory(self) -> Recorder:
            calls.append(("pin_memory", None))
            return self

        def to(self, device: torch.device, non_blocking: bool = False) -> Recorder:
            calls.append(("to", (device.type, non_blocking)))
            return self

    to_device(Recorder(), torch.device("cuda", 0))  # type: ignore[arg-type]
    assert calls == [("pin_memory", None), ("to", ("cuda", True))]
    t = torch.arange(6).view(2, 3)
    moved = to_device(t, torch.device("cpu"))
    assert moved is t and not moved.is_pinned()


def test_clip_grads_is_clip_grad_norm() -> None:
    """training.step.clip_grads (the trainer's path, also benchmarks/gpu_mfu.py's) returns
    the norm before clipping and scales the gradients as torch.nn.utils.clip_grad_norm_."""
    from training.step import clip_grads

    torch.manual_seed(0)
    a, b = torch.nn.Linear(8, 4), torch.nn.Linear(8, 4)
    b.load_state_dict(a.state_dict())
    x = torch.randn(3, 8)
    for m in (a, b):
        m(x).pow(2).sum().backward()
    want = torch.nn.utils.clip_grad_norm_(list(b.parameters()), 0.5)
    got = clip_grads(a, 0.5)
    assert float(got) == pytest.approx(float(want), rel=1e-6) and float(want) > 0.5
    for p, q in zip(a.parameters(), b.parameters(), strict=True):
        torch.testing.assert_close(p.grad, q.grad)
    before = [_grad(p).clone() for p in a.parameters()]
    assert float(clip_grads(a, None)) == pytest.approx(0.5, rel=1e-5)  # no clip: norm only
    assert all(torch.equal(g, _grad(p)) for g, p in zip(before, a.parameters(), strict=True))


def _grad(p: torch.Tensor) -> torch.Tensor:
    """``p.grad``, which the test needs to be there."""
    assert p.grad is not None
    return p.grad


@pytest.mark.slow
def test_gpu_mfu_benchmark_runs_what_users_run(tmp_path: Path) -> None:
    """benchmarks/gpu_mfu.py by default measures selective activation checkpointing (torchtitan's
    usual pairing with compile) with fused AdamW; its tiny CPU shape trains to a finite loss."""
    import json
    import os
    import subprocess
    import sys

    out = tmp_path / "mfu.json"
    repo = Path(__file__).resolve().parents[2]
    cmd = [sys.executable, "benchmarks/gpu_mfu.py", "--tiny", "--steps=1", "--warmup=1"]
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    subprocess.run([*cmd, "--compile=off", f"--json={out}"], cwd=repo, env=env, check=True)
    (row,) = json.loads(out.read_text())
    assert row["ac"] == "selective" and row["optimizer"] == "fused AdamW"
    assert 0 < row["final_loss"] < 20
    # one process: tokens/s is batch x seq per step (under torchrun, x world size)
    assert row["tokens_per_s"] == pytest.approx(row["batch"] * row["seq"] / row["step_time_s"])


def test_gpu_mfu_stops_when_the_state_cannot_fit() -> None:
    """The Llama-2-7B shape (6.74 B parameters) with fp32 master weights needs ~100 GiB of
    weights, gradients and AdamW state: on an 80 GB H100 (79.1 GiB usable) the benchmark stops
    before building anything and names --pure-bf16 (~50 GiB, which fits); an H200 (139.8 GiB)
    takes it; two GPUs sharding it (FSDP) take it on H100s too."""
    from benchmarks.gpu_mfu import state_check

    n, h100, h200 = 6_738_415_616, int(79.1 * 2**30), int(139.8 * 2**30)
    msg = state_check(n, pure_bf16=False, world=1, total_bytes=h100)
    assert msg is not None and msg.startswith("6.74 B parameters need ~100.4 GiB per GPU")
    assert msg.endswith("run with --pure-bf16 (~50.2 GiB)")
    assert state_check(n, pure_bf16=True, world=1, total_bytes=h100) is None
    assert state_check(n, pure_bf16=False, world=1, total_bytes=h200) is None
    assert state_check(n, pure_bf16=False, world=2, total_bytes=h100) is None
    # 70B does not fit one GPU even in bf16: the advice is more GPUs, not --pure-bf16
    big = state_check(68_976_648_192, pure_bf16=False, world=1, total_bytes=h200)
    assert big is not None and big.endswith("shard it over more GPUs (torchrun --nproc_per_node N)")


def test_native_precision_from_torch_capabilities_or_flags() -> None:
    """torch.cpu.get_capabilities() (AVX-512 BF16, AMX, aarch64 bf16) or /proc/cpuinfo flags
    decide; torch's dispatch level (AVX2, AVX512, ...) never names bf16, so it cannot."""
    from training.model import native_from

    bf16, fp16 = torch.bfloat16, torch.float16
    assert native_from(bf16, {"avx512_bf16": True}, set())
    assert native_from(bf16, {"amx_bf16": True}, set())
    assert native_from(bf16, {"bf16": True}, set())  # aarch64
    assert not native_from(bf16, {"avx2": True, "avx512_bf16": False, "amx_fp16": True}, set())
    assert native_from(fp16, {"amx_fp16": True}, set())
    assert native_from(bf16, {}, {"fpu", "avx512_bf16"})  # flags alone
    assert not native_from(bf16, {}, {"avx2", "fma"})
    caps = dict(torch.cpu.get_capabilities())  # this machine: both sources agree with the answer
    here = native_low_precision(torch.device("cpu"), bf16)
    assert here == native_from(bf16, caps, cpu_flags())
    if caps.get("avx512_bf16") or caps.get("amx_bf16"):
        assert here


@pytest.mark.parametrize("dropout", [0.0, 0.1])
def test_activation_checkpointing_stashes_the_rng_only_with_dropout(
    dropout: float, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Without dropout the recompute draws no random numbers, so checkpoint must not stash and
    restore the RNG state for each layer (torchtitan stashes it for any model by default); with
    attention dropout it must, or the replay's masks differ. Counted through the real
    torch.get_rng_state, which checkpoint calls for each layer when it preserves."""
    from transformers import AutoModelForCausalLM

    from training.model import decoder_layers
    from training.parallelize import _wrap_layer_forward

    cfg = _tiny_llama(attention_dropout=dropout, attn_implementation=None)
    model = AutoModelForCausalLM.from_config(cfg).train()
    for layer in decoder_layers(model):
        _wrap_layer_forward(layer, "full", compile_layer=False)
    calls: list[int] = []
    real = torch.get_rng_state

    def counted() -> torch.Tensor:
        calls.append(1)
        return real()

    monkeypatch.setattr(torch, "get_rng_state", counted)
    model(input_ids=torch.randint(0, 64, (1, 8)), use_cache=False).logits.sum().backward()
    # with dropout: a stash per layer in forward, and the replay's fork_rng in backward
    assert len(calls) == (2 * cfg.num_hidden_layers if dropout else 0)


@pytest.mark.parametrize("ac_mode", ["none", "full", "selective"])
def test_compiled_block_fails_on_a_graph_break_instead_of_running_eager(ac_mode: str) -> None:
    """--compile compiles each block with fullgraph=True, as torchtitan's apply_compile: a block
    dynamo cannot capture whole stops the run at its first forward, with or without activation
    checkpointing inside. Without it, dynamo splits the block at the break (or, under
    checkpoint, runs the whole layer eager) with a warning only, and a GPU run loses its fused
    kernels unnoticed. Dynamo gives up while tracing, before any backend compile."""
    from torch import nn

    from training.parallelize import _wrap_layer_forward

    class Breaks(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.lin = nn.Linear(4, 4)

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            y = self.lin(x)
            torch._dynamo.graph_break()
            return y * 2

    layer = Breaks()
    _wrap_layer_forward(layer, ac_mode, compile_layer=True)
    torch._dynamo.reset()
    with pytest.raises(torch._dynamo.exc.Unsupported, match="graph_break"):
        layer(torch.ones(2, 4))


def test_built_model_never_makes_a_kv_cache() -> None:
    """build_empty gives the model its own config with use_cache=False, so a forward without
    use_cache (validation, benchmarks, any caller) builds no KV cache, which AC's replay would
    fill twice; the spec's config, which the export writes, keeps use_cache."""
    from transformers import LlamaForCausalLM

    from training.dist import distributed
    from training.model import build_empty, full_state_dict, materialize, model_spec

    spec = model_spec("tiny-llama-2l", 256, 64)
    assert spec.config.use_cache
    model = build_empty(spec)
    assert isinstance(model, LlamaForCausalLM)
    assert model.config.use_cache is False and model.config is not spec.config
    with distributed():  # a world of one: materialize broadcasts rank 0's weights
        materialize(model, spec, torch.device("cpu"), full_state_dict(spec, 0))
    out = model(input_ids=torch.randint(0, 256, (1, 16)))
    assert out.past_key_values is None
    assert spec.config.use_cache


@pytest.mark.parametrize(("use_sliding_window", "maskless"), [(False, True), (True, False)])
def test_qwen2_without_sliding_window_runs_maskless(
    use_sliding_window: bool, maskless: bool
) -> None:
    """Qwen2 configs keep a sliding_window value next to use_sliding_window=False (as hub
    config.json files have it): only the flag decides whether the window is used."""
    from transformers import AutoModelForCausalLM, Qwen2Config

    from training.model import use_maskless_causal_sdpa

    cfg = Qwen2Config(
        vocab_size=64,
        hidden_size=32,
        intermediate_size=64,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        # transformers declares the config's __init__ through dataclass_transform (its fields
        # only); at runtime __init_subclass__ makes it take the extra kwargs it pops in
        # __post_init__, attn_implementation among them.
        attn_implementation="sdpa",  # type: ignore[call-arg]
    )
    model = AutoModelForCausalLM.from_config(cfg)
    model.config.use_sliding_window = use_sliding_window
    model.config.sliding_window = 4096
    assert use_maskless_causal_sdpa(model) is maskless
