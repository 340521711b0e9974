"""Dataset inference (Maini et al., NeurIPS 2024, "LLM Dataset Inference: Did you train on
my dataset?"): many weak membership scores, combined, tell a suspect set from an i.i.d.
held-out set of the same source.

The procedure follows the authors' `linear_di.py`: every score column is a feature;
features are clipped at their 2.5% and 97.5% quantiles (their 'clip' outlier rule) and
standardised with the suspect set's mean and spread; a linear model is learned on one half
of each set (logistic regression, scikit-learn) and scores the other halves; a one-sided
t-test asks whether the suspect half scores as more member-like than the held-out half.
Two deviations, both for a valid p-value. The clipping bounds are the quantiles of both
sets pooled: the authors clip each set at its own quantiles, a set-specific transform that
the linear model learns on one half and finds again in the other (of 400 simulated i.i.d.
pairs of 100 documents with 30 heavy-tailed scores, 15.8% fell below p = 0.05 that way and
6.5% with pooled bounds; with normal scores 8.5% and 5.0%; `tests/test_dataset_inference.py`).
And the t-test is Welch's (the authors use Student's pooled-variance test; with halves of
equal size the two agree closely).

Seeded splits repeat this; the median p-value and its spread are reported. Valid only if
the held-out set is an i.i.d. split of the same data the suspect set was drawn from (same
source, period and format, never trained on): then without training the two cannot be
told apart, whatever the scores are.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
from scipy.stats import ttest_ind

DEFAULT_SPLITS = 10
# Fewer rows than this per side leave too few per half to learn and to test.
MIN_PER_SIDE = 20
CLIP_QUANTILES = (0.025, 0.975)
I_I_D = (
    "valid only if the held-out texts are an i.i.d. split of the same data as the audited "
    "ones (same source, period and format) that the model never saw"
)


@dataclass(frozen=True)
class DatasetInference:
    """The test on one suspect set against one held-out set."""

    group: str
    heldout: str
    features: list[str]
    n_suspect: int
    n_heldout: int
    p_values: list[float]

    @property
    def median_p(self) -> float:
        return float(np.median(self.p_values))

    @property
    def spread(self) -> tuple[float, float]:
        """The middle half of the split p-values (25% and 75% quantiles)."""
        low, high = np.quantile(self.p_values, [0.25, 0.75])
        return float(low), float(high)

    def significant(self, alpha: float) -> bool:
        return self.median_p < alpha

    def sentence(self, alpha: float) -> str:
        low, high = self.spread
        numbers = (
            f"median p = {self.median_p:.2g} over {len(self.p_values)} seeded splits, "
            f"middle half {low:.2g} to {high:.2g}; {self.n_suspect} audited against "
            f"{self.n_heldout} held-out documents ({self.heldout}), {len(self.features)} "
            f"score columns combined"
        )
        if self.significant(alpha):
            finding = (f"Dataset inference: group '{self.group}' scores as more member-like "
                       f"than its held-out set at the {alpha:.0%} level")  # fmt: skip
        else:
            finding = (f"Dataset inference: no evidence at the {alpha:.0%} level that group "
                       f"'{self.group}' was trained on")  # fmt: skip
        return f"{finding} ({numbers}); {I_I_D}."


def split_p_value(suspect: np.ndarray, heldout: np.ndarray, seed: int) -> float:
    """One seeded split: learn on a half of each set, Welch-test the other halves."""
    from sklearn.linear_model import LogisticRegression

    rng = np.random.default_rng(seed)
    suspect = suspect[rng.permutation(len(suspect))]
    heldout = heldout[rng.permutation(len(heldout))]
    a, b = len(suspect) // 2, len(heldout) // 2
    features = np.concatenate([suspect[:a], heldout[:b]])
    labels = np.concatenate([np.ones(a), np.zeros(b)])
    model = LogisticRegression(max_iter=1000).fit(features, labels)
    test = ttest_ind(
        model.decision_function(suspect[a:]), model.decision_function(heldout[b:]),
        equal_var=False, alternative="greater",
    )  # fmt: skip
    return float(test.pvalue) if np.isfinite(test.pvalue) else 1.0


def dataset_inference(
    suspect: np.ndarray,
    heldout: np.ndarray,
    features: Sequence[str],
    *,
    splits: int = DEFAULT_SPLITS,
    seed: int = 0,
    group: str = "all",
    heldout_name: str = "held-out set",
) -> DatasetInference:
    """The test on feature matrices [rows, features] (finite values, same columns)."""
    suspect, heldout = np.asarray(suspect, np.float64), np.asarray(heldout, np.float64)
    for name, matrix in (("audited", suspect), ("held-out", heldout)):
        if len(matrix) < MIN_PER_SIDE:
            raise ValueError(f"dataset inference needs at least {MIN_PER_SIDE} {name} "
                             f"documents with every score, got {len(matrix)}")  # fmt: skip
    low, high = np.quantile(np.concatenate([suspect, heldout]), CLIP_QUANTILES, axis=0)
    suspect, heldout = np.clip(suspect, low, high), np.clip(heldout, low, high)
    mean, spread = suspect.mean(axis=0), suspect.std(axis=0)
    spread[spread == 0] = 1.0
    suspect, heldout = (suspect - mean) / spread, (heldout - mean) / spread
    p_values = [split_p_value(suspect, heldout, seed + i) for i in range(splits)]
    return DatasetInference(group, heldout_name, list(features), len(suspect), len(heldout),
                            p_values)  # fmt: skip
