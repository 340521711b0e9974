"""Evidence per document: the most member-like documents, each with a text excerpt whose
lowest-k% tokens (the ones that pulled its Min-K%++ score down) are marked.

Token z-scores and character spans come from `minkscan score --token-scores` (the same
forward pass as the scores); without them the excerpt is plain text, and without a kept
text there is no excerpt, only a note saying how to get one.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

import numpy as np
import polars as pl

from minkscan.calibration.threshold import has_score
from minkscan.schema import (
    GROUP,
    GROUP_KEY,
    ID,
    N_TOKENS,
    TEXT,
    TOKEN_COLUMNS,
    TOKEN_END,
    TOKEN_START,
    TOKEN_Z,
)

EXCERPT_CHARS = 600
LEAD_CHARS = 80  # context shown before the first marked token of a window
DEFAULT_K_PERCENT = 20
NO_TEXT_NOTE = (
    "no text in the scores: run `minkscan score` with --token-scores (or --keep-columns "
    "<text column>) to see excerpts"
)


@dataclass(frozen=True)
class Evidence:
    """One suspicious document: its score and an excerpt as (text, marked) segments."""

    id: str
    group: str
    score: float
    n_tokens: int | None
    segments: list[tuple[str, bool]] = field(default_factory=list)
    cut_before: bool = False
    cut_after: bool = False
    lowest_tokens: list[str] = field(default_factory=list)
    note: str = ""
    p_value: float | None = None  # conformal, against the calibration non-members
    selected: bool | None = None  # by the report's FDR selection


def k_percent(method: str) -> int:
    """The k% of a ``..._k{P}`` score column (20 for columns without one)."""
    match = re.search(r"_k(\d+)$", method)
    return int(match.group(1)) if match else DEFAULT_K_PERCENT


def lowest_k(z: np.ndarray, percent: int) -> np.ndarray:
    """Indices of the max(1, floor(P% of n)) lowest token scores, the ones the score averages."""
    k = max(1, (percent * z.size) // 100)
    return np.sort(np.argsort(z, kind="stable")[:k])


def whole_words(text: str, spans: list[tuple[int, int]]) -> list[tuple[int, int]]:
    """Token spans as the words they belong to: leading whitespace dropped, each widened to
    the word (run of letters and digits) around it, overlapping or touching ones merged --
    so a number split into digit tokens is marked once, and no mark starts with a space."""
    words: list[tuple[int, int]] = []
    for start, stop in sorted(spans):
        while start < stop and text[start].isspace():
            start += 1
        if start >= stop:
            continue
        while start > 0 and text[start - 1].isalnum() and text[start].isalnum():
            start -= 1
        while stop < len(text) and text[stop].isalnum() and text[stop - 1].isalnum():
            stop += 1
        if words and start <= words[-1][1]:
            words[-1] = (words[-1][0], max(stop, words[-1][1]))
        else:
            words.append((start, stop))
    return words


def _window(spans: list[tuple[int, int]], length: int) -> tuple[int, int]:
    """The EXCERPT_CHARS-long character window holding the most marked spans."""
    if length <= EXCERPT_CHARS or not spans:
        return 0, min(length, EXCERPT_CHARS)
    starts = np.array([max(0, start - LEAD_CHARS) for start, _ in spans])
    counts = [int(((starts >= s) & (starts < s + EXCERPT_CHARS)).sum()) for s in starts]
    begin = int(min(starts[int(np.argmax(counts))], length - EXCERPT_CHARS))
    return begin, begin + EXCERPT_CHARS


def excerpt(text: str, spans: list[tuple[int, int]]) -> tuple[list[tuple[str, bool]], bool, bool]:
    """(segments, cut before, cut after): a window of ``text`` with ``spans`` marked."""
    begin, end = _window(spans, len(text))
    segments: list[tuple[str, bool]] = []
    cursor = begin
    for start, stop in sorted(spans):
        start, stop = max(start, cursor), min(stop, end)
        if start >= stop:
            continue
        if start > cursor:
            segments.append((text[cursor:start], False))
        segments.append((text[start:stop], True))
        cursor = stop
    if cursor < end:
        segments.append((text[cursor:end], False))
    return segments, begin > 0, end < len(text)


def _evidence(row: dict, method: str, has_tokens: bool, has_text: bool) -> Evidence:
    base = {
        ID: str(row.get(ID)),
        GROUP: str(row[GROUP_KEY]),
        "score": float(row[method]),
        N_TOKENS: row.get(N_TOKENS),
    }
    text = row.get(TEXT) if has_text else None
    if not isinstance(text, str):
        return Evidence(**base, note=NO_TEXT_NOTE)
    z = row.get(TOKEN_Z) if has_tokens else None
    starts, ends = row.get(TOKEN_START), row.get(TOKEN_END)
    if not z or not starts or not ends:
        segments, before, after = excerpt(text, [])
        return Evidence(
            **base, segments=segments, cut_before=before, cut_after=after,
            note="run `minkscan score --token-scores` to mark the tokens behind the score",
        )  # fmt: skip
    picked = lowest_k(np.asarray(z, dtype=np.float64), k_percent(method))
    spans = whole_words(text, [(int(starts[i]), int(ends[i])) for i in picked])
    segments, before, after = excerpt(text, spans)
    lowest = [text[s:e] for s, e in spans]
    return Evidence(
        **base, segments=segments, cut_before=before, cut_after=after, lowest_tokens=lowest,
        note=f"marked: the words holding the {len(picked)} lowest-z tokens of {len(z)} "
             f"(the {k_percent(method)}% that the score averages)",
    )  # fmt: skip


def top_evidence(rows: pl.LazyFrame, method: str, names: list[str], top_n: int) -> list[Evidence]:
    """The ``top_n`` documents with the highest ``method`` score, as evidence."""
    has_tokens = set(TOKEN_COLUMNS) <= set(names)
    has_text = TEXT in names
    wanted = [ID, GROUP_KEY, N_TOKENS, method]
    wanted += [TEXT] if has_text else []
    wanted += list(TOKEN_COLUMNS) if has_tokens else []
    top = (
        rows.filter(has_score(pl.col(method)))
        .sort(method, descending=True)
        .head(top_n)
        .select([name for name in wanted if name in names or name == GROUP_KEY])
        .collect()
    )
    return [_evidence(row, method, has_tokens, has_text) for row in top.iter_rows(named=True)]
