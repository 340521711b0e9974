"""The verdict one scored dataset supports, from its per-group statistics
(`minkscan.reporting.groups`), evidence documents and checks (length, distribution shift).

The primary method is declared before looking (default Min-K%++ k=20). Its p-values are
Holm-adjusted across groups and decide the verdict; every other method is exploratory, with
p-values Holm-adjusted across all its (method, group) tests, so that picking the method
that "found" contamination is not mistaken for evidence.
"""

from __future__ import annotations

import difflib
from dataclasses import dataclass, field, replace

import polars as pl

from minkscan.calibration.threshold import (
    Calibration,
    primary_method,
    sample_size_warning,
)
from minkscan.evaluation.blind import BLIND_AUROC_WARN
from minkscan.evaluation.dataset_inference import DEFAULT_SPLITS, DatasetInference
from minkscan.methods import score_columns
from minkscan.reporting.audits import DEFAULT_FDR, FdrSelection, fdr_selection, heldout_inference
from minkscan.reporting.evidence import Evidence, top_evidence
from minkscan.reporting.groups import GroupResult, group_results
from minkscan.reporting.lengths import LengthCheck, length_check
from minkscan.reporting.numbers import p_phrase, percent, rate
from minkscan.reporting.shift import ShiftCheck, shift_check
from minkscan.schema import GROUP_KEY, LABEL, N_TOKENS, STATUS

ROC_OTHERS = 3  # methods drawn beside the primary one in the ROC plot
# Said once, where an estimate reads "at least" (`Report.at_least_note` fills in why).
AT_LEAST_NOTE = (
    "'at least': {why}, so (flagged - FPR) / (1 - FPR) is a lower bound on the contaminated "
    "fraction"
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
    shift: ShiftCheck | None = None  # the blind baseline per group
    fdr: FdrSelection | None = None  # documents selected at a controlled FDR
    inference: list[DatasetInference] = field(default_factory=list)  # against --heldout
    inference_note: str | None = None  # why dataset inference did not run for some group
    order_test: dict | None = None  # `minkscan order-test`'s order_test.json
    unscored: list[str] = field(default_factory=list)  # groups with no scored document

    @property
    def results(self) -> list[GroupResult]:
        return self.primary + self.exploratory

    @property
    def threshold(self) -> float:
        return self.calibration.methods[self.primary_method].threshold

    def exceeding(self, bound: float) -> list[GroupResult]:
        """Groups that fail a gate at contamination ``bound`` on the verdict's own evidence:
        significant after Holm, and the lower end of the contamination interval above it.
        (A group with no scored document, `unscored`, fails any gate too.)"""
        return [
            row for row in self.primary
            if row.significant(self.alpha) and row.contamination_low > bound
        ]  # fmt: skip

    @property
    def at_least(self) -> bool:
        """Whether some shown estimate is a lower bound (then `at_least_note` explains it)."""
        return any(r.estimable and r.contamination_is_lower_bound for r in self.results)

    @property
    def at_least_note(self) -> str:
        """Why the estimates that read 'at least' are lower bounds, for this calibration."""
        lower = [r for r in self.results if r.estimable and r.contamination_is_lower_bound]
        method = lower[0].method if lower else self.primary_method
        cal = self.calibration.methods[method]
        why = (
            "the calibration has no members, so the TPR is unknown" if cal.tpr is None
            else f"the calibration's TPR for {method} ({rate(cal.tpr)}, from {cal.n_members} "
            f"members) is no higher than its FPR ({rate(cal.fpr)})"
        )  # fmt: skip
        return AT_LEAST_NOTE.format(why=why)

    def headline(self) -> str:
        """One sentence over all groups."""
        hits = [row.group for row in self.primary if row.significant(self.alpha)]
        level = f"at the {self.alpha:.0%} level"
        if self.unscored:
            named = ", ".join(f"'{name}'" for name in self.unscored)
            scored = f"{len(self.primary)} scored group(s)"
            unscored = f"; no scored documents in {named}, so nothing is concluded there"
            if not hits:
                return (f"No evidence of contamination in the {scored} {level} "
                        f"({self.primary_method}){unscored}.")  # fmt: skip
            found = ", ".join(f"'{name}'" for name in hits)
            return (f"Evidence of contamination {level} in {len(hits)} of the {scored}: "
                    f"{found} ({self.primary_method}){unscored}.")  # fmt: skip
        if not hits:
            return f"No evidence of contamination in any group {level} ({self.primary_method})."
        named = ", ".join(f"'{name}'" for name in hits)
        return (
            f"Evidence of contamination {level} in {len(hits)} of {len(self.primary)} "
            f"group(s): {named} ({self.primary_method})."
        )

    def sentence(self, row: GroupResult, shift: bool = True) -> str:
        """The verdict for one group, in words a reader can act on (with the distribution
        shift caution, `shift_caution`, unless ``shift`` is False: the HTML sets it apart)."""
        rates = (
            f"{percent(row.flagged_fraction)} of {row.n_scored} documents flagged against "
            f"{percent(row.expected_fraction)} by chance "
            f"(Holm-adjusted {p_phrase(row.p_adjusted)})"
        )
        if not row.significant(self.alpha):
            return (
                f"No evidence of contamination in group '{row.group}' at the "
                f"{self.alpha:.0%} level: {rates}.{self.shift_caution(row) if shift else ''}"
            )
        return (
            f"Evidence of contamination in group '{row.group}' at the {self.alpha:.0%} level: "
            f"{rates}; estimated contaminated fraction {row.estimate()}."
            f"{self._length_caveat(row)}{self.shift_caution(row) if shift else ''}"
        )

    def shift_caution(self, row: GroupResult) -> str:
        """The blind baseline's caution for the group ('' when it has none)."""
        return "" if self.shift is None else self.shift.caution(row.group)

    def blind_lines(self) -> list[str]:
        """The blind baseline's AUROC per group, or why it is not shown."""
        if self.shift is None:
            return []
        if self.shift.note is not None:
            return [f"Blind baseline not run: {self.shift.note}."]
        lines = [self.shift.line(row.group) for row in self.primary]
        return [line + "." for line in lines if line is not None]

    def fdr_lines(self) -> list[str]:
        """Per group, how many documents the FDR selection holds (with the blind caution)."""
        if self.fdr is None:
            return []
        lines = [self.fdr.sentence(row.group) + self.shift_caution(row) for row in self.primary]
        return [*lines, self.fdr.explanation()]

    def inference_lines(self) -> list[str]:
        """Dataset inference per group, and why it did not run where it did not."""
        lines = [result.sentence(self.alpha) for result in self.inference]
        return lines + ([f"Dataset inference: {self.inference_note}."]
                        if self.inference_note else [])  # fmt: skip

    def order_lines(self) -> list[str]:
        """The order test's verdict as `minkscan order-test` wrote it, naming its file."""
        if not self.order_test:
            return []
        first, *rest = self.order_test["verdict"]
        files = ", ".join(self.order_test.get("inputs", [])) or "its file"
        return [f"Order test of {files}: {first}", *rest]

    def audit_lines(self) -> list[str]:
        """Every audit beyond the flagged fraction, as the terminal prints them."""
        return self.fdr_lines() + self.inference_lines() + self.order_lines()

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
            f"({percent(matched.matched_chance)}) it is not significant "
            f"({p_phrase(matched.p_value)}): document length may explain it."
        )


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
    blind_auroc_warn: float | None = BLIND_AUROC_WARN,
    fdr: float | None = DEFAULT_FDR,
    heldout: pl.DataFrame | None = None,
    heldout_name: str = "held-out set",
    heldout_splits: int = DEFAULT_SPLITS,
    order_test: dict | None = None,
) -> Report:
    """Verdict, per-group statistics, evidence documents and warnings for one scored dataset.

    With ``blind_auroc_warn`` (None: no check) each group is also told from the calibration
    non-members by text alone (`minkscan.reporting.shift`), and a group that is told apart
    (AUROC lower end above it) gets a caution in its verdict."""
    names = scores.collect_schema().names()
    methods = [name for name in score_columns(names) if name in calibration.methods]
    if not methods:
        raise ValueError("the scores have none of the calibrated score columns")
    primary = _primary(methods, primary_method)
    if group_column is not None and group_column not in names:
        close = difflib.get_close_matches(group_column, names, n=1)
        hint = f"did you mean '{close[0]}'? " if close else ""
        raise ValueError(
            f"group column '{group_column}' is not in the scores ({hint}they have "
            f"{names[:12]}); keep it with `minkscan score --keep-columns {group_column}`"
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
    results = group_results(rows, [primary], calibration)
    groups = rows.select(pl.col(GROUP_KEY).unique().sort()).collect()[GROUP_KEY].to_list()
    unscored = [name for name in groups if name not in {row.group for row in results}]
    if not results:
        raise ValueError(
            f"no scored document: every '{primary}' score is null or NaN"
            f"{' (statuses: ' + _statuses(rows) + ')' if STATUS in names else ''}; nothing "
            "to report (score texts the model can read)"
        )
    warnings += [
        f"group '{name}' has no scored document (every '{primary}' is null or NaN): nothing "
        "is concluded about it"
        for name in unscored
    ]
    shift = (
        None if blind_auroc_warn is None
        else shift_check(rows, [row.group for row in results], calibration, blind_auroc_warn)
    )  # fmt: skip
    selection = None if fdr is None else fdr_selection(rows, primary, calibration, fdr)
    inference, note = (
        ([], None) if heldout is None
        else heldout_inference(rows, heldout, [r.group for r in results], group_column,
                               heldout_name=heldout_name, splits=heldout_splits)
    )  # fmt: skip
    evidence = top_evidence(rows, primary, names, top_n)
    if selection is not None:
        p_values = selection.p_values([doc.score for doc in evidence])
        evidence = [
            replace(doc, p_value=p, selected=selection.is_selected(p))
            for doc, p in zip(evidence, p_values, strict=True)
        ]
    return Report(
        model=model,
        inputs=inputs or [],
        primary_method=primary,
        alpha=alpha,
        calibration=calibration,
        primary=results,
        exploratory=group_results(rows, others, calibration) if others else [],
        top_documents=evidence,
        audited_sample=_sample(rows, primary, sample_rows),
        roc=roc,
        lengths=lengths,
        warnings=warnings,
        shift=shift,
        fdr=selection,
        inference=inference,
        inference_note=note,
        order_test=order_test,
        unscored=unscored,
    )


def _statuses(rows: pl.LazyFrame) -> str:
    """'empty 3, too_short 1': how many rows have each status."""
    counts = rows.group_by(STATUS).len().sort(STATUS).collect()
    return ", ".join(f"{status} {n}" for status, n in counts.rows())


def _primary(methods: list[str], declared: str | None) -> str:
    try:
        return primary_method(methods, declared)
    except ValueError:
        close = difflib.get_close_matches(str(declared), methods, n=1)
        hint = f"did you mean '{close[0]}'? " if close else ""
        raise ValueError(
            f"method '{declared}' is not in both the scores and the calibration ({hint}both "
            f"have: {', '.join(methods)})"
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
