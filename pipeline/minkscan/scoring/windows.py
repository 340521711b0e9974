"""Sliding windows for documents longer than the model context.

Window i covers tokens [i * stride, i * stride + window); the first window scores all of
its positions, each later window only the ``stride`` tokens no earlier window scored, so
every token after the first is scored exactly once, with at most ``window - 1`` tokens of
context and at least ``window - stride``.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Window:
    """Tokens [start, end) go through the model; predictions of tokens >= first_new count."""

    start: int
    end: int
    first_new: int

    @property
    def n_predictions(self) -> int:
        """Predictions of one pass over the window: prediction j is of token start + j + 1."""
        return self.end - self.start - 1

    @property
    def first_kept(self) -> int:
        """Index of the window's first prediction that no earlier window made."""
        return self.first_new - self.start - 1


def plan_windows(n_tokens: int, window: int, stride: int) -> list[Window]:
    """Windows covering ``n_tokens`` tokens so each token t >= 1 is predicted exactly once."""
    if not 1 <= stride <= window - 1:
        raise ValueError(f"stride must be in 1..window-1 ({window - 1}), got {stride}")
    windows = [Window(0, min(window, n_tokens), 1)]
    while windows[-1].end < n_tokens:
        start = windows[-1].start + stride
        windows.append(Window(start, min(start + window, n_tokens), windows[-1].end))
    return windows
