"""The model stage: one loaded model scoring tokenised documents in length-bucketed batches.

`DocumentScorer` is what a Ray actor holds (one replica each) and what `score_texts`
uses in-process; it owns batching and device placement, while the math lives in
`pipeline.scoring` and the forward pass in `pipeline.models.forward`.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import polars as pl
import torch

from pipeline.config import ModelConfig, ScoringConfig
from pipeline.models.forward import PaddedBatch, batch_token_stats, choose_head_path
from pipeline.models.loading import LoadedModel, load_model
from pipeline.scoring.aggregate import document_scores, score_column_names
from pipeline.text.tokenize import EncodedDocument, encode_documents, plan_batches

PROBE_TEXT = "The quick brown fox jumps over the lazy dog near the bank of the river."


class DocumentScorer:
    """Scores tokenised documents with every single-pass method in one forward pass each."""

    def __init__(self, loaded: LoadedModel, scoring: ScoringConfig) -> None:
        self.loaded = loaded
        self.scoring = scoring
        self.columns = score_column_names(scoring.k_percentages, scoring.ablation_k_percentages)
        tokenizer = loaded.tokenizer
        self.pad_id = next(
            int(i) for i in (tokenizer.pad_token_id, tokenizer.eos_token_id, 0) if i is not None
        )
        probe = self.encode([PROBE_TEXT] * 2)
        self.head = choose_head_path(
            loaded.model,
            scoring.head,
            self._pad([probe[0].input_ids, probe[1].input_ids[:-3]]),
            row_chunk=scoring.row_chunk,
            vocab_chunk=scoring.vocab_chunk,
        )

    @property
    def head_path(self) -> str:
        """'triton', 'fused' or 'logits': how logits reach the reduction."""
        if self.head is None:
            return "logits"
        return "triton" if self.head.kernel == "triton" else "fused"

    def encode(self, texts: Sequence[object]) -> list[EncodedDocument]:
        """Tokenise with this model's tokenizer and the configured truncation / BOS rules."""
        return encode_documents(
            self.loaded.tokenizer,
            texts,
            max_tokens=self.scoring.max_tokens,
            prepend_bos=self.scoring.prepend_bos,
        )

    def _pad(self, sequences: list[tuple[int, ...]]) -> PaddedBatch:
        return PaddedBatch.from_ids(
            sequences, self.pad_id, self.scoring.padding_side, self.loaded.device
        )

    @torch.inference_mode()
    def score_documents(self, documents: Sequence[EncodedDocument]) -> dict[str, list[Any]]:
        """Columns ``n_tokens``, ``status`` and every score column, one entry per document.

        Scores are None for documents with no scored token.
        """
        result: dict[str, list[Any]] = {
            "n_tokens": [doc.n_scored for doc in documents],
            "status": [doc.status for doc in documents],
        }
        for name in self.columns:
            result[name] = [None] * len(documents)
        scorable = [i for i, doc in enumerate(documents) if doc.n_scored > 0]
        lengths = [len(documents[i].input_ids) for i in scorable]
        for batch in plan_batches(
            lengths,
            batch_tokens=self.scoring.batch_tokens,
            max_batch_size=self.scoring.max_batch_size,
        ):
            members = [documents[scorable[j]] for j in batch]
            stats = batch_token_stats(
                self.loaded.model,
                self._pad([doc.input_ids for doc in members]),
                head=self.head,
                row_chunk=self.scoring.row_chunk,
                vocab_chunk=self.scoring.vocab_chunk,
                compiled=self.scoring.compile_reduction,
            )
            scores = document_scores(
                stats,
                torch.tensor([doc.n_scored for doc in members]),
                [doc.text for doc in members],
                self.scoring.k_percentages,
                self.scoring.ablation_k_percentages,
            )
            for name, values in scores.items():
                for j, value in zip(batch, values.tolist(), strict=True):
                    result[name][scorable[j]] = None if math.isnan(value) else value
        return result

    def score_frame(self, texts: Sequence[object]) -> pl.DataFrame:
        """Tokenise and score ``texts``; one row per input, in input order."""
        columns = self.score_documents(self.encode(texts))
        schema = {"n_tokens": pl.Int64, "status": pl.Utf8} | {c: pl.Float64 for c in self.columns}
        return pl.DataFrame(columns, schema=schema)


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

    ``model`` is a name (see `pipeline.models.loading`) or an already loaded model.
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
