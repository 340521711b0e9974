"""PAC, Polarized Augment Calibration (Ye et al., ACL Findings 2024), as its authors'
`attack.py` computes it (yyy01/PAC):

    PD(x)  = mean of the top 5% of x's token log-probabilities
             - mean of the bottom 30%            (each at least one token)
    PAC(x) = PD(x) - mean over N word-swapped copies x'_i of PD(x'_i)

Each copy swaps two random words ``max(1, int(alpha * words))`` times (their `eda`: words
split on single spaces, a swap given up after four draws of the same index); N = 5 and
alpha = 0.3 by default. The authors rank by -PAC (their `calculate_auc`), so the column is
-PAC: higher means "more likely a member", as every column.

The document's own log p are the main pass's (no extra pass); the copies are scored on the
same actor, N passes per document. Each document's copies come from a random stream seeded
by ``baselines.pac_seed`` and the text alone, so a score does not depend on the batch.
"""

from __future__ import annotations

import random
import zlib

import numpy as np
import polars as pl

from minkscan.baselines.batch import RunnerBatch
from minkscan.config import BaselinesConfig
from minkscan.methods import method_named
from minkscan.scorer import DocumentScorer

# The authors' polarized-distance regions: the highest 5% and the lowest 30% of log p.
FAR_RATIO, LOCAL_RATIO = 0.05, 0.3
# Draws of a second index before a swap is given up (their `swap_word`).
SWAP_TRIES = 3


def polarized_distance(logprob: np.ndarray) -> float:
    """Mean of the highest `FAR_RATIO` of the log p minus the mean of the lowest
    `LOCAL_RATIO` (each region at least one token)."""
    ordered = np.sort(logprob)
    far = max(int(ordered.size * FAR_RATIO), 1)
    local = max(int(ordered.size * LOCAL_RATIO), 1)
    return float(ordered[::-1][:far].mean() - ordered[:local].mean())


def _swap_once(words: list[str], rng: random.Random) -> None:
    first = rng.randint(0, len(words) - 1)
    second, tries = first, 0
    while second == first:
        second = rng.randint(0, len(words) - 1)
        tries += 1
        if tries > SWAP_TRIES:
            return
    words[first], words[second] = words[second], words[first]


def swapped_copies(text: str, alpha: float, n: int, rng: random.Random) -> list[str]:
    """``n`` copies of ``text``, each with ``max(1, int(alpha * words))`` random swaps of
    two words (words split on single spaces and joined back the same way)."""
    words = text.split(" ")
    swaps = max(1, int(alpha * len(words)))
    copies = []
    for _ in range(n):
        copy = list(words)
        for _ in range(swaps):
            _swap_once(copy, rng)
        copies.append(" ".join(copy))
    return copies


def copy_rng(seed: int, text: str) -> random.Random:
    """The random stream of one document's copies: from the seed and the text alone."""
    return random.Random(f"{seed}:{zlib.crc32(text.encode('utf-8'))}")


class PAC:
    """The `pac` runner: on the target model's actors, reading the main pass's log p."""

    def __init__(self, baselines: BaselinesConfig) -> None:
        self.alpha = baselines.pac_alpha
        self.copies = baselines.pac_augmentations
        self.seed = baselines.pac_seed

    def __call__(self, scorer: DocumentScorer, batch: RunnerBatch) -> pl.DataFrame:
        originals = batch.logprobs(scorer)
        owners = [i for i, logprob in enumerate(originals) if logprob is not None]
        texts = [
            copy
            for i in owners
            for copy in swapped_copies(
                batch.documents[i].text, self.alpha, self.copies,
                copy_rng(self.seed, batch.documents[i].text),
            )
        ]  # fmt: skip
        copies = scorer.submit(scorer.encode(texts)).logprobs() if texts else []
        scores: list[float | None] = [None] * len(originals)
        for position, index in enumerate(owners):
            own = copies[position * self.copies : (position + 1) * self.copies]
            if any(logprob is None for logprob in own):
                continue
            calibration = float(np.mean([polarized_distance(lp) for lp in own]))
            scores[index] = calibration - polarized_distance(originals[index])
        (column,) = method_named("pac").output_columns
        return pl.DataFrame({column: scores}, schema={column: pl.Float64})
