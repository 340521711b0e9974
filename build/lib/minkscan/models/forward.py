"""One forward pass of a causal LM over a padded batch -> TokenStats of every scored position.

Two ways to get there, same numbers:

* fused: run the base model to its final hidden states and let the reduction compute
  logits tile by tile from the linear head (no [batch x tokens x vocab] tensor at all);
* logits: run the whole model and reduce its logits tile by tile (any head, any model).

The fused path runs either the torch tile loop or, on CUDA, the Triton kernel
(`minkscan.kernels.fused_head`); `LinearHead.kernel` says which.

`choose_head_path` probes the fused path against the logits path once at start-up and
falls back, with a warning, when they disagree (e.g. a model that rescales its logits).
"""

from __future__ import annotations

import logging
import warnings
from dataclasses import dataclass, replace
from typing import Literal

import torch
from transformers import PreTrainedModel

from minkscan.kernels.fused_head import token_stats_triton, triton_usable
from minkscan.scoring.token_stats import (
    TokenStats,
    token_stats_from_hidden,
    token_stats_from_logits,
)

logger = logging.getLogger(__name__)

HeadPath = Literal["fused", "logits", "triton"]


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
        if head.kernel == "triton":
            return token_stats_triton(
                rows.to(head.weight.dtype),
                head.weight,
                targets,
                bias=head.bias,
                softcap=head.softcap,
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
    ``probe_batch``, preferring the Triton kernel on CUDA; 'fused' and 'triton' insist on
    theirs; 'logits' never uses it.
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
    kwargs = {"row_chunk": row_chunk, "vocab_chunk": vocab_chunk}
    reference = batch_token_stats(model, probe_batch, head=None, **kwargs)
    if triton_usable(head.weight.device):
        kernel_head = replace(head, kernel="triton")
        if _probe_agrees(model, probe_batch, kernel_head, reference, **kwargs):
            return kernel_head
    if _probe_agrees(model, probe_batch, head, reference, **kwargs):
        return head
    return None


def _probe_agrees(
    model: PreTrainedModel,
    probe_batch: PaddedBatch,
    head: LinearHead,
    reference: TokenStats,
    *,
    row_chunk: int,
    vocab_chunk: int,
) -> bool:
    """Whether ``head``'s path matches the logits-path ``reference``; warns when it does not."""
    fused = batch_token_stats(
        model, probe_batch, head=head, row_chunk=row_chunk, vocab_chunk=vocab_chunk
    )
    tolerance = 1e-3 if head.weight.dtype == torch.float32 else 5e-2
    gap = max(
        (fused.target_logprob - reference.target_logprob).abs().mean().item(),
        (fused.minkpp() - reference.minkpp()).abs().mean().item(),
    )
    if not gap <= tolerance:
        fallback = "the torch fused path" if head.kernel == "triton" else "the model's logits"
        warnings.warn(
            f"fused head ({head.kernel}) disagrees with the model's own logits (mean gap "
            f"{gap:.3g} > {tolerance}); falling back to {fallback}",
            RuntimeWarning,
            stacklevel=3,
        )
        return False
    return True
