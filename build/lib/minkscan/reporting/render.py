"""Render a `Report` as a self-contained HTML page (plots inlined as PNG), Markdown and JSON.

All document text and group names go through `html.escape`, so a document holding
``<script>`` renders as text and the page runs no script at all.
"""

from __future__ import annotations

import base64
import html
import io
import json
from dataclasses import asdict
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

from minkscan.reporting.summary import Report  # noqa: E402

RESULT_HEADER = (
    "group",
    "method",
    "scored",
    "flagged",
    "flagged %",
    "chance %",
    "p-value",
    "contamination",
)


def _result_cells(report: Report, method_filter: str | None) -> list[list[str]]:
    rows = []
    for row in report.results:
        if method_filter is not None and row.method != method_filter:
            continue
        bound = " (lower bound)" if row.contamination_is_lower_bound else ""
        rows.append(
            [
                row.group,
                row.method,
                str(row.n_scored),
                str(row.n_flagged),
                f"{100 * row.flagged_fraction:.1f}",
                f"{100 * row.expected_fraction:.1f}",
                f"{row.p_value:.2g}",
                f"{100 * row.contamination:.1f}% [{100 * row.contamination_low:.1f}, "
                f"{100 * row.contamination_high:.1f}]{bound}",
            ]
        )
    return rows


def markdown_summary(report: Report) -> str:
    """Primary-method table per group, Markdown."""
    lines = [
        "# minkscan contamination report",
        "",
        f"Method `{report.primary_method}`, target FPR {report.calibration.target_fpr}, "
        f"calibrated on {report.calibration.source}; intervals at "
        f"{100 * report.calibration.confidence:.0f}% confidence.",
        "",
        "| " + " | ".join(RESULT_HEADER) + " |",
        "|" + "---|" * len(RESULT_HEADER),
    ]
    lines += [
        "| " + " | ".join(cells) + " |" for cells in _result_cells(report, report.primary_method)
    ]
    return "\n".join(lines) + "\n"


def _png(figure: plt.Figure) -> str:
    buffer = io.BytesIO()
    figure.savefig(buffer, format="png", dpi=80, bbox_inches="tight")
    plt.close(figure)
    return "data:image/png;base64," + base64.b64encode(buffer.getvalue()).decode("ascii")


def _histogram_png(report: Report, method: str) -> str:
    figure, axes = plt.subplots(figsize=(6, 3))
    edges = report.histogram_edges[method]
    for name, density in report.histograms[method].items():
        axes.stairs(density, edges, label=name)
    axes.axvline(report.calibration.methods[method].threshold, color="k", linestyle="--")
    axes.set_xlabel(method)
    axes.set_ylabel("fraction of documents")
    axes.legend(fontsize="small")
    return _png(figure)


def _roc_png(report: Report) -> str:
    figure, axes = plt.subplots(figsize=(4, 4))
    for method, (fpr, tpr) in report.roc.items():
        axes.plot(fpr, tpr, label=method)
    axes.plot([0, 1], [0, 1], color="grey", linestyle=":")
    axes.set_xlabel("FPR")
    axes.set_ylabel("TPR")
    axes.legend(fontsize="x-small")
    return _png(figure)


def _table(header: tuple[str, ...] | list[str], rows: list[list[str]]) -> str:
    head = "".join(f"<th>{html.escape(cell)}</th>" for cell in header)
    body = "".join(
        "<tr>" + "".join(f"<td>{html.escape(cell)}</td>" for cell in row) + "</tr>" for row in rows
    )
    return f"<table><tr>{head}</tr>{body}</table>"


def html_page(report: Report) -> str:
    """The whole report as one HTML page with no external resources and no scripts."""
    parts = [
        "<!DOCTYPE html><html><head><meta charset='utf-8'><title>minkscan report</title>",
        "<style>body{font-family:sans-serif;margin:2em}table{border-collapse:collapse}"
        "td,th{border:1px solid #ccc;padding:3px 6px;font-size:13px;vertical-align:top}"
        "td{max-width:60em;white-space:pre-wrap}</style></head><body>",
        "<h1>minkscan contamination report</h1>",
        f"<p>Primary method <b>{html.escape(report.primary_method)}</b>; target FPR "
        f"{report.calibration.target_fpr}; calibrated on {html.escape(report.calibration.source)}."
        "</p><h2>Per group and method</h2>",
        _table(RESULT_HEADER, _result_cells(report, None)),
        "<h2>Score histograms against the calibration non-members</h2>",
    ]
    for method in report.histograms:
        image = _histogram_png(report, method)
        parts.append(f"<h3>{html.escape(method)}</h3><img alt='histogram' src='{image}'>")
    if report.roc:
        parts.append(f"<h2>ROC curves</h2><img alt='ROC' src='{_roc_png(report)}'>")
    top = report.top_documents
    parts.append(f"<h2>Top {top.height} most suspicious documents</h2>")
    parts.append(_table(top.columns, [[str(value) for value in row] for row in top.iter_rows()]))
    parts.append("</body></html>")
    return "\n".join(parts)


def json_summary(report: Report) -> dict:
    """Machine-readable summary (no plots, no document text)."""
    return {
        "primary_method": report.primary_method,
        "target_fpr": report.calibration.target_fpr,
        "confidence": report.calibration.confidence,
        "calibration_source": report.calibration.source,
        "results": [asdict(row) for row in report.results],
        "top_ids": report.top_documents["id"].to_list()
        if "id" in report.top_documents.columns
        else [],
    }


def write_report(report: Report, output_dir: str | Path) -> list[Path]:
    """Write report.html, report.md and report.json into ``output_dir``."""
    output_dir = Path(output_dir)
    output_dir.mkdir(parents=True, exist_ok=True)
    paths = [output_dir / "report.html", output_dir / "report.md", output_dir / "report.json"]
    paths[0].write_text(html_page(report), encoding="utf-8")
    paths[1].write_text(markdown_summary(report), encoding="utf-8")
    paths[2].write_text(json.dumps(json_summary(report), indent=2), encoding="utf-8")
    return paths
