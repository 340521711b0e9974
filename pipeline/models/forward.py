"""One forward pass of a causal LM over a padded batch -> TokenStats of every scored position.

Two ways to get there, same numbers:

* fused: run the base model to its final hidden states and let the reduction compute
  logits tile by tile from the linear head (no [batch x tokens x vocab] tensor at all);
* logits: run the whole model and reduce its logits tile by tile (any head, any model).

`choose_head_path` probes the fused path against the logits path once at start-up and
falls back, with a warning, when they disagree (e.g. a model that rescales its logits).
"""

from __future__ import annotations

import logging
import warnings
from dataclasses import dataclass
from typing import Literal

import torch
from transformers import PreTrainedModel

from pipeline.scoring.token_stats import (
    TokenStats,
    token_stats_from_hidden,
    token_stats_from_logits,
)

logger = logging.getLogger(__name__)

HeadPath = Literal["fused", "logits"]


@dataclass(frozen=True)
class LinearHead:
    """The output projection as plain tensors: logits = softcap(hidden @ weight.T + bias)."""

    weight: torch.Tensor
    bias: torch.Tensor | None
    softcap: float | None


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


@dataclass(frozen=True)
class PaddedBatch:
    """Token ids [B, T] and attention mask [B, T] (1 = real token), on the model's device."""

    input_ids: torch.Tensor
    attention_mask: torch.Tensor

    @classmethod
    def from_ids(
        cls,
        sequences: list[tuple[int, ...]],
        pad_id: int,
        padding_side: str,
        device: torch.device,
    ) -> PaddedBatch:
        width = max(len(s) for s in sequences)
        ids = torch.full((len(sequences), width), pad_id, dtype=torch.long)
        mask = torch.zeros((len(sequences), width), dtype=torch.long)
        for row, seq in enumerate(sequences):
            span = slice(0, len(seq)) if padding_side == "right" else slice(width - len(seq), width)
            ids[row, span] = torch.tensor(seq, dtype=torch.long)
            mask[row, span] = 1
        return cls(ids.to(device), mask.to(device))

    def scored_positions(self) -> torch.Tensor:
        """Boolean [B, T-1]: position t predicts the real token t+1 from a real token t."""
        return (self.attention_mask[:, :-1] * self.attention_mask[:, 1:]).bool()

    def position_ids(self) -> torch.Tensor:
        """Positions counted over real tokens only, so left padding does not shift them."""
        return (self.attention_mask.cumsum(dim=1) - 1).clamp_min(0)


def batch_token_stats(
    model: PreTrainedModel,
    batch: PaddedBatch,
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
    scored = batch.scored_positions()
    targets = batch.input_ids[:, 1:][scored]
    inputs = {
        "input_ids": batch.input_ids,
        "attention_mask": batch.attention_mask,
        "position_ids": batch.position_ids(),
    }
    if head is not None:
        hidden = model.base_model(**inputs, use_cache=False)[0]
        rows = hidden[:, :-1][scored]
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
    logits = model(**inputs, use_cache=False).logits
    batch_size, width, vocab = logits.shape
    flat = logits.view(batch_size * width, vocab)
    row_index = scored.nonzero()
    flat_rows = row_index[:, 0] * width + row_index[:, 1]
    return token_stats_from_logits(
        _RowView(flat, flat_rows),
        targets,
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


def choose_head_path(
    model: PreTrainedModel,
    requested: str,
    probe_batch: PaddedBatch,
    *,
    row_chunk: int,
    vocab_chunk: int,
) -> LinearHead | None:
    """Return the LinearHead to use for the fused path, or None for the logits path.

    'auto' uses the fused path only if it exists and matches the logits path on
    ``probe_batch``; 'fused' insists on it; 'logits' never uses it.
    """
    if requested == "logits":
        return None
    head = find_linear_head(model)
    if head is None:
        if requested == "fused":
            raise ValueError(
                "scoring.head='fused' but the model's head is not a plain linear layer"
            )
        logger.info("model head is not a plain linear layer; reducing the model's logits")
        return None
    if requested == "fused":
        return head
    kwargs = {"row_chunk": row_chunk, "vocab_chunk": vocab_chunk}
    fused = batch_token_stats(model, probe_batch, head=head, **kwargs)
    reference = batch_token_stats(model, probe_batch, head=None, **kwargs)
    tolerance = 1e-3 if head.weight.dtype == torch.float32 else 5e-2
    gap = max(
        (fused.target_logprob - reference.target_logprob).abs().mean().item(),
        (fused.minkpp() - reference.minkpp()).abs().mean().item(),
    )
    if not gap <= tolerance:
        warnings.warn(
            f"fused head disagrees with the model's own logits (mean gap {gap:.3g} > "
            f"{tolerance}); falling back to reducing the model's logits",
            RuntimeWarning,
            stacklevel=2,
        )
        return None
    return head
