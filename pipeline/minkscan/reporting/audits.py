"""The report's audits that a flagged fraction cannot give: documents selected at a
controlled false discovery rate, and dataset inference against an i.i.d. held-out set.

FDR: every audited document's primary score gets a conformal p-value against the
calibration non-members (`minkscan.calibration.conformal`); Benjamini-Hochberg selects at
level q over all audited documents at once, so the one list of selected ids (``selected.csv``)
holds at most a share q of non-members in expectation, and each group's count is read from it.

Dataset inference (`minkscan.evaluation.dataset_inference`): each group's documents
against the held-out scores (the held-out rows of the same group when they carry the group
column, else all of them), every score column the two share as a feature.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace

import numpy as np
import polars as pl

from minkscan.calibration import Calibration
from minkscan.calibration.conformal import benjamini_hochberg, conformal_p_values
from minkscan.calibration.threshold import has_score
from minkscan.evaluation.blind import BLIND_AUROC_WARN, MIN_TEXTS, blind_auroc
from minkscan.evaluation.dataset_inference import (
    MIN_PER_SIDE,
    DatasetInference,
    dataset_inference,
)
from minkscan.methods import score_columns
from minkscan.reporting.numbers import format_p
from minkscan.reporting.shift import TURNED_OFF
from minkscan.schema import GROUP, GROUP_KEY, ID, ROW, SOURCE, TEXT

DEFAULT_FDR = 0.05
ROW_INDEX = "_row_index"  # a row's position among the audited rows, to join decisions back
SELECTED_COLUMN = "selected"
EXCHANGEABLE = (
    "valid if the calibration non-members are exchangeable with the group's non-members "
    "(the same kind of text; the blind baseline tests that)"
)


@dataclass(frozen=True)
class FdrSelection:
    """Documents selected by Benjamini-Hochberg at ``q`` over conformal p-values against
    ``n_calibration`` non-member scores: per group (selected, scored), every scored row
    (`ROW_INDEX` in the audited rows, id, group, score, p-value, q-value, selected), and the
    largest selected p-value."""

    q: float
    method: str
    n_calibration: int
    groups: dict[str, tuple[int, int]]
    documents: pl.DataFrame = field(repr=False)
    cutoff: float
    nonmembers: np.ndarray = field(repr=False)

    @property
    def selected(self) -> pl.DataFrame:
        """The selected rows (id, group, score, p-value, q-value), smallest p first."""
        chosen = self.documents.filter(pl.col(SELECTED_COLUMN))
        return chosen.drop(ROW_INDEX, SELECTED_COLUMN).sort("p_value")

    def p_values(self, scores: list[float]) -> list[float]:
        """Conformal p-values of ``scores`` against the same non-members."""
        return conformal_p_values(np.asarray(scores), self.nonmembers).tolist()

    def is_selected(self, p_value: float) -> bool:
        """Whether a document of this p-value is in the selection (BH's cutoff)."""
        return self.cutoff > 0 and p_value <= self.cutoff

    def sentence(self, group: str) -> str:
        """How many of the group's documents the selection holds."""
        chosen, scored = self.groups.get(group, (0, 0))
        return (f"FDR flags: {chosen} of {scored} documents in group '{group}' selected at "
                f"q = {self.q:g}.")  # fmt: skip

    def explanation(self) -> str:
        """How the documents were selected, what that guarantees, and under what assumption."""
        text = (
            f"Selected by Benjamini-Hochberg over all audited documents' conformal p-values of "
            f"{self.method} against {self.n_calibration} calibration non-members: at most "
            f"{self.q:.0%} of the selected are expected to be non-members; {EXCHANGEABLE}."
        )
        floor = 1 / (self.n_calibration + 1)
        total = sum(scored for _, scored in self.groups.values())
        chosen = sum(chosen for chosen, _ in self.groups.values())
        if chosen == 0 and floor > self.q:
            text += (f" No document can be selected: with {self.n_calibration} non-members the "
                     f"smallest p-value is {format_p(floor)} > q; calibrate on more.")  # fmt: skip
        elif chosen == 0 and floor * total > self.q:
            text += (f" With {self.n_calibration} non-members the smallest p-value is "
                     f"{format_p(floor)}, so a selection needs several documents with it; more "
                     f"non-members give finer p-values.")  # fmt: skip
        return text

    def csv(self) -> str:
        return self.selected.write_csv()


def fdr_selection(
    rows: pl.LazyFrame, method: str, calibration: Calibration, q: float
) -> FdrSelection:
    """Select audited documents (``rows`` with `GROUP_KEY`) at FDR level ``q``."""
    nonmembers = np.asarray(calibration.methods[method].nonmember_sample, dtype=np.float64)
    scored = (
        rows.with_row_index(ROW_INDEX)
        .filter(has_score(pl.col(method)))
        .select(
            ROW_INDEX, pl.col(ID).cast(pl.Utf8), pl.col(GROUP_KEY).alias(GROUP), pl.col(method)
        )  # fmt: skip
        .collect()
    )
    p_values = conformal_p_values(scored[method].to_numpy(), nonmembers)
    selection = benjamini_hochberg(p_values, q)
    frame = scored.with_columns(
        pl.Series("p_value", p_values), pl.Series("q_value", selection.q_values),
        pl.Series(SELECTED_COLUMN, selection.selected),
    )  # fmt: skip
    counts = frame.group_by(GROUP).agg(pl.col(SELECTED_COLUMN).sum(), pl.len()).sort(GROUP)
    groups = {str(g): (int(s), int(n)) for g, s, n in counts.rows()}
    return FdrSelection(q, method, int(nonmembers.size), groups, frame, selection.cutoff,
                        nonmembers)  # fmt: skip


def _features(frame: pl.DataFrame, columns: list[str]) -> np.ndarray:
    return frame.select(pl.col(c).cast(pl.Float64) for c in columns).to_numpy()


def heldout_inference(
    rows: pl.LazyFrame,
    heldout: pl.DataFrame,
    groups: list[str],
    group_column: str | None,
    *,
    heldout_name: str,
    splits: int,
    blind_warn: float | None = BLIND_AUROC_WARN,
) -> tuple[list[DatasetInference], str | None]:
    """Dataset inference of every group against the held-out scores; a note instead of a
    result where a group has too few documents with every shared score. Each result
    carries the blind baseline between the group's texts and the held-out texts (its i.i.d.
    assumption, checked), or why it could not run."""
    names = rows.collect_schema().names()
    shared = [c for c in score_columns(names) if c in heldout.columns]
    if not shared:
        return [], "the held-out scores share no score column with the audited ones"
    texts = TEXT in names and TEXT in heldout.columns
    finite = pl.all_horizontal(pl.col(c).cast(pl.Float64).is_finite() for c in shared)
    audited = (
        rows.filter(finite.fill_null(False))
        .select(GROUP_KEY, *shared, *([TEXT] if texts else []))
        .collect()
    )
    held = heldout.filter(finite.fill_null(False))
    by_group = group_column is not None and group_column in held.columns
    results, skipped = [], []
    for group in groups:
        mine = audited.filter(pl.col(GROUP_KEY) == group)
        theirs = held.filter(pl.col(group_column).cast(pl.Utf8) == group) if by_group else held
        if min(len(mine), len(theirs)) < MIN_PER_SIDE:
            skipped.append(f"'{group}' ({len(mine)} audited, {len(theirs)} held out)")
            continue
        result = dataset_inference(
            _features(mine, shared), _features(theirs, shared), shared, splits=splits,
            group=group, heldout_name=heldout_name,
        )  # fmt: skip
        results.append(_checked(result, mine, theirs, texts, blind_warn))
    note = None
    if skipped:
        note = (f"dataset inference needs at least {MIN_PER_SIDE} documents with every "
                f"score on each side; not run for {', '.join(skipped)}")  # fmt: skip
    return results, note


def _checked(
    result: DatasetInference, mine: pl.DataFrame, theirs: pl.DataFrame, texts: bool,
    warn: float | None,
) -> DatasetInference:  # fmt: skip
    """``result`` with the blind baseline between the audited and held-out texts."""
    if warn is None:
        return replace(result, blind_note=TURNED_OFF)
    if not texts:
        return replace(result, blind_note="no texts on both sides: score both with "
                       "`--keep-columns text` to check it")  # fmt: skip
    blind = blind_auroc(mine[TEXT].to_list(), theirs[TEXT].to_list())
    if blind is None:
        return replace(result, blind_note=f"fewer than {MIN_TEXTS} non-empty texts on a side")
    return replace(result, blind=blind, blind_warn=warn)


def shared_documents(audited: pl.DataFrame, heldout: pl.DataFrame) -> list[str]:
    """'N with the same id (e.g. ...)', 'N with the same text (...)': documents both sets
    hold. Ids derived from a path and row (no id column) are not compared: two files can
    share a path."""
    found = []
    ids = [_given_ids(frame) for frame in (audited, heldout)]
    if all(i is not None for i in ids):
        both = ids[0].filter(ids[0].is_in(ids[1].implode())).unique(maintain_order=True)
        if len(both):
            found.append(f"{len(both)} with the same id (e.g. "
                         f"{', '.join(repr(v) for v in both.head(3).to_list())})")  # fmt: skip
    if TEXT in audited.columns and TEXT in heldout.columns:
        texts = [frame[TEXT].drop_nulls().str.strip_chars() for frame in (audited, heldout)]
        texts = [t.filter(t != "") for t in texts]
        both = texts[0].filter(texts[0].is_in(texts[1].implode())).unique(maintain_order=True)
        if len(both):
            found.append(f"{len(both)} with the same text (e.g. {both[0][:60]!r})")
    return found


def _given_ids(frame: pl.DataFrame) -> pl.Series | None:
    """The ids a set was given (not derived from its path and row); None without ids."""
    if ID not in frame.columns:
        return None
    ids = frame[ID].cast(pl.Utf8)
    if SOURCE in frame.columns and ROW in frame.columns:
        derived = pl.col(SOURCE) + ":" + pl.col(ROW).cast(pl.Utf8)
        ids = frame.filter(pl.col(ID).cast(pl.Utf8) != derived)[ID].cast(pl.Utf8)
    return ids.drop_nulls()
