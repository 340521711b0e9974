"""What one scored dataset's report says: a decision per group and the sentences every output
(terminal, Markdown, HTML, JSON) prints, from the statistics `minkscan.reporting.build`
computed.

The primary method is declared before looking (default Min-K%++ k=20). Its p-values are
Holm-adjusted across groups and decide the verdict; every other method is exploratory, with
p-values Holm-adjusted across all its (method, group) tests, so that picking the method
that "found" contamination is not mistaken for evidence.

A verdict is never stronger than the checks beside it: a group that the text alone tells
from the calibration non-members (`minkscan.reporting.shift`) is **inconclusive**, with the
blind AUROC as the reason and no contamination fraction; where the check could not run, the
verdict says that the shift was not checked.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import polars as pl

from minkscan.calibration.threshold import Calibration
from minkscan.evaluation.dataset_inference import DatasetInference
from minkscan.reporting.audits import FdrSelection
from minkscan.reporting.evidence import Evidence
from minkscan.reporting.groups import NOT_ESTIMABLE, GroupResult
from minkscan.reporting.lengths import LengthCheck
from minkscan.reporting.numbers import p_phrase, percent, rate
from minkscan.reporting.shift import ShiftCheck

# A group's decision, in every output.
CONTAMINATED, NO_EVIDENCE, INCONCLUSIVE = "contaminated", "no evidence", "inconclusive"
NOT_ESTIMATED_SHIFT = (
    "not estimated: the group differs from the calibration non-members by text alone"
)
# Where a person turns when the verdict cannot answer (docs/audits.md).
OTHER_AUDITS = (
    "for an answer, calibrate on known non-members of the same kind of text, or run "
    "dataset inference (--heldout) or the order test (docs/audits.md: which audit "
    "answers which question)"
)
# Said once, where an estimate reads "at least" (`Report.at_least_note` fills in why).
AT_LEAST_NOTE = (
    "'at least': {why}, so (flagged - FPR) / (1 - FPR) is a lower bound on the contaminated "
    "fraction"
)
EXPLORATORY_AT_LEAST_NOTE = AT_LEAST_NOTE.format(
    why="where a method's calibration TPR is unknown (no members) or no higher than its FPR"
)


def _names(groups: list[str]) -> str:
    return ", ".join(f"'{name}'" for name in groups)


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
    shift: ShiftCheck  # the blind baseline per group (or why it did not run)
    warnings: list[str] = field(default_factory=list)
    fdr: FdrSelection | None = None  # documents selected at a controlled FDR
    inference: list[DatasetInference] = field(default_factory=list)  # against --heldout
    inference_note: str | None = None  # why dataset inference did not run for some group
    order_test: dict | None = None  # `minkscan order-test`'s order_test.json
    unscored: list[str] = field(default_factory=list)  # groups with no scored document
    # Every audited row's decision (`minkscan.reporting.decisions`), once the report has its
    # group decisions; written as decisions.parquet.
    decisions: pl.DataFrame | None = field(default=None, repr=False)

    @property
    def results(self) -> list[GroupResult]:
        return self.primary + self.exploratory

    @property
    def threshold(self) -> float:
        return self.calibration.methods[self.primary_method].threshold

    def decision(self, row: GroupResult) -> str:
        """`CONTAMINATED`, `NO_EVIDENCE` or, where the text alone tells the group from the
        calibration non-members, `INCONCLUSIVE`."""
        if self.shift.shifted(row.group):
            return INCONCLUSIVE
        return CONTAMINATED if row.significant(self.alpha) else NO_EVIDENCE

    def groups_decided(self, decision: str) -> list[str]:
        """The primary groups with ``decision``, in table order."""
        return [row.group for row in self.primary if self.decision(row) == decision]

    @property
    def overall(self) -> str:
        """The report's one decision: contaminated if a group is, else inconclusive if a
        group is (or has no scored document), else no evidence."""
        if self.groups_decided(CONTAMINATED):
            return CONTAMINATED
        if self.groups_decided(INCONCLUSIVE) or self.unscored:
            return INCONCLUSIVE
        return NO_EVIDENCE

    def exceeding(self, bound: float) -> list[GroupResult]:
        """Groups that fail a gate at contamination ``bound`` on the verdict's own evidence:
        contaminated (significant after Holm, not inconclusive) and the lower end of the
        contamination interval above it. (A group with no scored document, `unscored`,
        fails any gate too; an inconclusive one neither passes nor fails.)"""
        return [
            row for row in self.primary
            if self.decision(row) == CONTAMINATED and row.contamination_low > bound
        ]  # fmt: skip

    def estimate(self, row: GroupResult) -> str:
        """A row's contamination estimate as every output shows it: none for a group the
        text alone tells apart (its rate is no estimate of training)."""
        return NOT_ESTIMATED_SHIFT if self.shift.shifted(row.group) else row.estimate()

    def estimated(self, row: GroupResult) -> bool:
        """Whether the row's contamination numbers are an estimate to show."""
        return row.estimable and not self.shift.shifted(row.group)

    def contamination_note(self, row: GroupResult) -> str | None:
        """Why a row has no contamination estimate (None: it has one)."""
        if self.shift.shifted(row.group):
            return NOT_ESTIMATED_SHIFT
        return None if row.estimable else NOT_ESTIMABLE

    @property
    def at_least(self) -> bool:
        """Whether some shown estimate is a lower bound (then `at_least_note` explains it)."""
        return any(self.estimated(r) and r.contamination_is_lower_bound for r in self.primary)

    @property
    def exploratory_at_least(self) -> bool:
        """Whether some exploratory estimate is a lower bound (`EXPLORATORY_AT_LEAST_NOTE`
        says why, beside those rows rather than the primary table's)."""
        return any(self.estimated(r) and r.contamination_is_lower_bound for r in self.exploratory)

    @property
    def at_least_note(self) -> str:
        """Why the primary estimates that read 'at least' are lower bounds."""
        cal = self.calibration.methods[self.primary_method]
        why = (
            "the calibration has no members, so the TPR is unknown" if cal.tpr is None
            else f"the calibration's TPR for {self.primary_method} ({rate(cal.tpr)}, from "
            f"{cal.n_members} members) is no higher than its FPR ({rate(cal.fpr)})"
        )  # fmt: skip
        return AT_LEAST_NOTE.format(why=why)

    def headline(self) -> str:
        """One sentence over all groups, never stronger than the shift check beside it."""
        level, method = f"at the {self.alpha:.0%} level", f"({self.primary_method})"
        found = self.groups_decided(CONTAMINATED)
        unsure = self.groups_decided(INCONCLUSIVE)
        total = len(self.primary)
        scored = f"the {total} scored group(s)" if self.unscored else f"{total} group(s)"
        if found:
            text = (f"Evidence of contamination {level} in {len(found)} of {scored}: "
                    f"{_names(found)} {method}")  # fmt: skip
        elif not unsure:
            text = (f"No evidence of contamination in {scored} {level} {method}"
                    if self.unscored else
                    f"No evidence of contamination in any group {level} {method}")  # fmt: skip
        elif len(unsure) == total:
            text = f"Inconclusive {level} {method}"
        else:
            text = (f"No evidence of contamination {level} in {total - len(unsure)} of "
                    f"{scored} {method}")  # fmt: skip
        if unsure:
            text += (f"; inconclusive in {_names(unsure)}: the text alone tells "
                     f"{'it' if len(unsure) == 1 else 'them'} from the calibration non-members "
                     f"({self._blind_summary(unsure)}), so a flagged fraction there may reflect "
                     "distribution shift, not training")  # fmt: skip
        if self.unscored:
            text += (
                f"; no scored documents in {_names(self.unscored)}, so nothing is concluded there"
            )
        unchecked = self._unchecked()
        if unchecked:
            text += f"; distribution shift not checked ({unchecked})"
        return text + "."

    def _blind_summary(self, groups: list[str]) -> str:
        """'blind AUROC 0.998' or 'blind AUROC 0.95 to 1.00' over ``groups``."""
        values = [self.shift.groups[g].auroc.value for g in groups]
        low, high = min(values), max(values)
        span = rate(low) if low == high else f"{rate(low)} to {rate(high)}"
        return f"blind AUROC {span} > {self.shift.warn_above:g}"

    def _unchecked(self) -> str:
        """Why the shift check did not run, for the groups where it did not ('' if it ran
        for every group)."""
        reasons = {row.group: self.shift.unchecked(row.group) for row in self.primary}
        missing = [g for g, why in reasons.items() if why]
        if not missing:
            return ""
        why = reasons[missing[0]]
        if len(missing) == len(reasons):
            return why
        return f"for {_names(missing)}: {why}"

    def sentence(self, row: GroupResult) -> str:
        """The verdict for one group, in words a reader can act on."""
        rates = (
            f"{percent(row.flagged_fraction)} of {row.n_scored} documents flagged against "
            f"{percent(row.expected_fraction)} by chance "
            f"(Holm-adjusted {p_phrase(row.p_adjusted)})"
        )
        decision = self.decision(row)
        level = f"at the {self.alpha:.0%} level"
        if decision == INCONCLUSIVE:
            text = (f"Inconclusive for group '{row.group}' {level}: {rates}, but "
                    f"{self.shift.reason(row.group)}; no contamination fraction is estimated "
                    f"({OTHER_AUDITS}).")  # fmt: skip
        elif decision == NO_EVIDENCE:
            text = f"No evidence of contamination in group '{row.group}' {level}: {rates}."
        else:
            text = (f"Evidence of contamination in group '{row.group}' {level}: {rates}; "
                    f"estimated contaminated fraction {row.estimate()}."
                    f"{self._length_caveat(row)}")  # fmt: skip
        unchecked = self.shift.unchecked(row.group)
        if unchecked:
            text += f" Distribution shift not checked: {unchecked}."
        same = self.shift.same_texts(row.group)
        return f"{text} {same}" if same else text

    def shift_caution(self, row: GroupResult) -> str:
        """The blind baseline's caution for the group's other audits ('' when none)."""
        return self.shift.caution(row.group)

    def blind_lines(self) -> list[str]:
        """The blind baseline's AUROC per group, or why it is not shown."""
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
