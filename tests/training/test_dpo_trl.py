"""The preference losses equal TRL's (trl==1.16.0, requirements-dev.txt) on the same model and batch.

If this fails, `--method dpo` no longer trains what TRL's DPOTrainer (sigmoid DPO, robust DPO,
IPO) or CPOTrainer (SimPO, `cpo_alpha=0`) trains: the loss, the chosen/rejected rewards or the
gradient of every parameter differ by more than 1e-5, with a frozen reference copy (full
fine-tuning) and with LoRA (the reference is the base with the adapters disabled) alike; or the
pairs are no longer tokenized as TRL tokenizes them (the completion tokens, eos, the prompt's
boundary, conversational rows through the chat template).

TRL's own code paths run here: `DPOTrainer._prepare_dataset` (through its constructor), its
collator and `compute_loss`; `CPOTrainer`'s collator, `concatenated_inputs` and
`get_batch_loss_metrics`. Ours: `training.data.preference` (tokenize_row, collate_pairs) and
`training.preference` (sequence_logps, pair_losses), the functions `training.dpo`'s step calls.
"""

from __future__ import annotations

import copy
import json
import warnings
from pathlib import Path
from typing import Any

import pytest
import torch

from training.data import load_tokenizer
from training.data.preference import (
    PREFERENCE_SAMPLE,
    collate_pairs,
    preference_row,
    tokenize_row,
)
from training.model import model_spec
from training.preference import METRICS, Objective, pair_losses, sequence_logps

pytest.importorskip("trl")

TOL = 1e-5
N = 4
CONVERSATIONS = [
    {
        "prompt": [
            {"role": "system", "content": "You answer in one word."},
            {"role": "user", "content": f"Which colour is the {thing}?"},
        ],
        "chosen": [{"role": "assistant", "content": good}],
        "rejected": [{"role": "assistant", "content": bad}],
    }
    for thing, good, bad in [
        ("sky", "Blue.", "Green."),
        ("grass", "Green.", "Purple."),
        ("snow", "White.", "Black."),
        ("coal", "Black.", "Yellow."),
    ]
]


@pytest.fixture(scope="module")
def tok() -> Any:
    return load_tokenizer("tiny-llama")


def _rows() -> list[dict[str, Any]]:
    lines = PREFERENCE_SAMPLE.read_text(encoding="utf-8").splitlines()
    return [json.loads(line) for line in lines[:N]]


def _models(tok: Any) -> tuple[Any, Any]:
    """(policy, reference): the seeded tiny-llama-2l, the policy moved away from it a little so
    that the rewards are not all zero."""
    from transformers import AutoModelForCausalLM

    spec = model_spec("tiny-llama-2l", len(tok), 256)
    torch.manual_seed(0)
    ref = AutoModelForCausalLM.from_config(spec.config, dtype=torch.float32)
    policy = copy.deepcopy(ref)
    with torch.no_grad():
        for p in policy.parameters():
            p.add_(0.02 * torch.randn_like(p))
    return policy, ref


LORA = {"r": 4, "lora_alpha": 8, "lora_dropout": 0.0, "target_modules": ["q_proj", "v_proj"]}


def _lora_twin(trainer: Any, base: Any) -> Any:
    """TRL's adapters (it wraps the policy itself from `peft_config`, so its reference is the base
    with the adapters disabled) get a non-zero lora_B, then the same adapters on our copy of the
    base: adapted != base, the two models equal."""
    from peft import LoraConfig, get_peft_model

    torch.manual_seed(1)
    theirs = dict(trainer.model.named_parameters())
    with torch.no_grad():
        for name, p in theirs.items():
            if "lora_B" in name:
                p.normal_(0, 0.05)
    ours = get_peft_model(base, LoraConfig(**LORA))
    with torch.no_grad():
        for name, p in ours.named_parameters():
            p.copy_(theirs[name])
    return ours


def _grads(model: Any) -> dict[str, torch.Tensor]:
    return {n: p.grad.detach().clone() for n, p in model.named_parameters() if p.grad is not None}


def _max_grad_diff(a: dict[str, torch.Tensor], b: dict[str, torch.Tensor]) -> float:
    assert a.keys() == b.keys() and a
    return max(float((a[k] - b[k]).abs().max()) for k in a)


def _ours(
    obj: Objective, policy: Any, batch: dict[str, torch.Tensor], reference: Any
) -> tuple[float, dict[str, float], dict[str, torch.Tensor]]:
    """Our loss (mean over the pairs), metrics and gradients; `reference` is a model, or a
    PeftModel whose adapters are disabled for the reference forward, or None (SimPO)."""
    logps, lengths = sequence_logps(policy, batch)
    ref = None
    if reference is not None:
        with torch.no_grad():
            if hasattr(reference, "disable_adapter"):
                with reference.disable_adapter():
                    ref = sequence_logps(policy, batch)[0]
            else:
                ref = sequence_logps(reference, batch)[0]
    losses, stats = pair_losses(obj, logps, lengths, ref)
    loss = losses.mean()
    loss.backward()
    figures = dict(zip(METRICS, stats.mean(0).tolist(), strict=True))
    return float(loss), figures, _grads(policy)


def _dpo_trainer(tok: Any, tmp: Path, policy: Any, ref: Any, rows: list[dict], **kw: Any) -> Any:
    from datasets import Dataset
    from trl import DPOConfig, DPOTrainer

    peft_config = kw.pop("peft_config", None)
    args = DPOConfig(
        output_dir=str(tmp),
        report_to=[],
        use_cpu=True,
        bf16=False,
        per_device_train_batch_size=N,
        save_strategy="no",
        **kw,
    )
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return DPOTrainer(
            model=policy,
            ref_model=ref,
            args=args,
            train_dataset=Dataset.from_list(rows),
            processing_class=tok,
            peft_config=peft_config,
        )


@pytest.mark.parametrize("rows", [_rows(), CONVERSATIONS], ids=["standard", "conversational"])
def test_pairs_are_tokenized_as_trl_does(tok: Any, tmp_path: Path, rows: list[dict]) -> None:
    policy, ref = _models(tok)
    trainer = _dpo_trainer(tok, tmp_path, policy, ref, rows)
    for i, row in enumerate(rows):
        theirs = trainer.train_dataset[i]
        mine = tokenize_row(tok, preference_row(row, f"row {i}"))
        for key in ("prompt_ids", "chosen_ids", "rejected_ids"):
            assert mine[key] == theirs[key], (i, key)
    batch = collate_pairs([tokenize_row(tok, preference_row(r, "")) for r in rows], [1.0] * N, 0)
    collated = trainer.data_collator([trainer.train_dataset[i] for i in range(N)])
    real = collated["attention_mask"].bool()
    assert torch.equal(batch["input_ids"][real], collated["input_ids"][real])
    assert torch.equal(batch["labels"] != -100, collated["completion_mask"].bool())


CASES = [
    ("sigmoid", {}),
    ("robust", {"label_smoothing": 0.1}),
    ("ipo", {}),
]


@pytest.mark.parametrize("reference", ["copy", "lora"])
@pytest.mark.parametrize(("loss_type", "extra"), CASES, ids=[c[0] for c in CASES])
def test_dpo_losses_match_trl(
    tok: Any, tmp_path: Path, reference: str, loss_type: str, extra: dict[str, float]
) -> None:
    beta = 0.2
    policy, ref = _models(tok)
    lora = reference == "lora"
    if lora:
        from peft import LoraConfig

        policy, ref, extra = ref, None, {**extra, "peft_config": LoraConfig(**LORA)}
    mine_policy = copy.deepcopy(policy)  # before TRL patches its forward
    mine_ref = copy.deepcopy(ref) if ref is not None else None
    rows = _rows()
    trainer = _dpo_trainer(
        tok, tmp_path, policy, ref, rows, beta=beta, loss_type=[loss_type], **extra
    )
    if lora:
        mine_policy = mine_ref = _lora_twin(trainer, mine_policy)
    inputs = trainer.data_collator([trainer.train_dataset[i] for i in range(N)])
    loss = trainer.compute_loss(trainer.model, inputs)
    loss.backward()
    theirs = {k: v[-1] for k, v in trainer._metrics["train"].items()}

    batch = collate_pairs([tokenize_row(tok, preference_row(r, "")) for r in rows], [1.0] * N, 0)
    obj = Objective(loss_type, beta, float(extra.get("label_smoothing", 0.0)))
    my_loss, mine, my_grads = _ours(obj, mine_policy, batch, mine_ref)

    print(f"{loss_type}/{reference}: loss {my_loss} vs {float(loss)}")
    assert abs(my_loss - float(loss)) < TOL
    for key in ("rewards/chosen", "rewards/rejected", "rewards/margins", "rewards/accuracies"):
        assert abs(mine[key] - theirs[key]) < TOL, key
    for key in ("logps/chosen", "logps/rejected"):  # ~ -120: fp32 sums of 20-odd tokens
        assert abs(mine[key] - theirs[key]) < TOL * abs(theirs[key]), key
    assert abs(mine["rewards/chosen"]) > 1e-3  # the policy is not its reference
    diff = _max_grad_diff(my_grads, _grads(trainer.model))
    print(f"{loss_type}/{reference}: max gradient difference {diff:.2e}")
    assert diff < TOL


def test_sigmoid_label_smoothing_is_conservative_dpo(tok: Any) -> None:
    """TRL 1.16's DPOTrainer ignores label_smoothing for `sigmoid`; ours is cDPO (TRL's form
    before 1.0, CPOTrainer's today): -(1-e) log s(b h) - e log s(-b h). At e = 0 it is the
    plain sigmoid loss that the TRL comparison checks."""
    logps = torch.tensor([-10.0, -12.0, -11.0, -11.5])
    ref = torch.tensor([-10.5, -12.0, -11.0, -11.0])
    lengths = torch.tensor([5, 6, 5, 7])
    b, e = 0.3, 0.2
    losses, _ = pair_losses(Objective("sigmoid", b, e), logps, lengths, ref)
    h = torch.tensor([(-10.0 + 10.5) - (-11.0 + 11.0), (-12.0 + 12.0) - (-11.5 + 11.0)])
    expected = -(1 - e) * torch.nn.functional.logsigmoid(
        b * h
    ) - e * torch.nn.functional.logsigmoid(-b * h)
    assert torch.allclose(losses, expected, atol=1e-7)


@pytest.mark.parametrize("label_smoothing", [0.0, 0.1])
def test_simpo_matches_trl_cpo(tok: Any, tmp_path: Path, label_smoothing: float) -> None:
    from datasets import Dataset
    from trl.experimental.cpo import CPOConfig, CPOTrainer

    beta, gamma = 2.0, 0.5
    policy, _ = _models(tok)
    mine_policy = copy.deepcopy(policy)
    args = CPOConfig(
        output_dir=str(tmp_path),
        report_to=[],
        use_cpu=True,
        bf16=False,
        per_device_train_batch_size=N,
        save_strategy="no",
        loss_type="simpo",
        cpo_alpha=0.0,
        simpo_gamma=gamma,
        beta=beta,
        label_smoothing=label_smoothing,
        max_length=256,
    )
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        trainer = CPOTrainer(
            model=policy, args=args, train_dataset=Dataset.from_list(_rows()), processing_class=tok
        )
    inputs = trainer.data_collator([trainer.train_dataset[i] for i in range(N)])
    loss, theirs = trainer.get_batch_loss_metrics(trainer.model, inputs)
    loss.backward()

    cat = trainer.concatenated_inputs(inputs, padding_value=tok.pad_token_id)
    batch = {"input_ids": cat["concatenated_input_ids"], "labels": cat["concatenated_labels"]}
    obj = Objective("simpo", beta, label_smoothing, gamma)
    my_loss, mine, my_grads = _ours(obj, mine_policy, batch, None)

    print(f"simpo e={label_smoothing}: loss {my_loss} vs {float(loss)}")
    assert abs(my_loss - float(loss)) < TOL
    for key in METRICS:
        assert abs(mine[key] - theirs[key]) < TOL, key
    diff = _max_grad_diff(my_grads, _grads(trainer.model))
    print(f"simpo e={label_smoothing}: max gradient difference {diff:.2e}")
    assert diff < TOL
