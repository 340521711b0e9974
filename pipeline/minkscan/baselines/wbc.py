"""WBC, window-based comparison of a target and a reference model's token losses, as
Fast-MIA's `wbc.py` computes it:

    wbc = mean over window sizes w of the share of length-w windows (sliding, every start)
          where the reference's loss sum exceeds the target's

with the two loss sequences (-log p of each token after the first, each model on its own
tokenizer) cut to the shorter one and aligned by position, and w cut to that length.
Window sizes 1, 5, 10 and 20 by default. Training lowers the target's loss on a member, so
more windows favour it: higher means "more likely a member", as every column.

It runs on the reference model's actors and reads the reference pass that Ref runs (one pass
for both) and the main pass's per-token log p, which the scoring stage passes on: no
forward pass of its own.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import polars as pl

from minkscan.baselines.batch import RunnerBatch
from minkscan.config import BaselinesConfig
from minkscan.methods import method_named
from minkscan.scorer import DocumentScorer


def window_comparison(
    target_loss: np.ndarray, reference_loss: np.ndarray, windows: Sequence[int]
) -> float:
    """The mean over ``windows`` of the share of windows where the reference's loss sum
    exceeds the target's (both cut to the shorter sequence; None-free, non-empty)."""
    n = min(target_loss.size, reference_loss.size)
    shares = []
    for size in windows:
        kernel = np.ones(min(size, n))
        target = np.convolve(target_loss[:n], kernel, mode="valid")
        reference = np.convolve(reference_loss[:n], kernel, mode="valid")
        shares.append(float(np.mean(reference > target)))
    return float(np.mean(shares))


class WBC:
    """The `wbc` runner: on the reference model's actors (their scorer is the reference's)."""

    def __init__(self, baselines: BaselinesConfig) -> None:
        self.windows = list(baselines.wbc_windows)

    def __call__(self, scorer: DocumentScorer, batch: RunnerBatch) -> pl.DataFrame:
        assert batch.target_logprobs is not None, "WBC reads the main pass's log p"
        scores = [
            None
            if target is None or reference is None
            else window_comparison(-target, -reference, self.windows)
            for target, reference in zip(batch.target_logprobs, batch.logprobs(scorer), strict=True)
        ]
        (column,) = method_named("wbc").output_columns
        return pl.DataFrame({column: scores}, schema={column: pl.Float64})
