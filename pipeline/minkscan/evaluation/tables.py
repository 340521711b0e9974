"""Paper-style benchmark tables from a scored, labelled frame (one row per document).

The frame holds ``label`` (1 = member), ``group`` (e.g. length or domain) and the score
columns of `minkscan.scoring.aggregate`. Every table is a polars DataFrame with one row
per method; rows whose score is null (unscorable documents) are left out per method.
"""

from __future__ import annotations

from collections.abc import Sequence

import polars as pl

from minkscan.methods import METHODS, title
from minkscan.schema import GROUP, LABEL
from minkscan.statistics import auroc, bootstrap_interval, fpr_at_tpr, tpr_at_fpr

ALL_GROUPS = "all"
BOOTSTRAP_RESAMPLES = 200
# Below this many scored documents of either label in a group, an AUROC's 95% interval is
# wider than about +-0.15 (Hanley-McNeil at AUROC 0.5: sqrt(61 / (12 * 30 * 30)) = 0.075).
MIN_PER_LABEL = 30
# The row of the blind baseline (`minkscan.evaluation.blind`), and the column that marks
# the methods that do not beat it.
BLIND_ROW = "Blind baseline (text only, no model)"
NOT_ABOVE_BLIND = "not above blind in"


def method_columns(score_columns: Sequence[str], k: int) -> dict[str, str]:
    """Main-table methods (display name -> score column) at the paper's default k, in
    registry order, for those present in the scores."""
    wanted = {
        method.title: method.key if method.per_k is None else f"{method.key}_k{k}"
        for method in METHODS
        if method.main_table
    }
    return {name: column for name, column in wanted.items() if column in score_columns}


def decomposition_columns(score_columns: Sequence[str], k: int) -> dict[str, str]:
    """The Min-K%++ ablation rows: raw log p, minus mu, over sigma, both."""
    wanted = {
        "log p": f"mink_k{k}",
        "-mu": f"minkpp_mu_k{k}",
        "/sigma": f"minkpp_sigma_k{k}",
        "both": f"minkpp_k{k}",
    }
    return {name: column for name, column in wanted.items() if column in score_columns}


def k_sweep_columns(score_columns: Sequence[str]) -> dict[str, str]:
    """Every k of every main-table per-k method (Min-K%, Min-K%++, Gap-K%) in the scores."""
    swept = [m for m in METHODS if m.per_k == "k_percentages" and m.main_table]
    return {
        title(column): column for method in swept for column in score_columns if method.owns(column)
    }


def _subsets(frame: pl.DataFrame) -> list[tuple[str, pl.DataFrame]]:
    """Each group's rows by its name, then, where there are several, all of them together
    under `ALL_GROUPS` -- or, where a group already has that name, under "all groups" (the
    name is a column suffix: a second "all" would overwrite the first)."""
    groups = sorted(frame[GROUP].unique().to_list())
    subsets = [(group, frame.filter(pl.col(GROUP) == group)) for group in groups]
    if len(groups) > 1:
        subsets.append((ALL_GROUPS if ALL_GROUPS not in groups else "all groups", frame))
    return subsets


def metric_table(
    frame: pl.DataFrame,
    methods: dict[str, str],
    fpr_target: float = 0.05,
    *,
    detailed: bool = False,
    n_resamples: int = BOOTSTRAP_RESAMPLES,
) -> pl.DataFrame:
    """One row per method; ``n_<group>`` (scored members / non-members, as text),
    ``auroc_<group>`` and ``tpr@<fpr>_<group>`` columns per group.

    ``detailed`` adds, per group, the 95% bootstrap interval of AUROC (``auroc_<group>_lo``,
    ``auroc_<group>_hi``; ``n_resamples`` stratified resamples, fixed seed), ``tpr@0.01fpr``
    and ``fpr@0.95tpr``.
    """
    frame = frame.with_columns(pl.col(GROUP).cast(pl.Utf8))
    tpr_name = f"tpr@{fpr_target:g}fpr"
    rows = []
    for name, column in methods.items():
        row: dict[str, object] = {"method": name, "column": column}
        for group, subset in _subsets(frame):
            subset = subset.drop_nulls(column)
            labels, scores = subset[LABEL].to_list(), subset[column].to_list()
            row[f"n_{group}"] = f"{sum(labels)}/{len(labels) - sum(labels)}"
            try:
                row[f"auroc_{group}"] = auroc(labels, scores)
                if detailed:
                    interval = bootstrap_interval(auroc, labels, scores, n_resamples=n_resamples)
                    row[f"auroc_{group}_lo"] = interval.low
                    row[f"auroc_{group}_hi"] = interval.high
                row[f"{tpr_name}_{group}"] = tpr_at_fpr(labels, scores, fpr_target)
                if detailed:
                    row[f"tpr@0.01fpr_{group}"] = tpr_at_fpr(labels, scores, 0.01)
                    row[f"fpr@0.95tpr_{group}"] = fpr_at_tpr(labels, scores, 0.95)
            except ValueError as error:
                raise ValueError(f"method {name}, group {group}: {error}") from None
        rows.append(row)
    table = pl.DataFrame(rows)
    return _marked_against_blind(table) if BLIND_ROW in methods else table


def small_groups(frame: pl.DataFrame, minimum: int = MIN_PER_LABEL) -> list[str]:
    """A sentence per group (and for all groups together) with fewer than ``minimum`` documents
    of either label: its AUROC and TPR are too noisy to rank methods by."""
    frame = frame.with_columns(pl.col(GROUP).cast(pl.Utf8))
    sentences = []
    for group, subset in _subsets(frame):
        members = int((subset[LABEL] == 1).sum())
        nonmembers = subset.height - members
        if min(members, nonmembers) < minimum:
            sentences.append(
                f"group {group} has {members} members and {nonmembers} non-members: with fewer "
                f"than {minimum} of either label its AUROC's 95% interval is wider than +-0.15"
            )
    return sentences


def _marked_against_blind(table: pl.DataFrame) -> pl.DataFrame:
    """A `NOT_ABOVE_BLIND` column: the groups where a method's AUROC is no higher than the
    blind baseline's (then the text alone separates the sets as well as the model does)."""
    blind = table.filter(pl.col("method") == BLIND_ROW).row(0, named=True)
    groups = [c.removeprefix("auroc_") for c in table.columns
              if c.startswith("auroc_") and not c.endswith(("_lo", "_hi"))]  # fmt: skip
    marks = [
        "" if row["method"] == BLIND_ROW
        else ", ".join(g for g in groups if row[f"auroc_{g}"] <= blind[f"auroc_{g}"])
        for row in table.iter_rows(named=True)
    ]  # fmt: skip
    return table.with_columns(pl.Series(NOT_ABOVE_BLIND, marks))


def _with_intervals(table: pl.DataFrame, digits: int) -> pl.DataFrame:
    """Fold ``X_lo`` / ``X_hi`` columns into ``X`` as text "value [lo, hi]"."""
    for column in [c for c in table.columns if f"{c}_lo" in table.columns]:
        low, high = f"{column}_lo", f"{column}_hi"
        cells = [
            f"{v:.{digits}f} [{lo:.{digits}f}, {hi:.{digits}f}]"
            for v, lo, hi in zip(table[column], table[low], table[high], strict=True)
        ]
        table = table.with_columns(pl.Series(column, cells)).drop(low, high)
    return table


def to_markdown(table: pl.DataFrame, digits: int = 3) -> str:
    """A GitHub-flavoured Markdown table; floats rounded to ``digits``, intervals inline."""
    table = _with_intervals(table, digits)
    header = "| " + " | ".join(table.columns) + " |"
    rule = "|" + "|".join("---" for _ in table.columns) + "|"
    lines = [header, rule]
    for row in table.iter_rows():
        cells = [f"{v:.{digits}f}" if isinstance(v, float) else str(v) for v in row]
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)
