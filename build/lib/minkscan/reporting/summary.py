"""Per-group contamination statistics at calibrated thresholds, computed lazily with polars.

Flagged fraction f is compared with the chance rate (the calibrated FPR) by a one-sided
binomial test. Where the method's TPR is known, the contaminated fraction is estimated as
(f - FPR) / (TPR - FPR), clipped to [0, 1], with the Clopper-Pearson interval of f mapped
through the same formula. Without a TPR, (f - FPR) / (1 - FPR) is a lower bound (TPR <= 1).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import polars as pl
from scipy.stats import binomtest

from minkscan.calibration.threshold import Calibration, clopper_pearson, score_columns

HISTOGRAM_BINS = 30


@dataclass(frozen=True)
class GroupResult:
    """One (group, method) row of the report."""

    group: str
    method: str
    n_scored: int
    n_flagged: int
    flagged_fraction: float
    expected_fraction: float
    p_value: float
    contamination: float
    contamination_low: float
    contamination_high: float
    contamination_is_lower_bound: bool


@dataclass(frozen=True)
class Report:
    """Everything `write_report` renders; plain data, no plotting."""

    primary_method: str
    results: list[GroupResult]
    histograms: dict[str, dict[str, list[float]]]
    histogram_edges: dict[str, list[float]]
    roc: dict[str, tuple[list[float], list[float]]]
    top_documents: pl.DataFrame
    calibration: Calibration

    def exceeding(self, bound: float) -> list[GroupResult]:
        """Primary-method groups whose estimated contamination exceeds ``bound``."""
        return [
            row
            for row in self.results
            if row.method == self.primary_method and row.contamination > bound
        ]


def _contamination(
    flagged: int, n: int, fpr: float, tpr: float | None, confidence: float
) -> tuple[float, float, float, bool]:
    low, high = clopper_pearson(flagged, n, confidence)
    ceiling = tpr if tpr is not None and tpr > fpr else 1.0

    def mapped(fraction: float) -> float:
        return float(np.clip((fraction - fpr) / (ceiling - fpr), 0.0, 1.0))

    return mapped(flagged / n), mapped(low), mapped(high), tpr is None or tpr <= fpr


def build_report(
    scores: pl.LazyFrame,
    calibration: Calibration,
    *,
    primary_method: str | None = None,
    group_column: str | None = None,
    top_n: int = 20,
) -> Report:
    """Flag rates, tests, contamination estimates, histograms and top documents per group."""
    names = scores.collect_schema().names()
    methods = [name for name in score_columns(names) if name in calibration.methods]
    if not methods:
        raise ValueError("the score file has none of the calibrated score columns")
    primary = primary_method or ("minkpp_k20" if "minkpp_k20" in methods else methods[0])
    if primary not in methods:
        raise ValueError(f"method '{primary}' is not in both the scores and the calibration")
    if group_column is not None and group_column not in names:
        raise ValueError(f"group column '{group_column}' is not in the score file")
    group = pl.col(group_column).cast(pl.Utf8) if group_column else pl.lit("all")
    rows = scores.with_columns(group.alias("_group"))

    results, histograms, edges = [], {}, {}
    for method in methods:
        cal = calibration.methods[method]
        counts = (
            rows.filter(pl.col(method).is_not_null() & pl.col(method).is_finite())
            .group_by("_group")
            .agg(
                pl.len().alias("n"),
                (pl.col(method) > cal.threshold).sum().alias("flagged"),
            )
            .sort("_group")
            .collect()
        )
        for name, n, flagged in counts.iter_rows():
            estimate, low, high, lower_bound = _contamination(
                flagged, n, cal.fpr, cal.tpr, calibration.confidence
            )
            p_value = binomtest(flagged, n, max(cal.fpr, 1e-12), alternative="greater").pvalue
            results.append(
                GroupResult(
                    name,
                    method,
                    n,
                    flagged,
                    flagged / n,
                    cal.fpr,
                    float(p_value),
                    estimate,
                    low,
                    high,
                    lower_bound,
                )
            )
        histograms[method], edges[method] = _histograms(rows, method, cal.nonmember_sample)

    top_columns = [c for c in ("id", "_group", "text", primary) if c in names or c == "_group"]
    top = (
        rows.filter(pl.col(primary).is_not_null())
        .sort(primary, descending=True)
        .head(top_n)
        .select(top_columns)
        .rename({"_group": "group"})
        .collect()
    )
    return Report(primary, results, histograms, edges, _roc(rows, methods, names), top, calibration)


def _histograms(
    rows: pl.LazyFrame, method: str, calibration_sample: list[float]
) -> tuple[dict[str, list[float]], list[float]]:
    """Density histograms per group and for the calibration non-members, shared bin edges."""
    finite = rows.filter(pl.col(method).is_finite())
    bounds = finite.select(pl.col(method).min().alias("lo"), pl.col(method).max().alias("hi"))
    bounds = bounds.collect()
    observed = [v for v in (bounds["lo"][0], bounds["hi"][0]) if v is not None]
    low = min(*observed, *calibration_sample)
    high = max(*observed, *calibration_sample)
    width = (high - low) / HISTOGRAM_BINS or 1.0
    bin_index = ((pl.col(method) - low) / width).floor().clip(0, HISTOGRAM_BINS - 1).cast(pl.Int64)
    binned = (
        finite.group_by("_group", bin_index.alias("bin")).agg(pl.len().alias("count")).collect()
    )
    result: dict[str, list[float]] = {}
    for (name,), part in binned.group_by("_group"):
        counts = np.zeros(HISTOGRAM_BINS)
        counts[part["bin"].to_numpy()] = part["count"].to_numpy()
        result[str(name)] = list(counts / counts.sum())
    reference = np.histogram(
        calibration_sample, HISTOGRAM_BINS, (low, low + width * HISTOGRAM_BINS)
    )
    result["calibration non-members"] = list(reference[0] / reference[0].sum())
    return result, [low + width * i for i in range(HISTOGRAM_BINS + 1)]


def _roc(
    rows: pl.LazyFrame, methods: list[str], names: list[str]
) -> dict[str, tuple[list[float], list[float]]]:
    """ROC curves per method when the score file carries 0/1 labels of both classes."""
    if "label" not in names:
        return {}
    from sklearn.metrics import roc_curve

    labelled = rows.filter(pl.col("label").is_not_null()).select(["label", *methods]).collect()
    if labelled["label"].n_unique() < 2:
        return {}
    curves = {}
    for method in methods:
        part = labelled.filter(pl.col(method).is_not_null())
        fpr, tpr, _ = roc_curve(part["label"].to_numpy(), part[method].to_numpy())
        curves[method] = (list(map(float, fpr)), list(map(float, tpr)))
    return curves
