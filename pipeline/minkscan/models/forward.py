"""One forward pass of a causal LM over a batch of rows -> TokenStats of every kept prediction.

Rows hold one sequence each (padded) or several back to back (packed, see `TokenBatch`). A
sequence is a document or one window of a long one; only its predictions from
``first_kept`` on are kept (a later window's new tokens).

The batch is built on the host, where the positions to keep and their target ids are known
from the lengths alone, so the device never has to find them (a boolean mask would make
the host wait for the GPU). It is copied from pinned memory without blocking, so the host
can build the next batch while the GPU computes this one.

Ways to the statistics, same numbers:

* fused: run the base model to its final hidden states and let the head path compute
  logits from the linear head (`LinearHead.kernel`: torch tiles, cuBLAS row chunks plus a
  Triton row pass, or one Triton kernel); no [batch x tokens x vocab] tensor in float32;
* logits: run the whole model and reduce its logits tile by tile (any head, any model).

Which path a model gets, and whether its rows may be packed, is decided once at start-up
by `minkscan.models.probes`. Everything here runs under ``torch.inference_mode``: no
autograd graph is built, so nothing of a batch outlives it.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Literal

import numpy as np
import torch
from transformers import PreTrainedModel

from minkscan.kernels.fused_head import token_stats_chunked, token_stats_triton
from minkscan.scoring.token_stats import (
    TokenStats,
    token_stats_from_hidden,
    token_stats_from_logits,
)

HeadKernel = Literal["torch", "chunked", "triton"]


@dataclass(frozen=True)
class LinearHead:
    """The output projection as plain tensors: logits = softcap(hidden @ weight.T + bias)."""

    weight: torch.Tensor
    bias: torch.Tensor | None
    softcap: float | None
    kernel: HeadKernel = "torch"  # which reduction runs it (see `head_token_stats`)


@dataclass(frozen=True)
class Tiles:
    """Workspace of the head reduction: ``row_chunk`` rows at a time, and ``vocab_chunk``
    vocabulary ids per torch tile (see `minkscan.models.workspace.head_tiles`)."""

    row_chunk: int
    vocab_chunk: int


def find_linear_head(model: PreTrainedModel) -> LinearHead | None:
    """The model's head as a LinearHead, or None when it is not a plain linear layer."""
    head = model.get_output_embeddings()
    base = getattr(model, "base_model", None)
    if not isinstance(head, torch.nn.Linear) or base is None or base is model:
        return None
    config = model.config
    text_config = getattr(config, "text_config", None) or config
    softcap = getattr(text_config, "final_logit_softcapping", None)
    return LinearHead(weight=head.weight, bias=head.bias, softcap=softcap)


@torch.inference_mode()
def head_token_stats(
    head: LinearHead,
    rows: torch.Tensor,
    targets: torch.Tensor,
    tiles: Tiles,
    *,
    compiled: bool = False,
) -> TokenStats:
    """TokenStats of final hidden ``rows`` [N, H] under ``head``, by the reduction its
    ``kernel`` names: one Triton kernel, cuBLAS chunks plus a Triton row pass, or the torch
    tile loop (``compiled``: its per-tile moments through torch.compile)."""
    device = head.weight.device
    rows, targets = rows.to(device, non_blocking=True), targets.to(device, non_blocking=True)
    common = {"bias": head.bias, "softcap": head.softcap}
    if head.kernel == "triton":
        return token_stats_triton(rows.to(head.weight.dtype), head.weight, targets, **common)
    if head.kernel == "chunked":
        return token_stats_chunked(rows, head.weight, targets, row_chunk=tiles.row_chunk, **common)
    return token_stats_from_hidden(
        rows,
        head.weight,
        targets,
        row_chunk=tiles.row_chunk,
        vocab_chunk=tiles.vocab_chunk,
        compiled=compiled,
        **common,
    )


# A sequence of token ids and the index of its first prediction to keep.
Segment = tuple[Sequence[int], int]


@dataclass(frozen=True)
class TokenBatch:
    """Rows of token ids [R, W] for one forward pass, and which predictions to keep.

    ``padded``: one sequence per row, an attention mask marking its real tokens.
    ``packed``: several sequences per row back to back, positions restarting at 0 for each
    and no attention mask, so transformers keeps attention inside each (its packed-sequence
    support reads the boundaries from the position ids); no compute is spent on padding.
    ``keep`` indexes the flattened [R * W] positions whose next-token prediction is kept,
    sequences in row order, and ``targets`` holds the token each of them predicts.
    """

    input_ids: torch.Tensor
    position_ids: torch.Tensor
    attention_mask: torch.Tensor | None
    keep: torch.Tensor
    targets: torch.Tensor

    @classmethod
    def padded(
        cls,
        segments: Sequence[Segment],
        pad_id: int,
        padding_side: str,
        device: torch.device,
    ) -> TokenBatch:
        width = max(len(ids) for ids, _ in segments)
        ids = np.full((len(segments), width), pad_id, dtype=np.int64)
        mask = np.zeros((len(segments), width), dtype=np.int64)
        keep, targets = [], []
        for row, (sequence, first_kept) in enumerate(segments):
            start = 0 if padding_side == "right" else width - len(sequence)
            ids[row, start : start + len(sequence)] = sequence
            mask[row, start : start + len(sequence)] = 1
            keep.append(row * width + start + np.arange(first_kept, len(sequence) - 1))
            targets.append(ids[row, start + first_kept + 1 : start + len(sequence)])
        # Positions count real tokens only, so left padding does not shift them.
        positions = np.clip(mask.cumsum(axis=1) - 1, 0, None)
        return cls._on(device, ids, positions, mask, keep, targets)

    @classmethod
    def packed(
        cls,
        rows: Sequence[Sequence[Segment]],
        device: torch.device,
        shape: tuple[int, int] | None = None,
    ) -> TokenBatch:
        """Each row's sequences back to back; a shorter row ends in filler that repeats its
        first token as one more sequence of its own, never kept (not the pad id, which
        makes transformers warn about a missing attention mask). With ``shape`` the batch
        is exactly that many rows of that width (a compiled body's), extra rows filler."""
        width = max(sum(len(ids) for ids, _ in row) for row in rows)
        n_rows = len(rows)
        if shape is not None:
            n_rows, width = shape
            rows = [*rows, *[[(rows[0][0][0][:1], 0)]] * (n_rows - len(rows))]
        ids = np.empty((n_rows, width), dtype=np.int64)
        positions = np.empty((n_rows, width), dtype=np.int64)
        keep, targets = [], []
        for r, row in enumerate(rows):
            start = 0
            for sequence, first_kept in row:
                end = start + len(sequence)
                ids[r, start:end] = sequence
                positions[r, start:end] = np.arange(len(sequence))
                keep.append(r * width + start + np.arange(first_kept, len(sequence) - 1))
                targets.append(ids[r, start + first_kept + 1 : end])
                start = end
            ids[r, start:] = row[0][0][0]
            positions[r, start:] = np.arange(width - start)
        return cls._on(device, ids, positions, None, keep, targets)

    @classmethod
    def _on(
        cls,
        device: torch.device,
        ids: np.ndarray,
        positions: np.ndarray,
        mask: np.ndarray | None,
        keep: list[np.ndarray],
        targets: list[np.ndarray],
    ) -> TokenBatch:
        """The host arrays as tensors on ``device``: pinned and copied without blocking on
        CUDA, so the copy overlaps whatever the GPU is still computing."""

        def move(array: np.ndarray) -> torch.Tensor:
            tensor = torch.from_numpy(np.ascontiguousarray(array, dtype=np.int64))
            if device.type == "cuda":
                return tensor.pin_memory().to(device, non_blocking=True)
            return tensor.to(device)

        return cls(
            input_ids=move(ids),
            position_ids=move(positions),
            attention_mask=None if mask is None else move(mask),
            keep=move(np.concatenate(keep)),
            targets=move(np.concatenate(targets)),
        )

    @property
    def n_kept(self) -> int:
        return self.keep.shape[0]

    def model_inputs(self) -> dict[str, torch.Tensor | None]:
        return {
            "input_ids": self.input_ids,
            "attention_mask": self.attention_mask,
            "position_ids": self.position_ids,
        }


@torch.inference_mode()
def batch_token_stats(
    model: PreTrainedModel,
    batch: TokenBatch,
    *,
    head: LinearHead | None,
    tiles: Tiles,
    compiled: bool = False,
    body: Callable[[dict[str, torch.Tensor | None]], torch.Tensor] | None = None,
) -> TokenStats:
    """TokenStats of the batch's kept predictions, sequences in row order, tokens in text order.

    With ``head`` the fused path is used (the final hidden states from ``body``, default the
    eager base model; `minkscan.models.compiled.Body`), otherwise the model's logits are
    reduced; ``compiled`` is passed on to the torch tile reduction. Nothing here waits for
    the device: the result is queued work until something reads it.
    """
    inputs = batch.model_inputs()
    if head is not None:
        if body is None:
            hidden = model.base_model(**inputs, use_cache=False)[0]
        else:
            hidden = body(inputs)
        # A replica split over GPUs may end on another device than its (tied) head.
        rows = hidden.flatten(0, 1).index_select(0, batch.keep.to(hidden.device))
        del hidden
        return head_token_stats(head, rows, batch.targets, tiles, compiled=compiled)
    logits = model(**inputs, use_cache=False).logits
    flat = logits.flatten(0, 1)
    return token_stats_from_logits(
        _RowView(flat, batch.keep.to(flat.device)),
        batch.targets.to(flat.device),
        row_chunk=tiles.row_chunk,
        vocab_chunk=tiles.vocab_chunk,
        compiled=compiled,
    )


class _RowView:
    """Lazily gathers selected rows of a [rows, vocab] tensor, one tile at a time."""

    def __init__(self, matrix: torch.Tensor, rows: torch.Tensor) -> None:
        self.matrix, self.rows = matrix, rows
        self.shape = (rows.shape[0], matrix.shape[1])

    def __getitem__(self, index: tuple[slice, slice]) -> torch.Tensor:
        row_slice, column_slice = index
        return self.matrix[self.rows[row_slice], column_slice]
