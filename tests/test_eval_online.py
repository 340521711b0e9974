"""Online (chunk-level) detection: one pass per document, same numbers as offline prefixes."""

from __future__ import annotations

import numpy as np
import polars as pl
import pytest
from minkscan.config import ScoringConfig
from minkscan.evaluation.online import chunk_scores, label_chunks, online_setting
from minkscan.models.forward import Tiles, batch_token_stats
from minkscan.scorer import DocumentScorer
from minkscan.scoring.aggregate import Documents, document_scores
from tiny_models import TRAINING_TEXT

LONG_TEXT = " ".join(TRAINING_TEXT)


@pytest.fixture(scope="module")
def scorer(tiny_llama):
    return DocumentScorer(tiny_llama, ScoringConfig(ablation_k_percentages=[20]))


def test_chunks_tile_every_scored_token_once_in_order(scorer) -> None:
    frame = chunk_scores(scorer, ["a", "b"], [LONG_TEXT, "short text"], chunk_tokens=16)
    for doc_id, text in (("a", LONG_TEXT), ("b", "short text")):
        rows = frame.filter(frame["id"] == doc_id).sort("chunk")
        n_scored = scorer.encode([text])[0].n_scored
        assert rows["chunk_start"].to_list()[0] == 0
        assert rows["chunk_start"].to_list()[1:] == rows["chunk_end"].to_list()[:-1]
        assert rows["chunk_end"].to_list()[-1] == n_scored
        assert all(e - s <= 16 for s, e in zip(rows["chunk_start"], rows["chunk_end"], strict=True))


def test_chunk_scores_equal_offline_scores_of_same_tokens_with_same_prefix(scorer) -> None:
    frame = chunk_scores(scorer, ["a"], [LONG_TEXT], chunk_tokens=16)
    ids = scorer.encode([LONG_TEXT])[0].input_ids
    tokenizer = scorer.loaded.tokenizer
    for row in frame.iter_rows(named=True):
        start, end = row["chunk_start"], row["chunk_end"]
        # The same tokens, their prefix as context, one unchunked pass of the model's logits.
        prefix_stats = batch_token_stats(
            scorer.loaded.model,
            scorer.pad([(ids[: end + 1], start)]),
            head=None,
            tiles=Tiles(row_chunk=64, vocab_chunk=128),
        )
        chunk = Documents(prefix_stats, np.array([end - start]),
                          [tokenizer.decode(ids[start + 1 : end + 1])])  # fmt: skip
        methods = [method for method in scorer.methods if method.per_chunk]
        offline = document_scores(chunk, methods, scorer.scoring)
        for name in scorer.columns:
            assert row[name] == pytest.approx(offline[name].item(), rel=1e-4, abs=1e-5), name


def test_unscorable_documents_yield_no_chunks(scorer) -> None:
    frame = chunk_scores(scorer, ["empty", "none"], ["", None], chunk_tokens=8)
    assert frame.height == 0


def test_chunk_size_must_be_positive(scorer) -> None:
    with pytest.raises(ValueError, match="chunk_tokens"):
        chunk_scores(scorer, ["a"], [LONG_TEXT], chunk_tokens=0)


def test_online_setting_labels_chunks_by_side_of_the_non_member_prefix(scorer) -> None:
    data = pl.DataFrame({"text": TRAINING_TEXT, "label": [0, 1] * 3})
    setting = online_setting(data, seed=1)
    assert setting.height == 3
    assert all(
        t.startswith(p + " ") for t, p in zip(setting["text"], setting["prefix"], strict=True)
    )
    chunks = chunk_scores(scorer, setting["id"].to_list(), setting["text"].to_list(), 4)
    labelled = label_chunks(scorer, setting, chunks)
    boundaries = dict(
        zip(
            setting["id"], (len(d.input_ids) for d in scorer.encode(setting["prefix"])), strict=True
        )
    )
    assert set(labelled["label"]) == {0, 1} and labelled.height < chunks.height
    for row in labelled.iter_rows(named=True):
        predicted = range(row["chunk_start"] + 1, row["chunk_end"] + 1)
        side = [token >= boundaries[row["id"]] for token in predicted]
        assert all(side) if row["label"] == 1 else not any(side)
