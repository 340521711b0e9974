"""Length confound check: do audited documents and calibration non-members differ in length?

Membership scores move with document length, so a flagged fraction above chance can come
from length alone when the audited texts are longer or shorter than the non-members the
threshold was set on (Duan et al. 2024, "Do membership inference attacks work on large
language models?"). The two token-count distributions are compared with a two-sample
Kolmogorov-Smirnov test; a difference is reported when p < 0.01 and D >= 0.1.

Where feasible, a length-matched chance rate is offered: the calibration non-members are cut
into length quintiles, the false-positive rate of each quintile at the threshold is weighted
by the share of a group's documents in it, and the group's flagged fraction is tested
against that rate instead of the overall FPR.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import polars as pl
from scipy.stats import binomtest, ks_2samp

from minkscan.calibration.threshold import Calibration, is_flagged
from minkscan.reporting.numbers import p_phrase
from minkscan.schema import GROUP_KEY, N_TOKENS

KS_P = 0.01
KS_D = 0.1
BINS = 5
MIN_PER_BIN = 20
MAX_OUTSIDE = 0.10  # audited share beyond the calibration length range for a matched rate
SAMPLE = 5000


@dataclass(frozen=True)
class MatchedRow:
    """A group's flagged fraction against its length-matched chance rate."""

    group: str
    n_scored: int
    flagged_fraction: float
    matched_chance: float
    p_value: float


@dataclass(frozen=True)
class LengthCheck:
    """Token counts of audited vs calibration documents, and the length-matched comparison."""

    audited_median: float
    calibration_median: float
    ks_statistic: float
    ks_p_value: float
    matched: list[MatchedRow] = field(default_factory=list)
    matched_note: str = ""

    @property
    def differs(self) -> bool:
        return self.ks_p_value < KS_P and self.ks_statistic >= KS_D

    @property
    def warning(self) -> str | None:
        if not self.differs:
            return None
        direction = "longer" if self.audited_median > self.calibration_median else "shorter"
        return (
            f"audited documents are {direction} than the calibration non-members (median "
            f"{self.audited_median:.0f} vs {self.calibration_median:.0f} tokens; two-sample "
            f"Kolmogorov-Smirnov D = {self.ks_statistic:.2f}, {p_phrase(self.ks_p_value)}): "
            "scores depend on length, so flagged fractions may reflect length rather than "
            "membership; "
            + (
                "see the length-matched comparison in the document-length section"
                if self.matched
                else self.matched_note
            )
        )


def length_check(rows: pl.LazyFrame, method: str, calibration: Calibration) -> LengthCheck | None:
    """Compare audited and calibration lengths for ``method``; None without calibration
    lengths (a calibration file from before they were kept, or scores without n_tokens)."""
    cal = calibration.methods[method]
    if not cal.nonmember_lengths:
        return None
    cal_lengths = np.asarray(cal.nonmember_lengths, dtype=np.float64)
    scored = rows.filter(pl.col(method).is_not_null() & pl.col(method).is_finite())
    audited = scored.select(N_TOKENS).collect()[N_TOKENS]
    if audited.len() == 0:
        return None
    sample = audited.sample(min(SAMPLE, audited.len()), seed=0).to_numpy().astype(np.float64)
    test = ks_2samp(sample, cal_lengths)
    matched, note = _matched(scored, method, calibration, cal_lengths, audited.to_numpy())
    return LengthCheck(
        audited_median=float(np.median(sample)),
        calibration_median=float(np.median(cal_lengths)),
        ks_statistic=float(test.statistic),
        ks_p_value=float(test.pvalue),
        matched=matched,
        matched_note=note,
    )


def _matched(
    scored: pl.LazyFrame,
    method: str,
    calibration: Calibration,
    cal_lengths: np.ndarray,
    audited: np.ndarray,
) -> tuple[list[MatchedRow], str]:
    """Per-group flagged fraction vs the length-matched chance rate, or why there is none."""
    cal = calibration.methods[method]
    edges = np.unique(np.quantile(cal_lengths, np.linspace(0, 1, BINS + 1)[1:-1]))
    cal_bins = np.searchsorted(edges, cal_lengths, side="right")
    per_bin = np.bincount(cal_bins, minlength=edges.size + 1)
    if edges.size == 0 or per_bin.min() < MIN_PER_BIN:
        return [], (
            f"no length-matched rate: needs at least {MIN_PER_BIN} calibration non-members in "
            f"each of {BINS} length bins"
        )
    outside = float(((audited < cal_lengths.min()) | (audited > cal_lengths.max())).mean())
    if outside > MAX_OUTSIDE:
        return [], (
            f"no length-matched rate: {100 * outside:.0f}% of audited documents lie outside "
            f"the calibration length range [{cal_lengths.min():.0f}, {cal_lengths.max():.0f}] "
            "tokens; calibrate on non-members of the audited lengths"
        )
    scores = np.asarray(cal.nonmember_sample)
    above = scores > cal.threshold
    bin_fpr = np.array([above[cal_bins == b].mean() for b in range(per_bin.size)])
    length_bin = pl.sum_horizontal([(pl.col(N_TOKENS) > edge).cast(pl.Int64) for edge in edges])
    counts = (
        scored.group_by(GROUP_KEY, length_bin.alias("_bin"))
        .agg(pl.len().alias("n"), is_flagged(pl.col(method), cal.threshold).sum().alias("flagged"))
        .collect()
    )
    rows = []
    for (group,), part in sorted(counts.group_by(GROUP_KEY), key=lambda item: str(item[0][0])):
        n, flagged = int(part["n"].sum()), int(part["flagged"].sum())
        shares = np.zeros(per_bin.size)
        shares[part["_bin"].to_numpy()] = part["n"].to_numpy() / n
        chance = float(np.clip(shares @ bin_fpr, 1e-12, 1.0))
        p = binomtest(flagged, n, chance, alternative="greater").pvalue
        rows.append(MatchedRow(str(group), n, flagged / n, chance, float(p)))
    return rows, ""
