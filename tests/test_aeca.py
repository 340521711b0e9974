"""AECA computes what its authors' `evaluate_aeca` computes: from one forward pass at
temperature 1, the potential stream p(x_t) * I_ref(x_t) (I_ref = -log of the add-one
smoothed reference-corpus frequency; 0.5 for ids the frequency table lacks), high-passed,
and std(spectrum) - lambda * std(NLL) with population deviations, higher = member; it is
scored in the main pass whenever token frequencies are given."""

from __future__ import annotations

import numpy as np
import pytest
from minkscan.config import ScoringConfig
from minkscan.methods import single_pass_columns
from minkscan.scorer import DocumentScorer
from minkscan.text.frequencies import write_frequencies
from naive_reference import naive_token_scores
from scipy.stats import rankdata

TEXTS = [
    "The river bank was flooded after the storm, and the bank closed early.",
    "A quick brown fox jumps over the lazy dog; the dog does not move.",
    "Short one here.",
    "Numbers: 1 2 3 4 5 6 7 8 9 10 11 12.",
]


def authors_aeca(loaded, input_ids: list[int], counts: np.ndarray, weight: float) -> float:
    """Their `calculate_streams` + `apply_dynamic_entropic_convolution` + score, rewritten
    from the definition in float64."""
    nll = -naive_token_scores(loaded, input_ids)["logprob"].numpy()
    labels = np.asarray(input_ids[1:])
    i_ref_table = -(np.log(counts + 1) - np.log(counts.sum() + len(counts)))
    i_ref = i_ref_table[np.clip(labels, 0, len(counts) - 1)]
    i_ref[labels >= len(counts)] = 0.5
    potential = np.exp(-nll) * i_ref
    shock = np.empty_like(potential)
    shock[:-1] = potential[:-1] - potential[1:]
    shock[-1] = potential[-1]
    return float(np.std(shock) - weight * np.std(nll))


@pytest.mark.parametrize("weight", [1.0, 3.0])
def test_aeca_is_the_authors_definition(tiny_model, tmp_path, weight) -> None:
    """On a tokenizer without BOS (gpt2) and with one (llama, gemma3)."""
    vocab = len(tiny_model.tokenizer)
    counts = np.random.default_rng(0).integers(0, 50, vocab - 40)  # the last 40 ids: unseen
    path = str(tmp_path / "freq.parquet")
    write_frequencies(path, counts, {"tokenizer": "tiny"})
    scorer = DocumentScorer(
        tiny_model, ScoringConfig(dcpdd_frequencies=path, aeca_lambda=weight, k_percentages=[20])
    )
    documents = scorer.encode(TEXTS)
    got = scorer.score_documents(documents)["aeca"]
    expected = [authors_aeca(tiny_model, list(d.input_ids), counts, weight) for d in documents]
    assert got == pytest.approx(expected, rel=1e-6, abs=1e-9)
    assert list(rankdata(got)) == list(rankdata(expected))


def test_aeca_is_scored_only_with_token_frequencies(tmp_path) -> None:
    assert "aeca" not in single_pass_columns(ScoringConfig())
    path = str(tmp_path / "freq.parquet")
    write_frequencies(path, np.ones(10, dtype=np.int64), {"tokenizer": "tiny"})
    assert "aeca" in single_pass_columns(ScoringConfig(dcpdd_frequencies=path))
