"""Computing a scored dataset's `Report`: per-group statistics at calibrated thresholds
(`minkscan.reporting.groups`), evidence documents, and the checks beside the verdict --
length, distribution shift (`minkscan.reporting.shift`), FDR selection and dataset
inference (`minkscan.reporting.audits`)."""

from __future__ import annotations

import difflib
from dataclasses import replace

import polars as pl

from minkscan.calibration.threshold import Calibration, primary_method, sample_size_warning
from minkscan.evaluation.blind import BLIND_AUROC_WARN
from minkscan.evaluation.dataset_inference import DEFAULT_SPLITS
from minkscan.methods import score_columns
from minkscan.reporting.audits import DEFAULT_FDR, fdr_selection, heldout_inference
from minkscan.reporting.decisions import decision_table
from minkscan.reporting.evidence import top_evidence
from minkscan.reporting.groups import group_results
from minkscan.reporting.lengths import length_check
from minkscan.reporting.shift import shift_check
from minkscan.reporting.summary import Report
from minkscan.schema import GROUP_KEY, LABEL, N_TOKENS, STATUS

ROC_OTHERS = 3  # methods drawn beside the primary one in the ROC plot


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

    With ``blind_auroc_warn`` (None: the check is off, and the verdict says the shift was not
    checked) each group is also told from the calibration non-members by text alone
    (`minkscan.reporting.shift`); a group told apart (AUROC lower end above it) is
    inconclusive."""
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
    warnings += _not_finite(rows, primary, names)
    shift = shift_check(rows, [row.group for row in results], calibration, blind_auroc_warn)
    selection = None if fdr is None else fdr_selection(rows, primary, calibration, fdr)
    inference, note = (
        ([], None) if heldout is None
        else heldout_inference(rows, heldout, [r.group for r in results], group_column,
                               heldout_name=heldout_name, splits=heldout_splits,
                               blind_warn=blind_auroc_warn)
    )  # fmt: skip
    evidence = top_evidence(rows, primary, names, top_n)
    if selection is not None:
        p_values = selection.p_values([doc.score for doc in evidence])
        evidence = [
            replace(doc, p_value=p, selected=selection.is_selected(p))
            for doc, p in zip(evidence, p_values, strict=True)
        ]
    report = Report(
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
    decided = {row.group: report.decision(row) for row in report.primary}
    table = decision_table(rows, primary, report.threshold, selection, decided)
    return replace(report, decisions=table)


def _not_finite(rows: pl.LazyFrame, method: str, names: list[str]) -> list[str]:
    """A warning counting, by status, the rows whose score is NaN (left out of the verdict)
    or infinite (counted: +inf flagged as the most member-like, -inf not)."""
    score = pl.col(method).cast(pl.Float64)
    status = pl.col(STATUS) if STATUS in names else pl.lit("(no status)")
    counts = (
        rows.filter(score.is_nan() | score.is_infinite())
        .group_by(status.alias(STATUS), score.is_nan().alias("nan"), (score > 0).alias("plus"))
        .len()
        .sort(STATUS, "nan", "plus")
        .collect()
    )
    if counts.is_empty():
        return []
    parts = [f"{n} {'NaN' if nan else '+inf' if plus else '-inf'} with status '{state}'"
             for state, nan, plus, n in counts.rows()]  # fmt: skip
    return [f"'{method}' is not finite on {counts['len'].sum()} rows ({', '.join(parts)}): NaN "
            "is no score and is left out of the verdict; +inf is the most member-like score "
            "and is counted as flagged, -inf as not flagged"]  # fmt: skip


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
