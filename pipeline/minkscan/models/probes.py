"""Start-up probes: which head path a model is scored by, and whether its rows may be packed.

Each probe runs the model a few times on a small batch when a scorer starts and settles one
choice for its lifetime, warning when it has to fall back:

* `choose_head_path`: the fused head (Triton kernel or torch tiles) only where it matches the
  model's own logits (a model that rescales its logits does not); with ``head: auto`` and
  both fused reductions agreeing (CUDA), the one that reduces a tile of rows faster;
* `packing_agrees`: packed rows only where they score as one document per row does.
"""

from __future__ import annotations

import logging
import statistics
import time
import warnings
from collections.abc import Sequence
from dataclasses import replace

import torch
from transformers import PreTrainedModel

from minkscan.kernels.fused_head import triton_usable
from minkscan.models.forward import (
    LinearHead,
    TokenBatch,
    batch_token_stats,
    find_linear_head,
    head_token_stats,
)
from minkscan.scoring.token_stats import TokenStats

logger = logging.getLogger(__name__)

TIMED_RUNS = 3  # after one warm-up run (Triton compiles its kernel on the first call)


def choose_head_path(
    model: PreTrainedModel,
    requested: str,
    probe_batch: TokenBatch,
    *,
    row_chunk: int,
    vocab_chunk: int,
) -> LinearHead | None:
    """Return the LinearHead to use for the fused path, or None for the logits path.

    'auto' uses a fused path only if it exists and matches the logits path on
    ``probe_batch``; where the Triton kernel and the torch tiles both match (CUDA), it
    times both and keeps the faster. 'fused' and 'triton' insist on theirs; 'logits' never
    uses one.
    """
    if requested == "logits":
        return None
    head = find_linear_head(model)
    if requested == "triton" and not triton_usable(head.weight.device if head else model.device):
        raise ValueError("scoring.head='triton' needs a CUDA model and the triton package")
    if head is None:
        if requested in ("fused", "triton"):
            raise ValueError(
                f"scoring.head='{requested}' but the model's head is not a plain linear layer"
            )
        logger.info("model head is not a plain linear layer; reducing the model's logits")
        return None
    if requested == "fused":
        return head
    if requested == "triton":
        return replace(head, kernel="triton")
    chunks = {"row_chunk": row_chunk, "vocab_chunk": vocab_chunk}
    reference = batch_token_stats(model, probe_batch, head=None, **chunks)
    candidates = [replace(head, kernel="triton")] if triton_usable(head.weight.device) else []
    candidates.append(head)
    agreeing: list[LinearHead] = []
    for candidate in candidates:
        instead = (
            "the torch fused path" if candidate.kernel == "triton"
            else "the Triton kernel" if agreeing
            else "the model's logits"
        )  # fmt: skip
        if _probe_agrees(model, probe_batch, candidate, reference, instead=instead, **chunks):
            agreeing.append(candidate)
    if len(agreeing) > 1:
        return faster_head(agreeing, **chunks)
    return agreeing[0] if agreeing else None


def faster_head(heads: Sequence[LinearHead], *, row_chunk: int, vocab_chunk: int) -> LinearHead:
    """The head whose reduction of ``row_chunk`` random hidden rows takes the least time
    (median of `TIMED_RUNS` after a warm-up): the Triton kernel is not faster than cuBLAS
    matmuls plus torch tiles on every GPU, vocabulary and width."""
    weight = heads[0].weight
    generator = torch.Generator(device=weight.device).manual_seed(0)
    rows = torch.randn(
        row_chunk, weight.shape[1], generator=generator, device=weight.device, dtype=weight.dtype
    )
    targets = torch.randint(
        weight.shape[0], (row_chunk,), generator=generator, device=weight.device
    )
    seconds = [
        _seconds(head, rows, targets, row_chunk=row_chunk, vocab_chunk=vocab_chunk)
        for head in heads
    ]
    logger.info(
        "fused head reduction of %d rows: %s",
        row_chunk,
        ", ".join(f"{h.kernel} {1e3 * s:.2f} ms" for h, s in zip(heads, seconds, strict=True)),
    )
    return heads[seconds.index(min(seconds))]


def _seconds(
    head: LinearHead, rows: torch.Tensor, targets: torch.Tensor, *, row_chunk: int, vocab_chunk: int
) -> float:
    """Median wall seconds of one reduction of ``rows`` under ``head``."""
    runs = []
    for run in range(TIMED_RUNS + 1):
        start = time.perf_counter()
        head_token_stats(head, rows, targets, row_chunk=row_chunk, vocab_chunk=vocab_chunk)
        if rows.device.type == "cuda":
            torch.cuda.synchronize(rows.device)
        if run:
            runs.append(time.perf_counter() - start)
    return statistics.median(runs)


def packing_agrees(
    model: PreTrainedModel,
    head: LinearHead | None,
    documents: Sequence[Sequence[int]],
    pad_id: int,
    *,
    row_chunk: int,
    vocab_chunk: int,
) -> bool:
    """Whether ``documents`` packed into one row score as they do one per row; warns when
    not (attention that ignores packed position ids lets each document see the previous)."""
    kwargs = {"head": head, "row_chunk": row_chunk, "vocab_chunk": vocab_chunk}
    device = model.get_input_embeddings().weight.device
    alone = batch_token_stats(
        model, TokenBatch.padded(documents, pad_id, "right", device), **kwargs
    )
    packed = batch_token_stats(model, TokenBatch.packed([documents], device), **kwargs)
    gap, tolerance = _gap(packed, alone), _tolerance(model.dtype)
    if not gap <= tolerance:
        warnings.warn(
            f"documents packed into one row score differently from one per row (mean gap "
            f"{gap:.3g} > {tolerance}): this model's attention does not keep packed documents "
            "apart; padding instead",
            RuntimeWarning,
            stacklevel=3,
        )
        return False
    return True


def _gap(stats: TokenStats, reference: TokenStats) -> float:
    return max(
        (stats.target_logprob - reference.target_logprob).abs().mean().item(),
        (stats.minkpp() - reference.minkpp()).abs().mean().item(),
    )


def _tolerance(dtype: torch.dtype) -> float:
    """Mean gap allowed between two routes to the same numbers (float32 or half precision)."""
    return 1e-3 if dtype == torch.float32 else 5e-2


def _probe_agrees(
    model: PreTrainedModel,
    probe_batch: TokenBatch,
    head: LinearHead,
    reference: TokenStats,
    *,
    instead: str,
    row_chunk: int,
    vocab_chunk: int,
) -> bool:
    """Whether ``head``'s path matches the logits-path ``reference``; warns when it does not,
    naming the path used ``instead``."""
    fused = batch_token_stats(
        model, probe_batch, head=head, row_chunk=row_chunk, vocab_chunk=vocab_chunk
    )
    gap, tolerance = _gap(fused, reference), _tolerance(head.weight.dtype)
    if not gap <= tolerance:
        warnings.warn(
            f"fused head ({head.kernel}) disagrees with the model's own logits (mean gap "
            f"{gap:.3g} > {tolerance}); falling back to {instead}",
            RuntimeWarning,
            stacklevel=3,
        )
        return False
    return True
