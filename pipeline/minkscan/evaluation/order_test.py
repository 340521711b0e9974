"""The sharded order test of Oren et al. (ICLR 2024, "Proving Test Set Contamination in
Black Box Language Models"): its orderings, its statistic and its two p-values.

If a model never saw a benchmark, every ordering of its examples is equally likely under
the model; one trained on the published file prefers the published order. The examples
are cut into contiguous shards. Per shard, the log-likelihood of its examples joined in
published order is compared with that of seeded shuffles; the statistic is published
minus the mean of the shuffles, and a one-sided t-test across shards asks whether it is
above zero (the paper's test). The exact permutation p-value pools the ranks: under the
null the number of shuffles scoring at least the published order is uniform on
{0..P} in every shard, independently, so its sum has a known distribution. Ties count
against the published order, which keeps that p-value conservative. Neither p-value
needs a single non-member; both are valid only if the published order is itself random
(`minkscan.evaluation.exchangeability` checks the text for that).

Here: the orderings' shape (`OrderSettings`), the statistic and p-values, and the result
with its verdict (`OrderTestResult`, what `order_test.json` holds); pure numpy and scipy.
Running the forward passes is `minkscan.evaluation.order_run`'s job.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass

import numpy as np
from scipy.signal import fftconvolve
from scipy.stats import ttest_1samp

from minkscan.evaluation.exchangeability import ExchangeabilityCheck

# Each shard needs two examples, or it has a single ordering and nothing to compare.
MIN_EXAMPLES_PER_SHARD = 2


def shard_bounds(n_examples: int, shards: int) -> list[tuple[int, int]]:
    """Contiguous [start, end) of each shard, sizes differing by at most one."""
    if shards < 2:
        raise ValueError(f"the order test needs at least 2 shards (a t-test across them), "
                         f"got {shards}")  # fmt: skip
    if n_examples < MIN_EXAMPLES_PER_SHARD * shards:
        raise ValueError(
            f"the order test needs at least {MIN_EXAMPLES_PER_SHARD} examples per shard: "
            f"{n_examples} examples cannot fill {shards} shards (use --shards "
            f"{max(2, n_examples // MIN_EXAMPLES_PER_SHARD)} or fewer)"
        )
    edges = np.linspace(0, n_examples, shards + 1).round().astype(int)
    return [(int(a), int(b)) for a, b in zip(edges[:-1], edges[1:], strict=True)]


def shuffled_orders(size: int, permutations: int, seed: int, shard: int) -> list[list[int]]:
    """``permutations`` seeded random orders of a shard's ``size`` examples (its own stream
    per shard, so a shard's shuffles do not depend on the others)."""
    rng = np.random.default_rng([seed, shard])
    return [rng.permutation(size).tolist() for _ in range(permutations)]


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


def order_statistics(published: np.ndarray, shuffled: np.ndarray) -> OrderStatistics:
    """The test from log-likelihoods: ``published`` [shards], ``shuffled`` [shards, P]."""
    published = np.asarray(published, dtype=np.float64)
    shuffled = np.asarray(shuffled, dtype=np.float64)
    if shuffled.ndim != 2 or shuffled.shape[0] != published.size or shuffled.shape[1] < 1:
        raise ValueError(f"shuffled must be [shards, permutations >= 1], got {shuffled.shape}")
    differences = published - shuffled.mean(axis=1)
    if np.ptp(differences) == 0:  # no spread: the t statistic is undefined
        t_statistic = 0.0 if differences[0] == 0 else float(np.sign(differences[0]) * np.inf)
        t_p_value = 1.0 if differences[0] <= 0 else 0.0
    else:
        test = ttest_1samp(differences, 0.0, alternative="greater")
        t_statistic, t_p_value = float(test.statistic), float(test.pvalue)
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


@dataclass(frozen=True)
class OrderSettings:
    """What decides the orderings: how each example reads and how examples are cut."""

    template: str | None
    separator: str
    shards: int
    permutations: int
    seed: int


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
    """Everything `order_test.json` holds: the settings, the inputs, the model, the cost, the
    test, the exchangeability check and the verdict at ``alpha``."""

    settings: OrderSettings
    inputs: list[str]
    examples: int
    model: str
    alpha: float
    cost: Cost
    statistics: OrderStatistics
    exchangeability: ExchangeabilityCheck

    @property
    def significant(self) -> bool:
        return self.statistics.t_p_value < self.alpha

    def verdict(self) -> list[str]:
        """The verdict line (the finding, with what the test can and cannot see) and whether
        the file's order allows the test at all."""
        stats = self.statistics
        evidence = (
            f"(sharded order test over {stats.shards} shards of {self.examples} examples, "
            f"{stats.permutations} shuffles each: published minus shuffled log-likelihood "
            f"{stats.mean_difference:+.3g} nats on average, one-sided t-test p = "
            f"{stats.t_p_value:.2g}, exact permutation p = {stats.permutation_p_value:.2g})"
        )
        level = f"at the {self.alpha:.0%} level"
        if self.significant:
            finding = (f"Evidence {level} that the model was trained on this file in its "
                       f"published order {evidence}.{SCOPE}.")  # fmt: skip
        else:
            finding = (f"No evidence {level} that the model was trained on this file in its "
                       f"published order {evidence}.{SCOPE}, so this does not show that the "
                       "file is clean.")  # fmt: skip
        if not self.exchangeability.exchangeable:
            finding = "Not trustworthy on this file: " + finding[0].lower() + finding[1:]
        return [finding, self.exchangeability.sentence()]

    def to_json(self) -> dict:
        return {
            "verdict": self.verdict(),
            "significant": self.significant,
            "trustworthy": self.exchangeability.exchangeable,
            "alpha": self.alpha,
            "model": self.model,
            "inputs": self.inputs,
            "examples": self.examples,
            "settings": asdict(self.settings),
            "cost": asdict(self.cost),
            "statistics": asdict(self.statistics),
            "exchangeability": asdict(self.exchangeability),
        }
