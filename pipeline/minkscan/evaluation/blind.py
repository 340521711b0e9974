"""The blind baseline (Das et al. 2024, "Blind Baselines Beat Membership Inference Attacks
for Foundation Models"): a classifier that never sees the model, told two sets of texts
apart.

If it separates an audited set from the calibration non-members (or the members from the
non-members of a benchmark), the two sets differ in their text alone -- period, source,
topic, format -- and a detector's "member" signal on them may be that shift, not training.

The classifier is scikit-learn's: character (2-5, within words) and word (1-2) n-gram
TF-IDF, logistic regression, out-of-fold probabilities from stratified k-fold
cross-validation, and an AUROC with a percentile bootstrap interval over documents.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np

if TYPE_CHECKING:
    import polars as pl

    from minkscan.statistics import Interval

# A report's verdict carries a caution when the blind AUROC's lower end is above this
# (`minkscan report --blind-auroc-warn`); this module imports scikit-learn and polars only
# when run, so the CLI's help can read it.
BLIND_AUROC_WARN = 0.6
# The benchmark's column of blind-classifier scores (not a method: no model is involved).
BLIND = "blind"
# Fewer texts than this per side cannot be cross-validated meaningfully.
MIN_TEXTS = 10
# Texts per side the classifier sees at most (a seeded sample beyond that): its cost is
# linear in them, and a few thousand pin the AUROC to a few points.
MAX_TEXTS = 5000
FOLDS = 5


@dataclass(frozen=True)
class BlindResult:
    """The blind baseline's AUROC (interval) on ``n_positive`` vs ``n_negative`` texts."""

    auroc: Interval
    n_positive: int
    n_negative: int

    def to_dict(self) -> dict[str, float | int]:
        return {"auroc": self.auroc.value, "auroc_low": self.auroc.low,
                "auroc_high": self.auroc.high, "n_positive": self.n_positive,
                "n_negative": self.n_negative}  # fmt: skip


def auroc_phrase(result: BlindResult) -> str:
    """'blind AUROC 0.998 [0.995, 1.000]'."""
    auroc = result.auroc
    return f"blind AUROC {auroc.value:.3f} [{auroc.low:.3f}, {auroc.high:.3f}]"


def told_apart(result: BlindResult | None, warn_above: float | None) -> bool:
    """Whether the text alone tells the two sets apart: the AUROC's lower end is above
    ``warn_above`` (None: the check is off)."""
    return warn_above is not None and result is not None and result.auroc.low > warn_above


def below_chance(result: BlindResult | None, warn_above: float | None) -> bool:
    """Whether an AUROC's upper end is as far below 0.5 as ``warn_above`` is above it: a
    cross-validated classifier does that when the same texts sit on both sides (each text's
    twin, in the training folds, carries the other label)."""
    return warn_above is not None and result is not None and result.auroc.high < 1 - warn_above


def _classifier(seed: int) -> Any:
    """TF-IDF over character and word n-grams, then logistic regression."""
    from sklearn.feature_extraction.text import TfidfVectorizer
    from sklearn.linear_model import LogisticRegression
    from sklearn.pipeline import make_pipeline, make_union

    features = make_union(
        TfidfVectorizer(analyzer="char_wb", ngram_range=(2, 5), min_df=2, sublinear_tf=True,
                        max_features=200_000),
        TfidfVectorizer(analyzer="word", ngram_range=(1, 2), min_df=2, sublinear_tf=True,
                        max_features=200_000),
    )  # fmt: skip
    return make_pipeline(features, LogisticRegression(C=4.0, max_iter=2000, random_state=seed))


def _usable(text: object) -> bool:
    """A text the classifier can read: a non-blank string."""
    return isinstance(text, str) and bool(text.strip())


def _sample(texts: Sequence[str], rng: np.random.Generator) -> list[str]:
    texts = [text for text in texts if _usable(text)]
    if len(texts) <= MAX_TEXTS:
        return texts
    return [texts[i] for i in sorted(rng.choice(len(texts), MAX_TEXTS, replace=False))]


def blind_scores(texts: Sequence[str], labels: Sequence[int], *, seed: int = 0) -> np.ndarray:
    """Out-of-fold P(label 1) of each text from the blind classifier (stratified k-fold:
    each text is scored by a model that never saw it). Empty texts get NaN."""
    from sklearn.model_selection import StratifiedKFold, cross_val_predict

    usable = np.array([_usable(t) for t in texts])
    y = np.asarray(labels)[usable]
    kept = [t for t, ok in zip(texts, usable, strict=True) if ok]
    folds = StratifiedKFold(n_splits=min(FOLDS, int(y.sum()), int((1 - y).sum())), shuffle=True,
                            random_state=seed)  # fmt: skip
    scores = np.full(len(texts), np.nan)
    scores[usable] = cross_val_predict(
        _classifier(seed), kept, y, cv=folds, method="predict_proba"
    )[:, 1]
    return scores


def blind_auroc(
    positives: Sequence[str],
    negatives: Sequence[str],
    *,
    seed: int = 0,
    n_resamples: int = 1000,
    confidence: float = 0.95,
) -> BlindResult | None:
    """How well the text alone tells ``positives`` (audited, or members) from ``negatives``
    (non-members): the out-of-fold AUROC of the blind classifier, with its bootstrap
    interval. None when either side has fewer than `MIN_TEXTS` non-empty texts."""
    from minkscan.statistics import auroc, bootstrap_interval

    rng = np.random.default_rng(seed)
    positives, negatives = _sample(positives, rng), _sample(negatives, rng)
    if min(len(positives), len(negatives)) < MIN_TEXTS:
        return None
    labels = np.array([1] * len(positives) + [0] * len(negatives))
    probability = blind_scores(positives + negatives, labels, seed=seed)
    interval = bootstrap_interval(
        auroc, labels, probability, n_resamples=n_resamples, confidence=confidence, seed=seed
    )
    return BlindResult(interval, len(positives), len(negatives))


def with_blind_scores(
    frame: pl.DataFrame, text: str, label: str, group: str, *, seed: int = 0
) -> pl.DataFrame:
    """``frame`` with a `BLIND` column: each group's blind classifier (members against
    non-members of that group) scoring its texts out of fold; null where a group has fewer
    than `MIN_TEXTS` of either label."""
    import polars as pl

    parts = []
    for _, part in frame.with_row_index("_order").group_by(group, maintain_order=True):
        labels = part[label].to_numpy()
        usable = labels[[_usable(t) for t in part[text].to_list()]]
        enough = min(int((usable == 1).sum()), int((usable == 0).sum())) >= MIN_TEXTS
        scores = (
            blind_scores(part[text].to_list(), labels, seed=seed) if enough
            else np.full(part.height, np.nan)
        )  # fmt: skip
        parts.append(part.with_columns(pl.Series(BLIND, scores).fill_nan(None)))
    return pl.concat(parts).sort("_order").drop("_order")
