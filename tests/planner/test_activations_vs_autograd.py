"""The planner's per-layer activation formula against what autograd really saves.

If this fails, ``planner.memory.activation_model`` no longer describes the tensors
HF's LlamaDecoderLayer (SDPA attention, RMSNorm, SwiGLU, GQA) keeps for backward, and every
activation figure of ``python -m planner`` (with and without AC) is off. The test runs
one forward of the tiny preset on CPU (bf16 and fp32), records every tensor autograd saves
(``saved_tensors_hooks``, parameters excluded, storages counted once) and compares the bytes
with the formula. Nothing is mocked.
"""

from __future__ import annotations

import pytest

from planner.memory import PRECISIONS, activation_model
from planner.shapes import resolve

B, S = 2, 256


def _saved_bytes(dtype_name: str, one_layer: bool) -> tuple[int, int]:
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.set_num_threads(1)
    torch.manual_seed(0)
    shape = resolve("tiny-llama")
    cfg = LlamaConfig(
        vocab_size=shape.vocab_size,
        hidden_size=shape.hidden_size,
        intermediate_size=shape.intermediate_size,
        num_hidden_layers=shape.num_layers,
        num_attention_heads=shape.num_heads,
        num_key_value_heads=shape.num_kv_heads,
        max_position_embeddings=4096,
        attention_dropout=0.0,
    )
    model = LlamaForCausalLM(cfg).to(getattr(torch, dtype_name))
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
