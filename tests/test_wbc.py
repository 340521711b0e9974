"""WBC computes what Fast-MIA's `wbc.py` computes: over window sizes 1, 5, 10 and 20 (cut to
the shorter sequence), the share of sliding windows where the reference model's loss sum
exceeds the target's, averaged; higher = member. It needs a reference model."""

from __future__ import annotations

import numpy as np
import pytest
from minkscan.baselines.wbc import window_comparison
from minkscan.config import BaselinesConfig, ConfigError, build_config


def fast_mia_wbc(target: np.ndarray, reference: np.ndarray, windows: list[int]) -> float:
    """Their `_compute_window_score` per window, averaged; written with explicit loops."""
    n = min(len(target), len(reference))
    shares = []
    for window in windows:
        size = min(window, n)
        starts = range(n - size + 1)
        wins = [sum(reference[s : s + size]) > sum(target[s : s + size]) for s in starts]
        shares.append(sum(wins) / len(wins))
    return float(np.mean(shares))


@pytest.mark.parametrize(("n_target", "n_reference"), [(40, 40), (30, 35), (3, 8), (1, 1)])
def test_the_window_comparison_is_fast_mias(n_target, n_reference):
    rng = np.random.default_rng(n_target)
    target, reference = rng.gamma(2, 1, n_target), rng.gamma(2, 1, n_reference)
    windows = [1, 5, 10, 20]
    assert window_comparison(target, reference, windows) == pytest.approx(
        fast_mia_wbc(target, reference, windows)
    )


def test_a_target_with_lower_loss_everywhere_scores_one():
    target = np.full(30, 1.0)
    assert window_comparison(target, target + 0.5, [1, 5, 10, 20]) == 1.0
    assert window_comparison(target + 0.5, target, [1, 5, 10, 20]) == 0.0


def test_wbc_needs_a_reference_model():
    assert BaselinesConfig().wbc_windows == [1, 5, 10, 20]
    with pytest.raises(ConfigError, match="wbc needs reference_model"):
        build_config({}, {"baselines.wbc": True})
