"""The planner's per-layer activation formula against what autograd really saves.

If this fails, ``planner.memory.activation_model`` no longer describes the tensors
HF's LlamaDecoderLayer (SDPA attention, RMSNorm, SwiGLU, GQA) keeps for backward, and every
activation figure of ``eks-fsdp plan`` (with and without AC) is off. The test runs
one forward of the tiny preset on CPU (bf16 and fp32), records every tensor autograd saves
(``saved_tensors_hooks``, parameters excluded, storages counted once) and compares the bytes
with the formula. Under the training package's own activation checkpointing (full and
op-level selective, ``training.parallelize``) autograd's hooks no longer see what is kept, so
those tests read from ``torch.profiler``'s CPU allocation records instead: the bytes a layer
leaves allocated after its forward, and the peak of a forward + backward, which selective AC
raises over full AC by exactly what the planner adds. Nothing is mocked.

Those records are exact, so the comparisons are to the byte, with no tolerance: the CPU
allocator reports each block at the size asked for (``c10/core/CPUAllocator.cpp``,
``DefaultCPUAllocator::allocate`` -> ``ProfiledCPUMemoryReporter::New(data, nbytes)``; there
is no caching or rounding on CPU). What the records also hold is the free of any block
allocated while memory profiling was on, in whatever earlier window: ``New`` keeps every such
block's size in ``size_table_`` and ``Delete`` reports its free as a negative allocation. A
wrapped layer sits in a reference cycle (its ``forward`` is a closure over the bound method),
so what an earlier window left behind is freed by Python's cycle collector, whose runs depend
on the process's allocation history (under pytest-xdist, on which tests a worker ran before,
which load changes): a run inside a window once took an earlier window's 256 KiB layer output
off the count. So a window counts only blocks allocated inside it and still allocated at its
end (paired by address), with the collector run before it and off during it
(``_collector_quiet``).
"""

from __future__ import annotations

import gc
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import pytest

from planner.assumptions import DEFAULT
from planner.memory import PRECISIONS, activation_model
from planner.shapes import resolve

B, S = 2, 256


def _tiny_model(dtype_name: str, layers: int | None = None) -> Any:
    """The tiny preset's LlamaForCausalLM in ``dtype_name`` (``layers`` decoder layers)."""
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.set_num_threads(1)
    torch.manual_seed(0)
    shape = resolve("tiny-llama")
    cfg = LlamaConfig(
        vocab_size=shape.vocab_size,
        hidden_size=shape.hidden_size,
        intermediate_size=shape.intermediate_size,
        num_hidden_layers=layers or shape.num_layers,
        num_attention_heads=shape.num_heads,
        num_key_value_heads=shape.num_kv_heads,
        max_position_embeddings=4096,
        attention_dropout=0.0,
    )
    return LlamaForCausalLM(cfg).to(getattr(torch, dtype_name))


def _saved_bytes(dtype_name: str, one_layer: bool) -> tuple[int, int]:
    import torch

    shape = resolve("tiny-llama")
    model = _tiny_model(dtype_name)
    params = {p.untyped_storage().data_ptr() for p in model.parameters()}
    storages: dict[int, int] = {}
    recording = [not one_layer]

    def pack(t: torch.Tensor) -> torch.Tensor:
        if recording[0]:
            s = t.untyped_storage()
            if s.data_ptr() not in params:
                storages[s.data_ptr()] = s.nbytes()
        return t

    if one_layer:
        layer = model.model.layers[1]
        layer.register_forward_pre_hook(lambda m, a: recording.__setitem__(0, True))
        layer.register_forward_hook(lambda m, a, o: recording.__setitem__(0, False))
    from training.loss import token_loss_sum

    ids = torch.randint(0, shape.vocab_size, (B, S))
    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        out = model(input_ids=ids)
        # the training package's loss: chunked, labels shifted instead of logits
        token_loss_sum(out.logits, ids, overwrite_logits=True)
    logits = out.logits.untyped_storage()
    alive = 0 if logits.data_ptr() in storages else logits.nbytes()
    return sum(storages.values()), alive


@pytest.mark.parametrize(("dtype", "precision"), [("bfloat16", "pure_bf16"), ("float32", "fp32")])
def test_one_decoder_layer_saves_what_the_formula_says(dtype: str, precision: str) -> None:
    shape = resolve("tiny-llama")
    measured, _ = _saved_bytes(dtype, one_layer=True)
    predicted = B * S * activation_model(shape, PRECISIONS[precision]).per_layer
    # cos/sin tables (S x head_dim, per sequence, not per token) are the only extra.
    assert measured == pytest.approx(predicted, rel=0.02)


def test_whole_forward_saves_layers_plus_head() -> None:
    shape = resolve("tiny-llama")
    saved, logits = _saved_bytes("bfloat16", one_layer=False)
    act = activation_model(shape, PRECISIONS["pure_bf16"])
    # The chunked loss saves the logits themselves (bf16), the fp32 log-sum-exp, the target
    # index and its mask per token: no fp32 copy of the logits outlives the forward.
    predicted = B * S * (shape.num_layers * act.per_layer + act.head)
    assert saved + logits == pytest.approx(predicted, rel=0.02)


def _left_allocated(dtype_name: str, ac: str) -> tuple[int, int]:
    """(bytes decoder layer 1 of the tiny preset leaves allocated after its forward under the
    package's ``ac`` wrapping, bytes of its output), from torch.profiler's allocation records."""
    import torch
    from torch._C._profiler import _EventType
    from torch.profiler import ProfilerActivity, profile

    from training.parallelize import _wrap_layer_forward

    shape = resolve("tiny-llama")
    model = _tiny_model(dtype_name, layers=2)
    dtype = getattr(torch, dtype_name)
    layer = model.model.layers[1]
    _wrap_layer_forward(layer, ac, compile_layer=False)
    x = torch.randn(B, S, shape.hidden_size, dtype=dtype, requires_grad=True)
    positions = torch.arange(S).unsqueeze(0).expand(B, S)
    rope = model.model.rotary_emb(x, positions)
    with (
        _collector_quiet(),
        profile(activities=[ProfilerActivity.CPU], profile_memory=True) as prof,
    ):
        out = layer(x, position_embeddings=rope, attention_mask=None, position_ids=positions)
    out = out[0] if isinstance(out, tuple) else out
    records: list[tuple[int, int, int]] = []
    stack = list(prof.profiler.kineto_results.experimental_event_tree())  # type: ignore[union-attr]
    while stack:
        node = stack.pop()
        if node.tag == _EventType.Allocation:
            f = node.extra_fields
            records.append((node.start_time_ns, f.ptr, f.alloc_size))
        stack.extend(node.children)
    assert out.requires_grad  # the graph (and so what it keeps) is alive while we count
    return _left_in_window(records), out.numel() * out.element_size()


@contextmanager
def _collector_quiet() -> Iterator[None]:
    """Python's cycle collector run now and off until the block ends: garbage of earlier windows
    (a wrapped layer's reference cycle) is freed before a window, never at a moment inside it."""
    gc.collect()
    was_enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was_enabled:
            gc.enable()


def _left_in_window(records: list[tuple[int, int, int]]) -> int:
    """Bytes of the blocks allocated in a profiling window and not freed in it, from its
    ``(time, address, signed size)`` allocation records: a free of a block allocated before the
    window (the profiler reports it when an earlier window allocated it) is not counted. At one
    instant a free sorts before an allocation of the same address (the address was reused)."""
    mine: dict[int, int] = {}
    for _t, ptr, size in sorted(records):
        if size > 0:
            mine[ptr] = size
        else:
            mine.pop(ptr, None)
    return sum(mine.values())


@pytest.mark.parametrize(("dtype", "precision"), [("bfloat16", "pure_bf16"), ("float32", "fp32")])
def test_checkpointed_layer_keeps_what_the_formula_says(dtype: str, precision: str) -> None:
    """Full AC keeps nothing but the layer's output (the next layer's input, ``layer_input``);
    op-level selective AC keeps on top of it q, v, gate and down and attention's output with
    its fp32 log-sum-exp (``selective``). Exact to the byte: both are whole tensors."""
    act = activation_model(resolve("tiny-llama"), PRECISIONS[precision])
    full, out = _left_allocated(dtype, "full")
    assert out == B * S * act.layer_input
    assert full == out
    selective, _ = _left_allocated(dtype, "selective")
    assert selective == B * S * act.selective
    none, _ = _left_allocated(dtype, "none")
    assert full < selective < none


def _step_peak(dtype_name: str, ac: str, seq: int) -> int:
    """Peak bytes allocated during forward + backward of the tiny preset's decoder layers under
    the package's ``ac`` wrapping (a second step: parameter gradients already exist)."""
    import torch

    from training.parallelize import _wrap_layer_forward

    shape = resolve("tiny-llama")
    model = _tiny_model(dtype_name)
    layers = list(model.model.layers)
    for layer in layers:
        _wrap_layer_forward(layer, ac, compile_layer=False)
    x0 = torch.randn(
        B, seq, shape.hidden_size, dtype=getattr(torch, dtype_name), requires_grad=True
    )
    positions = torch.arange(seq).unsqueeze(0).expand(B, seq)
    rope = tuple(t.detach() for t in model.model.rotary_emb(x0, positions))

    def step() -> None:
        x = x0
        for layer in layers:
            x = layer(x, position_embeddings=rope, attention_mask=None, position_ids=positions)
            x = x[0] if isinstance(x, tuple) else x
        x.sum().backward()

    from benchmarks.step_anatomy import profiled_peak

    step()
    with _collector_quiet():  # its running sum would count a free of an earlier window's block
        return profiled_peak(step)


@pytest.mark.parametrize(("dtype", "precision"), [("bfloat16", "pure_bf16"), ("float32", "fp32")])
def test_selective_ac_step_peak_over_full_ac_is_what_the_planner_adds(
    dtype: str, precision: str
) -> None:
    """The peak of a forward + backward under selective AC exceeds full AC's by what
    ``planner.memory`` adds, to the byte: the kept outputs of every layer but the one in
    backward, plus the down output non-reentrant checkpoint's early stop never hands back."""
    from planner.memory import layout, memory

    shape, seq = resolve("tiny-llama"), 64  # exact at any length; short is fast
    p, lay = PRECISIONS[precision], layout("FULL_SHARD", 1, 1)
    planned = {
        mode: memory(shape, lay, p, batch=B, seq=seq, ac=1.0, ac_mode=mode, a=DEFAULT).activations
        for mode in ("full", "selective")
    }
    measured = {mode: _step_peak(dtype, mode, seq) for mode in ("full", "selective", "none")}
    assert measured["selective"] - measured["full"] == planned["selective"] - planned["full"]
    assert measured["full"] < measured["selective"] < measured["none"]
