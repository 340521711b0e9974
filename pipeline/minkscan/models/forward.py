"""One forward pass of a causal LM over a batch of rows -> TokenStats of every scored position.

Rows hold one document each (padded) or several back to back (packed, see `TokenBatch`).

Two ways to get there, same numbers:

* fused: run the base model to its final hidden states and let the reduction compute
  logits tile by tile from the linear head (no [batch x tokens x vocab] tensor at all);
* logits: run the whole model and reduce its logits tile by tile (any head, any model).

The fused path runs either the torch tile loop or, on CUDA, the Triton kernel
(`minkscan.kernels.fused_head`); `LinearHead.kernel` says which. Which path a model gets,
and whether its rows may be packed, is decided once at start-up by `minkscan.models.probes`.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal

import torch
from transformers import PreTrainedModel

from minkscan.kernels.fused_head import token_stats_triton
from minkscan.scoring.token_stats import (
    TokenStats,
    token_stats_from_hidden,
    token_stats_from_logits,
)


@dataclass(frozen=True)
class LinearHead:
    """The output projection as plain tensors: logits = softcap(hidden @ weight.T + bias)."""

    weight: torch.Tensor
    bias: torch.Tensor | None
    softcap: float | None
    kernel: Literal["torch", "triton"] = "torch"  # which fused reduction runs it


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


def head_token_stats(
    head: LinearHead,
    rows: torch.Tensor,
    targets: torch.Tensor,
    *,
    row_chunk: int,
    vocab_chunk: int,
    compiled: bool = False,
) -> TokenStats:
    """TokenStats of final hidden ``rows`` [N, H] under ``head``, by the reduction its
    ``kernel`` names (the Triton kernel, or the torch tile loop)."""
    rows, targets = rows.to(head.weight.device), targets.to(head.weight.device)
    if head.kernel == "triton":
        return token_stats_triton(
            rows.to(head.weight.dtype), head.weight, targets, bias=head.bias, softcap=head.softcap
        )
    return token_stats_from_hidden(
        rows,
        head.weight,
        targets,
        bias=head.bias,
        softcap=head.softcap,
        row_chunk=row_chunk,
        vocab_chunk=vocab_chunk,
        compiled=compiled,
    )


@dataclass(frozen=True)
class TokenBatch:
    """Rows of token ids [R, W] for one forward pass, on the model's device.

    ``padded``: one document per row, an attention mask marking its real tokens.
    ``packed``: several documents per row back to back, positions restarting at 0 for each
    and no attention mask, so transformers keeps attention inside each document (its
    packed-sequence support reads the boundaries from the position ids); no compute is
    spent on padding between documents.
    ``scored`` [R, W-1] marks the positions t that predict token t+1 of the same document.
    """

    input_ids: torch.Tensor
    position_ids: torch.Tensor
    attention_mask: torch.Tensor | None
    scored: torch.Tensor

    @classmethod
    def padded(
        cls,
        sequences: Sequence[Sequence[int]],
        pad_id: int,
        padding_side: str,
        device: torch.device,
    ) -> TokenBatch:
        width = max(len(s) for s in sequences)
        ids = torch.full((len(sequences), width), pad_id, dtype=torch.long)
        mask = torch.zeros((len(sequences), width), dtype=torch.long)
        for row, seq in enumerate(sequences):
            span = slice(0, len(seq)) if padding_side == "right" else slice(width - len(seq), width)
            ids[row, span] = torch.tensor(seq, dtype=torch.long)
            mask[row, span] = 1
        # Positions count real tokens only, so left padding does not shift them.
        positions = (mask.cumsum(dim=1) - 1).clamp_min(0)
        scored = (mask[:, :-1] * mask[:, 1:]).bool()
        return cls(ids.to(device), positions.to(device), mask.to(device), scored.to(device))

    @classmethod
    def packed(cls, rows: Sequence[Sequence[Sequence[int]]], device: torch.device) -> TokenBatch:
        """Each row's documents back to back; a shorter row ends in filler that repeats its
        first token as one more document of its own, never scored (not the pad id, which
        makes transformers warn about a missing attention mask)."""
        width = max(sum(len(doc) for doc in row) for row in rows)
        ids = torch.empty((len(rows), width), dtype=torch.long)
        positions = torch.empty((len(rows), width), dtype=torch.long)
        scored = torch.zeros((len(rows), width - 1), dtype=torch.bool)
        for r, row in enumerate(rows):
            start = 0
            for doc in row:
                end = start + len(doc)
                ids[r, start:end] = torch.tensor(doc, dtype=torch.long)
                positions[r, start:end] = torch.arange(len(doc))
                scored[r, start : end - 1] = True
                start = end
            ids[r, start:] = row[0][0]
            positions[r, start:] = torch.arange(width - start)
        return cls(ids.to(device), positions.to(device), None, scored.to(device))

    def model_inputs(self) -> dict[str, torch.Tensor | None]:
        return {
            "input_ids": self.input_ids,
            "attention_mask": self.attention_mask,
            "position_ids": self.position_ids,
        }


def batch_token_stats(
    model: PreTrainedModel,
    batch: TokenBatch,
    *,
    head: LinearHead | None,
    row_chunk: int,
    vocab_chunk: int,
    compiled: bool = False,
) -> TokenStats:
    """TokenStats of all scored positions, documents in batch order, tokens in text order.

    With ``head`` the fused path is used, otherwise the model's logits are reduced;
    ``compiled`` is passed on to the reduction (`token_stats`).
    """
    scored = batch.scored
    targets = batch.input_ids[:, 1:][scored]
    inputs = batch.model_inputs()
    if head is not None:
        hidden = model.base_model(**inputs, use_cache=False)[0]
        # A replica split over GPUs may end on another device than its (tied) head.
        rows = hidden[:, :-1][scored.to(hidden.device)]
        return head_token_stats(
            head, rows, targets, row_chunk=row_chunk, vocab_chunk=vocab_chunk, compiled=compiled
        )
    logits = model(**inputs, use_cache=False).logits
    batch_size, width, vocab = logits.shape
    flat = logits.view(batch_size * width, vocab)
    row_index = scored.nonzero().to(logits.device)
    flat_rows = row_index[:, 0] * width + row_index[:, 1]
    return token_stats_from_logits(
        _RowView(flat, flat_rows),
        targets.to(logits.device),
        row_chunk=row_chunk,
        vocab_chunk=vocab_chunk,
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
