"""Score documents longer than the context with sliding windows instead of truncating them."""

from __future__ import annotations

import math
import sys
from collections.abc import Sequence

import polars as pl
import torch

from pipeline.models.forward import batch_token_stats
from pipeline.scorer import DocumentScorer
from pipeline.scoring.aggregate import document_scores
from pipeline.scoring.token_stats import TokenStats
from pipeline.scoring.windows import plan_windows, windowed_token_stats
from pipeline.text.tokenize import encode_documents


@torch.inference_mode()
def score_windowed(scorer: DocumentScorer, texts: Sequence[object], stride: int) -> pl.DataFrame:
    """Like `DocumentScorer.score_frame`, but every token of a long document is scored.

    The window is ``scoring.max_tokens`` tokens; windows advance by ``stride`` tokens, one
    forward pass each, and the document score aggregates over all of its tokens.
    """
    scoring = scorer.scoring

    def stats_of(ids: Sequence[int]) -> TokenStats:
        return batch_token_stats(
            scorer.loaded.model,
            scorer._pad([tuple(ids)]),
            head=scorer.head,
            row_chunk=scoring.row_chunk,
            vocab_chunk=scoring.vocab_chunk,
        )

    documents = encode_documents(
        scorer.loaded.tokenizer, texts, max_tokens=sys.maxsize, prepend_bos=scoring.prepend_bos
    )
    columns: dict[str, list] = {"n_tokens": [], "status": [], "n_windows": []}
    columns |= {name: [] for name in scorer.columns}
    for document in documents:
        columns["n_tokens"].append(document.n_scored)
        columns["status"].append(document.status)
        n_windows = (
            0
            if document.n_scored == 0
            else len(plan_windows(len(document.input_ids), scoring.max_tokens, stride))
        )
        columns["n_windows"].append(n_windows)
        if n_windows == 0:
            for name in scorer.columns:
                columns[name].append(None)
            continue
        stats = windowed_token_stats(document.input_ids, scoring.max_tokens, stride, stats_of)
        scores = document_scores(
            stats,
            torch.tensor([document.n_scored]),
            [document.text],
            scoring.k_percentages,
            scoring.ablation_k_percentages,
        )
        for name in scorer.columns:
            value = scores[name].item()
            columns[name].append(None if math.isnan(value) else value)
    schema = {"n_tokens": pl.Int64, "status": pl.Utf8, "n_windows": pl.Int64}
    return pl.DataFrame(columns, schema=schema | {c: pl.Float64 for c in scorer.columns})
