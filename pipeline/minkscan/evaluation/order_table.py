"""Several order tests at once (several benchmark files, or models): one table of every
test's p-values with Holm's adjustment across all of them, so that testing ten benchmarks
and reporting the one that "found" something is not mistaken for evidence."""

from __future__ import annotations

from dataclasses import dataclass

from minkscan.evaluation.order_test import EVIDENCE, NO_EVIDENCE, WITHHELD, OrderTestResult
from minkscan.statistics import holm


@dataclass(frozen=True)
class OrderRow:
    """One test of the table: which file and model, its numbers and its Holm-adjusted
    decision."""

    file: str
    model: str
    directory: str
    examples: int
    mean_difference: float
    t_p_value: float
    t_p_holm: float
    permutation_p_value: float
    permutation_p_holm: float
    exchangeable: bool
    detectable: float
    decision: str


def order_rows(tests: list[tuple[str, str, str, OrderTestResult]], alpha: float) -> list[OrderRow]:
    """Rows of (file, model, output directory, result), p-values Holm-adjusted across all."""
    t_holm = holm([result.statistics.t_p_value for *_, result in tests])
    rank_holm = holm([result.statistics.permutation_p_value for *_, result in tests])
    rows = []
    for (file, model, directory, result), t_adj, rank_adj in zip(
        tests, t_holm, rank_holm, strict=True
    ):
        exchangeable = result.exchangeability.exchangeable
        decision = NO_EVIDENCE if t_adj >= alpha else EVIDENCE if exchangeable else WITHHELD
        stats = result.statistics
        rows.append(OrderRow(
            file, model, directory, result.examples, stats.mean_difference, stats.t_p_value,
            t_adj, stats.permutation_p_value, rank_adj, exchangeable, stats.detectable(alpha),
            decision,
        ))  # fmt: skip
    return rows


def headline(rows: list[OrderRow], alpha: float) -> str:
    """One sentence over every test, at ``alpha`` after Holm's adjustment."""
    found = [row for row in rows if row.decision == EVIDENCE]
    withheld = [row for row in rows if row.decision == WITHHELD]
    level = f"at the {alpha:.0%} level after Holm's adjustment across {len(rows)} tests"
    if found:
        text = (f"Evidence {level} that {len(found)} of them were trained on in published "
                f"order: {', '.join(f'{r.file} ({r.model})' for r in found)}")  # fmt: skip
    else:
        text = f"No evidence {level} that any was trained on in published order"
    if withheld:
        text += (f"; withheld for {', '.join(f'{r.file} ({r.model})' for r in withheld)}: "
                 "a preference on a file whose order is not random")  # fmt: skip
    return text + "."


def _cell(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", " ")


def markdown(rows: list[OrderRow], alpha: float) -> str:
    """The table as Markdown, with its headline."""
    header = ("| file | model | examples | published - shuffled (nats) | t-test p | p (Holm) "
              "| permutation p | p (Holm) | order random | detectable (nats, 80% power) "
              "| decision |")  # fmt: skip
    lines = [f"**{headline(rows, alpha)}**", "", header, "|" + "---|" * 11]
    lines += [
        f"| {_cell(r.file)} | {_cell(r.model)} | {r.examples} | {r.mean_difference:+.3g} | "
        f"{r.t_p_value:.2g} | {r.t_p_holm:.2g} | {r.permutation_p_value:.2g} | "
        f"{r.permutation_p_holm:.2g} | {'yes' if r.exchangeable else 'no'} | "
        f"{r.detectable:.3g} | {r.decision} |"
        for r in rows
    ]
    return "\n".join(lines) + "\n"
