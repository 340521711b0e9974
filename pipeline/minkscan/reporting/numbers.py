"""How every number of a report reads, in every output (terminal, Markdown, HTML, the
calibration's lines): one rounding per kind of number, so a threshold or a p-value never
reads one way in a sentence and another in a table."""

from __future__ import annotations

P_FLOOR = 1e-10  # smaller p-values read as a bound: their digits mean nothing


def percent(value: float) -> str:
    """A fraction as a percentage with one decimal: '12.5%'."""
    return f"{100 * value:.1f}%"


def significant_digits(value: float) -> str:
    """A score or threshold to three significant digits: '-1.3', '0.0412'."""
    return f"{value:.3g}"


def rate(value: float) -> str:
    """A rate in [0, 1] (TPR, FPR, AUROC) to three decimals: '0.050'."""
    return f"{value:.3f}"


def format_p(value: float) -> str:
    """A p-value to two significant digits, tiny ones as a bound: '0.031', '< 1e-10'."""
    return f"< {P_FLOOR:g}" if value < P_FLOOR else f"{value:.2g}"


def p_phrase(value: float) -> str:
    """'p = 0.031' or 'p < 1e-10', for sentences."""
    return f"p {format_p(value)}" if value < P_FLOOR else f"p = {format_p(value)}"
