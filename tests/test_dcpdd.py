"""DC-PDD: `minkscan frequencies` counts a reference corpus with Ray Data exactly as the
tokenizer does, and the `dcpdd` column, scored in the same pass, matches a float64
reference of the paper's formula (first occurrences only, the clip bound, add-one smoothing
of unseen tokens as in the official code)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import polars as pl
import pytest
from helpers import SAMPLE
from minkscan.cli import main
from minkscan.config import ScoringConfig
from minkscan.io.score_reader import read_scores
from minkscan.scorer import DocumentScorer
from minkscan.text.frequencies import read_frequencies, write_frequencies
from naive_reference import naive_token_scores

TEXTS = [
    "The river bank was flooded after the storm, and the bank closed early.",
    "A quick brown fox jumps over the lazy dog; the dog does not move.",
    "Short one.",
]


def naive_dcpdd(loaded, input_ids: list[int], counts: np.ndarray, clip: float) -> float:
    """The paper's formula from scratch: p of each scored token, first occurrences only,
    p_ref = (count + 1) / (total + V), terms p * log(1 / p_ref) clipped at ``clip``."""
    logprob = naive_token_scores(loaded, input_ids)["logprob"].numpy()
    targets = input_ids[1:]
    seen, first = set(), []
    for position, token in enumerate(targets):
        if token not in seen:
            seen.add(token)
            first.append(position)
    p_ref = (counts + 1) / (counts.sum() + counts.size)
    terms = [np.exp(logprob[i]) * np.log(1 / p_ref[targets[i]]) for i in first]
    return float(np.mean(np.minimum(terms, clip)))


@pytest.mark.parametrize("clip", [0.01, 10.0])
def test_dcpdd_matches_a_float64_reference_of_the_paper(tiny_llama, tmp_path, clip) -> None:
    rng = np.random.default_rng(0)
    vocab = len(tiny_llama.tokenizer)
    counts = rng.integers(0, 50, vocab)
    counts[:5] = 0  # some ids never seen in the reference corpus
    path = str(tmp_path / "freq.parquet")
    write_frequencies(path, counts, {"tokenizer": "tiny"})
    scoring = ScoringConfig(dcpdd_frequencies=path, dcpdd_clip=clip, k_percentages=[20])
    scorer = DocumentScorer(tiny_llama, scoring)
    documents = scorer.encode(TEXTS)
    scores = scorer.score_documents(documents)
    for row, document in enumerate(documents):
        expected = naive_dcpdd(tiny_llama, list(document.input_ids), counts, clip)
        assert scores["dcpdd"][row] == pytest.approx(expected, rel=1e-6, abs=1e-9)
    assert read_frequencies(path).log_unseen == pytest.approx(np.log(1 / (counts.sum() + vocab)))


@pytest.mark.usefixtures("local_ray")
@pytest.mark.slow
def test_frequencies_command_counts_like_the_tokenizer_and_feeds_the_score(
    tiny_llama_dir: Path, tiny_llama, tmp_path: Path, capsys
) -> None:
    freq = tmp_path / "freq.parquet"
    base = ["--model", str(tiny_llama_dir), "--set", "scoring.max_tokens=16"]
    assert main(["frequencies", "--input", str(SAMPLE), "--output", str(freq), *base]) == 0
    assert "counted" in capsys.readouterr().out
    texts = pl.read_parquet(SAMPLE)["text"].to_list()
    expected = np.zeros(len(tiny_llama.tokenizer), dtype=np.int64)
    for ids in tiny_llama.tokenizer(texts)["input_ids"]:
        np.add.at(expected, ids[:16], 1)
    counted = pl.read_parquet(freq).sort("token_id")["count"].to_numpy()
    assert np.array_equal(counted, expected)

    assert main(["frequencies", "--input", str(SAMPLE), "--output", str(freq), *base]) == 2
    assert "already exists" in capsys.readouterr().err

    out = tmp_path / "scores"
    assert main(["score", "--output", str(out), "--model", str(tiny_llama_dir), "--limit", "8",
                 "--set", f"scoring.dcpdd_frequencies={freq}"]) == 0  # fmt: skip
    scores = pl.from_arrow(read_scores(str(out)).table)
    assert scores["dcpdd"].is_not_null().all() and (scores["dcpdd"] > 0).all()
