"""Preference losses (`--method dpo`): DPO, conservative and robust DPO, IPO, SimPO, as TRL has them.

The flags are TRL's (`DPOConfig`: `beta`, `loss_type`, `label_smoothing`,
`precompute_ref_log_probs`; `CPOConfig`: `simpo_gamma`). With c, r the policy's summed log-probs
of the chosen and rejected completion, c0, r0 the reference's, n_c, n_r their token counts and
h = (c - c0) - (r - r0), each pair's loss is (TRL 1.16, trl/trainer/dpo_trainer.py
`_compute_loss`, and trl/experimental/cpo/cpo_trainer.py `cpo_loss` for SimPO):

- `sigmoid` (DPO): -(1 - e) log s(b h) - e log s(-b h), e = --label_smoothing. With e = 0 it is
  TRL's `sigmoid` loss; with e > 0 it is conservative DPO (cDPO, the form TRL's DPOTrainer had
  before 1.0 and CPOTrainer still has). TRL 1.16's DPOTrainer ignores label_smoothing for
  `sigmoid`; its label-smoothed variant is `robust`, below.
- `robust` (robust DPO): [-(1 - e) log s(b h) + e log s(-b h)] / (1 - 2e), TRL's `robust`.
- `ipo`: (h_c / n_c - h_r / n_r - 1 / (2 b))^2 with h_c = c - c0, h_r = r - r0: TRL's length-
  normalised IPO.
- `simpo` (reference-free): -(1 - e) log s(b m) - e log s(-b m), m = c / n_c - r / n_r - g / b,
  g = --simpo_gamma: TRL's CPOTrainer with `loss_type="simpo"` and `cpo_alpha=0` (SimPO's paper
  has no NLL term; CPOTrainer's default cpo_alpha=1 adds the chosen answers' cross-entropy).

The step's loss is the mean over the pairs of the GLOBAL batch (TRL: the mean over a device's
batch), so any world size or accumulation split gives the same update. The metrics are TRL's:
`rewards/chosen` b (c - c0) and `rewards/rejected` b (r - r0) (SimPO: b c / n_c and b r / n_r,
as CPOTrainer logs them), their difference `rewards/margins`, `rewards/accuracies` (chosen reward
above rejected), and `logps/chosen`, `logps/rejected` (SimPO: per token). Each is the mean over
the global batch's pairs.

Chosen and rejected run through the model in one forward of 2B rows (`sequence_logps`), as TRL's
concatenated forward. A leaf but for `training.loss` (torch imported in the functions only, so
`training.config` can call `check` without it).
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import torch

TrainConfig = Any
"""A `training.config.TrainConfig` (not imported: training.config imports this module)."""

METHODS = ("sft", "dpo")
LOSS_TYPES = ("sigmoid", "robust", "ipo", "simpo")
REFERENCE_FREE = ("simpo",)
METRICS = (
    "rewards/chosen",
    "rewards/rejected",
    "rewards/accuracies",
    "rewards/margins",
    "logps/chosen",
    "logps/rejected",
)
"""TRL's names of the per-pair figures, in the order `pair_losses` returns them."""
DPO_FLAGS = ("beta", "loss_type", "label_smoothing", "simpo_gamma", "precompute_ref_log_probs")
PREFERENCE_DATASETS = ("preference_sample", "custom", "hf_dataset")


class PreferenceError(ValueError):
    """A --method dpo flag that cannot be used; one line naming it."""


def check(cfg: TrainConfig) -> None:
    """--method and the preference flags: values, pairings, and data that can hold pairs."""

    def fail(flag: str, msg: str) -> None:
        raise PreferenceError(f"--{flag}: {msg}")

    if cfg.method not in METHODS:
        fail("method", f"must be one of {', '.join(METHODS)}, got {cfg.method!r}")
    defaults = {f.name: f.default for f in dataclasses.fields(cfg)}
    if cfg.method != "dpo":
        for flag in DPO_FLAGS:
            if getattr(cfg, flag) != defaults[flag]:
                fail(flag, "only used with --method dpo")
        if cfg.dataset == "preference_sample":
            fail("dataset", "preference_sample holds preference pairs: use it with --method dpo")
        return
    if cfg.dataset not in PREFERENCE_DATASETS:
        fail(
            "dataset",
            f"{cfg.dataset} holds no preference pairs; with --method dpo use "
            f"{', '.join(PREFERENCE_DATASETS)}",
        )
    if cfg.loss_type not in LOSS_TYPES:
        fail("loss_type", f"must be one of {', '.join(LOSS_TYPES)}, got {cfg.loss_type!r}")
    if not (math.isfinite(cfg.beta) and cfg.beta > 0):
        fail("beta", f"must be a finite number > 0, got {cfg.beta}")
    if not 0 <= cfg.label_smoothing < 0.5:
        fail("label_smoothing", f"must be in [0, 0.5), got {cfg.label_smoothing}")
    if cfg.label_smoothing and cfg.loss_type == "ipo":
        fail("label_smoothing", "has no meaning for --loss_type ipo")
    if cfg.simpo_gamma != defaults["simpo_gamma"] and cfg.loss_type != "simpo":
        fail("simpo_gamma", "only used with --loss_type simpo")
    if cfg.loss_type in REFERENCE_FREE and cfg.precompute_ref_log_probs:
        fail("precompute_ref_log_probs", f"--loss_type {cfg.loss_type} uses no reference model")
    if cfg.packing_strategy != defaults["packing_strategy"]:
        fail("packing_strategy", "not used with --method dpo (one pair per row, as TRL's)")
    if (
        cfg.use_peft
        and cfg.from_peft_checkpoint
        and not cfg.precompute_ref_log_probs
        and cfg.loss_type not in REFERENCE_FREE
    ):
        fail(
            "from_peft_checkpoint",
            "with --method dpo the reference would be the base without the adapters you "
            "start from; add --precompute_ref_log_probs (the reference is then the starting "
            "adapters, as TRL's 'ref' adapter) or export merged weights and start from them",
        )


def reference_kind(cfg: TrainConfig) -> str:
    """How the run gets the reference's log-probs: none (SimPO), precomputed, adapters (LoRA:
    the base with the adapters disabled) or copy (a frozen FSDP2-sharded copy)."""
    if cfg.loss_type in REFERENCE_FREE:
        return "none"
    if cfg.precompute_ref_log_probs:
        return "precomputed"
    return "adapters" if cfg.use_peft else "copy"


def checkpoint_settings(cfg: TrainConfig) -> dict[str, Any]:
    """The flags a DPO checkpoint fits only with (meta.json's settings); none for SFT, so SFT
    checkpoints made before preference tuning existed still load."""
    if cfg.method == "sft":
        return {}
    return {"method": cfg.method, "precompute_ref_log_probs": cfg.precompute_ref_log_probs}


@dataclass(frozen=True)
class Objective:
    """The loss and its parameters (the --method dpo flags)."""

    loss_type: str = "sigmoid"
    beta: float = 0.1
    label_smoothing: float = 0.0
    simpo_gamma: float = 0.5

    @classmethod
    def of(cls, cfg: TrainConfig) -> Objective:
        return cls(cfg.loss_type, cfg.beta, cfg.label_smoothing, cfg.simpo_gamma)

    @property
    def reference_free(self) -> bool:
        return self.loss_type in REFERENCE_FREE


def sequence_logps(model: Any, batch: dict[str, torch.Tensor]) -> tuple[torch.Tensor, torch.Tensor]:
    """(summed log-prob of each row's label tokens (fp32, 2B), their count) from ONE forward of
    the concatenated chosen + rejected rows (`training.data.preference.collate_pairs`).

    As `training.step.token_loss_sum`: attention_mask=None (right padding is never attended
    from a real token), labels shifted instead of the logits, the chunked loss (no fp32 copy
    of the logits), its gradient written into the logits' storage when nothing else reads it.
    """
    from training.loss import IGNORE_INDEX, chunked_cross_entropy, shift_labels

    logits = model(input_ids=batch["input_ids"], attention_mask=None, use_cache=False).logits
    targets = shift_labels(batch["labels"])
    nll = chunked_cross_entropy(
        logits, targets, overwrite_logits=logits.requires_grad, per_token=True
    )
    return -nll.view(targets.shape).sum(dim=1), (targets != IGNORE_INDEX).sum(dim=1)


def pair_losses(
    obj: Objective,
    logps: torch.Tensor,
    lengths: torch.Tensor,
    ref_logps: torch.Tensor | None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """(loss of each pair (B), its `METRICS` (B x 6, no gradient)) from the policy's summed
    log-probs of the 2B rows (chosen first), their completion token counts and the
    reference's summed log-probs (2B; None for SimPO)."""
    import torch
    import torch.nn.functional as F

    b, e = obj.beta, obj.label_smoothing
    chosen, rejected = logps.chunk(2)
    n_c, n_r = lengths.to(logps.dtype).clamp(min=1.0).chunk(2)
    if obj.reference_free:  # SimPO (CPOTrainer): length-normalised, no reference
        chosen, rejected = chosen / n_c, rejected / n_r
        margin = chosen - rejected - obj.simpo_gamma / b
        losses = -F.logsigmoid(b * margin) * (1 - e) - F.logsigmoid(-b * margin) * e
        r_chosen, r_rejected = b * chosen.detach(), b * rejected.detach()
    else:
        assert ref_logps is not None
        ref_chosen, ref_rejected = ref_logps.to(logps.dtype).chunk(2)
        h_chosen, h_rejected = chosen - ref_chosen, rejected - ref_rejected
        h = h_chosen - h_rejected
        if obj.loss_type == "sigmoid":
            losses = -F.logsigmoid(b * h) * (1 - e) - F.logsigmoid(-b * h) * e
        elif obj.loss_type == "robust":
            clean, flipped = -(1 - e) * F.logsigmoid(b * h), -e * F.logsigmoid(-b * h)
            losses = (clean - flipped) / (1 - 2 * e)
        elif obj.loss_type == "ipo":
            losses = (h_chosen / n_c - h_rejected / n_r - 1 / (2 * b)) ** 2
        else:
            raise ValueError(f"unknown loss_type {obj.loss_type!r}")
        r_chosen, r_rejected = b * h_chosen.detach(), b * h_rejected.detach()
    stats = torch.stack(
        [
            r_chosen,
            r_rejected,
            (r_chosen > r_rejected).to(r_chosen.dtype),
            r_chosen - r_rejected,
            chosen.detach(),
            rejected.detach(),
        ],
        dim=1,
    )
    return losses, stats
