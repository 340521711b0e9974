"""The one registry of scoring methods: every score column, its name for people, the
forward passes it costs, whether it has one column per k, and its computation.

Every score is oriented so that higher means "more likely a member", and every score column
is calibrated and reported. The scorer's output columns and their math, the pipeline's
score files and the work of its model stages, the forward passes and seconds a run
reports, calibration, reports and benchmark tables all derive from `METHODS`. Adding a
method means its row here, its math (a `TokenStats` or `Documents` method, or an extra-pass
runner in `minkscan.baselines`) and its test.

The computations are written against the objects they receive, so this module imports
neither torch nor the baselines (planning a run stays light); extra-pass runners are named
``"module:Class"`` and imported by the model stage that runs them.
"""

from __future__ import annotations

import importlib
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Literal

if TYPE_CHECKING:
    from minkscan.config import BaselinesConfig, ScoringConfig

# The Loss method's column: the main pass's mean log p (higher = member), which the
# extra-pass methods compare against. Named for what it holds: transformers' and lm-eval's
# `loss` is its negative, so a column named `loss` here would invert on a join.
LOSS = "mean_logprob"
# Score columns older minkscan versions wrote under another name, by that name; readers of
# a minkscan score output (and of a calibration) take them under the name they have now.
FORMER_NAMES: dict[str, str] = {"loss": LOSS}
# The method a report's verdict rests on unless another is declared: Min-K%++ at k = 20%.
DEFAULT_PRIMARY = "minkpp_k20"


@dataclass(frozen=True)
class Method:
    """One detector and how it is computed.

    A single-pass method comes from the main forward pass. With ``per_k`` (the
    ScoringConfig list whose k values give it one column each, ``{key}_k{P}``) its score is
    the mean of the lowest k% of ``token`` (per-token values from the `TokenStats`),
    smoothed first by a moving average of the ScoringConfig field ``window`` if set;
    otherwise ``document`` gives its one column ``key`` from the `Documents` of a batch.
    ``needs`` names the ScoringConfig field it needs set (its input data); ``per_chunk``
    whether it is defined on a chunk of a document (online detection).

    An extra-pass method (``extra_pass`` names its BaselinesConfig switch) is computed by
    ``run``, a ``"module:Class"`` runner built with the BaselinesConfig once per actor and
    called with (scorer, texts, base loss) per batch, on the target model's actors or, for
    ``on="reference"`` or ``"gradnorm"``, on that stage's own model. It declares its
    ``companions`` (detail columns written after its score, never scores themselves), its
    forward ``passes`` per document (0: it reads another method's pass; generations for
    SaMIA), the ``source`` model(s) making them, and whether it ``reads_target_logprobs``
    (the main pass's per-token log p, which the scoring stage then passes on to it)."""

    key: str
    title: str
    per_k: Literal["k_percentages", "ablation_k_percentages"] | None = None
    token: Callable[[Any], Any] | None = None
    window: str | None = None
    document: Callable[[Any], Any] | None = None
    extra_pass: str | None = None
    run: str | None = None
    on: Literal["target", "reference", "gradnorm"] = "target"
    main_table: bool = True
    reference: str = ""
    needs: str | None = None
    per_chunk: bool = True
    companions: tuple[str, ...] = ()
    passes: Callable[[BaselinesConfig], int] = lambda _: 1
    source: Callable[[BaselinesConfig, str], str] | None = None
    reads_target_logprobs: bool = False

    def columns(self, k_percentages: Sequence[int], ablation_k_percentages: Sequence[int]):
        """This method's score columns for the given k values."""
        if self.per_k is None:
            return [self.key]
        ks = k_percentages if self.per_k == "k_percentages" else ablation_k_percentages
        return [f"{self.key}_k{p}" for p in ks]

    @property
    def output_columns(self) -> tuple[str, ...]:
        """An extra-pass method's columns: its score, then its companions."""
        return (self.key, *self.companions)

    def owns(self, column: str) -> bool:
        if self.per_k is None:
            return column == self.key
        return re.fullmatch(rf"{self.key}_k\d+", column) is not None

    def enabled(self, scoring: ScoringConfig) -> bool:
        """Whether a single-pass method has what it needs under ``scoring``."""
        return self.needs is None or bool(getattr(scoring, self.needs))

    def runner(self, baselines: BaselinesConfig) -> Callable[..., Any]:
        """An extra-pass method's runner for ``baselines`` (imports its module)."""
        assert self.run is not None, f"{self.key} is computed in the main pass"
        module, _, name = self.run.partition(":")
        return getattr(importlib.import_module(module), name)(baselines)


# The module of the extra-pass runners (imported only by the model stages that run them).
_BASELINES = "minkscan.baselines.extra_pass"
_RECALL = "minkscan.baselines.recall"
_GRADNORM = "minkscan.baselines.gradnorm"
_PAC = "minkscan.baselines.pac"
_WBC = "minkscan.baselines.wbc"
_SAMIA = "minkscan.baselines.samia"


def neighbor_source(target_model: str, masked_lm: str | None) -> str:
    """Which model generates the neighbours: ``masked-lm:NAME`` or ``causal-lm:NAME``."""
    if masked_lm is not None:
        return f"masked-lm:{masked_lm}"
    return f"causal-lm:{target_model}"


def _neighbor_passes(baselines: BaselinesConfig) -> int:
    """N scoring passes, plus one proposal pass of the target model or N masked-LM passes."""
    return baselines.neighbors + (1 if baselines.neighbor_model is None else baselines.neighbors)


METHODS: tuple[Method, ...] = (
    Method(
        LOSS,
        "Loss",
        document=lambda documents: documents.loss(),
        reference="mean log p(x_t) (Yeom et al. 2018)",
    ),
    Method(
        "zlib",
        "Zlib",
        document=lambda documents: documents.zlib(),
        reference="loss / zlib-compressed length (Carlini et al. 2021)",
    ),
    Method(
        "lowercase",
        "Lowercase",
        extra_pass="lowercase",
        run=f"{_BASELINES}:Lowercase",
        companions=("lowercase_n_tokens",),
        reference="Carlini et al. 2021",
    ),
    Method(
        "neighbor",
        "Neighbor",
        extra_pass="neighbors",
        run=f"{_BASELINES}:Neighbor",
        companions=("neighbor_source",),
        passes=_neighbor_passes,
        source=lambda b, target: neighbor_source(target, b.neighbor_model),
        reference="Mattern et al. 2023",
    ),
    Method(
        "ref",
        "Ref",
        extra_pass="reference_model",
        run=f"{_BASELINES}:Ref",
        on="reference",
        companions=("ref_n_tokens",),
        source=lambda b, _: b.reference_model.name,
        reference="Carlini et al. 2021",
    ),
    Method(
        "wbc",
        "WBC",
        extra_pass="wbc",
        run=f"{_WBC}:WBC",
        on="reference",
        passes=lambda _: 0,  # reads the main pass's and Ref's per-token log p
        reads_target_logprobs=True,
        source=lambda b, _: b.reference_model.name,
        reference="mean over window sizes of the share of windows where the reference's "
        "loss sum exceeds the target's (window-based comparison; Fast-MIA)",
    ),
    Method(
        "recall",
        "ReCaLL",
        extra_pass="recall_prefix",
        run=f"{_RECALL}:ReCaLL",
        reference="LL(x | non-member prefix) / LL(x), prefix KV-cached (Xie et al. 2024)",
    ),
    Method(
        "conrecall",
        "Con-ReCall",
        extra_pass="conrecall_member_prefix",
        run=f"{_RECALL}:ConReCaLL",
        passes=lambda _: 2,
        reference="(LL(x | non-member prefix) - gamma LL(x | member prefix)) / LL(x) "
        "(Wang et al. 2024)",
    ),
    Method(
        "gradnorm",
        "GradNorm",
        extra_pass="gradnorm",
        run=f"{_GRADNORM}:GradNorm",
        on="gradnorm",
        passes=lambda _: 2,  # a forward and a backward pass
        reference="- mean parameter-gradient norm of the loss (as MIMIR, Duan et al. 2024)",
    ),
    Method(
        "pac",
        "PAC",
        extra_pass="pac",
        run=f"{_PAC}:PAC",
        passes=lambda b: b.pac_augmentations,  # the original's log p is the main pass's
        reference="mean polarized distance of N word-swapped copies minus the document's "
        "(Ye et al., ACL Findings 2024; yyy01/PAC)",
    ),
    Method(
        "samia",
        "SaMIA",
        extra_pass="samia",
        run=f"{_SAMIA}:SaMIA",
        companions=("samia_generated_tokens",),
        passes=lambda b: b.samia_samples,  # generations, each a prefill and decoding steps
        reference="mean ROUGE-1 recall of sampled continuations of the first half against "
        "the second (Kaneko et al. 2024; nlp-titech/samia)",
    ),
    Method(
        "mink",
        "Min-K%",
        "k_percentages",
        token=lambda stats: stats.target_logprob,
        reference="lowest k% of log p (Shi et al. 2024)",
    ),
    Method(
        "minkpp",
        "Min-K%++",
        "k_percentages",
        token=lambda stats: stats.minkpp(),
        reference="lowest k% of (log p - mu) / sigma (Zhang et al. 2025)",
    ),
    Method(
        "gapk",
        "Gap-K%",
        "k_percentages",
        token=lambda stats: stats.gap(),
        window="gap_window",
        reference="lowest k% of the moving average of (log p - log p_top1) / sigma "
        "(arXiv 2601.19936)",
    ),
    Method(
        "dcpdd",
        "DC-PDD",
        document=lambda documents: documents.dcpdd(),
        needs="dcpdd_frequencies",
        per_chunk=False,  # counts each distinct token once per document
        reference="mean over first occurrences of min(p(x_t) * -log p_ref(x_t), clip), p_ref "
        "from reference-corpus token counts (Zhang et al., EMNLP 2024)",
    ),
    Method(
        "aeca",
        "AECA",
        document=lambda documents: documents.aeca(),
        needs="dcpdd_frequencies",
        per_chunk=False,  # spreads over the whole document's token streams
        reference="std of the high-passed p(x_t) * -log p_ref(x_t) stream minus lambda * std "
        "of -log p(x_t) (AECA; Fast-MIA)",
    ),
    Method(
        "minkpp_mu",
        "Min-K%++ (mu only)",
        "ablation_k_percentages",
        token=lambda stats: stats.minkpp_mu(),
        main_table=False,
    ),
    Method(
        "minkpp_sigma",
        "Min-K%++ (sigma only)",
        "ablation_k_percentages",
        token=lambda stats: stats.minkpp_sigma(),
        main_table=False,
    ),
)
SINGLE_PASS = tuple(method for method in METHODS if method.extra_pass is None)
# The key under which the main pass (all single-pass methods at once) is counted and timed.
MAIN_PASS = "main"


def method_named(key: str) -> Method:
    """The registry's method ``key``."""
    return next(method for method in METHODS if method.key == key)


def extra_pass_methods(baselines: BaselinesConfig) -> list[Method]:
    """The extra-pass methods ``baselines`` enables, in registry order."""
    return [m for m in METHODS if m.extra_pass and getattr(baselines, m.extra_pass)]


def passes_on(baselines: BaselinesConfig, on: str) -> int:
    """Forward passes per document the enabled extra-pass methods make on ``on``'s actors
    (``"target"``: beside the main pass)."""
    return sum(m.passes(baselines) for m in extra_pass_methods(baselines) if m.on == on)


def reads_target_logprobs(baselines: BaselinesConfig, on: str | None = None) -> bool:
    """Whether an enabled extra-pass method (run on ``on``'s actors, or any) reads the main
    pass's per-token log p."""
    return any(
        m.reads_target_logprobs and (on is None or m.on == on)
        for m in extra_pass_methods(baselines)
    )


def baseline_columns(baselines: BaselinesConfig) -> list[str]:
    """The columns the enabled extra-pass methods add to the score output, in output order."""
    return [c for m in extra_pass_methods(baselines) for c in m.output_columns]


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


def single_pass_methods(scoring: ScoringConfig) -> list[Method]:
    """The single-pass methods ``scoring`` enables, in registry order."""
    return [method for method in SINGLE_PASS if method.enabled(scoring)]


def single_pass_columns(scoring: ScoringConfig) -> list[str]:
    """The columns one forward pass yields under ``scoring`` (the scorer's), in output order."""
    ks, ablation = scoring.k_percentages, scoring.ablation_k_percentages
    return [c for method in single_pass_methods(scoring) for c in method.columns(ks, ablation)]


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
