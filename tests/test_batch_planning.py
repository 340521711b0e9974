"""Forward batches: every document once, under the token budget, with little padding."""

from __future__ import annotations

import random

import pytest
from minkscan.text.tokenize import PACKED_ROW_TOKENS, plan_batches, plan_packed_batches


def padding_share(batches: list[list[list[int]]], lengths: list[int]) -> float:
    """Share of a batch plan's positions (rows x width of each batch) that are padding."""
    positions = real = 0
    for rows in batches:
        width = max(sum(lengths[i] for i in row) for row in rows)
        positions += width * len(rows)
        real += sum(lengths[i] for row in rows for i in row)
    return 1 - real / positions


def mixed_lengths(n: int, seed: int = 0) -> list[int]:
    rng = random.Random(seed)
    return [rng.randint(20, 130) for _ in range(n)]


@pytest.mark.parametrize("batch_tokens,max_rows", [(2, 64), (300, 4), (8192, 64)])
def test_packed_plan_places_every_document_once_within_width_budget_and_row_cap(
    batch_tokens: int, max_rows: int
) -> None:
    lengths = mixed_lengths(300) + [500, 1, 1]
    batches = plan_packed_batches(lengths, batch_tokens=batch_tokens, max_rows=max_rows)
    placed = sorted(i for rows in batches for row in rows for i in row)
    assert placed == list(range(len(lengths)))
    for rows in batches:
        longest = max(lengths[i] for row in rows for i in row)
        width = max(longest, min(2 * longest, PACKED_ROW_TOKENS))
        assert all(sum(lengths[i] for i in row) <= width for row in rows)
        assert len(rows) <= max_rows
        assert len(rows) == 1 or len(rows) * width <= batch_tokens


def test_packing_leaves_far_less_padding_than_length_buckets() -> None:
    lengths = mixed_lengths(256)
    buckets = plan_batches(lengths, batch_tokens=8192, max_batch_size=64)
    packed = plan_packed_batches(lengths, batch_tokens=8192, max_rows=64)
    assert padding_share([[[i] for i in batch] for batch in buckets], lengths) > 0.10
    assert padding_share(packed, lengths) < 0.05
