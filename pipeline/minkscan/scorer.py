"""The model stage: one loaded model scoring tokenised documents in packed batches.

`DocumentScorer` is what a Ray actor holds (one replica each) and what `score_texts`
uses in-process; it owns batching and device placement, while the math lives in
`minkscan.scoring` and the forward pass in `minkscan.models.forward`.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import polars as pl
import torch

from minkscan.config import ModelConfig, ScoringConfig
from minkscan.methods import single_pass_columns
from minkscan.models.forward import TokenBatch, batch_token_stats
from minkscan.models.loading import LoadedModel, load_model
from minkscan.models.probes import choose_head_path, packing_agrees
from minkscan.scoring.aggregate import dcpdd_score, document_scores
from minkscan.scoring.token_stats import TokenStats
from minkscan.scoring.windows import Window, concat_token_stats, plan_windows, select_positions
from minkscan.text.frequencies import read_frequencies
from minkscan.text.tokenize import (
    EncodedDocument,
    encode_documents,
    plan_batches,
    plan_packed_batches,
)

PROBE_TEXT = "The quick brown fox jumps over the lazy dog near the bank of the river."
# With scoring.token_scores: per scored token, its Min-K%++ z and character span in the text.
TOKEN_COLUMNS = ("token_z", "token_start", "token_end")


class DocumentScorer:
    """Scores tokenised documents with every single-pass method in one forward pass each."""

    def __init__(self, loaded: LoadedModel, scoring: ScoringConfig) -> None:
        self.loaded = loaded
        self.scoring = scoring
        self.columns = single_pass_columns(scoring)
        self.reference = (
            None if scoring.dcpdd_frequencies is None
            else read_frequencies(scoring.dcpdd_frequencies)
        )  # fmt: skip
        tokenizer = loaded.tokenizer
        self.pad_id = next(
            int(i) for i in (tokenizer.pad_token_id, tokenizer.eos_token_id, 0) if i is not None
        )
        probe = self.encode([PROBE_TEXT] * 2)
        probe_ids = [probe[0].input_ids, probe[1].input_ids[:-3]]
        chunks = {"row_chunk": scoring.row_chunk, "vocab_chunk": scoring.vocab_chunk}
        self.head = choose_head_path(loaded.model, scoring.head, self.pad(probe_ids), **chunks)
        self.packing = scoring.packing and packing_agrees(
            loaded.model, self.head, probe_ids, self.pad_id, **chunks
        )

    @property
    def head_path(self) -> str:
        """'triton', 'fused' or 'logits': how logits reach the reduction."""
        if self.head is None:
            return "logits"
        return "triton" if self.head.kernel == "triton" else "fused"

    def encode(self, texts: Sequence[object]) -> list[EncodedDocument]:
        """Tokenise with this model's tokenizer and the configured truncation / BOS rules.

        With ``scoring.window_stride``, documents over ``max_tokens`` keep all their tokens
        (status windowed) instead of being truncated.
        """
        return encode_documents(
            self.loaded.tokenizer,
            texts,
            max_tokens=self.scoring.max_tokens,
            prepend_bos=self.scoring.prepend_bos,
            windowed=self.scoring.window_stride is not None,
            spans=self.scoring.token_scores,
        )

    def pad(self, sequences: Sequence[Sequence[int]]) -> TokenBatch:
        """Token id sequences as one padded batch (a row each) on the model's device."""
        return TokenBatch.padded(
            sequences, self.pad_id, self.scoring.padding_side, self.loaded.device
        )

    def rows(self, rows: Sequence[Sequence[Sequence[int]]]) -> TokenBatch:
        """Rows of token id sequences as one batch: packed when the model allows it (then
        a row may hold several), else padded (a row holds one)."""
        if self.packing:
            return TokenBatch.packed(rows, self.loaded.device)
        return self.pad([sequence for row in rows for sequence in row])

    def windows(self, n_tokens: int) -> list[Window]:
        """The forward passes over a document of ``n_tokens`` ids: sliding windows of
        ``max_tokens`` when it is longer and ``window_stride`` is set, else one pass."""
        stride = self.scoring.window_stride
        if stride is None or n_tokens <= self.scoring.max_tokens:
            return [Window(0, n_tokens, 1)]
        return plan_windows(n_tokens, self.scoring.max_tokens, stride)

    @torch.inference_mode()
    def score_documents(self, documents: Sequence[EncodedDocument]) -> dict[str, list[Any]]:
        """Columns ``n_tokens``, ``status`` and every score column, one entry per document
        (and `TOKEN_COLUMNS` with ``scoring.token_scores``).

        The windows of all documents (one per document unless it is windowed) share the
        packed (or length-bucketed) batches; each document's new predictions are stitched in
        text order and aggregated over all its tokens. Scores are None for documents with no
        scored token.
        """
        result: dict[str, list[Any]] = {
            "n_tokens": [doc.n_scored for doc in documents],
            "status": [doc.status for doc in documents],
        }
        for name in self.columns:
            result[name] = [None] * len(documents)
        scorable = [i for i, doc in enumerate(documents) if doc.n_scored > 0]
        pieces = [
            (index, window)
            for index in scorable
            for window in self.windows(len(documents[index].input_ids))
        ]
        piece_stats: list[TokenStats | None] = [None] * len(pieces)
        for rows in self._plan_rows([window.end - window.start for _, window in pieces]):
            ids = [
                [
                    documents[index].input_ids[window.start : window.end]
                    for index, window in (pieces[j] for j in row)
                ]
                for row in rows
            ]
            stats = batch_token_stats(
                self.loaded.model,
                self.rows(ids),
                head=self.head,
                row_chunk=self.scoring.row_chunk,
                vocab_chunk=self.scoring.vocab_chunk,
                compiled=self.scoring.compile_reduction,
            )
            offset = 0  # the batch's stats hold each window's predictions in row order
            for j in (j for row in rows for j in row):
                window = pieces[j][1]
                kept = slice(offset + window.first_kept, offset + window.n_predictions)
                piece_stats[j] = select_positions(stats, kept)
                offset += window.n_predictions
        by_document: dict[int, list[TokenStats]] = {index: [] for index in scorable}
        for (index, _), stats in zip(pieces, piece_stats, strict=True):
            by_document[index].append(stats)
        # Aggregate in groups under the token budget: the per-group grids stay bounded.
        for group in self._plan([documents[index].n_scored for index in scorable]):
            members = [scorable[g] for g in group]
            scores = document_scores(
                concat_token_stats([part for i in members for part in by_document[i]]),
                torch.tensor([documents[i].n_scored for i in members]),
                [documents[i].text for i in members],
                self.scoring.k_percentages,
                self.scoring.ablation_k_percentages,
                self.scoring.gap_window,
            )
            for name, values in scores.items():
                for index, value in zip(members, values.tolist(), strict=True):
                    result[name][index] = None if math.isnan(value) else value
        if self.reference is not None:
            for index, parts in by_document.items():
                result["dcpdd"][index] = dcpdd_score(
                    concat_token_stats(parts).target_logprob,
                    documents[index].input_ids[1:],
                    self.reference,
                    self.scoring.dcpdd_clip,
                )
        if self.scoring.token_scores:
            result |= _token_columns(documents, by_document)
        return result

    def _plan_rows(self, lengths: Sequence[int]) -> list[list[list[int]]]:
        """Forward batches as rows of piece indices (one per row unless packing)."""
        if self.packing:
            return plan_packed_batches(
                lengths,
                batch_tokens=self.scoring.batch_tokens,
                max_rows=self.scoring.max_batch_size,
            )
        return [[[j] for j in batch] for batch in self._plan(lengths)]

    def _plan(self, lengths: Sequence[int]) -> list[list[int]]:
        return plan_batches(
            lengths,
            batch_tokens=self.scoring.batch_tokens,
            max_batch_size=self.scoring.max_batch_size,
        )

    def score_frame(self, texts: Sequence[object]) -> pl.DataFrame:
        """Tokenise and score ``texts``; one row per input, in input order."""
        columns = self.score_documents(self.encode(texts))
        schema = {"n_tokens": pl.Int64, "status": pl.Utf8} | {c: pl.Float64 for c in self.columns}
        if self.scoring.token_scores:
            schema |= {"token_z": pl.List(pl.Float32)}
            schema |= {name: pl.List(pl.Int32) for name in TOKEN_COLUMNS[1:]}
        return pl.DataFrame(columns, schema=schema)


def _token_columns(
    documents: Sequence[EncodedDocument], by_document: dict[int, list[TokenStats]]
) -> dict[str, list[Any]]:
    """Per scored token (every token after the first): its Min-K%++ z and its character
    span; None for documents with no scored token."""
    columns: dict[str, list[Any]] = {name: [None] * len(documents) for name in TOKEN_COLUMNS}
    for index, parts in by_document.items():
        columns["token_z"][index] = concat_token_stats(parts).minkpp().float().cpu().tolist()
        spans = documents[index].spans[1:]
        if spans:
            columns["token_start"][index] = [start for start, _ in spans]
            columns["token_end"][index] = [end for _, end in spans]
    return columns


def _split_options(options: dict[str, Any]) -> tuple[dict[str, Any], dict[str, Any]]:
    model_keys = set(ModelConfig.model_fields) - {"name"}
    scoring_keys = set(ScoringConfig.model_fields)
    unknown = set(options) - model_keys - scoring_keys
    if unknown:
        known = ", ".join(sorted(model_keys | scoring_keys))
        raise TypeError(f"unknown option(s) {sorted(unknown)}; known: {known}")
    return (
        {k: v for k, v in options.items() if k in model_keys},
        {k: v for k, v in options.items() if k in scoring_keys},
    )


def score_texts(
    texts: Sequence[object],
    model: str | LoadedModel = "smollm2-135m",
    **options: Any,
) -> pl.DataFrame:
    """Score texts in-process; one row per text with ``n_tokens``, ``status`` and scores.

    ``model`` is a name (see `minkscan.models.loading`) or an already loaded model.
    ``options`` are fields of `ModelConfig` (dtype, device, ...) or `ScoringConfig`
    (k_percentages, max_tokens, prepend_bos, batch_tokens, ...).
    """
    model_options, scoring_options = _split_options(options)
    if isinstance(model, LoadedModel):
        if model_options:
            raise TypeError(
                f"model options {sorted(model_options)} need a model name, not a LoadedModel"
            )
        loaded = model
    else:
        loaded = load_model(ModelConfig(name=model, **model_options))
    scorer = DocumentScorer(loaded, ScoringConfig(**scoring_options))
    return scorer.score_frame(list(texts))
