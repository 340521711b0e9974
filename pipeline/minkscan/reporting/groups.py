"""Per-group contamination statistics at calibrated thresholds.

A document is flagged when its score is above the method's threshold (`is_flagged`); every
score but null and NaN counts (`has_score`: +inf is the most member-like score). Per
group, the flagged fraction f (Clopper-Pearson interval) is compared with the chance rate
(the calibrated FPR) by a one-sided binomial test. Where the method's TPR is known, the
contaminated fraction is estimated as (f - FPR) / (TPR - FPR), clipped to [0, 1], with the
interval of f and that of the TPR mapped through the same formula; without a TPR,
(f - FPR) / (1 - FPR) is a lower bound (TPR <= 1). An interval spanning nearly all of
[0, 1] is reported as not estimable.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

import numpy as np
import polars as pl
from scipy.stats import binomtest

from minkscan.calibration.threshold import (
    Calibration,
    MethodCalibration,
    has_score,
    is_flagged,
)
from minkscan.reporting.numbers import percent
from minkscan.schema import GROUP_KEY
from minkscan.statistics import clopper_pearson, holm

# A contamination interval this wide or wider is no estimate at all.
NOT_ESTIMABLE_WIDTH = 0.9
NOT_ESTIMABLE = "not estimable with this calibration (needs more members / a higher TPR)"


@dataclass(frozen=True)
class GroupResult:
    """One (group, method) row of the report."""

    group: str
    method: str
    n_scored: int
    n_flagged: int
    flagged_fraction: float
    flagged_low: float
    flagged_high: float
    expected_fraction: float
    p_value: float
    p_adjusted: float
    contamination: float
    contamination_low: float
    contamination_high: float
    contamination_is_lower_bound: bool

    def significant(self, alpha: float) -> bool:
        return self.p_adjusted < alpha

    @property
    def estimable(self) -> bool:
        """Whether the contamination interval says anything: one spanning nearly all of
        [0, 1] does not (too few members, or a TPR too close to the FPR)."""
        return self.contamination_high - self.contamination_low < NOT_ESTIMABLE_WIDTH

    def estimate(self) -> str:
        """'12.3% [4.0%, 25.1%]', 'at least 12.3% [...]' or 'not estimable ...'."""
        if not self.estimable:
            return NOT_ESTIMABLE
        bound = "at least " if self.contamination_is_lower_bound else ""
        return (
            f"{bound}{percent(self.contamination)} [{percent(self.contamination_low)}, "
            f"{percent(self.contamination_high)}]"
        )


def _contamination(
    flagged: int, n: int, cal: MethodCalibration, confidence: float
) -> tuple[float, float, float, bool]:
    """(estimate, low, high, lower bound?) of the contaminated fraction. Its interval takes
    the flagged fraction's interval and, where members were calibrated, the TPR's: the
    high end divides by the lowest plausible TPR, the low end by the highest."""
    low, high = clopper_pearson(flagged, n, confidence)
    fpr = cal.fpr
    if cal.tpr is None or cal.tpr <= fpr:
        ceiling = ceiling_low = ceiling_high = 1.0
    else:
        ceiling = cal.tpr
        ceiling_low = cal.tpr_low if cal.tpr_low is not None and cal.tpr_low > fpr else None
        ceiling_high = cal.tpr_high if cal.tpr_high is not None else cal.tpr

    def mapped(fraction: float, top: float | None) -> float:
        if top is None:  # the TPR may be no higher than the FPR: no upper limit
            return 1.0 if fraction > fpr else 0.0
        return float(np.clip((fraction - fpr) / (top - fpr), 0.0, 1.0))

    bound = cal.tpr is None or cal.tpr <= fpr
    return mapped(flagged / n, ceiling), mapped(low, ceiling_high), mapped(high, ceiling_low), bound


def group_results(
    rows: pl.LazyFrame, methods: list[str], calibration: Calibration
) -> list[GroupResult]:
    """Rows of several methods from one pass over the scores, p-values Holm-adjusted across
    all of them. A group where a method scored nothing has no row for it."""
    counts = (
        rows.group_by(GROUP_KEY)
        .agg(
            expr
            for method in methods
            for expr in (
                has_score(pl.col(method)).sum().alias(f"n:{method}"),
                (
                    has_score(pl.col(method))
                    & is_flagged(pl.col(method), calibration.methods[method].threshold)
                )
                .sum()
                .alias(f"flagged:{method}"),
            )
        )
        .sort(GROUP_KEY)
        .collect()
    )
    results = []
    for method in methods:
        cal = calibration.methods[method]
        for name, n, flagged in counts.select(GROUP_KEY, f"n:{method}", f"flagged:{method}").rows():
            if n == 0:
                continue
            low, high = clopper_pearson(flagged, n, calibration.confidence)
            p_value = binomtest(flagged, n, max(cal.fpr, 1e-12), alternative="greater").pvalue
            estimate, c_low, c_high, bound = _contamination(flagged, n, cal, calibration.confidence)
            results.append(
                GroupResult(
                    group=str(name),
                    method=method,
                    n_scored=n,
                    n_flagged=flagged,
                    flagged_fraction=flagged / n,
                    flagged_low=low,
                    flagged_high=high,
                    expected_fraction=cal.fpr,
                    p_value=float(p_value),
                    p_adjusted=float(p_value),  # replaced below, once all tests are known
                    contamination=estimate,
                    contamination_low=c_low,
                    contamination_high=c_high,
                    contamination_is_lower_bound=bound,
                )
            )
    adjusted = holm([row.p_value for row in results])
    return [replace(row, p_adjusted=p) for row, p in zip(results, adjusted, strict=True)]
