"""The one registry of scoring methods: every score column, its name for people, the
forward passes it costs, and whether it has one column per k.

Every score is oriented so that higher means "more likely a member", and every score column
is calibrated and reported. The scorer's output columns, the pipeline's score files, the
forward passes and seconds a run reports, calibration, reports and benchmark tables all
derive from `METHODS`; adding a single-pass method means a row here and its math in
`minkscan.scoring.aggregate`.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Literal

if TYPE_CHECKING:
    from minkscan.config import BaselinesConfig, ScoringConfig

# The method a report's verdict rests on unless another is declared: Min-K%++ at k = 20%.
DEFAULT_PRIMARY = "minkpp_k20"


@dataclass(frozen=True)
class Method:
    """One detector. ``per_k`` names the ScoringConfig list whose k values give it one column
    each (``{key}_k{P}``); otherwise its column is ``key``. ``extra_pass`` names the
    BaselinesConfig switch of a method that needs forward passes beyond the main one;
    ``needs`` the ScoringConfig field a single-pass method needs set (its input data);
    ``per_chunk`` whether it is defined on a chunk of a document (online detection).

    An extra-pass method also declares its ``companions`` (detail columns written after its
    score, never scores themselves), its forward ``passes`` per document and the ``source``
    model(s) making them, both from the BaselinesConfig and the target model's name."""

    key: str
    title: str
    per_k: Literal["k_percentages", "ablation_k_percentages"] | None = None
    extra_pass: str | None = None
    main_table: bool = True
    reference: str = ""
    needs: str | None = None
    per_chunk: bool = True
    companions: tuple[str, ...] = ()
    passes: Callable[[BaselinesConfig], int] = lambda _: 1
    source: Callable[[BaselinesConfig, str], str] | None = None

    def columns(self, k_percentages: Sequence[int], ablation_k_percentages: Sequence[int]):
        """This method's score columns for the given k values."""
        if self.per_k is None:
            return [self.key]
        ks = k_percentages if self.per_k == "k_percentages" else ablation_k_percentages
        return [f"{self.key}_k{p}" for p in ks]

    def owns(self, column: str) -> bool:
        if self.per_k is None:
            return column == self.key
        return re.fullmatch(rf"{self.key}_k\d+", column) is not None


def neighbor_source(target_model: str, masked_lm: str | None) -> str:
    """Which model generates the neighbours: ``masked-lm:NAME`` or ``causal-lm:NAME``."""
    if masked_lm is not None:
        return f"masked-lm:{masked_lm}"
    return f"causal-lm:{target_model}"


def _neighbor_passes(baselines: BaselinesConfig) -> int:
    """N scoring passes, plus one proposal pass of the target model or N masked-LM passes."""
    return baselines.neighbors + (1 if baselines.neighbor_model is None else baselines.neighbors)


METHODS: tuple[Method, ...] = (
    Method("loss", "Loss", reference="mean log p(x_t) (Yeom et al. 2018)"),
    Method("zlib", "Zlib", reference="loss / zlib-compressed length (Carlini et al. 2021)"),
    Method(
        "lowercase",
        "Lowercase",
        extra_pass="lowercase",
        companions=("lowercase_n_tokens",),
        reference="Carlini et al. 2021",
    ),
    Method(
        "neighbor",
        "Neighbor",
        extra_pass="neighbors",
        companions=("neighbor_source",),
        passes=_neighbor_passes,
        source=lambda b, target: neighbor_source(target, b.neighbor_model),
        reference="Mattern et al. 2023",
    ),
    Method(
        "ref",
        "Ref",
        extra_pass="reference_model",
        companions=("ref_n_tokens",),
        source=lambda b, _: b.reference_model.name,
        reference="Carlini et al. 2021",
    ),
    Method("mink", "Min-K%", "k_percentages", reference="lowest k% of log p (Shi et al. 2024)"),
    Method(
        "minkpp",
        "Min-K%++",
        "k_percentages",
        reference="lowest k% of (log p - mu) / sigma (Zhang et al. 2025)",
    ),
    Method(
        "gapk",
        "Gap-K%",
        "k_percentages",
        reference="lowest k% of the moving average of (log p - log p_top1) / sigma "
        "(arXiv 2601.19936)",
    ),
    Method(
        "dcpdd",
        "DC-PDD",
        needs="dcpdd_frequencies",
        per_chunk=False,  # counts each distinct token once per document
        reference="mean over first occurrences of min(p(x_t) * -log p_ref(x_t), clip), p_ref "
        "from reference-corpus token counts (Zhang et al., EMNLP 2024)",
    ),
    Method("minkpp_mu", "Min-K%++ (mu only)", "ablation_k_percentages", main_table=False),
    Method("minkpp_sigma", "Min-K%++ (sigma only)", "ablation_k_percentages", main_table=False),
)
SINGLE_PASS = tuple(method for method in METHODS if method.extra_pass is None)
# The key under which the main pass (all single-pass methods at once) is counted and timed.
MAIN_PASS = "main"


def extra_pass_methods(baselines: BaselinesConfig) -> list[Method]:
    """The extra-pass methods ``baselines`` enables, in registry order."""
    return [m for m in METHODS if m.extra_pass and getattr(baselines, m.extra_pass)]


def baseline_columns(baselines: BaselinesConfig) -> list[str]:
    """The columns the enabled extra-pass methods add to the score output, in output order."""
    return [c for m in extra_pass_methods(baselines) for c in (m.key, *m.companions)]


def pass_labels(baselines: BaselinesConfig, target_model: str) -> dict[str, str]:
    """{key: label} of the run's forward passes: the main pass, then each enabled extra-pass
    method (``Ref (gpt2)``, ``Neighbor (causal-lm:NAME)``)."""
    labels = {MAIN_PASS: "single-pass methods"}
    for method in extra_pass_methods(baselines):
        source = method.source(baselines, target_model) if method.source else None
        labels[method.key] = method.title + (f" ({source})" if source else "")
    return labels


def forward_passes(baselines: BaselinesConfig, target_model: str) -> dict[str, int]:
    """Forward passes per document (per window of a windowed one), by `pass_labels` label."""
    counts = {MAIN_PASS: 1} | {m.key: m.passes(baselines) for m in extra_pass_methods(baselines)}
    labels = pass_labels(baselines, target_model)
    return {labels[key]: n for key, n in counts.items()}


def single_pass_columns(scoring: ScoringConfig) -> list[str]:
    """The columns one forward pass yields under ``scoring`` (the scorer's), in output order."""
    ks, ablation = scoring.k_percentages, scoring.ablation_k_percentages
    enabled = [m for m in SINGLE_PASS if m.needs is None or getattr(scoring, m.needs)]
    return [column for method in enabled for column in method.columns(ks, ablation)]


def method_of(column: str) -> Method | None:
    """The method a column belongs to (None: not a score column)."""
    return next((method for method in METHODS if method.owns(column)), None)


def score_columns(names: Sequence[str]) -> list[str]:
    """The score columns among ``names`` (a file's schema), in its order."""
    return [name for name in names if method_of(name) is not None]


def title(column: str) -> str:
    """A column's name for people: 'Min-K%++ k=20', 'Ref'."""
    method = method_of(column)
    if method is None:
        return column
    if method.per_k is None:
        return method.title
    return f"{method.title} k={column.rsplit('_k', 1)[1]}"
