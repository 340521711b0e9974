"""Every audited document's decision in one file (``decisions.parquet``, and CSV with
``report --csv``): which documents were flagged, and why, at corpus scale without a join.

One row per audited row, in the order of the scores: its id, group and status, its primary
score, whether that score is over the threshold, its conformal p-value and BH q-value, whether
the FDR selection holds it, and its group's decision (`minkscan.reporting.summary`). A row
with no score (empty, too short, NaN) keeps its status and has nulls for the rest.
"""

from __future__ import annotations

import polars as pl

from minkscan.calibration.threshold import has_score, is_flagged
from minkscan.reporting.audits import ROW_INDEX, SELECTED_COLUMN, FdrSelection
from minkscan.schema import GROUP, GROUP_KEY, ID, STATUS

FLAGGED = "flagged"
GROUP_DECISION = "group_decision"
NO_SCORED_DOCUMENT = "no scored document"


def decision_table(
    rows: pl.LazyFrame,
    method: str,
    threshold: float,
    selection: FdrSelection | None,
    group_decisions: dict[str, str],
) -> pl.DataFrame:
    """The decisions of every row of ``rows`` (with `GROUP_KEY`) on ``method``."""
    names = rows.collect_schema().names()
    score = pl.col(method).cast(pl.Float64)
    table = (
        rows.with_row_index(ROW_INDEX)
        .select(
            ROW_INDEX,
            pl.col(ID).cast(pl.Utf8) if ID in names else pl.lit(None, pl.Utf8).alias(ID),
            pl.col(GROUP_KEY).alias(GROUP),
            pl.col(STATUS) if STATUS in names else pl.lit(None, pl.Utf8).alias(STATUS),
            score.alias(method),
            pl.when(has_score(score)).then(is_flagged(score, threshold)).alias(FLAGGED),
        )
        .collect()
    )
    if selection is not None:
        found = selection.documents.select(ROW_INDEX, "p_value", "q_value", SELECTED_COLUMN)
        table = table.join(found, on=ROW_INDEX, how="left", maintain_order="left")
    decision = pl.col(GROUP).replace_strict(group_decisions, default=NO_SCORED_DOCUMENT)
    return table.with_columns(decision.alias(GROUP_DECISION)).drop(ROW_INDEX)
