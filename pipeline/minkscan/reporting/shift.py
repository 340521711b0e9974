"""Is it training, or only a different kind of text? The blind baseline of each audited group
against the calibration non-members (`minkscan.evaluation.blind`).

When a classifier that never sees the model tells a group from the calibration non-members
(AUROC lower end above ``warn_above``), the two sets differ in their text alone (period,
source, topic, format), so a flagged fraction there may be that shift, not training: the
group's verdict is inconclusive (`minkscan.reporting.summary`). An AUROC far below chance
(upper end below ``1 - warn_above``) is the other sign a cross-validated classifier gives:
the same texts on both sides, which the check also counts directly against the texts the
calibration kept. Where it could not run, it says why, and the verdict says the shift was
not checked.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import polars as pl

from minkscan.calibration import Calibration
from minkscan.calibration.threshold import BLIND_TEXT_CHARS
from minkscan.evaluation.blind import (
    MIN_TEXTS,
    BlindResult,
    auroc_phrase,
    below_chance,
    blind_auroc,
    told_apart,
)
from minkscan.reporting.numbers import rate
from minkscan.schema import GROUP_KEY, TEXT

# Audited texts per group read for the check at most (the classifier samples from them).
READ_TEXTS = 20_000
TURNED_OFF = "turned off (--blind-auroc-warn below 0)"


@dataclass(frozen=True)
class ShiftCheck:
    """The blind baseline per audited group; ``note`` says why it was not run at all."""

    warn_above: float | None
    groups: dict[str, BlindResult | None] = field(default_factory=dict)
    note: str | None = None
    # Per group, how many of its texts are among the calibration's kept non-member texts.
    shared_texts: dict[str, int] = field(default_factory=dict)
    calibration_texts: int = 0

    def shifted(self, group: str) -> bool:
        """Whether the text alone tells ``group`` from the calibration non-members."""
        return told_apart(self.groups.get(group), self.warn_above)

    def unchecked(self, group: str) -> str | None:
        """Why the shift was not checked for ``group`` (None: it was)."""
        if self.note is not None:
            return self.note
        if self.groups.get(group) is None:
            return f"fewer than {MIN_TEXTS} non-empty texts on a side"
        return None

    def line(self, group: str) -> str | None:
        """'Blind baseline ...: AUROC a [l, h]' for the group (None: not computed)."""
        result = self.groups.get(group)
        if result is None:
            return None
        return (
            f"Blind baseline (text only, no model) for group '{group}' against the calibration "
            f"non-members: AUROC {rate(result.auroc.value)} [{rate(result.auroc.low)}, "
            f"{rate(result.auroc.high)}]"
        )

    def reason(self, group: str) -> str:
        """Why a shifted group's verdict is inconclusive ('' if it is not shifted)."""
        if not self.shifted(group):
            return ""
        result = self.groups[group]
        return (
            f"a classifier that never sees the model tells this group from the calibration "
            f"non-members ({auroc_phrase(result)}, at least {rate(result.auroc.low)} > "
            f"{self.warn_above:g}): the two sets differ in their text alone, so a flagged "
            "fraction may reflect distribution shift, not training"
        )

    def same_texts(self, group: str) -> str:
        """A caution when the calibration seems to hold the group's own texts ('' if not)."""
        shared = self.shared_texts.get(group, 0)
        result = self.groups.get(group)
        if not (shared or below_chance(result, self.warn_above)):
            return ""
        parts = []
        if shared:
            parts.append(f"{shared} of its texts are among the {self.calibration_texts} "
                         "non-member texts the calibration kept")  # fmt: skip
        if below_chance(result, self.warn_above):
            parts.append(f"the {auroc_phrase(result)} is far below chance (a sign of the same "
                         "texts on both sides)")  # fmt: skip
        return (
            f"Caution: group '{group}' looks like (part of) the calibration set: "
            f"{'; '.join(parts)}. Audited documents that are calibration non-members are "
            "flagged at the FPR by construction; audit documents the calibration did not use."
        )

    def caution(self, group: str) -> str:
        """The sentence a shifted group's other audits carry ('' if it is not shifted)."""
        reason = self.reason(group)
        return f" Caution: {reason}." if reason else ""

    def to_json(self, group: str) -> dict:
        """The group's check for report.json: AUROC and interval, whether it fired, and why
        it was not checked where it was not."""
        result = self.groups.get(group)
        values = {
            "checked": self.unchecked(group) is None,
            "warn_above": self.warn_above,
            "auroc": None, "auroc_low": None, "auroc_high": None,
            "fired": self.shifted(group),
            "same_texts": bool(self.same_texts(group)),
            "texts_in_calibration": self.shared_texts.get(group, 0),
            "not_checked": self.unchecked(group),
        }  # fmt: skip
        if result is not None:
            values |= {"auroc": result.auroc.value, "auroc_low": result.auroc.low,
                       "auroc_high": result.auroc.high, "n_audited": result.n_positive,
                       "n_calibration": result.n_negative}  # fmt: skip
        return values


def shift_check(
    rows: pl.LazyFrame, groups: list[str], calibration: Calibration, warn_above: float | None
) -> ShiftCheck:
    """The blind baseline of every group of ``rows`` (with `GROUP_KEY`) against the
    calibration's non-member texts, when both sides have text (``warn_above`` None: the
    check is turned off, and says so)."""
    if warn_above is None:
        return ShiftCheck(None, note=TURNED_OFF)
    if TEXT not in rows.collect_schema().names():
        return ShiftCheck(warn_above, note="the scores hold no text; score with "
                          "`--keep-columns text` to check it")  # fmt: skip
    if not calibration.nonmember_texts:
        return ShiftCheck(warn_above, note="the calibration holds no non-member texts; "
                          "calibrate on scores that keep the text")  # fmt: skip
    # One pass over the scores: the first READ_TEXTS texts of every group.
    sampled = (
        rows.select(GROUP_KEY, TEXT)
        .group_by(GROUP_KEY, maintain_order=True)
        .head(READ_TEXTS)
        .collect()
    )
    texts = {
        key: frame[TEXT].to_list()
        for (key,), frame in sampled.partition_by(GROUP_KEY, as_dict=True).items()
    }
    kept = set(calibration.nonmember_texts)
    shared = {
        group: sum(
            isinstance(t, str) and t[:BLIND_TEXT_CHARS] in kept for t in texts.get(group, [])
        )
        for group in groups
    }
    results = {
        group: blind_auroc(texts.get(group, []), calibration.nonmember_texts) for group in groups
    }
    return ShiftCheck(warn_above, results, shared_texts=shared, calibration_texts=len(kept))
