"""Model shapes and FLOPs of the capacity planner.

If this fails, the planner's built-in Llama shapes no longer match the public checkpoints
(parameter counts 6.74B / 13.0B / 68.98B / 8.03B / 70.55B), a config.json is read wrongly (GQA,
head_dim, tied embeddings), or the FLOPs-per-token formula (6 N_matmul + 12 L h s, PaLM's MFU
convention) changed: every MFU and step time the planner prints would move. Pure arithmetic,
nothing mocked.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from planner.shapes import BUILTIN, ShapeError, from_config_json, resolve
from planner.timing import executed_flops_per_token, model_flops_per_token

REPO = Path(__file__).resolve().parents[2]

PUBLISHED = {
    "llama2-7b": 6.74e9,
    "llama2-13b": 13.0e9,
    "llama2-70b": 68.98e9,
    "llama3-8b": 8.03e9,
    "llama3-70b": 70.55e9,
}


@pytest.mark.parametrize(("name", "published"), PUBLISHED.items())
def test_builtin_parameter_counts_match_published(name: str, published: float) -> None:
    assert BUILTIN[name].n_params == pytest.approx(published, rel=0.005)


def test_exact_counts_of_two_shapes() -> None:
    # Llama-2-7B: 32 x (4 x 4096^2 + 3 x 4096 x 11008 + 2 x 4096) + 2 x 32000 x 4096 + 4096.
    assert BUILTIN["llama2-7b"].n_params == 6_738_415_616
    # Llama-2-70B (GQA, 8 KV heads of 128): k and v are 8192 x 1024.
    assert BUILTIN["llama2-70b"].layer_param_shapes()[1] == (1024, 8192)
    assert BUILTIN["llama2-70b"].n_params == 68_976_648_192


def test_flops_per_token_is_6n_plus_attention() -> None:
    s = BUILTIN["llama2-7b"]
    n_matmul = 32 * (4 * 4096**2 + 3 * 4096 * 11008) + 32000 * 4096
    assert s.matmul_params == n_matmul
    assert model_flops_per_token(s, 4096) == 6 * n_matmul + 12 * 32 * 4096 * 4096
    # ~4.61e10 FLOPs per token at 4096 (6 x 6.61e9 + 6.44e9).
    assert model_flops_per_token(s, 4096) == pytest.approx(4.6085e10, rel=1e-4)


def test_executed_flops_add_one_forward_with_ac_and_halve_causal_attention() -> None:
    """Full AC runs each layer's forward again but for the down projection (torch's
    checkpoint stops before it; measured in tests/training/test_flops.py). Flash attention:
    the causal half, its backward 2.5 forwards (FlashAttention-2 recomputes the scores), AC
    one forward more."""
    s = BUILTIN["llama2-13b"]
    off = executed_flops_per_token(s, 4096, 0.0)
    on = executed_flops_per_token(s, 4096, 1.0)
    down = s.hidden_size * s.intermediate_size
    layers = (s.layer_matmul_params - down) * s.num_layers
    assert on.gemm - off.gemm == pytest.approx(2 * layers)
    fwd = 0.5 * 4 * s.num_layers * s.hidden_size * 4096
    assert off.attention == pytest.approx(3.5 * fwd)
    assert on.attention == pytest.approx(4.5 * fwd)
    half = executed_flops_per_token(s, 4096, 0.5)
    assert half.gemm == pytest.approx((on.gemm + off.gemm) / 2)


def test_selective_ac_recomputes_k_o_and_up_and_no_attention() -> None:
    """Op-level SAC runs the 2nd, 4th and 6th of a layer's seven matmuls again (k, o, up; the
    policy in training.parallelize) and saves attention's output: Llama-2-7B recomputes 39% of
    a layer's matmul work where full AC recomputes all of it."""
    from planner.timing import recompute_share

    s = BUILTIN["llama2-7b"]
    off = executed_flops_per_token(s, 4096, 0.0)
    sac = executed_flops_per_token(s, 4096, 1.0, "selective")
    k, o, up = 4096 * 4096, 4096 * 4096, 4096 * 11008
    assert sac.gemm - off.gemm == pytest.approx(2 * 32 * (k + o + up))
    assert sac.attention == off.attention
    assert recompute_share(s, 1.0, "selective") == pytest.approx(
        (k + o + up) / s.layer_matmul_params
    )
    assert round(recompute_share(s, 1.0, "selective"), 2) == 0.39
    down = s.hidden_size * s.intermediate_size
    assert recompute_share(s, 0.5, "full") == pytest.approx(
        0.5 * (s.layer_matmul_params - down) / s.layer_matmul_params
    )


def test_config_json_with_gqa_head_dim_and_tied_embeddings(tmp_path: Path) -> None:
    cfg = {
        "vocab_size": 1000,
        "hidden_size": 512,
        "intermediate_size": 1024,
        "num_hidden_layers": 3,
        "num_attention_heads": 8,
        "num_key_value_heads": 2,
        "head_dim": 32,
        "tie_word_embeddings": True,
        "max_position_embeddings": 2048,
    }
    path = tmp_path / "config.json"
    path.write_text(json.dumps(cfg))
    s = from_config_json(path)
    assert (s.q_size, s.kv_size, s.max_position_embeddings) == (256, 64, 2048)
    layer = 512 * 256 + 2 * 512 * 64 + 256 * 512 + 3 * 512 * 1024 + 2 * 512
    assert s.n_params == 3 * layer + 1000 * 512 + 512  # one shared embedding matrix
    assert resolve(str(tmp_path)).n_params == s.n_params  # a folder holding config.json


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ('{"hidden_size": 64,\n "vocab_size": }', "config.json:2: not valid JSON"),
        ("[1, 2]", "must hold a JSON object"),
        ('{"hidden_size": 64}', "config has no vocab_size"),
        (
            '{"vocab_size": 10, "hidden_size": "x", "intermediate_size": 4, "num_hidden_layers": 1,'
            ' "num_attention_heads": 1}',
            "hidden_size must be an integer",
        ),
    ],
)
def test_malformed_config_json(tmp_path: Path, text: str, message: str) -> None:
    path = tmp_path / "config.json"
    path.write_text(text)
    with pytest.raises(ShapeError, match=message):
        from_config_json(path)


def test_tiny_preset_resolves_from_the_training_source() -> None:
    s = resolve("tiny-llama")
    assert (s.hidden_size, s.num_layers, s.num_heads, s.num_kv_heads) == (256, 4, 8, 4)
    assert s.vocab_size > 1000  # the bundled tokenizer's length


def test_planner_imports_no_torch() -> None:
    code = (
        "import sys, planner.cli, planner.calibrate, planner.plot, planner.published; "
        "sys.exit(1 if 'torch' in sys.modules or 'pulumi' in sys.modules else 0)"
    )
    assert subprocess.run([sys.executable, "-c", code], cwd=REPO).returncode == 0
