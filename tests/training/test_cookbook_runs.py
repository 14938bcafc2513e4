"""llama-cookbook's flags that change a run, trained for real: 2 processes, FSDP2 on gloo, the
tiny preset, a few steps each, all in one torchrun launch.

If these fail, `--freeze_layers` trains the layers it should keep (or freezes the others),
`--checkpoint_type FULL_STATE_DICT` writes a file that does not load into the model or holds other
weights than the model has, `--optimizer anyprecision` does not run on FSDP2's sharded parameters
or keeps fp32 state, `--from_peft_checkpoint` starts from fresh adapters instead of the folder's,
or `--tokenizer_name` is ignored. What llama-cookbook does is named in training/cookbook_run.py.
"""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

import pytest
import torch

from tests.training.helpers import TINY, launch, merge, run_dirs
from training.config import parse_args
from training.cookbook_run import full_state_paths

pytestmark = pytest.mark.slow

SEED = 42


def _argv(base: Path, name: str, *extra: str) -> list[str]:
    return merge(TINY, run_dirs(base, name), ["--enable_fsdp", "--num_epochs=1"], list(extra))


@pytest.fixture(scope="module")
def runs(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict[str, Any]]:
    from transformers import AutoTokenizer

    from training.data import TOKENIZER_DIR

    base = tmp_path_factory.mktemp("cookbook_runs")
    tok = AutoTokenizer.from_pretrained(str(TOKENIZER_DIR))
    tok.add_tokens(["<cookbook_extra>"])
    tok.save_pretrained(str(base / "tokenizer"))
    jobs = [
        {
            "kind": "train",
            "name": "freeze",
            "stdout": True,
            "argv": _argv(
                base,
                "freeze",
                "--max_train_step=3",
                "--freeze_layers",
                "--num_freeze_layers=1",
                "--fsdp_config.checkpoint_type=StateDictType.FULL_STATE_DICT",
                "--save_optimizer",
                "--save_model=True",
                "--low_cpu_fsdp",
                "--use_fast_kernels",
            ),
        },
        {
            "kind": "train",
            "name": "anyprecision",
            "argv": _argv(
                base,
                "anyprecision",
                "--max_train_step=2",
                "--fsdp_config.pure_bf16",
                "--force_bf16",
                "--fsdp_config.optimizer=anyprecision",
                "--checkpoint_every=2",
                "--async_checkpoint=False",
            ),
        },
        {
            "kind": "train",
            "name": "lora_a",
            "argv": _argv(base, "lora_a", "--max_train_step=3", "--use_peft", "--save_model"),
        },
        {
            "kind": "train",
            "name": "lora_b",
            "argv": _argv(
                base,
                "lora_b",
                "--max_train_step=1",
                "--use_peft",
                "--save_model",
                "--lr=1e-30",  # an update far below fp32's resolution of the weights
                f"--from_peft_checkpoint={base / 'lora_a' / 'out' / 'adapter'}",
            ),
        },
        {
            "kind": "train",
            "name": "tokenizer",
            "argv": _argv(
                base, "tokenizer", "--max_train_step=1", f"--tokenizer_name={base / 'tokenizer'}"
            ),
        },
    ]
    results = launch(2, jobs, base / "launch")
    for name, result in results.items():
        assert result["rc"] == [0, 0], (name, result["stderr"])
    return base, results


def _initial_weights() -> dict[str, torch.Tensor]:
    from training.data import load_tokenizer
    from training.model import full_state_dict, model_spec

    spec = model_spec("tiny-llama-2l", len(load_tokenizer("tiny-llama-2l")), 64)
    return full_state_dict(spec, SEED)


def test_freeze_layers_keeps_the_first_layers_bit_identical(runs: tuple[Path, Any]) -> None:
    """After 3 steps, layer 0 equals the seeded initial weights bit for bit; layer 1, the
    embedding and the head all moved; the optimizer state holds no layer-0 parameter."""
    base, _ = runs
    cfg = parse_args(_argv(base, "freeze", "--checkpoint_type=FULL_STATE_DICT"))
    model_file, optim_file = full_state_paths(cfg, 0)
    trained = torch.load(model_file, weights_only=True)
    initial = _initial_weights()
    assert trained.keys() == initial.keys()
    layer0 = [k for k in initial if k.startswith("model.layers.0.")]
    moved = [k for k in initial if not k.startswith("model.layers.0.") and "norm" not in k]
    assert layer0 and all(torch.equal(trained[k], initial[k]) for k in layer0)
    assert moved and all(not torch.equal(trained[k], initial[k]) for k in moved)
    optim = torch.load(optim_file, weights_only=True)
    assert optim["state"] and not [k for k in optim["state"] if k.startswith("model.layers.0.")]
    assert len(optim["state"]) == len(initial) - len(layer0)


def test_full_state_dict_loads_into_the_model_with_the_exports_logits(
    runs: tuple[Path, Any],
) -> None:
    """The FULL_STATE_DICT file (rank 0's torch.save) loads into a fresh model strictly, and its
    logits on a fixed batch equal those of the servable export of the same run exactly."""
    from transformers import AutoConfig, AutoModelForCausalLM

    base, _ = runs
    cfg = parse_args(_argv(base, "freeze", "--checkpoint_type=FULL_STATE_DICT"))
    model_file, _ = full_state_paths(cfg, 0)
    export = base / "freeze" / "out" / "hf"
    fresh = AutoModelForCausalLM.from_config(AutoConfig.from_pretrained(export))
    fresh.load_state_dict(torch.load(model_file, weights_only=True), strict=True)
    exported = AutoModelForCausalLM.from_pretrained(export, dtype=torch.float32)
    ids = torch.randint(
        0, fresh.config.vocab_size, (2, 16), generator=torch.Generator().manual_seed(0)
    )
    with torch.no_grad():
        a = fresh.eval()(input_ids=ids).logits
        b = exported.eval()(input_ids=ids).logits
    assert torch.equal(a, b)


def test_low_cpu_fsdp_and_fast_kernels_said_once(runs: tuple[Path, Any]) -> None:
    """Flags naming what the package always does are accepted and said once, by rank 0."""
    _, results = runs
    out0, out1 = results["freeze"]["stdout"]
    assert out0.count("--low_cpu_fsdp: always on here") == 1
    assert out0.count("--use_fast_kernels: always on here") == 1
    assert "--low_cpu_fsdp" not in out1


def test_anyprecision_runs_on_sharded_bf16_parameters(runs: tuple[Path, Any]) -> None:
    """`--pure_bf16 --optimizer anyprecision` on FSDP2: finite losses, and the checkpointed
    momentum and variance are bf16 (AdamW's fused kernel would keep them in the params' dtype
    too; the bit-level check against llama-cookbook's optimizer is in test_cookbook_wheel)."""
    from torch.distributed.checkpoint import FileSystemReader

    base, _ = runs
    rows = [json.loads(line) for line in (base / "anyprecision" / "out" / "metrics.jsonl").open()]
    assert len(rows) == 2 and all(math.isfinite(r["loss"]) for r in rows)
    meta = FileSystemReader(
        str(base / "anyprecision" / "ckpt" / "run" / "step-000002")
    ).read_metadata()
    states = {
        k: v for k, v in meta.state_dict_metadata.items() if k.endswith(("exp_avg", "exp_avg_sq"))
    }
    assert states and all(v.properties.dtype == torch.bfloat16 for v in states.values())


def test_from_peft_checkpoint_continues_from_the_folder(runs: tuple[Path, Any]) -> None:
    """A run started from lora_a's adapter folder (one step at lr 1e-30) exports the same
    adapter weights; those weights are not fresh ones (lora_B is zero when fresh)."""
    from safetensors.torch import load_file

    base, _ = runs
    a = load_file(str(base / "lora_a" / "out" / "adapter" / "adapter_model.safetensors"))
    b = load_file(str(base / "lora_b" / "out" / "adapter" / "adapter_model.safetensors"))
    assert a.keys() == b.keys()
    lora_b = [k for k in a if "lora_B" in k]
    assert lora_b and all(a[k].abs().max() > 0 for k in lora_b)
    assert max(float((a[k] - b[k]).abs().max()) for k in a) == 0.0


def test_tokenizer_name_loads_that_tokenizer(runs: tuple[Path, Any]) -> None:
    """--tokenizer_name with one more token than the preset's: the preset is built with that
    vocabulary, one more embedding row and one more head row (2 x hidden 64 parameters)."""
    base, _ = runs
    plain = json.loads((base / "freeze" / "out" / "summary.json").read_text())
    bigger = json.loads((base / "tokenizer" / "out" / "summary.json").read_text())
    assert bigger["params"] - plain["params"] == 2 * 64
