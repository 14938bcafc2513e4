"""The preference trainer (`--method dpo`): `Trainer`'s loop, checkpoints and export on pairs.

`PreferenceSteps` holds what changes; `training.finetune.trainer_class` mixes it into `Trainer`
as `PreferenceTrainer` (so this module does not import the trainer that imports it).

What changes against supervised fine-tuning (`training.finetune.Trainer`):

- **data**: preference pairs (`training.data.preference`), one pair per row; a micro-batch of B
  pairs is one forward of 2B rows, chosen then rejected (TRL's concatenated forward);
- **the reference**, by `training.preference.reference_kind`: with LoRA the same sharded model
  with its adapters disabled (`PeftModel.disable_adapter`, TRL's way; no second copy); in a full
  fine-tune a frozen copy built like the policy (empty, sharded by `parallelize` without
  activation checkpointing, filled from rank 0's initial weights): no gradient, no optimizer
  state, never checkpointed (it is the start weights, read again at every start); or, with
  `--precompute_ref_log_probs`, the start model's log-probs of every pair computed once before
  step 1 (each rank its share, all-reduced), kept with the pairs and in every checkpoint
  (`ReferenceLogps`: a resumed policy is no longer the reference). SimPO has none;
- **the step**: each pair's loss (`training.preference.pair_losses`) weighted 1 (0 for a filler
  pair), scaled by world size / the GLOBAL batch's pair count: the gradient is that of the mean
  over the global batch at any world size or accumulation; TRL's metrics summed on the device,
  all-reduced once and logged with the loss (metrics.jsonl, Prometheus' loss, the tracker);
- **validation**: the same loss and metrics over the validation pairs, printed with the reward
  accuracy and kept in summary.json (`eval_rewards/accuracies`, ...).
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from torch.distributed.checkpoint.stateful import Stateful

from training.preference import METRICS, Objective, pair_losses, reference_kind, sequence_logps

if TYPE_CHECKING:
    import torch

    from training.config import TrainConfig
    from training.dist import DistEnv

Trainer = Any
"""`training.finetune.Trainer`, which `PreferenceSteps` is mixed into
(`training.finetune.trainer_class`: finetune imports this module, not the other way)."""


def shard_reference(ref: Any, mesh: Any, cfg: TrainConfig, dims: Any) -> None:
    """Freeze a reference copy and shard it as the policy (`parallelize`) but without
    activation checkpointing (it never runs backward) and with every unit resharded after its
    forward: the policy keeps `[norm, lm_head]` and the root gathered for its backward, which
    the reference never runs, so they would stay gathered for the whole run."""
    from torch.distributed.fsdp import FSDPModule

    from training.parallelize import parallelize

    ref.requires_grad_(False)
    plain = dataclasses.replace(
        cfg, fsdp_activation_checkpointing=False, ac_mode="full", compile=False
    )
    parallelize(ref, mesh, plain, dims)
    if isinstance(ref, FSDPModule) and dims.strategy != "NO_SHARD":
        ref.set_reshard_after_forward(True)


class ReferenceLogps(Stateful):
    """The precomputed reference log-probs (chosen, rejected) of every pair of each split, held
    by the pairs themselves (`ref_logps`) and saved in checkpoints as one fp64 tensor a split."""

    def __init__(self, splits: dict[str, Sequence[dict[str, Any]]]) -> None:
        self.splits = splits
        self.loaded = False

    def state_dict(self) -> dict[str, Any]:
        import torch

        return {
            name: torch.tensor([p.get("ref_logps", [0.0, 0.0]) for p in pairs], dtype=torch.float64)
            for name, pairs in self.splits.items()
        }

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        for name, pairs in self.splits.items():
            for pair, values in zip(pairs, state_dict[name].tolist(), strict=True):
                pair["ref_logps"] = values
        self.loaded = True


class PreferenceSteps:
    """What `Trainer` does differently on preference pairs; `training.finetune.trainer_class`
    puts it before `Trainer` (`PreferenceTrainer`): setup (here) -> fit -> finish."""

    cfg: Any
    env: Any
    spec: Any
    mesh: Any
    dims: Any
    model: Any
    peft: Any
    tokenizer: Any
    batches: Any
    eval_data: Any
    optimizer: Any
    hooks: Any
    state: Any
    data_notes: list[str]
    flops_per_token: float

    def __init__(self, cfg: TrainConfig, env: DistEnv) -> None:
        self.objective = Objective.of(cfg)
        self.reference = reference_kind(cfg)
        self.ref_model: Any = None
        self.ref_state: ReferenceLogps | None = None
        self.eval_figures: dict[str, float] = {}
        super().__init__(cfg, env)  # type: ignore[call-arg]
        if self.reference == "copy":
            self.ref_model = self._frozen_copy()
        if self.reference in ("copy", "adapters"):  # a reference forward per step: ~2N a token
            from training.model import flops_per_token

            self.flops_per_token += flops_per_token(self.spec.config, self.cfg.context_length) / 3
        if self.ref_state is not None and not self.ref_state.loaded:
            self._precompute()

    # -- setup ----------------------------------------------------------------------------------
    def _data_kinds(self) -> tuple[Any, Any, Any]:
        from training.data.preference import PreferenceBatches, PreferenceEvalBatches, build_pairs

        return build_pairs, PreferenceBatches, PreferenceEvalBatches

    def _extra_state(self) -> dict[str, Stateful]:
        if self.reference != "precomputed":
            return {}
        splits = {"train": self.batches.dataset}
        if self.eval_data is not None:
            splits["validation"] = self.eval_data.dataset
        self.ref_state = ReferenceLogps(splits)
        return {"reference": self.ref_state}

    def _frozen_copy(self) -> Any:
        """The reference of a full fine-tune: the start weights, frozen and sharded as the
        policy (no activation checkpointing: it never runs backward), in eval mode."""
        import torch

        from training.model import build_empty, full_state_dict, materialize

        cfg = self.cfg
        ref = build_empty(self.spec)
        shard_reference(ref, self.mesh, cfg, self.dims)
        where = torch.device("cpu") if cfg.fsdp_cpu_offload and cfg.enable_fsdp else self.env.device
        weights = full_state_dict(self.spec, cfg.seed) if self.env.is_main else None
        materialize(ref, self.spec, where, weights)
        del weights
        return ref.eval()

    def _precompute(self) -> None:
        """Every pair's reference log-probs from the start model (eval mode, no gradient), each
        rank its share of each split as `EvalBatches` deals them, summed over ranks."""
        import torch

        from training.data import to_device
        from training.data.preference import collate_pairs
        from training.dist import all_reduce_sum_tensor

        assert self.ref_state is not None
        t0, dev = time.perf_counter(), self.env.device
        W, rank, pad = self.env.world_size, self.env.rank, self.tokenizer.pad_token_id
        sizes = {"train": self.cfg.batch_size_training, "validation": self.cfg.val_batch_size}
        self.model.eval()
        for name, pairs in self.ref_state.splits.items():
            n, B = len(pairs), sizes[name]
            out = torch.zeros(n, 2, dtype=torch.float64, device=dev)
            for k in range(-(-n // (B * W))):
                ids = [k * B * W + rank * B + j for j in range(B)]
                batch = collate_pairs([pairs[i % n] for i in ids], [1.0] * B, pad)
                with torch.no_grad():
                    logps, _ = sequence_logps(
                        self.model, {k: to_device(batch[k], dev) for k in ("input_ids", "labels")}
                    )
                mine = [j for j, i in enumerate(ids) if i < n]
                if mine:
                    both = torch.stack(logps.chunk(2), dim=1).double()
                    out[torch.tensor([ids[j] for j in mine], device=dev)] = both[mine]
            for pair, values in zip(pairs, all_reduce_sum_tensor(out).tolist(), strict=True):
                pair["ref_logps"] = values
        self.model.train()
        self.ref_state.loaded = True
        if self.env.is_main:
            counts = " + ".join(f"{len(p)} {n}" for n, p in self.ref_state.splits.items())
            print(
                f"reference log-probs of {counts} pairs computed in "
                f"{time.perf_counter() - t0:.1f} s (--precompute_ref_log_probs)",
                flush=True,
            )

    # -- the step -------------------------------------------------------------------------------
    def _reference_logps(self, batch: dict[str, Any]) -> torch.Tensor | None:
        """The reference's summed log-probs of the 2B rows (chosen first), without gradient."""
        import torch

        if self.reference == "none":
            return None
        if self.reference == "precomputed":
            return batch["ref_logps"].t().reshape(-1)
        with torch.no_grad():
            if self.ref_model is not None:
                return sequence_logps(self.ref_model, batch)[0]
            with self.peft.disable_adapter():  # LoRA: the base is the reference
                return sequence_logps(self.model, batch)[0]

    def _pair_sums(self, mb: dict[str, Any]) -> tuple[torch.Tensor, torch.Tensor]:
        """(sum of this micro-batch's weighted pair losses, with gradient; the 8 weighted sums
        [loss, METRICS..., pairs] in fp64, without)."""
        import torch

        from training.data import to_device

        batch = {k: to_device(v, self.env.device) for k, v in mb.items()}
        logps, lengths = sequence_logps(self.model, batch)
        losses, stats = pair_losses(self.objective, logps, lengths, self._reference_logps(batch))
        w = batch["weight"].to(losses.dtype)
        loss = (losses * w).sum()
        figures = torch.cat([loss.detach()[None], (stats * w[:, None]).sum(0), w.sum()[None]])
        return loss, figures.double()

    def train_step(self, micro_batches: list[dict[str, torch.Tensor]]) -> dict[str, Any]:
        """One optimizer step over this rank's micro-batches of pairs; returns global figures
        (device tensors, fetched with the loss by `_flush_rows`)."""
        import torch

        from training.dist import all_reduce_sum_tensor
        from training.parallelize import set_gradient_sync

        g_label, g_input = self.batches.step_token_counts()
        g_pairs = max(self.batches.step_pairs, 1)
        scale = self.env.world_size / g_pairs  # FSDP averages over ranks: sum / global pairs
        sums = torch.zeros(len(METRICS) + 2, dtype=torch.float64, device=self.env.device)
        for i, mb in enumerate(micro_batches):
            set_gradient_sync(self.model, self.dims, last_micro_batch=i == len(micro_batches) - 1)
            loss, figures = self._pair_sums(mb)
            (loss * scale).backward()
            sums += figures
        grad_norm = self._clip_grads()
        self.optimizer.step()
        self.optimizer.zero_grad(set_to_none=True)
        means = all_reduce_sum_tensor(sums) / g_pairs
        stop, checkpoint_due = self._vote()
        return {
            "loss": means[0],
            "grad_norm": grad_norm,
            "tokens": g_input,
            "label_tokens": g_label,
            "stop": stop,
            "checkpoint_due": checkpoint_due,
            "lr": self.optimizer.param_groups[0]["lr"],
            "extra": {
                "pairs": self.batches.step_pairs,
                **dict(zip(METRICS, means[1:], strict=False)),
            },
        }

    # -- validation -----------------------------------------------------------------------------
    def validate(self, epoch: int = 0) -> float:
        """Mean pair loss over the validation pairs (all ranks); TRL's metrics beside it."""
        import torch

        from training.dist import all_reduce_sum_tensor

        assert self.eval_data is not None
        self.model.eval()
        sums = torch.zeros(len(METRICS) + 2, dtype=torch.float64, device=self.env.device)
        with torch.no_grad():
            for mb in self.eval_data:
                sums += self._pair_sums(mb)[1]
        self.model.train()
        values = all_reduce_sum_tensor(sums).tolist()
        pairs = max(values[-1], 1.0)
        loss, figures = values[0] / pairs, [v / pairs for v in values[1:-1]]
        self.eval_figures = {f"eval_{k}": v for k, v in zip(METRICS, figures, strict=True)}
        if self.hooks.tracker is not None:
            self.hooks.tracker.log({"eval_loss": loss, **self.eval_figures}, self.state.step)
        if self.env.is_main:
            f = self.eval_figures
            print(
                f"epoch {epoch}: eval loss {loss:.4f}, reward accuracy "
                f"{f['eval_rewards/accuracies']:.3f}, reward margin {f['eval_rewards/margins']:.4f} "
                f"({int(values[-1])} pairs)",
                flush=True,
            )
        return loss

    def _unit(self) -> str:
        return f"train pairs (chosen and rejected of up to {self.cfg.context_length} tokens)"

    def _summary_extra(self) -> dict[str, Any]:
        return {"method": "dpo", "loss_type": self.objective.loss_type, **self.eval_figures}
