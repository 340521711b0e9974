"""Dataset inference (Maini et al., NeurIPS 2024): valid on i.i.d. sets (about 5% of null
runs below 0.05), powerful when the suspect set scores differently, and the one deviation
from the authors' code -- clipping bounds pooled over both sets -- is what keeps it valid."""

from __future__ import annotations

import math
from dataclasses import replace

import numpy as np
import pytest
from minkscan.evaluation import dataset_inference as di
from minkscan.evaluation.blind import BlindResult
from minkscan.statistics import Interval

FEATURES = [f"f{i}" for i in range(30)]
RUNS = 400
ROWS = 100  # per set: small sets with many scores are where clipping matters most
# Three standard errors above 5% over RUNS runs.
BOUND = 0.05 + 3 * math.sqrt(0.05 * 0.95 / RUNS)


def _ours(suspect: np.ndarray, heldout: np.ndarray, seed: int) -> float:
    return di.dataset_inference(suspect, heldout, FEATURES, splits=1, seed=seed).median_p


def _authors_clipping(suspect: np.ndarray, heldout: np.ndarray, seed: int) -> float:
    """The same test with each set clipped at its own quantiles, as the authors' code does."""
    a, b = (np.clip(m, *np.quantile(m, di.CLIP_QUANTILES, axis=0)) for m in (suspect, heldout))
    mean, spread = a.mean(axis=0), a.std(axis=0)
    return di.split_p_value((a - mean) / spread, (b - mean) / spread, seed)


def _null_rate(test, sampler) -> float:
    """Share of RUNS pairs of i.i.d. sets (ROWS x 30 features each) told apart at 5%."""
    rng = np.random.default_rng(7)
    p = [test(sampler(rng), sampler(rng), seed) for seed in range(RUNS)]
    return float(np.mean(np.array(p) < 0.05))


def normal(rng: np.random.Generator) -> np.ndarray:
    return rng.normal(size=(ROWS, len(FEATURES)))


def heavy_tailed(rng: np.random.Generator) -> np.ndarray:
    return rng.standard_t(3, size=(ROWS, len(FEATURES)))


@pytest.mark.slow
def test_iid_sets_are_told_apart_at_about_the_nominal_rate():
    assert _null_rate(_ours, normal) <= BOUND
    assert _null_rate(_ours, heavy_tailed) <= BOUND


def test_clipping_each_set_at_its_own_quantiles_as_the_authors_do_is_not_valid():
    assert _null_rate(_authors_clipping, heavy_tailed) > BOUND


def test_a_suspect_set_that_scores_as_more_member_like_is_found():
    rng = np.random.default_rng(8)
    shift = 0.3 * (np.arange(30) < 5)  # five of thirty scores carry a weak signal
    result = di.dataset_inference(rng.normal(size=(200, 30)) + shift,
                                  rng.normal(size=(200, 30)), FEATURES)  # fmt: skip
    assert result.median_p < 0.01 and result.significant(0.05)
    assert len(result.p_values) == di.DEFAULT_SPLITS
    assert "i.i.d." in result.sentence(0.05)


def test_too_few_documents_on_a_side_are_refused():
    with pytest.raises(ValueError, match="at least 20 held-out"):
        di.dataset_inference(np.zeros((50, 2)), np.zeros((10, 2)), ["a", "b"])


def _with_blind(auroc: float, low: float, high: float) -> di.DatasetInference:
    """A result whose suspect set scores higher, with a given blind baseline beside it."""
    rng = np.random.default_rng(9)
    result = di.dataset_inference(rng.normal(size=(50, 3)) + 1, rng.normal(size=(50, 3)),
                                  ["a", "b", "c"])  # fmt: skip
    return replace(result, blind=BlindResult(Interval(auroc, low, high), 50, 50), blind_warn=0.6)


def test_a_heldout_set_the_text_alone_tells_apart_makes_the_result_not_valid():
    result = _with_blind(0.97, 0.95, 0.99)
    assert result.median_p < 0.01 and not result.valid and not result.significant(0.05)
    assert result.decision(0.05) == "not valid"
    assert result.sentence(0.05).startswith("Dataset inference for group 'all' is not valid")


def test_a_blind_auroc_far_below_chance_is_called_out_as_the_same_texts_on_both_sides():
    result = _with_blind(0.05, 0.02, 0.09)
    assert result.valid and result.decision(0.05) == "evidence"
    assert "far below chance, a sign of the same texts on both sides" in result.sentence(0.05)


def test_a_heldout_set_of_the_same_kind_says_the_check_passed():
    result = _with_blind(0.52, 0.45, 0.58)
    assert "the text alone does not tell them apart: blind AUROC 0.520" in result.sentence(0.05)
