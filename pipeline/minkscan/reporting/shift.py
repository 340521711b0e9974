"""Is it training, or only a different kind of text? The blind baseline of each audited group
against the calibration non-members (`minkscan.evaluation.blind`): when a classifier that
never sees the model tells them apart, a flagged fraction may reflect distribution shift
(period, source, topic, format) rather than training, and the verdict says so.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import polars as pl

from minkscan.calibration import Calibration
from minkscan.evaluation.blind import BlindResult, blind_auroc
from minkscan.reporting.numbers import rate
from minkscan.schema import GROUP_KEY, TEXT

# Audited texts per group read for the check at most (the classifier samples from them).
READ_TEXTS = 20_000


@dataclass(frozen=True)
class ShiftCheck:
    """The blind baseline per audited group; ``note`` says why it was not run, if it was not."""

    warn_above: float
    groups: dict[str, BlindResult | None] = field(default_factory=dict)
    note: str | None = None

    def shifted(self, group: str) -> bool:
        """Whether the text alone tells ``group`` from the calibration non-members."""
        result = self.groups.get(group)
        return result is not None and result.auroc.low > self.warn_above

    def line(self, group: str) -> str | None:
        """'Blind baseline ...: AUROC a [l, h]' for the group (None: not computed)."""
        result = self.groups.get(group)
        if result is None:
            return None
        auroc = result.auroc
        return (
            f"Blind baseline (text only, no model) for group '{group}' against the calibration "
            f"non-members: AUROC {rate(auroc.value)} [{rate(auroc.low)}, {rate(auroc.high)}]"
        )

    def caution(self, group: str) -> str:
        """The sentence a shifted group's verdict carries ('' if it is not shifted)."""
        if not self.shifted(group):
            return ""
        auroc = self.groups[group].auroc
        return (
            f" Caution: a classifier that never sees the model tells this group from the "
            f"calibration non-members (blind AUROC {rate(auroc.value)}, at least {rate(auroc.low)} "
            f"> {self.warn_above:g}): the two sets differ without the model, so the flagged "
            f"fraction may reflect distribution shift, not training."
        )


def shift_check(
    rows: pl.LazyFrame, groups: list[str], calibration: Calibration, warn_above: float
) -> ShiftCheck:
    """The blind baseline of every group of ``rows`` (with `GROUP_KEY`) against the
    calibration's non-member texts, when both sides have text."""
    if TEXT not in rows.collect_schema().names():
        return ShiftCheck(warn_above, note="the scores hold no text (score with "
                          "`--keep-columns text` to check for distribution shift)")  # fmt: skip
    if not calibration.nonmember_texts:
        return ShiftCheck(warn_above, note="the calibration holds no non-member texts "
                          "(calibrate on scores that keep the text)")  # fmt: skip
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
    results = {
        group: blind_auroc(texts.get(group, []), calibration.nonmember_texts) for group in groups
    }
    return ShiftCheck(warn_above, results)
