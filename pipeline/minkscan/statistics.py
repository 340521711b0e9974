"""The statistics every higher layer shares (numpy, scipy, scikit-learn only): detection
metrics over (label, score) pairs, the exact binomial interval and Holm's adjustment.

Detection metrics: label 1 = member, higher score = member. TPR at a target FPR is the
highest true-positive rate among all thresholds whose false-positive rate is at most the
target (inclusive); FPR at 95% TPR is the lowest FPR among thresholds reaching at least 95%
TPR.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np
from scipy.stats import binomtest
from sklearn.metrics import roc_auc_score, roc_curve

DEFAULT_FPR_TARGETS = (0.05, 0.01, 0.001)


def _arrays(labels: Sequence[int], scores: Sequence[float]) -> tuple[np.ndarray, np.ndarray]:
    y = np.asarray(labels, dtype=int)
    s = np.asarray(scores, dtype=float)
    if y.shape != s.shape:
        raise ValueError(f"{y.size} labels but {s.size} scores")
    if not np.isin(y, (0, 1)).all():
        raise ValueError("labels must be 0 (non-member) or 1 (member)")
    if len(np.unique(y)) < 2:
        raise ValueError("metrics need both members (1) and non-members (0)")
    if not np.isfinite(s).all():
        raise ValueError("scores must be finite; drop unscored rows first")
    return y, s


def auroc(labels: Sequence[int], scores: Sequence[float]) -> float:
    """Area under the ROC curve (ties count one half)."""
    y, s = _arrays(labels, scores)
    return float(roc_auc_score(y, s))


def tpr_at_fpr(labels: Sequence[int], scores: Sequence[float], fpr_target: float = 0.05) -> float:
    """Highest TPR over thresholds with FPR <= ``fpr_target`` (inclusive)."""
    y, s = _arrays(labels, scores)
    fpr, tpr, _ = roc_curve(y, s, drop_intermediate=False)
    return float(tpr[fpr <= fpr_target + 1e-12].max())


def fpr_at_tpr(labels: Sequence[int], scores: Sequence[float], tpr_target: float = 0.95) -> float:
    """Lowest FPR over thresholds with TPR >= ``tpr_target`` (inclusive)."""
    y, s = _arrays(labels, scores)
    fpr, tpr, _ = roc_curve(y, s, drop_intermediate=False)
    return float(fpr[tpr >= tpr_target - 1e-12].min())


@dataclass(frozen=True)
class Interval:
    """A point estimate with a percentile bootstrap confidence interval."""

    value: float
    low: float
    high: float


def bootstrap_interval(
    metric: Callable[[Sequence[int], Sequence[float]], float],
    labels: Sequence[int],
    scores: Sequence[float],
    *,
    n_resamples: int = 1000,
    confidence: float = 0.95,
    seed: int = 0,
) -> Interval:
    """Percentile bootstrap CI of ``metric(labels, scores)``, resampling within each class.

    Stratified resampling keeps both classes in every resample, so every metric is defined.
    """
    y, s = _arrays(labels, scores)
    rng = np.random.default_rng(seed)
    members, non_members = np.flatnonzero(y == 1), np.flatnonzero(y == 0)
    values = np.empty(n_resamples)
    for i in range(n_resamples):
        index = np.concatenate(
            [rng.choice(members, members.size), rng.choice(non_members, non_members.size)]
        )
        values[i] = metric(y[index], s[index])
    alpha = (1 - confidence) / 2
    low, high = np.quantile(values, [alpha, 1 - alpha])
    return Interval(metric(y, s), float(low), float(high))


def clopper_pearson(successes: int, trials: int, confidence: float) -> tuple[float, float]:
    """Exact (Clopper-Pearson) binomial confidence interval for a proportion, by scipy."""
    interval = binomtest(successes, trials).proportion_ci(confidence, method="exact")
    return float(interval.low), float(interval.high)


def holm(p_values: list[float]) -> list[float]:
    """Holm step-down adjusted p-values (family-wise error control), in input order."""
    order = np.argsort(p_values)
    m = len(p_values)
    adjusted = np.empty(m)
    running = 0.0
    for rank, index in enumerate(order):
        running = max(running, min(1.0, (m - rank) * p_values[index]))
        adjusted[index] = running
    return adjusted.tolist()
