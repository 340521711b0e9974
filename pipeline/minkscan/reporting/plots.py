"""The report's figures as inline PNG data URIs (matplotlib, Agg: no display needed)."""

from __future__ import annotations

import base64
import io

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402

from minkscan.reporting.numbers import rate, significant_digits  # noqa: E402
from minkscan.reporting.summary import Report  # noqa: E402

MAX_HISTOGRAM_GROUPS = 4  # more groups are drawn as one "audited" histogram
BINS = 40


def _png(figure: plt.Figure) -> str:
    buffer = io.BytesIO()
    figure.savefig(buffer, format="png", dpi=90, bbox_inches="tight")
    plt.close(figure)
    return "data:image/png;base64," + base64.b64encode(buffer.getvalue()).decode("ascii")


def histogram(report: Report) -> str:
    """Primary scores: audited documents against calibration non-members, threshold marked."""
    calibration = report.calibration.methods[report.primary_method].nonmember_sample
    audited = report.audited_sample
    if len(audited) > MAX_HISTOGRAM_GROUPS:
        audited = {"audited (all groups)": [v for values in audited.values() for v in values]}
    values = [v for series in audited.values() for v in series] + list(calibration)
    edges = np.histogram_bin_edges(values, BINS)
    figure, axes = plt.subplots(figsize=(7, 3.2))
    axes.hist(calibration, edges, density=True, color="0.75", label="calibration non-members")
    for name, series in audited.items():
        axes.hist(series, edges, density=True, histtype="step", linewidth=1.6, label=name)
    label = f"threshold {significant_digits(report.threshold)} (flagged: score >)"
    axes.axvline(report.threshold, color="k", linestyle="--", label=label)
    axes.set_xlabel(f"{report.primary_method} (higher = more member-like)")
    axes.set_ylabel("density")
    axes.legend(fontsize="small", frameon=False)
    return _png(figure)


def flagged_fractions(report: Report) -> str:
    """Flagged fraction per group with its interval, against the chance rate."""
    rows = report.primary
    figure, axes = plt.subplots(figsize=(7, 0.45 * len(rows) + 1.2))
    positions = np.arange(len(rows))
    fractions = np.array([row.flagged_fraction for row in rows]) * 100
    errors = np.array(
        [[row.flagged_fraction - row.flagged_low, row.flagged_high - row.flagged_fraction]
         for row in rows]
    ).T * 100  # fmt: skip
    # The report's colours: red contaminated, amber inconclusive, blue no evidence.
    palette = {"contaminated": "#c0392b", "inconclusive": "#e67e22", "no evidence": "#2c7fb8"}
    colors = [palette[report.decision(row)] for row in rows]
    axes.barh(positions, fractions, xerr=errors, color=colors, capsize=3)
    chance = rows[0].expected_fraction * 100 if rows else 0
    axes.axvline(chance, color="k", linestyle="--", label=f"chance {chance:.1f}%")
    axes.set_yticks(positions, [row.group for row in rows])
    axes.invert_yaxis()
    axes.set_xlabel(f"flagged documents, % ({100 * report.calibration.confidence:.0f}% interval)")
    axes.legend(fontsize="small", frameon=False, loc="lower right")
    return _png(figure)


def roc(report: Report) -> str:
    """ROC curves of the primary method and at most three others (labelled scores only)."""
    figure, axes = plt.subplots(figsize=(4.2, 4.2))
    for method, (fpr, tpr, area) in report.roc.items():
        width = 2.2 if method == report.primary_method else 1.0
        axes.plot(fpr, tpr, linewidth=width, label=f"{method} (AUROC {rate(area)})")
    axes.plot([0, 1], [0, 1], color="grey", linestyle=":")
    axes.set_xlabel("false-positive rate")
    axes.set_ylabel("true-positive rate")
    axes.legend(fontsize="x-small", frameon=False, loc="lower right")
    return _png(figure)
