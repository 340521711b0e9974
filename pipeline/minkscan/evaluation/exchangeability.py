"""Is a file's published order random? The check the order test rests on.

The order test (`minkscan.evaluation.order_test`) is valid only if the published order is
itself a random order of the examples. A benchmark sorted by topic, source, length or
difficulty puts like examples next to each other, and a model that never saw it can still
prefer that order (in-context, similar neighbours are more predictable). The check needs no
model and looks two ways:

- lexical: TF-IDF vectors of the examples (word 1-2-grams, scikit-learn), the mean cosine
  similarity of neighbouring examples, against the same mean over seeded random orders; the
  permutation p-value is (1 + orders at least as alike) / (1 + orders);
- non-lexical: position against each example's length and against every numeric column, as
  the test compares them -- within shards: the mean over shards of Spearman's rank
  correlation of position with the feature, against the same mean with each shard's
  examples shuffled (two-sided permutation p-value, Bonferroni across the features).

Either below `EXCHANGEABILITY_ALPHA` and the order is not random. A sorted order can only
push the test towards finding a preference, so the verdict withholds only a positive result
on such a file; a null result stands.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

import numpy as np
from scipy.stats import rankdata

# Below this p-value neighbours count as more alike than random pairs.
EXCHANGEABILITY_ALPHA = 0.01
RESAMPLES = 999
# Examples the check reads at most (the first ones, in order): its cost is linear in them.
MAX_EXAMPLES = 20_000
LENGTH = "length"  # the feature every example has: its characters


@dataclass(frozen=True)
class OrderedFeature:
    """How a feature follows the position within shards: the mean Spearman correlation
    over shards and its permutation p-value (Bonferroni-adjusted across the features)."""

    name: str
    correlation: float
    p_value: float

    @property
    def fires(self) -> bool:
        return self.p_value < EXCHANGEABILITY_ALPHA


@dataclass(frozen=True)
class ExchangeabilityCheck:
    """Neighbours' mean TF-IDF cosine against random pairs' with its permutation p-value,
    and position against length and numeric columns within shards."""

    neighbour_similarity: float
    random_similarity: float
    p_value: float
    n_examples: int
    resamples: int
    features: list[OrderedFeature] = field(default_factory=list)

    @property
    def lexically_random(self) -> bool:
        return self.p_value >= EXCHANGEABILITY_ALPHA

    @property
    def sorted_by(self) -> list[OrderedFeature]:
        return [feature for feature in self.features if feature.fires]

    @property
    def exchangeable(self) -> bool:
        return self.lexically_random and not self.sorted_by

    def sentence(self, significant: bool = True) -> str:
        """The check in words; on a file whose order is not random, what that means for a
        result that is (``significant``) or is not a finding."""
        comparison = (
            f"neighbouring examples have mean TF-IDF cosine {self.neighbour_similarity:.3f} "
            f"against {self.random_similarity:.3f} for random pairs (permutation p = "
            f"{self.p_value:.2g}, {self.resamples} random orders of {self.n_examples} examples)"
        )
        order = "; ".join(
            f"within shards, position against {f.name} has mean Spearman "
            f"{f.correlation:+.2f} (p = {f.p_value:.2g}, Bonferroni over {len(self.features)})"
            for f in (self.sorted_by or self.features)
        )
        measured = f"{comparison}; {order}" if order else comparison
        if self.exchangeable:
            return f"The published order looks random: {measured}."
        why = []
        if not self.lexically_random:
            why.append("neighbours are more alike than random pairs")
        why += [f"it follows {f.name}" for f in self.sorted_by]
        sorted_file = f"The published order is not random ({' and '.join(why)}): {measured}"
        if significant:
            return (f"{sorted_file}. A model may prefer such an order without having been "
                    "trained on it, so the preference found is withheld.")  # fmt: skip
        return (f"{sorted_file}. A sorted order can only push the test towards a preference, "
                "so the null result stands.")  # fmt: skip


def _neighbour_mean(vectors, order: np.ndarray) -> float:
    """Mean cosine of consecutive rows of L2-normalised sparse ``vectors`` in ``order``."""
    left, right = vectors[order[:-1]], vectors[order[1:]]
    return float(np.asarray(left.multiply(right).sum(axis=1)).mean())


def _within_shard_feature(
    name: str, values: np.ndarray, bounds: Sequence[tuple[int, int]], resamples: int,
    rng: np.random.Generator, tests: int,
) -> OrderedFeature | None:  # fmt: skip
    """Mean over shards of Spearman(position, feature), with each shard's examples shuffled
    for its two-sided p-value, Bonferroni-adjusted over ``tests`` (None: the feature never
    varies). At least enough shuffles that the adjusted p-value can fall well below
    `EXCHANGEABILITY_ALPHA`."""
    resamples = max(resamples, int(10 * tests / EXCHANGEABILITY_ALPHA))
    observed, null = [], []
    for start, end in bounds:
        ranks = rankdata(values[start:end])
        if end - start < 2 or np.ptp(ranks) == 0:
            continue
        ranks = (ranks - ranks.mean()) / np.linalg.norm(ranks - ranks.mean())
        position = np.arange(end - start, dtype=np.float64)
        position = (position - position.mean()) / np.linalg.norm(position - position.mean())
        observed.append(float(ranks @ position))
        shuffled = ranks[rng.random((resamples, ranks.size)).argsort(axis=1)]
        null.append(shuffled @ position)
    if not observed:
        return None
    statistic, spread = float(np.mean(observed)), np.mean(null, axis=0)
    p_value = (1 + int((np.abs(spread) >= abs(statistic) - 1e-12).sum())) / (1 + resamples)
    return OrderedFeature(name, statistic, min(1.0, p_value * tests))


def exchangeability_check(
    texts: Sequence[str],
    *,
    resamples: int = RESAMPLES,
    seed: int = 0,
    bounds: Sequence[tuple[int, int]] | None = None,
    numeric: Mapping[str, Sequence[float]] | None = None,
) -> ExchangeabilityCheck:
    """Neighbour similarity of ``texts`` in the given order against ``resamples`` orders
    and, with the shards' ``bounds``, position against length and each ``numeric`` column
    (one value per text) within shards."""
    from sklearn.feature_extraction.text import TfidfVectorizer

    texts = list(texts)[:MAX_EXAMPLES]
    if len(texts) < 3:
        raise ValueError(f"the exchangeability check needs at least 3 examples, got {len(texts)}")
    vectors = TfidfVectorizer(ngram_range=(1, 2), sublinear_tf=True).fit_transform(texts)
    vectors = vectors.tocsr()
    observed = _neighbour_mean(vectors, np.arange(len(texts)))
    rng = np.random.default_rng(seed)
    null = np.array([_neighbour_mean(vectors, rng.permutation(len(texts)))
                     for _ in range(resamples)])  # fmt: skip
    features = []
    if bounds is not None:
        bounds = [(a, min(b, len(texts))) for a, b in bounds if a < len(texts)]
        columns = {LENGTH: [len(text) for text in texts]}
        columns |= {name: list(values)[: len(texts)] for name, values in (numeric or {}).items()}
        for name, values in columns.items():
            found = _within_shard_feature(name, np.asarray(values, np.float64), bounds,
                                          resamples, rng, len(columns))  # fmt: skip
            features += [found] if found is not None else []
    return ExchangeabilityCheck(
        neighbour_similarity=observed,
        random_similarity=float(null.mean()),
        p_value=float((1 + (null >= observed).sum()) / (1 + resamples)),
        n_examples=len(texts),
        resamples=resamples,
        features=features,
    )
