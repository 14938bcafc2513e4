"""Preference tuning (training's ``--method dpo``): bytes per GPU and step time.

What a DPO step is against supervised fine-tuning (``training.dpo``), and how it is modelled here
on top of ``planner.predict`` (kept out of ``planner.memory`` and ``planner.timing``):

- **two sequences per pair.** A micro-batch of B pairs is one forward of 2B rows (chosen and
  rejected, each up to the context length): the policy is planned as a micro-batch of 2B
  samples, its activations, compute and tokens doubled; an epoch of P pairs is 2P samples.
- **the reference**, by training's ``--use_peft`` / ``--precompute_ref_log_probs`` /
  ``--loss_type`` (``training.preference.reference_kind``):

  - ``copy`` (full fine-tuning): a frozen FSDP2-sharded copy of the start weights: its shard
    in the parameter dtype, no gradient, no optimizer state; per step a forward of the 2B rows
    (its all-gathers included: the larger of the two, as an evaluation pass); while it runs the
    policy holds its saved activations, and the reference adds its logits of the 2B rows and
    one gathered unit (the step's peak is the larger of that moment and the policy's own);
  - ``adapters`` (LoRA): the policy with its adapters disabled: no memory of its own, the same
    forward per step;
  - ``precomputed``: log-probs computed before step 1 (one forward over the training split,
    counted in the start-up), nothing per step;
  - ``none`` (SimPO): nothing.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from planner.memory import Layout, MemoryBreakdown

REFERENCES = ("copy", "adapters", "precomputed", "none")
PREFERENCE_SAMPLE_TRAIN_PAIRS = 1080
"""Pairs of training/assets/preference_sample.jsonl's training split (1,200 less the last 10%),
held against training.data.preference by tests/planner/test_preference_memory_vs_cpu.py."""


@dataclass(frozen=True)
class PreferenceSpec:
    """A DPO job: how its reference log-probs are had (``REFERENCES``)."""

    reference: str = "copy"

    def __post_init__(self) -> None:
        if self.reference not in REFERENCES:
            raise ValueError(f"reference {self.reference!r}: one of {', '.join(REFERENCES)}")


def spec_of(method: str, use_peft: bool, precompute: bool, loss_type: str) -> PreferenceSpec | None:
    """The spec of training's flags; None for SFT."""
    if method != "dpo":
        return None
    if loss_type == "simpo":
        return PreferenceSpec("none")
    if precompute:
        return PreferenceSpec("precomputed")
    return PreferenceSpec("adapters" if use_peft else "copy")


def policy_input(inp: Any) -> Any:
    """The policy's part of a DPO step as an SFT input: 2B rows per micro-batch, 2P samples an
    epoch (``inp.dataset_tokens`` counts P pairs of ``inp.seq`` tokens each)."""
    return replace(inp, preference=None, batch=2 * inp.batch, dataset_tokens=2 * inp.dataset_tokens)


def reference_memory(inp: Any, policy: MemoryBreakdown, rows: int, lay: Layout) -> MemoryBreakdown:
    """The policy's bytes (``rows`` = 2B rows a micro-batch, FSDP ``lay``) with the reference's
    added: a frozen copy's shard (``copy``), and the moment of the reference forward (``copy``
    and ``adapters``: with LoRA the same model runs again with its adapters off,
    ``training.dpo``), when the policy holds its saved activations and the reference adds its
    logits and log-sum-exp of the rows (compute dtype and fp32) and one gathered unit; the
    step's peak is the larger of that and the policy's own."""
    from planner.memory import shard_elements

    spec = inp.preference
    if spec is None or spec.reference not in ("copy", "adapters"):
        return policy
    p, shape = inp.precision, inp.shape
    held = (
        shard_elements(shape.param_shapes(), lay.shard) * p.param if spec.reference == "copy" else 0
    )
    logits = rows * inp.seq * (shape.vocab_size * p.compute + 4)
    during = policy.activations + logits + policy.gathered_unit
    peak = max(policy.activations + policy.gathered_peak, during)
    return replace(
        policy,
        params=policy.params + held,
        activations=peak - policy.gathered_peak,
    )


def preference_predict(inp: Any, nodes: int, predict: Callable[[Any, int], Any]) -> Any:
    """``planner.predict.predict`` (passed in: this module is below it) of a DPO ``PlanInput``
    (``inp.preference`` set): its ``Prediction``."""
    from planner.timing import recompute_share

    spec = inp.preference
    assert spec is not None
    base = policy_input(inp)
    pr = predict(base, nodes)
    ref_s = 0.0
    if spec.reference in ("copy", "adapters"):
        from planner.timing import ring_link, ring_time

        comp, lay, it = pr.compute, pr.layout, inp.instance
        fwd_share = 1.0 / (3.0 + recompute_share(inp.shape, inp.ac, inp.ac_mode))
        fwd = (comp.total_s - comp.optimizer_s) * fwd_share
        # the reference forward gathers every unit again (FSDP2 reshards after the policy's):
        # the larger of its compute and its all-gathers, as an evaluation pass
        link = ring_link(lay.shard, min(lay.shard, it.gpus), it, inp.assumptions)
        gather = ring_time(inp.shape.n_params * inp.precision.compute, lay.shard, link)
        ref_s = max(fwd, gather) * inp.grad_accum
    step_s = pr.step_time_s + ref_s
    tokens = base.batch * base.seq * base.grad_accum
    epoch = pr.epoch
    if epoch is not None:
        startup = epoch.startup_s
        if spec.reference == "precomputed":  # one forward over the split before step 1
            fwd = (pr.compute.total_s - pr.compute.optimizer_s) / 3.0
            startup += epoch.steps * fwd * base.grad_accum
        epoch = replace(epoch, loop_s=epoch.loop_s + epoch.steps * ref_s, startup_s=startup)
    mem = reference_memory(inp, pr.memory, base.batch, pr.layout)
    price = inp.usd_per_hour if inp.usd_per_hour is not None else inp.instance.usd_per_hour
    return replace(
        pr,
        memory=mem,
        fits=mem.total <= inp.instance.gpu_memory_bytes,
        step_time_s=step_s,
        tokens_per_s_per_gpu=tokens / step_s,
        mfu=pr.mfu * pr.step_time_s / step_s,
        epoch=epoch,
        cost_per_epoch_usd=nodes * price * epoch.wall_s / 3600.0 if epoch is not None else None,
    )


_FLAGS = ("method", "use_peft", "precompute_ref_log_probs", "loss_type")


def job_preference(extra_args: tuple[str, ...], dataset: str | None, seq: int) -> dict[str, Any]:
    """A job file's DPO, read from its training flags (``args``, each ``--flag=value``):
    ``{"preference": spec, "pairs_tokens": P x seq for the bundled sample}``, or {} for SFT."""
    values = {"method": "sft", "use_peft": "false", "precompute_ref_log_probs": "false"}
    values["loss_type"] = "sigmoid"
    for arg in extra_args:
        name, eq, value = arg[2:].partition("=")
        name = name.replace("-", "_")
        if name in _FLAGS:
            values[name] = value if eq else "true"
    on = {k: values[k].strip().lower() in ("true", "1", "yes", "on") for k in _FLAGS[1:3]}
    spec = spec_of(
        values["method"], on["use_peft"], on["precompute_ref_log_probs"], values["loss_type"]
    )
    if spec is None:
        return {}
    tokens = PREFERENCE_SAMPLE_TRAIN_PAIRS * seq if dataset == "preference_sample" else 0
    return {"preference": spec, "pairs_tokens": tokens}
