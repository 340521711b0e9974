"""The sharded order test of Oren et al. (ICLR 2024, "Proving Test Set Contamination in
Black Box Language Models"): its statistic, its two p-values, what a run could detect, and
the verdict.

If a model never saw a benchmark, every ordering of its examples is equally likely under
the model; one trained on the published file prefers the published order. Per shard
(`minkscan.evaluation.order_shards`), the log-likelihood of its examples in published order
is compared with that of seeded shuffles; the statistic is published minus the mean of the
shuffles, and the authors' one-sided t-test across shards asks whether it is above zero
(their statistic: mean / standard deviation (ddof 0) x sqrt(shards), against Student's t
with shards - 1 degrees of freedom). The exact permutation p-value pools the ranks: under
the null the number of a shard's shuffles scoring at least as high as the published order
is uniform on {0..P}, independently per shard; its sum has a known distribution. Ties count
against the published order. Neither p-value needs a single non-member; both are valid only
if the published order is itself random (`minkscan.evaluation.exchangeability`).

Pure numpy and scipy; reading the examples and running the forward passes is
`minkscan.evaluation.order_run`'s job.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, field

import numpy as np
from scipy.optimize import brentq
from scipy.signal import fftconvolve
from scipy.stats import nct
from scipy.stats import t as student

from minkscan.evaluation.exchangeability import ExchangeabilityCheck

POWER = 0.8  # the power at which a null result states the preference it could detect


def rank_sum_p_value(at_least: np.ndarray, permutations: int) -> float:
    """P(sum of independent uniform{0..P} <= observed sum): the exact permutation p-value of
    ``at_least`` (per shard, how many of its P shuffles score at least the published order).
    The sum's distribution is built by repeated squaring with FFT convolutions (accurate to
    ~1e-15 in absolute terms, far below any p-value a report prints as a number)."""
    single = np.full(permutations + 1, 1.0 / (permutations + 1))
    total, power, count = np.array([1.0]), single, int(at_least.size)
    while count:
        if count & 1:
            total = np.clip(fftconvolve(total, power), 0.0, None)
        count >>= 1
        if count:
            power = np.clip(fftconvolve(power, power), 0.0, None)
    return float(np.clip(total[: int(at_least.sum()) + 1].sum(), 0.0, 1.0))


def authors_t(differences: np.ndarray) -> tuple[float, float]:
    """(t, one-sided p) as the authors compute them: mean / std (ddof 0) x sqrt(n), against
    Student's t with n - 1 degrees of freedom."""
    n = differences.size
    spread = differences.std()
    if spread == 0:  # no spread: the statistic is undefined, its sign is the answer
        mean = float(differences.mean())
        return (0.0, 1.0) if mean <= 0 else (float("inf"), 0.0)
    t_statistic = float(differences.mean() / spread * math.sqrt(n))
    return t_statistic, float(student.sf(t_statistic, n - 1))


def detectable_preference(differences: np.ndarray, alpha: float, power: float = POWER) -> float:
    """The smallest mean per-shard preference (nats) the authors' t-test finds at level
    ``alpha`` with probability ``power``, given the spread of the observed differences
    (noncentral t). Their statistic is Student's times sqrt(n / (n - 1))."""
    n = differences.size
    spread = float(differences.std(ddof=1))
    if spread == 0:
        return 0.0
    critical = float(student.isf(alpha, n - 1)) * math.sqrt((n - 1) / n)

    def shortfall(ncp: float) -> float:
        return float(nct.sf(critical, n - 1, ncp)) - power

    ncp = brentq(shortfall, 0.0, critical + 50.0)
    return ncp * spread / math.sqrt(n)


@dataclass(frozen=True)
class OrderStatistics:
    """Per shard: the published order's log-likelihood, the shuffles' mean, their
    difference and how many shuffles scored at least as high; and the two p-values."""

    published: list[float]
    shuffled_mean: list[float]
    differences: list[float]
    at_least: list[int]
    permutations: int
    t_statistic: float
    t_p_value: float
    permutation_p_value: float

    @property
    def shards(self) -> int:
        return len(self.published)

    @property
    def mean_difference(self) -> float:
        return float(np.mean(self.differences))

    def detectable(self, alpha: float) -> float:
        """`detectable_preference` of this run's differences."""
        return detectable_preference(np.asarray(self.differences), alpha)


def order_statistics(published: np.ndarray, shuffled: np.ndarray) -> OrderStatistics:
    """The test from log-likelihoods: ``published`` [shards], ``shuffled`` [shards, P]."""
    published = np.asarray(published, dtype=np.float64)
    shuffled = np.asarray(shuffled, dtype=np.float64)
    if shuffled.ndim != 2 or shuffled.shape[0] != published.size or shuffled.shape[1] < 1:
        raise ValueError(f"shuffled must be [shards, permutations >= 1], got {shuffled.shape}")
    differences = published - shuffled.mean(axis=1)
    t_statistic, t_p_value = authors_t(differences)
    at_least = (shuffled >= published[:, None]).sum(axis=1)
    return OrderStatistics(
        published=published.tolist(),
        shuffled_mean=shuffled.mean(axis=1).tolist(),
        differences=differences.tolist(),
        at_least=at_least.astype(int).tolist(),
        permutations=int(shuffled.shape[1]),
        t_statistic=t_statistic,
        t_p_value=t_p_value,
        permutation_p_value=rank_sum_p_value(at_least, int(shuffled.shape[1])),
    )


# What the test can and cannot see, said in the verdict's line itself.
SCOPE = (
    " The test detects training on the file in its published order and is silent about "
    "shuffled, reformatted or paraphrased copies"
)
# The audits that still answer where the order test cannot (docs/audits.md).
OTHER_AUDITS = (
    "dataset inference against a private held-out split (`report --heldout`) or the "
    "calibrated report on known non-members of the same kind of text (docs/audits.md: which "
    "audit answers which question)"
)
# A result's decision, in the verdict and order_test.json.
EVIDENCE, NO_EVIDENCE, WITHHELD = "evidence", "no evidence", "withheld"


@dataclass(frozen=True)
class OrderSettings:
    """What decides the orderings: what an example is (the file's raw lines, a column, or
    a template's rendering, each followed by ``separator``), and how examples are cut."""

    examples: str
    template: str | None
    column: str | None
    separator: str
    shards: int
    permutations: int | None  # None: `default_permutations`, resolved when examples are read
    seed: int

    def scored(self) -> str:
        """What each example is, in words: 'raw lines', "column 'text'", "template '...'"."""
        if self.template is not None:
            return f"template {self.template!r}, each followed by {self.separator!r}"
        if self.column is not None:
            return f"column {self.column!r}, each followed by {self.separator!r}"
        return "raw lines"


@dataclass(frozen=True)
class Cost:
    """Forward passes and tokens of all orderings (a sliding window counts as a pass)."""

    orderings: int
    forward_passes: int
    tokens: int

    def line(self, estimate: bool) -> str:
        about = "about " if estimate else ""
        return (f"{self.orderings} orderings: {about}{self.forward_passes} forward passes, "
                f"{about}{self.tokens:,} tokens")  # fmt: skip


@dataclass(frozen=True)
class OrderTestResult:
    """Everything `order_test.json` holds: the settings, the inputs and their content, the
    model and its weights, the cost, the test, the exchangeability check and the verdict at
    ``alpha``."""

    settings: OrderSettings
    inputs: list[str]
    examples: int
    model: str
    alpha: float
    cost: Cost
    statistics: OrderStatistics
    exchangeability: ExchangeabilityCheck
    examples_read: int = 0  # examples the files hold (``examples`` is the first of them)
    input_content: dict[str, str] = field(default_factory=dict)  # path: content fingerprint
    weights: str | None = None  # what pins the model's weights (`model_identity`)

    @property
    def significant(self) -> bool:
        return self.statistics.t_p_value < self.alpha

    @property
    def decision(self) -> str:
        """Evidence, no evidence, or -- a preference found on a file whose order is not
        random -- withheld: a sorted order can only push the test towards a preference, so
        a null result stands and only a positive one is withheld."""
        if not self.significant:
            return NO_EVIDENCE
        return EVIDENCE if self.exchangeability.exchangeable else WITHHELD

    def _subject(self) -> str:
        """'bench.jsonl (raw lines, examples 1-164 of 164, sha256:ab12...)'."""
        files = ", ".join(self.inputs) or "this file"
        read = self.examples_read or self.examples
        content = ", ".join(self.input_content.get(p, "")[:23] for p in self.inputs if
                            self.input_content.get(p))  # fmt: skip
        rows = f"examples 1-{self.examples} of {read}"
        return f"{files} ({self.settings.scored()}, {rows}{', ' + content if content else ''})"

    def _model(self) -> str:
        return f"{self.model} (weights {self.weights})" if self.weights else self.model

    def verdict(self) -> list[str]:
        """The verdict line (the finding, what was tested, what the test can and cannot
        see, and for a null result what it could have detected) and the exchangeability
        check's line."""
        stats = self.statistics
        evidence = (
            f"(sharded order test over {stats.shards} shards of {self.examples} examples, "
            f"{stats.permutations} shuffle{'s' if stats.permutations != 1 else ''} each: "
            "published minus shuffled log-likelihood "
            f"{stats.mean_difference:+.3g} nats on average, one-sided t-test p = "
            f"{stats.t_p_value:.2g}, exact permutation p = {stats.permutation_p_value:.2g})"
        )
        level = f"at the {self.alpha:.0%} level"
        trained = (f"that the model {self._model()} was trained on {self._subject()} in its "
                   "published order")  # fmt: skip
        decision = self.decision
        if decision == EVIDENCE:
            finding = f"Evidence {level} {trained} {evidence}.{SCOPE}."
        elif decision == WITHHELD:
            finding = (f"Withheld: the model prefers the published order of {self._subject()} "
                       f"{evidence}, but that order is not random (see below), and a model may "
                       f"prefer a sorted order without having been trained on it; audits "
                       f"that can still answer: {OTHER_AUDITS}.")  # fmt: skip
        else:
            finding = (f"No evidence {level} {trained} {evidence}.{SCOPE}, so this does not "
                       f"show that the file is clean; this run could have detected a "
                       f"preference of {stats.detectable(self.alpha):.3g} nats per shard "
                       f"({POWER:.0%} power, from the observed spread).")  # fmt: skip
        return [finding, self.exchangeability.sentence(significant=self.significant)]

    def to_json(self) -> dict:
        return {
            "verdict": self.verdict(),
            "decision": self.decision,
            "significant": self.significant,
            "trustworthy": self.decision != WITHHELD,
            "alpha": self.alpha,
            "model": self.model,
            "weights": self.weights,
            "inputs": self.inputs,
            "input_content": self.input_content,
            "scored": self.settings.scored(),
            "examples": self.examples,
            "examples_read": self.examples_read or self.examples,
            "detectable_preference": self.statistics.detectable(self.alpha),
            "power": POWER,
            "settings": asdict(self.settings),
            "cost": asdict(self.cost),
            "statistics": asdict(self.statistics),
            "exchangeability": asdict(self.exchangeability)
            | {"exchangeable": self.exchangeability.exchangeable},
        }
