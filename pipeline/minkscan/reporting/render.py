"""Render a `Report` as a self-contained HTML page, Markdown and JSON.

HTML comes from a Jinja2 template with autoescaping on, so document text and group names
render as text (a document holding ``<script>`` shows it); the page has no script and a
Content-Security-Policy that forbids one. Every Markdown cell is escaped for Markdown and
HTML, so a group name cannot break the table or inject markup.
"""

from __future__ import annotations

import html
import importlib.metadata
import json
import re
from dataclasses import asdict
from pathlib import Path

import jinja2

from minkscan.calibration.threshold import is_flagged
from minkscan.io.paths import join, write_parquet, write_text
from minkscan.reporting import plots
from minkscan.reporting.groups import GroupResult
from minkscan.reporting.numbers import format_p, p_phrase, percent, significant_digits
from minkscan.reporting.summary import EXPLORATORY_AT_LEAST_NOTE, INCONCLUSIVE, Report
from minkscan.schema import DECISIONS, DECISIONS_CSV, GROUP, ID, SELECTED

_ENVIRONMENT = jinja2.Environment(
    loader=jinja2.PackageLoader("minkscan.reporting", "templates"),
    autoescape=True,
    undefined=jinja2.StrictUndefined,
)
# Inline Markdown syntax (emphasis, code, links, tables, strike-through); <, > and & are
# HTML-escaped first. Cells and sentences never start a line, so line-start syntax is moot.
_MARKDOWN_SPECIAL = re.compile(r"([\\`*_\[\]|~])")


def markdown_cell(value: object) -> str:
    """One table cell: HTML-escaped, Markdown specials backslash-escaped, on one line."""
    text = html.escape(" ".join(str(value).split()), quote=False)
    return _MARKDOWN_SPECIAL.sub(r"\\\1", text)


def _markdown_table(header: list[str], rows: list[list[object]]) -> list[str]:
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    return lines + ["| " + " | ".join(markdown_cell(c) for c in row) + " |" for row in rows]


def distinct_digits(values: list[float], threshold: float) -> int:
    """Significant digits at which none of ``values`` reads as the threshold unless it is
    equal to it (a flagged score never looks equal to the threshold it exceeds)."""
    digits = 3
    while digits < 17 and any(
        v != threshold and f"{v:.{digits}g}" == f"{threshold:.{digits}g}" for v in values
    ):
        digits += 1
    return digits


def _length_section(report: Report) -> list[str]:
    """The document-length comparison, as the HTML shows it."""
    lengths = report.lengths
    if lengths is None:
        return []
    lines = ["", "## Document length", "",
             f"Audited median {lengths.audited_median:.0f} tokens, calibration non-members "
             f"{lengths.calibration_median:.0f}; two-sample Kolmogorov-Smirnov D = "
             f"{lengths.ks_statistic:.2f}, {p_phrase(lengths.ks_p_value)} "
             f"({'the distributions differ' if lengths.differs else 'no material difference'};"
             " rule: p < 0.01 and D >= 0.1).", ""]  # fmt: skip
    if not lengths.matched:
        return [*lines, markdown_cell(lengths.matched_note)]
    return lines + _markdown_table(
        [GROUP, "scored", "flagged", "length-matched chance", "p"],
        [
            [
                m.group,
                m.n_scored,
                percent(m.flagged_fraction),
                percent(m.matched_chance),
                format_p(m.p_value),
            ]
            for m in lengths.matched
        ],  # fmt: skip
    )


def _audit_section(report: Report) -> list[str]:
    """The audits beyond the flagged fraction (FDR flags, dataset inference, order test)."""
    lines = report.audit_lines()
    if not lines:
        return []
    return ["", "## Audits with a stated guarantee", "",
            *[f"- {markdown_cell(line)}" for line in lines]]  # fmt: skip


def markdown_summary(report: Report) -> str:
    """Verdict, warnings, primary table, evidence ids and the exploratory table."""
    cal = report.calibration.methods[report.primary_method]
    lines = [
        "# minkscan contamination report",
        "",
        f"**{markdown_cell(report.headline())}**",
        "",
        *[f"- {markdown_cell(report.sentence(row))}" for row in report.primary],
        *[f"- {markdown_cell(line)}" for line in report.blind_lines()],
        *_audit_section(report),
        "",
        *[f"> Warning: {markdown_cell(w)}" for w in report.warnings],
        "",
        f"Model {markdown_cell(report.model or 'unknown')}; primary method "
        f"{markdown_cell(report.primary_method)}; flagged when score > "
        f"{significant_digits(cal.threshold)} [{significant_digits(cal.threshold_low)}, "
        f"{significant_digits(cal.threshold_high)}], set on {cal.n_nonmembers} non-members at "
        f"target FPR {percent(report.calibration.target_fpr)}.",
        "",
    ]
    lines += _markdown_table(
        [GROUP, "scored", "flagged", "chance", "p (Holm)", "contamination", "verdict"],
        [
            [
                r.group,
                r.n_scored,
                f"{percent(r.flagged_fraction)} [{percent(r.flagged_low)}, "
                f"{percent(r.flagged_high)}]",
                percent(r.expected_fraction),
                format_p(r.p_adjusted),
                report.estimate(r),
                report.decision(r),
            ]
            for r in report.primary
        ],  # fmt: skip
    )
    if report.at_least:
        lines += ["", f"_{markdown_cell(report.at_least_note)}_"]
    lines += _length_section(report)
    if report.top_documents:
        digits = distinct_digits([d.score for d in report.top_documents], cal.threshold)
        lines += ["", "## Most member-like documents", "",
                  f"Flagged when score > {cal.threshold:.{digits}g}.", ""]  # fmt: skip
        fdr = report.fdr is not None
        lines += _markdown_table(
            [ID, GROUP, "score", "flagged",
             *(["p (conformal)", f"selected (FDR {report.fdr.q:g})"] if fdr else []),
             "lowest-z words"],
            [
                [
                    d.id,
                    d.group,
                    f"{d.score:.{digits}g}",
                    "yes" if is_flagged(d.score, cal.threshold) else "no",
                    *([format_p(d.p_value), "yes" if d.selected else "no"] if fdr else []),
                    " · ".join(d.lowest_tokens[:12]),
                ]
                for d in report.top_documents
            ],
        )  # fmt: skip
    if report.exploratory:
        lines += ["", "## Exploratory (other methods; p Holm-adjusted across all)", ""]
        lines += _markdown_table(
            ["method", GROUP, "flagged", "chance", "p", "p (Holm)"],
            [
                [
                    r.method,
                    r.group,
                    percent(r.flagged_fraction),
                    percent(r.expected_fraction),
                    format_p(r.p_value),
                    format_p(r.p_adjusted),
                ]
                for r in report.exploratory
            ],  # fmt: skip
        )
    return "\n".join(lines) + "\n"


def top_lines(report: Report) -> list[str]:
    """The most member-like documents as the terminal shows them: one line each with its
    rank, id, group, score, whether it is flagged (and its conformal p and FDR selection),
    and the words that pulled its score down when the scores kept the text."""
    cal = report.calibration.methods[report.primary_method]
    if not report.top_documents:
        return ["No scored document to show."]
    digits = distinct_digits([d.score for d in report.top_documents], cal.threshold)
    lines = [f"Most member-like documents ({report.primary_method}; flagged when score > "
             f"{cal.threshold:.{digits}g}):"]  # fmt: skip
    for rank, d in enumerate(report.top_documents, 1):
        flagged = "flagged" if is_flagged(d.score, cal.threshold) else "not flagged"
        fdr = (
            ""
            if d.p_value is None
            else (f", conformal p {format_p(d.p_value)}{', selected' if d.selected else ''}")
        )
        words = f"; lowest-z words: {' · '.join(d.lowest_tokens[:8])}" if d.lowest_tokens else ""
        lines.append(f"  {rank}. {d.id} ({d.group}): score {d.score:.{digits}g}, "
                     f"{flagged}{fdr}{words}")  # fmt: skip
    return lines


def html_page(report: Report) -> str:
    """The whole report as one HTML page with no external resources and no scripts."""
    figures = {
        "histogram": plots.histogram(report),
        "flagged": plots.flagged_fractions(report),
        "roc": plots.roc(report) if report.roc else "",
    }
    template = _ENVIRONMENT.get_template("report.html.j2")
    return template.render(
        r=report,
        cal=report.calibration.methods[report.primary_method],
        conf=f"{100 * report.calibration.confidence:.0f}%",
        n_scored=sum(row.n_scored for row in report.primary),
        methods=sorted({row.method for row in report.exploratory}),
        plots=figures,
        pct=percent,
        sig=significant_digits,
        digits=distinct_digits([d.score for d in report.top_documents], report.threshold),
        flagged=lambda score: is_flagged(score, report.threshold),
        at_least_note=report.at_least_note,
        exploratory_at_least_note=EXPLORATORY_AT_LEAST_NOTE,
        fmt_p=format_p,
        p_phrase=p_phrase,
        version=importlib.metadata.version("minkscan"),
    )


def _row(report: Report, row: GroupResult) -> dict:
    """A group's statistics for JSON: a contamination estimate that is not estimable, or not
    estimated (the group differs from the calibration by text alone), is null with the
    reason, as the report's own cell says (never a bare 1.0)."""
    values = asdict(row)
    note = report.contamination_note(row)
    if note is not None:
        values |= {"contamination": None, "contamination_low": None,
                   "contamination_high": None, "contamination_note": note}  # fmt: skip
    return values


def _group(report: Report, row: GroupResult) -> dict:
    """A primary group for JSON: its statistics, decision, verdict and shift check."""
    return _row(report, row) | {
        "decision": report.decision(row),
        "verdict": report.sentence(row),
        "shift": report.shift.to_json(row.group),
    }


def json_summary(report: Report) -> dict:
    """Machine-readable summary (no plots, no document text)."""
    return {
        "verdict": report.headline(),
        "decision": report.overall,
        "inconclusive_groups": report.groups_decided(INCONCLUSIVE),
        "model": report.model,
        "inputs": report.inputs,
        "primary_method": report.primary_method,
        "flagged_when": "score > threshold",
        "threshold": report.threshold,
        "alpha": report.alpha,
        "target_fpr": report.calibration.target_fpr,
        "confidence": report.calibration.confidence,
        "calibration_source": report.calibration.source,
        "warnings": report.warnings,
        "unscored_groups": report.unscored,
        "groups": [_group(report, row) for row in report.primary],
        "results": [_row(report, row) for row in report.results],
        "length_check": asdict(report.lengths) if report.lengths else None,
        "blind_baseline": asdict(report.shift) | {"lines": report.blind_lines()},
        "top_ids": [doc.id for doc in report.top_documents],
        "evidence": [
            {ID: doc.id, GROUP: doc.group, "score": doc.score, "p_value": doc.p_value,
             "selected": doc.selected} for doc in report.top_documents
        ],
        "fdr": None if report.fdr is None else {
            "q": report.fdr.q, "method": report.fdr.method,
            "calibration_nonmembers": report.fdr.n_calibration, "p_cutoff": report.fdr.cutoff,
            "groups": {group: {"selected": chosen, "scored": scored}
                       for group, (chosen, scored) in report.fdr.groups.items()},
            "selected_file": SELECTED, "lines": report.fdr_lines(),
        },
        "decisions_file": DECISIONS,
        "dataset_inference": {
            "results": [asdict(result) | {"median_p": result.median_p,
                                          "valid": result.valid,
                                          "significant": result.significant(report.alpha),
                                          "decision": result.decision(report.alpha),
                                          "verdict": result.sentence(report.alpha)}
                        for result in report.inference],
            "note": report.inference_note,
        },
        "order_test": report.order_test,
    }  # fmt: skip


def write_report(report: Report, output_dir: str | Path, csv: bool = False) -> list[str]:
    """Write report.html, report.md, report.json, every audited document's decision
    (`DECISIONS`, and as CSV with ``csv``) and, with an FDR selection, the selected documents
    (`SELECTED`) into ``output_dir`` (a local directory or an ``s3://`` prefix); returns
    their paths."""
    pages = {
        "report.html": html_page(report),
        "report.md": markdown_summary(report),
        "report.json": json.dumps(json_summary(report), indent=2),
    }
    if report.fdr is not None:
        pages[SELECTED] = report.fdr.csv()
    if report.decisions is not None and csv:
        pages[DECISIONS_CSV] = report.decisions.write_csv()
    written = [write_text(join(str(output_dir), name), text) for name, text in pages.items()]
    if report.decisions is not None:
        written.append(write_parquet(join(str(output_dir), DECISIONS), report.decisions))
    return written
