"""Is a file's published order random? The check the order test rests on.

The order test (`minkscan.evaluation.order_test`) is valid only if the published order is
itself a random order of the examples. A benchmark sorted by topic, source or length puts
like examples next to each other, and a model that never saw it can still prefer that
order (in-context, similar neighbours are more predictable). The check needs no model:
TF-IDF vectors of the examples (word 1-2-grams, scikit-learn), the mean cosine similarity
of neighbouring examples, against the same mean over seeded random orders; the permutation
p-value is (1 + orders at least as alike) / (1 + orders). A small p-value means neighbours
are more alike than chance, and the order test cannot be trusted on this file.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

# Below this p-value neighbours count as more alike than random pairs.
EXCHANGEABILITY_ALPHA = 0.01
RESAMPLES = 999
# Examples the check reads at most (the first ones, in order): its cost is linear in them.
MAX_EXAMPLES = 20_000


@dataclass(frozen=True)
class ExchangeabilityCheck:
    """Neighbours' mean TF-IDF cosine against random pairs', and the permutation p-value."""

    neighbour_similarity: float
    random_similarity: float
    p_value: float
    n_examples: int
    resamples: int

    @property
    def exchangeable(self) -> bool:
        return self.p_value >= EXCHANGEABILITY_ALPHA

    def sentence(self) -> str:
        comparison = (
            f"neighbouring examples have mean TF-IDF cosine {self.neighbour_similarity:.3f} "
            f"against {self.random_similarity:.3f} for random pairs (permutation p = "
            f"{self.p_value:.2g}, {self.resamples} random orders of {self.n_examples} examples)"
        )
        if self.exchangeable:
            return f"The published order looks random: {comparison}."
        return (
            f"The order test cannot be trusted on this file: {comparison}, so the file is "
            "sorted (by topic, source or format) and a model may prefer its order without "
            "having been trained on it."
        )


def _neighbour_mean(vectors, order: np.ndarray) -> float:
    """Mean cosine of consecutive rows of L2-normalised sparse ``vectors`` in ``order``."""
    left, right = vectors[order[:-1]], vectors[order[1:]]
    return float(np.asarray(left.multiply(right).sum(axis=1)).mean())


def exchangeability_check(
    texts: Sequence[str], *, resamples: int = RESAMPLES, seed: int = 0
) -> ExchangeabilityCheck:
    """Neighbour similarity of ``texts`` in the given order against ``resamples`` orders."""
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
    return ExchangeabilityCheck(
        neighbour_similarity=observed,
        random_similarity=float(null.mean()),
        p_value=float((1 + (null >= observed).sum()) / (1 + resamples)),
        n_examples=len(texts),
        resamples=resamples,
    )
