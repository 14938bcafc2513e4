"""Measured FLOPs of one optimizer step beside the formula MFU uses (`--flop_counter`).

As llama-cookbook's `FlopMeasure` (`llama_cookbook/utils/flop_utils.py` at 0.0.5.post1, a
`torch.utils.flop_counter.FlopCounterMode`), one step is counted after `--flop_counter_start`
warm-up steps of this process: step `first + start` (step 4 of a fresh run). Every rank counts
the operations it runs (FSDP2 gathers the weights, so each rank multiplies full matrices with
its own micro-batches); the ranks' counts are summed into the step's global figure and printed
by rank 0 beside `training.model.flops_per_token` x the step's tokens, the formula of MFU
(PaLM's convention: 6 N + 12 L h_q S, h_q = heads x head_dim; 4 N + 6 N_adapters + 12 L h_q S
with LoRA; the planner's `model_flops_per_token` is the same formula).

What the count holds (torch 2.13, `torch/utils/flop_counter.py`): matrix products (`mm`,
`addmm`, `bmm`) and attention kernels, forward and backward, including what activation
checkpointing recomputes; no element-wise work. Its attention formula counts the full S x S
scores (no causal saving) and, in backward, the score recomputation flash kernels do: 14 L h_q S
per token against the formula's 12. torch registers no formula for the CPU flash kernel
(`_scaled_dot_product_flash_attention_for_cpu` and its backward), so `CPU_ATTENTION` gives it
torch's own SDPA counts. Measured / formula is therefore about 1 without activation
checkpointing and up to 4/3 with it (one more forward per layer; torch's non-reentrant
checkpoint stops recomputing after the last op whose output backward needs, which leaves out
each layer's MLP down projection).
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import torch
from torch.utils.flop_counter import FlopCounterMode, sdpa_backward_flop_count, sdpa_flop_count

FLOPS_FILE = "flops.json"


def _cpu_sdpa(query: Any, key: Any, value: Any, *args: Any, **kwargs: Any) -> int:
    """Forward of the CPU flash kernel: torch's SDPA count (shapes in, as for custom formulas)."""
    return int(sdpa_flop_count(query, key, value))


def _cpu_sdpa_backward(grad_out: Any, query: Any, key: Any, value: Any, *a: Any, **k: Any) -> int:
    """Backward of the CPU flash kernel: torch's SDPA backward count."""
    return int(sdpa_backward_flop_count(grad_out, query, key, value))


CPU_ATTENTION: dict[Any, Callable[..., int]] = {
    torch.ops.aten._scaled_dot_product_flash_attention_for_cpu: _cpu_sdpa,
    torch.ops.aten._scaled_dot_product_flash_attention_for_cpu_backward: _cpu_sdpa_backward,
}
"""FlopCounterMode `custom_mapping` for the CPU attention kernels torch leaves uncounted."""


def counter() -> FlopCounterMode:
    """A FlopCounterMode that prints nothing and counts CPU attention too."""
    return FlopCounterMode(display=False, custom_mapping=CPU_ATTENTION)


def split_counts(mode: FlopCounterMode) -> tuple[int, int]:
    """(matrix-product FLOPs, attention FLOPs) of everything `mode` counted."""
    matmul = attention = 0
    for op, flops in mode.get_flop_counts().get("Global", {}).items():
        if "attention" in str(op):
            attention += int(flops)
        else:
            matmul += int(flops)
    return matmul, attention


@dataclass(frozen=True)
class FlopReport:
    """One counted step, global (summed over ranks)."""

    step: int
    """The optimizer step counted."""
    measured: float
    """FLOPs FlopCounterMode counted on all ranks."""
    measured_matmul: float
    """Of which matrix products (projections, lm_head)."""
    measured_attention: float
    """Of which attention kernels."""
    formula: float
    """flops_per_token (6 N + 12 L h_q S; 4 N + 6 N_adapters + ... with LoRA) x the step's input
    tokens: what MFU assumes."""
    tokens: int
    """Input tokens of the global batch (training.data.batches' step_token_counts)."""
    seconds: float
    """Wall time of the counted step on the slowest rank (the counter's overhead included)."""

    @property
    def ratio(self) -> float:
        return self.measured / self.formula if self.formula else float("nan")

    def as_dict(self) -> dict[str, Any]:
        return {**asdict(self), "ratio": self.ratio}

    def line(self) -> str:
        rate = self.measured / self.seconds / 1e12 if self.seconds > 0 else 0.0
        return (
            f"flop counter, step {self.step}: measured {self.measured:.4g} FLOPs "
            f"(matmul {self.measured_matmul:.4g}, attention {self.measured_attention:.4g}); "
            f"MFU formula x {self.tokens} tokens {self.formula:.4g}; "
            f"measured/formula {self.ratio:.3f}; {rate:.3g} TFLOP/s while counting"
        )


class StepFlopCounter:
    """Counts step `step` (set by the caller) and reduces the counts over ranks afterwards."""

    def __init__(self, step: int, flops_per_token: float, device: torch.device) -> None:
        self.step = step
        self.flops_per_token = flops_per_token
        self.device = device
        self.report: FlopReport | None = None
        self._mode: FlopCounterMode | None = None
        self._t0 = 0.0

    def start(self) -> None:
        self._sync()
        self._mode = counter()
        self._mode.__enter__()
        self._t0 = time.perf_counter()

    def stop(self, tokens: int) -> FlopReport:
        """Leave the counter after the step; every rank calls this (one all-reduce)."""
        from training.dist import all_reduce_max, all_reduce_sum

        assert self._mode is not None, "start() first"
        self._sync()
        seconds = time.perf_counter() - self._t0
        self._mode.__exit__(None, None, None)
        matmul, attention = split_counts(self._mode)
        self._mode = None
        g_matmul, g_attention = all_reduce_sum([float(matmul), float(attention)], self.device)
        (slowest,) = all_reduce_max([seconds], self.device)
        self.report = FlopReport(
            step=self.step,
            measured=g_matmul + g_attention,
            measured_matmul=g_matmul,
            measured_attention=g_attention,
            formula=self.flops_per_token * tokens,
            tokens=tokens,
            seconds=slowest,
        )
        return self.report

    def _sync(self) -> None:
        if self.device.type == "cuda":  # the counted step is timed: one host sync each side
            torch.cuda.synchronize(self.device)


def write_report(report: FlopReport, out_dir: Path) -> Path:
    """`<out_dir>/flops.json` with the report's figures."""
    path = out_dir / FLOPS_FILE
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(report.as_dict(), indent=2) + "\n", encoding="utf-8")
    return path
