"""Detection metrics against hand-computed ROC cases (label 1 = member)."""

from __future__ import annotations

import pytest
from minkscan.statistics import auroc, bootstrap_interval, fpr_at_tpr, tpr_at_fpr

# Thresholds from the top: 0.8 -> (fpr 0, tpr .5); 0.4 -> (.5, .5); 0.35 -> (.5, 1); 0.1 -> (1, 1)
LABELS = [0, 0, 1, 1]
SCORES = [0.1, 0.4, 0.35, 0.8]


def test_auroc_counts_correctly_ordered_member_non_member_pairs() -> None:
    assert auroc(LABELS, SCORES) == pytest.approx(0.75)


def test_auroc_counts_ties_as_half() -> None:
    assert auroc([0, 1], [0.5, 0.5]) == pytest.approx(0.5)


def test_tpr_at_fpr_takes_best_threshold_with_fpr_at_most_target() -> None:
    assert tpr_at_fpr(LABELS, SCORES, 0.0) == pytest.approx(0.5)
    assert tpr_at_fpr(LABELS, SCORES, 0.49) == pytest.approx(0.5)


def test_tpr_at_fpr_target_is_inclusive() -> None:
    assert tpr_at_fpr(LABELS, SCORES, 0.5) == pytest.approx(1.0)


def test_fpr_at_95_tpr_is_lowest_fpr_reaching_the_tpr() -> None:
    assert fpr_at_tpr(LABELS, SCORES, 0.95) == pytest.approx(0.5)
    assert fpr_at_tpr(LABELS, SCORES, 0.5) == pytest.approx(0.0)


def test_bootstrap_interval_brackets_estimate_and_is_degenerate_for_perfect_separation() -> None:
    labels = [0] * 20 + [1] * 20
    scores = [i * 0.1 for i in range(20)] + [i * 0.1 + 2.05 for i in range(20)]
    noisy = bootstrap_interval(auroc, [0, 1] * 20, list(range(40)), n_resamples=200)
    assert noisy.low <= noisy.value <= noisy.high
    assert noisy.low < noisy.high
    perfect = bootstrap_interval(auroc, labels, scores, n_resamples=50)
    assert (perfect.low, perfect.value, perfect.high) == (1.0, 1.0, 1.0)


@pytest.mark.parametrize(
    ("labels", "scores", "message"),
    [
        ([1, 1], [0.1, 0.2], "both members"),
        ([0, 2], [0.1, 0.2], "labels must be"),
        ([0, 1], [0.1, float("nan")], "finite"),
        ([0, 1, 1], [0.1, 0.2], "labels but"),
    ],
)
def test_bad_metric_inputs_raise_clear_errors(labels, scores, message) -> None:
    with pytest.raises(ValueError, match=message):
        auroc(labels, scores)
