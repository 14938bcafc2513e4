"""Numerics of the low-precision modes: pure bf16 keeps rotary phases exact; fp16 is refused.

If these fail, `--pure_bf16` casts the rotary `inv_freq` buffers to bf16 again (a 0.4% relative
error that the rotary embedding multiplies by the position: radians of phase error at the end
of a 4,096-token context, so attention sees the wrong relative positions), or `--use_fp16`
trains in fp16 without loss scaling (gradients silently underflow) instead of stopping with
one line.
"""

from __future__ import annotations

import pytest
import torch
from transformers import LlamaForCausalLM
from transformers.models.llama.modeling_llama import LlamaRotaryEmbedding

from training.config import ConfigError, parse_args
from training.data import load_tokenizer
from training.model import build_empty, model_spec

POSITION = 4095


def _rotary(dtype: torch.dtype) -> LlamaRotaryEmbedding:
    tok = load_tokenizer("tiny-llama")
    model = build_empty(model_spec("tiny-llama", len(tok), 128, dtype))
    assert isinstance(model, LlamaForCausalLM)
    return model.model.rotary_emb


def test_pure_bf16_rotary_phase_at_position_4095_matches_fp32() -> None:
    ref, bf16 = _rotary(torch.float32), _rotary(torch.bfloat16)
    assert bf16.inv_freq.dtype == torch.float32
    assert torch.equal(bf16.inv_freq, ref.inv_freq)
    phase_ref = POSITION * ref.inv_freq.double()
    phase = POSITION * bf16.inv_freq.double()
    assert float((phase - phase_ref).abs().max()) == 0.0
    # What the cast used to do: most of a radian off at this position (so the test can fail).
    cast = POSITION * ref.inv_freq.to(torch.bfloat16).double()
    assert float((cast - phase_ref).abs().max()) > 0.5
    # The module's own output (cos/sin in bf16): only bf16 rounding of values in [-1, 1].
    x = torch.zeros(1, 1, 8, dtype=torch.bfloat16)
    pos = torch.tensor([[0, 1, 1000, POSITION]])
    cos, sin = bf16(x, pos)
    cos_ref, sin_ref = ref(x.float(), pos)
    assert cos.dtype == torch.bfloat16
    assert float((cos.float() - cos_ref).abs().max()) < 4e-3
    assert float((sin.float() - sin_ref).abs().max()) < 4e-3


def test_fp16_is_refused_with_one_line() -> None:
    with pytest.raises(ConfigError) as err:
        parse_args(["--use_fp16"])
    assert str(err.value).startswith("--use_fp16: fp16 training needs loss scaling")
    assert "\n" not in str(err.value)
    assert not parse_args(["--use_fp16", "--mixed_precision=False"]).mixed_precision
