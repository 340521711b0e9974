"""Sliding windows for documents longer than the model context.

Window i covers tokens [i * stride, i * stride + window); the first window scores all of
its positions, each later window only the ``stride`` tokens no earlier window scored, so
every token after the first is scored exactly once, with at most ``window - 1`` tokens of
context and at least ``window - stride``.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

import torch

from pipeline.scoring.token_stats import TokenStats


@dataclass(frozen=True)
class Window:
    """Tokens [start, end) go through the model; predictions of tokens >= first_new count."""

    start: int
    end: int
    first_new: int


def plan_windows(n_tokens: int, window: int, stride: int) -> list[Window]:
    """Windows covering ``n_tokens`` tokens so each token t >= 1 is predicted exactly once."""
    if not 1 <= stride <= window - 1:
        raise ValueError(f"stride must be in 1..window-1 ({window - 1}), got {stride}")
    windows = [Window(0, min(window, n_tokens), 1)]
    while windows[-1].end < n_tokens:
        start = windows[-1].start + stride
        windows.append(Window(start, min(start + window, n_tokens), windows[-1].end))
    return windows


def windowed_token_stats(
    input_ids: Sequence[int],
    window: int,
    stride: int,
    stats_of: Callable[[Sequence[int]], TokenStats],
) -> TokenStats:
    """TokenStats of every scored position of a long document, in text order.

    ``stats_of(ids)`` returns the stats of all len(ids) - 1 positions of one window (one
    forward pass); only each window's new positions are kept.
    """
    parts = []
    for part in plan_windows(len(input_ids), window, stride):
        stats = stats_of(input_ids[part.start : part.end])
        keep = slice(part.first_new - part.start - 1, None)
        parts.append(
            (stats.target_logprob[keep], stats.mean_logprob[keep], stats.std_logprob[keep])
        )
    return TokenStats(*(torch.cat(column) for column in zip(*parts, strict=True)))
