"""The `--save_model` export is a servable Hugging Face folder that gives the trained model's logits.

If these fail, the folder written from the sharded (FSDP2, 2-process) model is not loadable by
`AutoModelForCausalLM.from_pretrained` (and so by vLLM or TGI, which read the same layout),
misses the tokenizer and its chat template, the config or the generation config, holds
different weights than the ones trained (a shard lost or misplaced when gathering to rank 0),
its sharded form (`model-0000k-of-0000n.safetensors` + `model.safetensors.index.json`) does not
index every tensor exactly once, the export dtype is not the one asked for, or rank 0 gathers
the whole model in memory before writing instead of one shard at a time.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import torch

from training.export import INDEX_FILE, export_model, plan_shards


def _logits(folder: Path, ids: torch.Tensor, dtype: torch.dtype = torch.float32) -> torch.Tensor:
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(folder, dtype=dtype)
    model.eval()
    with torch.no_grad():
        return model(input_ids=ids).logits.float()


@pytest.mark.slow
def test_export_round_trip(world2: tuple[Path, dict[str, Any]]) -> None:
    from transformers import AutoTokenizer

    base, results = world2
    assert results["export"]["rc"] == 0
    folder = base / "export" / "out" / "hf"
    names = {p.name for p in folder.iterdir()}
    assert {
        "config.json",
        "generation_config.json",
        "model.safetensors",
        "tokenizer.json",
        "chat_template.jinja",
    } <= names
    assert INDEX_FILE not in names  # one shard: the single-file form, as save_pretrained
    saved = torch.load(base / "export" / "logits.pt")
    logits = _logits(folder, saved["input_ids"])
    assert logits.shape == saved["logits"].shape
    assert torch.allclose(logits, saved["logits"], atol=1e-5, rtol=0)
    tok = AutoTokenizer.from_pretrained(folder)
    assert tok.chat_template
    generation = json.loads((folder / "generation_config.json").read_text())
    assert generation["eos_token_id"] == tok.eos_token_id  # where generation stops
    config = json.loads((folder / "config.json").read_text())
    assert config["architectures"] == ["LlamaForCausalLM"] and config["dtype"] == "float32"


@pytest.mark.slow
def test_sharded_export_indexes_every_tensor_once(world2: tuple[Path, dict[str, Any]]) -> None:
    from safetensors import safe_open

    base, results = world2
    assert results["export_sharded"]["rc"] == 0
    folder = base / "export_sharded" / "out" / "hf"
    index = json.loads((folder / INDEX_FILE).read_text())
    shards = sorted(p.name for p in folder.glob("model-*.safetensors"))
    n = len(shards)
    assert n >= 3 and shards == [f"model-{i:05d}-of-{n:05d}.safetensors" for i in range(1, n + 1)]
    assert not (folder / "model.safetensors").exists()
    found: dict[str, str] = {}
    total = 0
    for shard in shards:
        with safe_open(str(folder / shard), "pt") as f:
            keys = list(f.keys())
            for key in keys:
                assert key not in found
                found[key] = shard
                t = f.get_tensor(key)
                total += t.numel() * t.element_size()
        # the limit (plus the header), unless one tensor is larger (the 451 kB embedding)
        assert len(keys) == 1 or (folder / shard).stat().st_size <= 300_000 + 10_000
    assert index["weight_map"] == found
    assert index["metadata"]["total_size"] == total
    saved = torch.load(base / "export_sharded" / "logits.pt")
    assert torch.allclose(_logits(folder, saved["input_ids"]), saved["logits"], atol=1e-5, rtol=0)


def test_shard_plan() -> None:
    sizes = [("a", 40), ("b", 40), ("c", 30), ("d", 200), ("e", 10)]
    assert plan_shards(sizes, 100) == [["a", "b"], ["c"], ["d"], ["e"]]
    assert plan_shards(sizes, 1000) == [["a", "b", "c", "d", "e"]]
    assert plan_shards([], 100) == []


@pytest.fixture(scope="module")
def tied_model() -> Any:
    from transformers import LlamaConfig, LlamaForCausalLM

    from training.data import load_tokenizer

    tok = load_tokenizer("tiny-llama-2l")
    config = LlamaConfig(
        vocab_size=len(tok),
        hidden_size=64,
        intermediate_size=512,  # layers large next to the (tied) embedding: a shard holds one
        num_hidden_layers=4,
        num_attention_heads=4,
        num_key_value_heads=2,
        tie_word_embeddings=True,
    )
    torch.manual_seed(3)
    model = LlamaForCausalLM(config).eval()
    return model, tok


def test_rank_zero_holds_one_shard_at_a_time(
    tmp_path: Path, tied_model: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Measured from outside export_model: every tensor the gather helper returns is tracked
    until it is freed (weakref.finalize), and the bytes still alive are summed at each gather
    and at each shard write; gathering the whole state dict first would hold them all."""
    import weakref

    import safetensors.torch

    from training import export

    live: dict[int, int] = {}  # id of a gathered tensor still alive -> its bytes
    seen: list[int] = []  # the live bytes at each gather and each write
    gather, write = export._materialize, safetensors.torch.save_file

    def tracked_gather(entry: Any, dtype: torch.dtype) -> torch.Tensor:
        tensor = gather(entry, dtype)
        key = id(tensor)
        live[key] = tensor.numel() * tensor.element_size()
        weakref.finalize(tensor, live.pop, key, None)
        seen.append(sum(live.values()))
        return tensor

    def tracked_write(tensors: dict[str, torch.Tensor], *args: Any, **kwargs: Any) -> None:
        seen.append(sum(live.values()))
        write(tensors, *args, **kwargs)

    monkeypatch.setattr(export, "_materialize", tracked_gather)
    monkeypatch.setattr(safetensors.torch, "save_file", tracked_write)
    model, tok = tied_model
    limit = 100_000
    report = export_model(
        model, model.config, tok, tmp_path, dtype=torch.float32, max_shard_bytes=limit
    )
    assert report is not None
    largest = max(p.numel() * 4 for p in model.parameters())
    total = sum(p.numel() * 4 for p in model.parameters())  # tied: the embedding counted once
    assert report.total_bytes == total
    assert len(seen) == len(list(model.state_dict())) - 1 + len(report.files)  # tied: once
    assert max(seen) <= limit + largest < total / 2  # one shard and the tensor being gathered
    assert report.max_held_bytes <= max(limit, largest)
    assert len(report.files) >= 4
    index = json.loads((tmp_path / INDEX_FILE).read_text())
    assert "lm_head.weight" not in index["weight_map"]  # tied: written once, as save_pretrained
    ids = torch.randint(0, len(tok), (2, 12), generator=torch.Generator().manual_seed(0))
    with torch.no_grad():
        want = model(input_ids=ids).logits
    assert torch.allclose(_logits(tmp_path, ids), want, atol=1e-6, rtol=0)


def test_dtype_on_request(tmp_path: Path, tied_model: Any) -> None:
    from safetensors import safe_open

    model, tok = tied_model
    export_model(model, model.config, tok, tmp_path, dtype=torch.bfloat16, max_shard_bytes=10**9)
    config = json.loads((tmp_path / "config.json").read_text())
    assert config["dtype"] == "bfloat16"
    with safe_open(str(tmp_path / "model.safetensors"), "pt") as f:
        assert {f.get_tensor(k).dtype for k in f.keys()} == {torch.bfloat16}  # noqa: SIM118
    ids = torch.randint(0, len(tok), (1, 12), generator=torch.Generator().manual_seed(1))
    with torch.no_grad():
        want = model(input_ids=ids).logits
    got = _logits(tmp_path, ids, torch.bfloat16)
    assert (got - want).abs().max() < 0.05  # bf16 weights and compute on a tiny model
