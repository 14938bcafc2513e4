"""Next-token cross-entropy that never holds an fp32 copy of the full logits.

The straightforward loss, `F.cross_entropy(logits[:, :-1].flatten(0, 1).float(), ...)`, keeps
alive at once: a contiguous copy of the shifted logits (the slice is not contiguous), an fp32
copy of it, its fp32 log-softmax (saved for backward) and, in backward, fp32 and logits-dtype
gradients. For Llama 3's 128k vocabulary at 3 x 4,096 tokens that is ~18 GB next to the
logits themselves.

Here the labels are shifted instead of the logits (each row's last position gets no target), and
`chunked_cross_entropy` runs over `chunk_rows` tokens at a time:

- forward: per chunk, the fp32 log-sum-exp and the target logit; only the per-token
  log-sum-exp (N floats) is saved next to the logits, which autograd keeps anyway;
- backward: per chunk, `(softmax - one_hot) * grad` in fp32, written back in the logits' dtype.
  The gradient goes into the logits' own storage when nothing else saved them for backward (a
  plain `lm_head` matmul saves its input and weight, never its output), else into one new
  logits-sized buffer.

Peak extra memory is therefore about two fp32 chunks (`chunk_rows x vocab x 4` bytes each: the
fp32 copy of a low-precision chunk and the exponentials), plus one logits-sized buffer only when
the logits cannot be overwritten. `chunk_rows` defaults to 256 MiB worth of fp32 rows and at
most a quarter of the tokens, so the loss's temporaries stay under half of one fp32 logits-sized
buffer (a quarter with fp32 logits, whose chunks need no fp32 copy).
"""

from __future__ import annotations

from typing import Any

import torch

IGNORE_INDEX = -100
CHUNK_BYTES = 256 * 2**20
"""fp32 bytes of one chunk of logits (the unit of the loss's temporary memory)."""

# grad_fn names of a logits tensor whose storage no backward node reads: the output of a
# matmul (Linear on 2-D or 3-D input) and the views of it that Linear itself makes.
_OVERWRITABLE = {"MmBackward0", "AddmmBackward0", "UnsafeViewBackward0", "ViewBackward0"}


MIN_CHUNKS = 4
"""At least this many chunks, so a chunk is at most a quarter of the logits."""


def chunk_rows_for(vocab: int, tokens: int, chunk_bytes: int = CHUNK_BYTES) -> int:
    """Tokens per chunk: one fp32 chunk of logits is at most `chunk_bytes` and a quarter of all."""
    return max(1, min(chunk_bytes // (4 * vocab), -(-tokens // MIN_CHUNKS)))


def shift_labels(labels: torch.Tensor, ignore_index: int = IGNORE_INDEX) -> torch.Tensor:
    """labels[:, 1:] with an ignored last column: position t is scored on token t + 1."""
    pad = labels.new_full((labels.shape[0], 1), ignore_index)
    return torch.cat([labels[:, 1:], pad], dim=1)


def chunked_cross_entropy(
    logits: torch.Tensor,
    targets: torch.Tensor,
    *,
    chunk_rows: int | None = None,
    ignore_index: int = IGNORE_INDEX,
    overwrite_logits: bool = False,
    per_token: bool = False,
) -> torch.Tensor:
    """Sum over tokens of -log softmax(logits)[target], in fp32, `targets == ignore_index` skipped.

    `logits` is (..., vocab), `targets` matches its leading shape (already shifted). With
    `overwrite_logits` the backward pass may write the gradient into the logits' storage (when
    it is safe, see the module docstring): the caller must not read `logits` after backward.
    `per_token`: each token's loss instead of the sum (flat, 0 where ignored; a preference
    loss sums them per sequence, training.preference), with the same memory.
    """
    vocab = logits.shape[-1]
    flat = logits.reshape(-1, vocab)
    flat_targets = targets.reshape(-1)
    if flat.shape[0] != flat_targets.shape[0]:
        raise ValueError(f"logits {tuple(logits.shape)} and targets {tuple(targets.shape)} differ")
    rows = chunk_rows or chunk_rows_for(vocab, flat.shape[0])
    inplace = overwrite_logits and _overwritable(logits)
    return _ChunkedCrossEntropy.apply(flat, flat_targets, rows, ignore_index, inplace, per_token)


def _overwritable(logits: torch.Tensor) -> bool:
    fn = logits.grad_fn
    return fn is not None and type(fn).__name__ in _OVERWRITABLE and logits.is_contiguous()


class _ChunkedCrossEntropy(torch.autograd.Function):
    @staticmethod
    def forward(  # type: ignore[override]
        ctx: Any,
        logits: torch.Tensor,
        targets: torch.Tensor,
        rows: int,
        ignore_index: int,
        inplace: bool,
        per_token: bool = False,
    ) -> torch.Tensor:
        n = logits.shape[0]
        valid = targets != ignore_index
        safe = torch.where(valid, targets, 0)
        lse = torch.empty(n, dtype=torch.float32, device=logits.device)
        total = torch.zeros((), dtype=torch.float32, device=logits.device)
        tokens = torch.zeros(n if per_token else 0, dtype=torch.float32, device=logits.device)
        for start in range(0, n, rows):
            end = min(start + rows, n)
            x = logits[start:end].float()
            lse[start:end] = torch.logsumexp(x, dim=-1)
            picked = x.gather(1, safe[start:end, None]).squeeze(1)
            chunk = torch.where(valid[start:end], lse[start:end] - picked, 0.0)
            if per_token:
                tokens[start:end] = chunk
            else:
                total += chunk.sum()
        ctx.save_for_backward(logits, safe, valid, lse)
        ctx.rows, ctx.inplace = rows, inplace
        return tokens if per_token else total

    @staticmethod
    @torch.autograd.function.once_differentiable
    def backward(ctx: Any, grad_out: torch.Tensor) -> tuple[Any, ...]:  # type: ignore[override]
        logits, safe, valid, lse = ctx.saved_tensors
        grad = logits if ctx.inplace else torch.empty_like(logits)
        n, rows = logits.shape[0], ctx.rows
        for start in range(0, n, rows):
            end = min(start + rows, n)
            x, g = logits[start:end], grad[start:end]
            if x.dtype == torch.float32:
                if not ctx.inplace:
                    g.copy_(x)
                p = g  # fp32: computed in the gradient's own storage, no temporary
            else:
                p = x.float()  # the one fp32 chunk of a low-precision run
            p.sub_(lse[start:end, None]).exp_()
            idx = torch.arange(end - start, device=p.device)
            p[idx, safe[start:end]] -= 1.0
            scale = grad_out[start:end] if grad_out.dim() else grad_out  # per token or the sum
            p.mul_((valid[start:end].to(p.dtype) * scale)[:, None])
            if p is not g:
                g.copy_(p)
        return grad, None, None, None, None, None


def token_loss_sum(
    logits: torch.Tensor, labels: torch.Tensor, *, overwrite_logits: bool = False
) -> torch.Tensor:
    """Summed next-token loss of a (batch, seq, vocab) logits tensor against unshifted labels."""
    return chunked_cross_entropy(logits, shift_labels(labels), overwrite_logits=overwrite_logits)
