"""Start-up probes: which head path a model is scored by, and whether its rows may be packed.

Each probe runs the model a few times on a small batch when a scorer starts and settles one
choice for its lifetime, warning when it has to fall back:

* `choose_head_path`: a fused head (the Triton kernel, cuBLAS chunks with a Triton row
  pass, or torch tiles) only where it matches the model's own logits (a model that rescales
  its logits does not); with ``head: auto`` and several agreeing (CUDA), the fastest;
* `packing_agrees`: packed rows only where they score as one document per row does.
"""

from __future__ import annotations

import logging
import statistics
import time
import warnings
from collections.abc import Callable, Sequence
from dataclasses import replace

import torch
from transformers import PreTrainedModel

from minkscan.kernels.fused_head import triton_usable
from minkscan.models.forward import (
    LinearHead,
    Tiles,
    TokenBatch,
    batch_token_stats,
    find_linear_head,
    head_token_stats,
)
from minkscan.models.probe_cache import ProbeCache
from minkscan.scoring.token_stats import TokenStats

logger = logging.getLogger(__name__)

TIMED_RUNS = 3  # after one warm-up run (Triton compiles its kernel on the first call)


TIMED_ROWS = 8192  # rows reduced per timed run (fewer where the torch tiles are smaller)
KERNEL_NAMES = {
    "triton": "the Triton kernel",
    "chunked": "cuBLAS chunks with the Triton row pass",
    "torch": "the torch fused path",
}
TilesFor = Callable[[str], Tiles]


def choose_head_path(
    model: PreTrainedModel,
    requested: str,
    probe_batch: TokenBatch,
    tiles_for: TilesFor,
    timer: Callable[[], float] = time.perf_counter,
    cache: ProbeCache | None = None,
) -> LinearHead | None:
    """Return the LinearHead to use for the fused path, or None for the logits path.

    'auto' considers every fused reduction the device runs (on CUDA with triton: the Triton
    kernel, cuBLAS chunks with a Triton row pass, the torch tiles; elsewhere the torch
    tiles), keeps those that match the logits path on ``probe_batch`` and, of several, the
    one that reduces a batch of rows fastest (as ``timer`` measures: tests drive a clock of
    their own; ``cache`` remembers the fastest for the next run, while the cheap agreement
    checks run every time). 'fused', 'chunked' and 'triton' insist on theirs; 'logits'
    never uses one. ``tiles_for(kernel)`` gives each path its tiles.
    """
    if requested == "logits":
        return None
    head = find_linear_head(model)
    device = head.weight.device if head else model.device
    if requested in ("triton", "chunked") and not triton_usable(device):
        raise ValueError(f"scoring.head='{requested}' needs a CUDA model and the triton package")
    if head is None:
        if requested != "auto":
            raise ValueError(
                f"scoring.head='{requested}' but the model's head is not a plain linear layer"
            )
        logger.info("model head is not a plain linear layer; reducing the model's logits")
        return None
    if requested != "auto":
        return replace(head, kernel="torch" if requested == "fused" else requested)
    reference = batch_token_stats(model, probe_batch, head=None, tiles=tiles_for("logits"))
    kernels = ["triton", "chunked", "torch"] if triton_usable(device) else ["torch"]
    candidates = [replace(head, kernel=kernel) for kernel in kernels]
    agreeing: list[LinearHead] = []
    for index, candidate in enumerate(candidates):
        fallback = next(
            (KERNEL_NAMES[c.kernel] for c in candidates[index + 1 :]),
            KERNEL_NAMES[agreeing[0].kernel] if agreeing else "the model's logits",
        )
        if _probe_agrees(
            model, probe_batch, candidate, reference, tiles_for(candidate.kernel), fallback
        ):
            agreeing.append(candidate)
    if len(agreeing) > 1:
        remembered = cache.get("fastest_head") if cache else None
        chosen = next((h for h in agreeing if h.kernel == remembered), None)
        if chosen is None:
            chosen = faster_head(agreeing, tiles_for, timer)
            if cache:
                cache.put("fastest_head", chosen.kernel)
        return chosen
    return agreeing[0] if agreeing else None


def faster_head(
    heads: Sequence[LinearHead], tiles_for: TilesFor, timer: Callable[[], float] = time.perf_counter
) -> LinearHead:
    """The head whose reduction of a batch of random hidden rows takes the least time
    (median of `TIMED_RUNS` after a warm-up): no one path is fastest on every GPU,
    vocabulary and width."""
    weight = heads[0].weight
    n_rows = min(TIMED_ROWS, tiles_for("torch").row_chunk)
    generator = torch.Generator(device=weight.device).manual_seed(0)
    rows = torch.randn(
        n_rows, weight.shape[1], generator=generator, device=weight.device, dtype=weight.dtype
    )
    targets = torch.randint(weight.shape[0], (n_rows,), generator=generator, device=weight.device)
    seconds = [_seconds(head, rows, targets, tiles_for(head.kernel), timer) for head in heads]
    logger.info(
        "fused head reduction of %d rows: %s",
        n_rows,
        ", ".join(f"{h.kernel} {1e3 * s:.2f} ms" for h, s in zip(heads, seconds, strict=True)),
    )
    return heads[seconds.index(min(seconds))]


def _seconds(
    head: LinearHead,
    rows: torch.Tensor,
    targets: torch.Tensor,
    tiles: Tiles,
    timer: Callable[[], float],
) -> float:
    """Median seconds (by ``timer``) of one reduction of ``rows`` under ``head``."""
    runs = []
    for run in range(TIMED_RUNS + 1):
        start = timer()
        head_token_stats(head, rows, targets, tiles)
        if rows.device.type == "cuda":
            torch.cuda.synchronize(rows.device)
        if run:
            runs.append(timer() - start)
    return statistics.median(runs)


def packing_agrees(
    model: PreTrainedModel,
    head: LinearHead | None,
    documents: Sequence[Sequence[int]],
    pad_id: int,
    tiles: Tiles,
) -> bool:
    """Whether ``documents`` packed into one row score as they do one per row; warns when
    not (attention that ignores packed position ids lets each document see the previous)."""
    kwargs = {"head": head, "tiles": tiles}
    device = model.get_input_embeddings().weight.device
    segments = [(document, 0) for document in documents]
    alone = batch_token_stats(model, TokenBatch.padded(segments, pad_id, "right", device), **kwargs)
    packed = batch_token_stats(model, TokenBatch.packed([segments], device), **kwargs)
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
    tiles: Tiles,
    instead: str,
) -> bool:
    """Whether ``head``'s path matches the logits-path ``reference``; warns when it does not,
    naming the path used ``instead``."""
    fused = batch_token_stats(model, probe_batch, head=head, tiles=tiles)
    gap, tolerance = _gap(fused, reference), _tolerance(head.weight.dtype)
    if not gap <= tolerance:
        warnings.warn(
            f"fused head ({KERNEL_NAMES[head.kernel]}) disagrees with the model's own logits "
            f"(mean gap {gap:.3g} > {tolerance}); falling back to {instead}",
            RuntimeWarning,
            stacklevel=3,
        )
        return False
    return True
