"""Online detection (Min-K%++ paper, appendix C): score consecutive chunks of a long text.

Each chunk of C scored tokens is conditioned on all preceding text; one forward pass per
document yields every chunk's token statistics, which are then aggregated chunk by chunk
with the same per-document aggregation as offline scoring.
"""

from __future__ import annotations

import random
from collections.abc import Sequence

import numpy as np
import polars as pl
import torch

from minkscan.methods import method_of
from minkscan.schema import GROUP, ID, LABEL, TEXT
from minkscan.scorer import DocumentScorer
from minkscan.scoring.aggregate import Documents, document_scores

# A chunk's span in scored-token positions (position 0 predicts the document's second token).
CHUNK_START, CHUNK_END = "chunk_start", "chunk_end"


@torch.inference_mode()
def chunk_scores(
    scorer: DocumentScorer, ids: Sequence[str], texts: Sequence[object], chunk_tokens: int = 32
) -> pl.DataFrame:
    """One row per chunk: id, chunk, chunk_start, chunk_end (scored-token span) and scores.

    Token positions count scored tokens (position 0 predicts the document's second token);
    the last chunk of a document may be shorter. Unscorable documents yield no rows.
    """
    if chunk_tokens < 1:
        raise ValueError("chunk_tokens must be >= 1")
    scoring = scorer.scoring
    rows: dict[str, list] = {ID: [], "chunk": [], CHUNK_START: [], CHUNK_END: []}
    methods = [method for method in scorer.methods if method.per_chunk]
    columns = [name for name in scorer.columns if method_of(name).per_chunk]
    for name in columns:
        rows[name] = []
    tokenizer = scorer.loaded.tokenizer
    for doc_id, document in zip(ids, scorer.encode(texts), strict=True):
        if document.n_scored == 0:
            continue
        stats = scorer.token_stats(scorer.pad([(document.input_ids, 0)]))
        starts = list(range(0, document.n_scored, chunk_tokens))
        ends = [min(s + chunk_tokens, document.n_scored) for s in starts]
        chunk_texts = [
            tokenizer.decode(document.input_ids[s + 1 : e + 1])
            for s, e in zip(starts, ends, strict=True)
        ]
        lengths = np.array([e - s for s, e in zip(starts, ends, strict=True)])
        scores = document_scores(Documents(stats, lengths, chunk_texts), methods, scoring)
        rows[ID] += [doc_id] * len(starts)
        rows["chunk"] += list(range(len(starts)))
        rows[CHUNK_START] += starts
        rows[CHUNK_END] += ends
        for name in columns:
            rows[name] += scores[name].cpu().tolist()
    schema = {ID: pl.Utf8, "chunk": pl.Int64, CHUNK_START: pl.Int64, CHUNK_END: pl.Int64}
    return pl.DataFrame(rows, schema=schema | {c: pl.Float64 for c in columns})


def online_setting(data: pl.DataFrame, seed: int = 0) -> pl.DataFrame:
    """The paper's online setting from labelled data: a non-member text, then a member text.

    Each non-member is paired with a random member; each part keeps a random number of its
    words (at least half). Returns id, text and prefix (the non-member part).
    """
    rng = random.Random(seed)
    data = data.filter(pl.col(TEXT).str.strip_chars().str.len_chars() > 0)
    non_members = data.filter(pl.col(LABEL) == 0)[TEXT].to_list()
    members = data.filter(pl.col(LABEL) == 1)[TEXT].to_list()
    if not non_members or not members:
        raise ValueError("the online setting needs both members (1) and non-members (0)")

    def random_prefix(text: str) -> str:
        words = text.split()
        return " ".join(words[: rng.randint((len(words) + 1) // 2, len(words))])

    prefixes = [random_prefix(text) for text in non_members]
    suffixes = [random_prefix(rng.choice(members)) for _ in non_members]
    return pl.DataFrame(
        {
            ID: [f"online:{i}" for i in range(len(prefixes))],
            TEXT: [f"{p} {s}" for p, s in zip(prefixes, suffixes, strict=True)],
            "prefix": prefixes,
        }
    )


def label_chunks(
    scorer: DocumentScorer, setting: pl.DataFrame, chunks: pl.DataFrame
) -> pl.DataFrame:
    """Chunks of `chunk_scores` over `online_setting` texts with ``label`` and ``group``.

    Scored position p predicts token p + 1; a chunk is a member (1) when all its predicted
    tokens lie after the non-member prefix, a non-member (0) when all lie inside it, and
    is dropped when it straddles the boundary (the boundary is the prefix's token count).
    """
    boundaries = [len(doc.input_ids) for doc in scorer.encode(setting["prefix"].to_list())]
    boundary = pl.DataFrame({ID: setting[ID], "boundary": boundaries})
    return (
        chunks.join(boundary, on=ID)
        .with_columns(
            pl.when(pl.col(CHUNK_START) + 1 >= pl.col("boundary"))
            .then(1)
            .when(pl.col(CHUNK_END) < pl.col("boundary"))
            .then(0)
            .alias(LABEL),
            pl.lit("online").alias(GROUP),
        )
        .drop_nulls(LABEL)
        .drop("boundary")
    )
