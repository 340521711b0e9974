"""Dataset inference (Maini et al., NeurIPS 2024): valid on i.i.d. sets (about 5% of null
runs below 0.05), powerful when the suspect set scores differently, and the one deviation
from the authors' code -- clipping bounds pooled over both sets -- is what keeps it valid."""

from __future__ import annotations

import math

import numpy as np
import pytest
from minkscan.evaluation import dataset_inference as di

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
