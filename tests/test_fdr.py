"""Document flags at a controlled false discovery rate: conformal p-values against the
calibration non-members, Benjamini-Hochberg selection, and the guarantee measured on
simulated scores with known membership."""

from __future__ import annotations

import numpy as np
import pytest
from minkscan.calibration.conformal import benjamini_hochberg, conformal_p_values


def test_a_conformal_p_value_counts_the_non_members_scoring_at_least_as_high():
    nonmembers = np.array([0.1, 0.5, 0.5, 0.9])
    scores = np.array([0.5, 1.0, 0.0])
    expected = [(1 + sum(n >= s for n in nonmembers)) / 5 for s in scores]
    assert conformal_p_values(scores, nonmembers).tolist() == pytest.approx(expected)
    assert conformal_p_values(scores, nonmembers).tolist() == pytest.approx([0.8, 0.2, 1.0])


def _step_up(p: np.ndarray, q: float) -> np.ndarray:
    """Benjamini-Hochberg as its paper states it: the largest k with p_(k) <= k q / m."""
    order = np.argsort(p)
    passing = np.flatnonzero(p[order] <= q * np.arange(1, p.size + 1) / p.size)
    selected = np.zeros(p.size, bool)
    if passing.size:
        selected[order[: passing.max() + 1]] = True
    return selected


def test_the_selection_is_benjamini_hochberg_step_up():
    rng = np.random.default_rng(3)
    p = np.concatenate([rng.uniform(size=80), rng.uniform(0, 0.002, size=20)])
    selection = benjamini_hochberg(p, 0.1)
    assert (selection.selected == _step_up(p, 0.1)).all()
    assert selection.cutoff == p[selection.selected].max()


@pytest.mark.parametrize("q", [0.0, 1.0, -0.1, 1.5])
def test_a_level_outside_zero_one_is_refused(q):
    with pytest.raises(ValueError, match="must be in"):
        benjamini_hochberg(np.array([0.1]), q)


def test_over_many_audits_the_realised_false_discovery_rate_stays_at_or_under_q():
    """500 simulated audits: 400 calibration non-members; 200 audited documents of which 30
    are members (scores shifted up). The mean share of non-members among the selected stays
    at or under q; selecting every p-value under q (no BH) does not."""
    rng = np.random.default_rng(4)
    q, runs = 0.1, 500
    fdp, naive = [], []
    for _ in range(runs):
        calibration = rng.normal(size=400)
        scores = np.concatenate([rng.normal(2.5, 1, 30), rng.normal(size=170)])
        member = np.arange(200) < 30
        p = conformal_p_values(scores, calibration)
        chosen = benjamini_hochberg(p, q).selected
        fdp.append((chosen & ~member).sum() / max(1, chosen.sum()))
        loose = p <= q
        naive.append((loose & ~member).sum() / max(1, loose.sum()))
    assert np.mean(fdp) <= q
    assert np.mean(fdp) > q / 2  # not vacuous: close to q * (share of non-members)
    assert np.mean(naive) > q
