"""PAC computes what its authors' `attack.py` computes (yyy01/PAC): the polarized distance
(top 5% minus bottom 30% of the token log-probabilities), calibrated by the mean distance of
N word-swapped copies made as their `eda` makes them, ranked by -PAC; seeded per document."""

from __future__ import annotations

import random

import numpy as np
import polars as pl
import pytest
from minkscan.baselines.batch import RunnerBatch
from minkscan.baselines.pac import PAC, copy_rng, polarized_distance, swapped_copies
from minkscan.config import BaselinesConfig, ScoringConfig
from minkscan.scorer import DocumentScorer
from naive_reference import naive_token_scores
from scipy.stats import rankdata
from tiny_models import TRAINING_TEXT

TEXTS = [TRAINING_TEXT[0], TRAINING_TEXT[1], "", TRAINING_TEXT[2], "one"]


def authors_distance(prob_list: list[float], ratio_local=0.3, ratio_far=0.05) -> float:
    """`calculate_Polarized_Distance`, rewritten from its definition."""
    local = max(int(len(prob_list) * ratio_local), 1)
    far = max(int(len(prob_list) * ratio_far), 1)
    ascending = sorted(prob_list)
    return float(np.mean(ascending[len(ascending) - far :]) - np.mean(ascending[:local]))


def authors_eda(sentence: str, alpha: float, num_aug: int, rng: random.Random) -> list[str]:
    """Their `eda` with `random_swap`/`swap_word`, drawing from ``rng`` (without the final
    shuffle of the copies, which does not change their mean)."""
    words = sentence.split(" ")
    n_rs = max(1, int(alpha * len(words)))
    out = []
    for _ in range(num_aug):
        new_words = words.copy()
        for _ in range(n_rs):
            i = rng.randint(0, len(new_words) - 1)
            j, counter = i, 0
            while j == i:
                j = rng.randint(0, len(new_words) - 1)
                counter += 1
                if counter > 3:
                    break
            else:
                new_words[i], new_words[j] = new_words[j], new_words[i]
        out.append(" ".join(new_words))
    return out


@pytest.mark.parametrize("n", [1, 2, 19, 20, 21, 100])
def test_the_polarized_distance_is_the_authors(n):
    values = np.random.default_rng(n).normal(-3, 2, n)
    assert polarized_distance(values) == pytest.approx(authors_distance(list(values)))


def test_copies_are_swapped_as_the_authors_eda_swaps_them():
    text = "the quick brown fox jumps over the lazy dog near a river bank"
    copies = swapped_copies(text, 0.3, 5, copy_rng(0, text))
    assert copies == authors_eda(text, 0.3, 5, copy_rng(0, text))
    assert all(sorted(c.split(" ")) == sorted(text.split(" ")) for c in copies)
    assert len(set(copies)) > 1 and text not in copies
    assert swapped_copies("alone", 0.3, 2, copy_rng(0, "alone")) == ["alone", "alone"]


def test_pac_is_minus_the_authors_pac_with_the_main_pass_log_p(tiny_model):
    """On a tokenizer without BOS (gpt2) and with one (llama, gemma3)."""
    scorer = DocumentScorer(tiny_model, ScoringConfig())
    documents = scorer.encode(TEXTS)
    batch = RunnerBatch(documents, pl.Series([0.0] * len(TEXTS)))
    got = PAC(BaselinesConfig(pac=True, pac_seed=3))(scorer, batch)["pac"].to_list()

    def distance(text: str) -> float:
        ids = tiny_model.tokenizer(text)["input_ids"]
        return authors_distance(naive_token_scores(tiny_model, ids)["logprob"].tolist())

    expected = []
    for document, value in zip(documents, got, strict=True):
        if document.n_scored == 0:
            assert value is None
            continue
        copies = authors_eda(document.text, 0.3, 5, copy_rng(3, document.text))
        pac = distance(document.text) - np.mean([distance(c) for c in copies])
        expected.append(-pac)  # their calculate_auc ranks by -PAC
    got = [v for v in got if v is not None]
    assert got == pytest.approx(expected, abs=1e-5)
    assert list(rankdata(got)) == list(rankdata(expected))


def test_a_documents_pac_does_not_depend_on_its_batch(tiny_llama):
    scorer = DocumentScorer(tiny_llama, ScoringConfig())
    runner = PAC(BaselinesConfig(pac=True))

    def pac(texts: list[str]) -> list[float | None]:
        documents = scorer.encode(texts)
        return runner(scorer, RunnerBatch(documents, pl.Series([0.0] * len(texts))))["pac"]

    alone = pac([TRAINING_TEXT[1]]).to_list()
    together = pac([TRAINING_TEXT[0], TRAINING_TEXT[1]]).to_list()
    assert together[1] == pytest.approx(alone[0], abs=1e-6)
