"""The chunked, label-shifted loss gives the numbers of the plain cross-entropy.

If these fail, `training.loss` no longer equals `F.cross_entropy(logits[:, :-1], labels[:, 1:],
ignore_index=-100, reduction="sum")` in value or in the gradients it sends to the head and the
hidden states (fp32 to ~1e-6; bf16 logits to bf16 rounding), for any chunk size, with ignored
labels, with the gradient written into the logits' storage or into a new buffer; or it overwrites
logits that another backward node still needs (a soft-capped head, where the logits are not a
plain matmul output), which would corrupt those gradients; or its memory claim breaks: the
loss's forward and backward must allocate at most a quarter of one fp32 logits buffer beyond
the logits (fp32 logits; half with bf16), where the plain cross-entropy on shifted logits
allocates three.
"""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from training.loss import chunk_rows_for, chunked_cross_entropy, shift_labels, token_loss_sum

B, T, H, V = 3, 11, 16, 37


def _reference(h: torch.Tensor, w: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
    logits = h @ w.t()
    return F.cross_entropy(
        logits[:, :-1].flatten(0, 1).float(),
        labels[:, 1:].flatten(),
        ignore_index=-100,
        reduction="sum",
    )


def _case(dtype: torch.dtype) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(0)
    h = torch.randn(B, T, H, generator=g).to(dtype)
    w = torch.randn(V, H, generator=g).to(dtype)
    labels = torch.randint(0, V, (B, T), generator=g)
    labels[0, :4] = -100  # a prompt
    labels[2, :] = -100  # a filler row: no target at all
    return h, w, labels


def _grads(loss_fn, dtype: torch.dtype) -> tuple[float, torch.Tensor, torch.Tensor]:  # type: ignore[no-untyped-def]
    h, w, labels = _case(dtype)
    h.requires_grad_()
    w.requires_grad_()
    loss = loss_fn(h, w, labels)
    (loss * 0.37).backward()  # a scale, as the trainer's 1 / global label count
    return float(loss.detach()), h.grad, w.grad  # type: ignore[return-value]


@pytest.mark.parametrize("chunk_rows", [1, 4, 7, 1000])
@pytest.mark.parametrize("overwrite", [False, True])
def test_fp32_matches_cross_entropy(chunk_rows: int, overwrite: bool) -> None:
    ref_loss, ref_h, ref_w = _grads(_reference, torch.float32)

    def ours(h: torch.Tensor, w: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
        logits = h @ w.t()
        return chunked_cross_entropy(
            logits, shift_labels(labels), chunk_rows=chunk_rows, overwrite_logits=overwrite
        )

    loss, gh, gw = _grads(ours, torch.float32)
    assert abs(loss - ref_loss) < 1e-4 * abs(ref_loss)
    assert (gh - ref_h).abs().max() < 1e-5
    assert (gw - ref_w).abs().max() < 1e-5


@pytest.mark.parametrize("overwrite", [False, True])
def test_bf16_logits_match_cross_entropy(overwrite: bool) -> None:
    ref_loss, ref_h, ref_w = _grads(_reference, torch.bfloat16)

    def ours(h: torch.Tensor, w: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
        return token_loss_sum(h @ w.t(), labels, overwrite_logits=overwrite)

    loss, gh, gw = _grads(ours, torch.bfloat16)
    assert abs(loss - ref_loss) < 1e-3 * abs(ref_loss)  # both sum in fp32
    # Both paths compute (softmax - one_hot) * scale in fp32 and round once to bf16.
    assert (gh.float() - ref_h.float()).abs().max() <= 2 * 2**-8 * ref_h.float().abs().max()
    assert (gw.float() - ref_w.float()).abs().max() <= 2 * 2**-8 * ref_w.float().abs().max()


def test_logits_saved_by_another_node_are_not_overwritten() -> None:
    """tanh soft-capping (Gemma 2) saves its output: the gradient must go to a new buffer."""
    cap = 5.0

    def capped_ref(h: torch.Tensor, w: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
        logits = torch.tanh((h @ w.t()) / cap) * cap
        return F.cross_entropy(
            logits[:, :-1].flatten(0, 1), labels[:, 1:].flatten(), reduction="sum"
        )

    def capped_ours(h: torch.Tensor, w: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
        logits = torch.tanh((h @ w.t()) / cap) * cap
        return token_loss_sum(logits, labels, overwrite_logits=True)

    ref_loss, ref_h, ref_w = _grads(capped_ref, torch.float32)
    loss, gh, gw = _grads(capped_ours, torch.float32)
    assert abs(loss - ref_loss) < 1e-4 * abs(ref_loss)
    assert (gh - ref_h).abs().max() < 1e-5
    assert (gw - ref_w).abs().max() < 1e-5


def test_overwrite_reuses_the_logits_storage() -> None:
    """With a plain head the gradient of the logits IS the logits' storage (no new buffer)."""
    h, w, labels = _case(torch.float32)
    w.requires_grad_()
    logits = h @ w.t()
    seen: list[int] = []
    logits.register_hook(lambda g: seen.append(g.data_ptr()))
    token_loss_sum(logits, labels, overwrite_logits=True).backward()
    assert seen == [logits.data_ptr()]


def test_no_grad_and_shapes() -> None:
    h, w, labels = _case(torch.float32)
    with torch.no_grad():
        a = token_loss_sum(h @ w.t(), labels)
        b = _reference(h, w, labels)
    assert abs(float(a) - float(b)) < 1e-4 * abs(float(b))
    assert shift_labels(labels)[:, -1].eq(-100).all()
    assert chunk_rows_for(128_256, 12_288) == 523  # 256 MiB of fp32 rows for Llama 3's vocabulary
    assert chunk_rows_for(3_072, 512) == 128  # small: a quarter of the tokens
    with pytest.raises(ValueError, match="targets"):
        chunked_cross_entropy(h @ w.t(), labels[:, 1:])


def test_loss_peak_memory_in_bytes() -> None:
    """Bytes counted from torch.profiler's allocation records (benchmarks/step_anatomy.py's
    measurement) for 512 tokens and an 8,192 vocabulary: the loss's peak extra allocation
    over its forward and backward, against one fp32 logits buffer (16 MiB here). Measured:
    plain F.cross_entropy on logits[:, :-1].float() 2.99x; training.loss 0.251x with fp32
    logits (one fp32 chunk is a quarter of the rows; the rest is small per-chunk tensors) and
    0.501x with bf16 logits. The bounds leave 1% of one buffer for those small tensors."""
    from benchmarks.step_anatomy import loss_memory

    rows = {(r["loss"], r["logits_dtype"]): r for r in loss_memory(512, 8192)}
    fp32_logits = 512 * 8192 * 4
    assert all(r["fp32_logits_bytes"] == fp32_logits for r in rows.values())
    ours = "training.loss"
    assert rows[(ours, "float32")]["peak_extra_bytes"] <= 0.26 * fp32_logits
    assert rows[(ours, "bfloat16")]["peak_extra_bytes"] <= 0.51 * fp32_logits
    plain = "F.cross_entropy on shifted logits"
    assert rows[(plain, "float32")]["peak_extra_bytes"] >= 2.5 * fp32_logits  # the measure sees it
