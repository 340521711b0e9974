"""Per-group contamination statistics at calibrated thresholds, and the verdict they support.

A document is flagged when its score is above the method's threshold (`is_flagged`). Per
group, the flagged fraction f (Clopper-Pearson interval) is compared with the chance rate
(the calibrated FPR) by a one-sided binomial test. Where the method's TPR is known, the
contaminated fraction is estimated as (f - FPR) / (TPR - FPR), clipped to [0, 1], with the
interval of f and that of the TPR mapped through the same formula; without a TPR,
(f - FPR) / (1 - FPR) is a lower bound (TPR <= 1). An interval spanning nearly all of
[0, 1] is reported as not estimable.

The primary method is declared before looking (default Min-K%++ k=20). Its p-values are
Holm-adjusted across groups and decide the verdict; every other method is exploratory, with
p-values Holm-adjusted across all its (method, group) tests, so that picking the method
that "found" contamination is not mistaken for evidence.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace

import numpy as np
import polars as pl
from scipy.stats import binomtest

from minkscan.calibration.threshold import (
    Calibration,
    MethodCalibration,
    is_flagged,
    primary_method,
    sample_size_warning,
)
from minkscan.methods import score_columns
from minkscan.reporting.evidence import Evidence, top_evidence
from minkscan.reporting.lengths import LengthCheck, length_check
from minkscan.schema import GROUP_KEY, LABEL, N_TOKENS
from minkscan.statistics import clopper_pearson, holm

ROC_OTHERS = 3  # methods drawn beside the primary one in the ROC plot
# A contamination interval this wide or wider is no estimate at all.
NOT_ESTIMABLE_WIDTH = 0.9
NOT_ESTIMABLE = "not estimable with this calibration (needs more members / a higher TPR)"
# Said once, where an estimate reads "at least".
AT_LEAST_NOTE = (
    "'at least': the calibration has no members (or a TPR no higher than its FPR), so the "
    "TPR is unknown and (flagged - FPR) / (1 - FPR) is a lower bound on the contaminated "
    "fraction"
)


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
            f"{bound}{_percent(self.contamination)} [{_percent(self.contamination_low)}, "
            f"{_percent(self.contamination_high)}]"
        )


@dataclass(frozen=True)
class Report:
    """Everything the renderers show; plain data, no plotting."""

    model: str | None
    inputs: list[str]
    primary_method: str
    alpha: float
    calibration: Calibration
    primary: list[GroupResult]
    exploratory: list[GroupResult]
    top_documents: list[Evidence]
    audited_sample: dict[str, list[float]]  # primary scores per group (a sample), for plots
    roc: dict[str, tuple[list[float], list[float], float]]  # method: fpr, tpr, AUROC
    lengths: LengthCheck | None
    warnings: list[str] = field(default_factory=list)

    @property
    def results(self) -> list[GroupResult]:
        return self.primary + self.exploratory

    @property
    def threshold(self) -> float:
        return self.calibration.methods[self.primary_method].threshold

    def exceeding(self, bound: float) -> list[GroupResult]:
        """Groups that fail a gate at contamination ``bound`` on the verdict's own evidence:
        significant after Holm, and the lower end of the contamination interval above it."""
        return [
            row for row in self.primary
            if row.significant(self.alpha) and row.contamination_low > bound
        ]  # fmt: skip

    @property
    def at_least(self) -> bool:
        """Whether some shown estimate is a lower bound (then `AT_LEAST_NOTE` explains it)."""
        return any(r.estimable and r.contamination_is_lower_bound for r in self.results)

    def headline(self) -> str:
        """One sentence over all groups."""
        hits = [row.group for row in self.primary if row.significant(self.alpha)]
        level = f"at the {self.alpha:.0%} level"
        if not hits:
            return f"No evidence of contamination in any group {level} ({self.primary_method})."
        named = ", ".join(f"'{name}'" for name in hits)
        return (
            f"Evidence of contamination {level} in {len(hits)} of {len(self.primary)} "
            f"group(s): {named} ({self.primary_method})."
        )

    def sentence(self, row: GroupResult) -> str:
        """The verdict for one group, in words a reader can act on."""
        rates = (
            f"{_percent(row.flagged_fraction)} of {row.n_scored} documents flagged against "
            f"{_percent(row.expected_fraction)} by chance "
            f"(Holm-adjusted {p_phrase(row.p_adjusted)})"
        )
        if not row.significant(self.alpha):
            return (
                f"No evidence of contamination in group '{row.group}' at the "
                f"{self.alpha:.0%} level: {rates}."
            )
        return (
            f"Evidence of contamination in group '{row.group}' at the {self.alpha:.0%} level: "
            f"{rates}; estimated contaminated fraction {row.estimate()}."
            f"{self._length_caveat(row)}"
        )

    def _length_caveat(self, row: GroupResult) -> str:
        """A caution when lengths differ and the length-matched chance rate explains the group."""
        if self.lengths is None or not self.lengths.differs:
            return ""
        matched = next((m for m in self.lengths.matched if m.group == row.group), None)
        if matched is None:
            return " Caution: audited and calibration lengths differ (see the warning)."
        if matched.p_value < self.alpha:
            return ""
        return (
            f" Caution: against the length-matched chance rate "
            f"({_percent(matched.matched_chance)}) it is not significant "
            f"({p_phrase(matched.p_value)}): document length may explain it."
        )


def _percent(value: float) -> str:
    return f"{100 * value:.1f}%"


def format_p(value: float) -> str:
    """p-values to two significant digits, tiny ones as a bound."""
    return "< 1e-10" if value < 1e-10 else f"{value:.2g}"


def p_phrase(value: float) -> str:
    """'p = 0.03' or 'p < 1e-10', for sentences."""
    return f"p {format_p(value)}" if value < 1e-10 else f"p = {format_p(value)}"


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


def _results(rows: pl.LazyFrame, methods: list[str], calibration: Calibration) -> list[GroupResult]:
    """Rows of several methods from one pass over the scores, p-values Holm-adjusted across
    all of them. A group where a method scored nothing has no row for it."""
    counts = (
        rows.group_by(GROUP_KEY)
        .agg(
            expr
            for method in methods
            for expr in (
                pl.col(method).is_finite().sum().alias(f"n:{method}"),
                (
                    pl.col(method).is_finite()
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


def build_report(
    scores: pl.LazyFrame,
    calibration: Calibration,
    *,
    primary_method: str | None = None,
    group_column: str | None = None,
    top_n: int = 20,
    alpha: float = 0.05,
    model: str | None = None,
    inputs: list[str] | None = None,
    sample_rows: int = 5000,
) -> Report:
    """Verdict, per-group statistics, evidence documents and warnings for one scored dataset."""
    names = scores.collect_schema().names()
    methods = [name for name in score_columns(names) if name in calibration.methods]
    if not methods:
        raise ValueError("the scores have none of the calibrated score columns")
    primary = _primary(methods, primary_method)
    if group_column is not None and group_column not in names:
        raise ValueError(
            f"group column '{group_column}' is not in the scores (has {names[:12]}); keep it "
            f"with `minkscan score --keep-columns {group_column}`"
        )
    group = pl.col(group_column).cast(pl.Utf8).fill_null("(none)") if group_column else None
    rows = scores.with_columns((group if group is not None else pl.lit("all")).alias(GROUP_KEY))
    others = [method for method in methods if method != primary]
    warnings = [w for w in [sample_size_warning(calibration, primary)] if w]
    if model and calibration.model and model != calibration.model:
        warnings.append(
            f"the scores come from model '{model}' but the calibration from "
            f"'{calibration.model}': thresholds do not transfer between models"
        )
    lengths = length_check(rows, primary, calibration) if N_TOKENS in names else None
    if lengths is not None and lengths.warning:
        warnings.append(lengths.warning)
    roc = _roc(rows, primary, others, names)
    return Report(
        model=model,
        inputs=inputs or [],
        primary_method=primary,
        alpha=alpha,
        calibration=calibration,
        primary=_results(rows, [primary], calibration),
        exploratory=_results(rows, others, calibration) if others else [],
        top_documents=top_evidence(rows, primary, names, top_n),
        audited_sample=_sample(rows, primary, sample_rows),
        roc=roc,
        lengths=lengths,
        warnings=warnings,
    )


def _primary(methods: list[str], declared: str | None) -> str:
    try:
        return primary_method(methods, declared)
    except ValueError:
        raise ValueError(
            f"method '{declared}' is not in both the scores and the calibration"
        ) from None


def _sample(rows: pl.LazyFrame, method: str, size: int) -> dict[str, list[float]]:
    """Up to ``size`` finite primary scores per group (seeded), for the histogram."""
    finite = rows.filter(pl.col(method).is_finite()).select(GROUP_KEY, method).collect()
    sample = {}
    for (name,), part in finite.group_by(GROUP_KEY, maintain_order=True):
        values = part[method]
        if values.len() > size:
            values = values.sample(size, seed=0)
        sample[str(name)] = values.to_list()
    return dict(sorted(sample.items()))


def _roc(
    rows: pl.LazyFrame, primary: str, others: list[str], names: list[str]
) -> dict[str, tuple[list[float], list[float], float]]:
    """ROC curves when the scores carry 0/1 labels of both classes: the primary method and
    the ``ROC_OTHERS`` other methods of highest AUROC."""
    if LABEL not in names:
        return {}
    from sklearn.metrics import roc_auc_score, roc_curve

    labelled = rows.filter(pl.col(LABEL).is_not_null()).select([LABEL, primary, *others])
    labelled = labelled.collect()
    if labelled[LABEL].n_unique() < 2:
        return {}
    curves = {}
    for method in [primary, *others]:
        part = labelled.filter(pl.col(method).is_not_null() & pl.col(method).is_finite())
        if part[LABEL].n_unique() < 2:
            continue
        truth, values = part[LABEL].to_numpy(), part[method].to_numpy()
        fpr, tpr, _ = roc_curve(truth, values)
        curves[method] = (fpr.tolist(), tpr.tolist(), float(roc_auc_score(truth, values)))
    best_others = sorted((m for m in curves if m != primary), key=lambda m: -curves[m][2])
    keep = [m for m in [primary, *best_others[:ROC_OTHERS]] if m in curves]
    return {method: curves[method] for method in keep}
