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
told apart, whatever the scores are. The result carries the check of that assumption: when
a classifier that never sees the model tells the two sets' texts apart, the result is not
valid, whatever its p-value.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
from scipy.stats import ttest_ind

from minkscan.evaluation.blind import BlindResult, auroc_phrase, below_chance, told_apart

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
    """The test on one suspect set against one held-out set, with the check of its own
    assumption: the blind baseline between the two sets' texts (`minkscan.evaluation.blind`),
    or why it did not run."""

    group: str
    heldout: str
    features: list[str]
    n_suspect: int
    n_heldout: int
    p_values: list[float]
    blind: BlindResult | None = None  # audited against held-out texts, by text alone
    blind_warn: float | None = None  # the AUROC above which the sets count as told apart
    blind_note: str | None = None  # why the i.i.d. check did not run

    @property
    def median_p(self) -> float:
        return float(np.median(self.p_values))

    @property
    def spread(self) -> tuple[float, float]:
        """The middle half of the split p-values (25% and 75% quantiles)."""
        low, high = np.quantile(self.p_values, [0.25, 0.75])
        return float(low), float(high)

    @property
    def valid(self) -> bool:
        """False when the text alone tells the held-out set from the audited one: then the
        two are not an i.i.d. split, and the test's p-value is no evidence of training."""
        return not told_apart(self.blind, self.blind_warn)

    def significant(self, alpha: float) -> bool:
        return self.valid and self.median_p < alpha

    def decision(self, alpha: float) -> str:
        """'evidence', 'no evidence' or 'not valid'."""
        if not self.valid:
            return "not valid"
        return "evidence" if self.significant(alpha) else "no evidence"

    def sentence(self, alpha: float) -> str:
        low, high = self.spread
        numbers = (
            f"median p = {self.median_p:.2g} over {len(self.p_values)} seeded splits, "
            f"middle half {low:.2g} to {high:.2g}; {self.n_suspect} audited against "
            f"{self.n_heldout} held-out documents ({self.heldout}), {len(self.features)} "
            f"score columns combined"
        )
        if not self.valid:
            return (f"Dataset inference for group '{self.group}' is not valid: the held-out "
                    f"set is distinguishable from the audited set by text alone "
                    f"({auroc_phrase(self.blind)}, at least {self.blind.auroc.low:.3f} > "
                    f"{self.blind_warn:g}), so they are not an i.i.d. split and the test "
                    f"({numbers}) is no evidence of training; use a held-out split drawn at "
                    "random from the same data as the audited set.")  # fmt: skip
        if self.significant(alpha):
            finding = (f"Dataset inference: group '{self.group}' scores as more member-like "
                       f"than its held-out set at the {alpha:.0%} level")  # fmt: skip
        else:
            finding = (f"Dataset inference: no evidence at the {alpha:.0%} level that group "
                       f"'{self.group}' was trained on")  # fmt: skip
        return f"{finding} ({numbers}); {I_I_D}{self._check()}."

    def _check(self) -> str:
        """What the blind baseline said of the i.i.d. assumption, as a clause."""
        if self.blind_note is not None:
            return f"; that assumption was not checked ({self.blind_note})"
        if self.blind is None:
            return ""
        if below_chance(self.blind, self.blind_warn):
            return (f"; caution: the {auroc_phrase(self.blind)} between the two sets is far "
                    "below chance, a sign of the same texts on both sides")  # fmt: skip
        return f" (the text alone does not tell them apart: {auroc_phrase(self.blind)})"


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
