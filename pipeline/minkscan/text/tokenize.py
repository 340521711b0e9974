"""Text -> token ids with a per-document status, and batch plans (packed rows or length buckets).

Follows the Min-K%++ reference code: ``tokenizer(text)`` with the tokenizer's default
special tokens, and every token after the first is scored. ``prepend_bos`` adds a BOS
token (when the tokenizer did not) so that the first text token is scored too.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from minkscan.schema import (
    EMPTY,
    NOT_TEXT,
    OK,
    SCORED_STATUSES,
    TOO_SHORT,
    TRUNCATED,
    WINDOWED,
)

if TYPE_CHECKING:
    from transformers import PreTrainedTokenizerBase


@dataclass(frozen=True)
class EncodedDocument:
    """Token ids of one document and whether (and how) it can be scored."""

    text: str
    input_ids: tuple[int, ...]
    status: str
    # Character span [start, end) of each token in ``text`` when asked for; (0, 0) for
    # special tokens such as BOS.
    spans: tuple[tuple[int, int], ...] = ()

    @property
    def n_scored(self) -> int:
        """Positions with a next-token prediction: every token after the first."""
        return len(self.input_ids) - 1 if self.status in SCORED_STATUSES else 0


def bos_token_id(tokenizer: PreTrainedTokenizerBase) -> int:
    """The id used by ``prepend_bos``: BOS, else EOS (GPT-2 style tokenizers share them)."""
    for token_id in (tokenizer.bos_token_id, tokenizer.eos_token_id):
        if token_id is not None:
            return int(token_id)
    raise ValueError("prepend_bos is set but the tokenizer has neither a BOS nor an EOS token")


def _encode(
    tokenizer: PreTrainedTokenizerBase, texts: list[str], spans: bool, part_separator: str | None
) -> tuple[list[list[int]], list[list[tuple[int, int]]]]:
    """Token ids (and character spans) of each text, with the tokenizer's special tokens;
    with ``part_separator``, of each part between separators tokenised on its own, the parts'
    ids concatenated (spans shifted to the whole text)."""
    if part_separator is None:
        parts = [[text] for text in texts]
    else:
        parts = [text.split(part_separator) for text in texts]
    flat = [part for text_parts in parts for part in text_parts]
    encoded = tokenizer(flat, add_special_tokens=True, return_offsets_mapping=spans)
    flat_offsets = encoded["offset_mapping"] if spans else [[]] * len(flat)
    ids, offsets, index = [], [], 0
    for text_parts in parts:
        text_ids, text_offsets, start = [], [], 0
        for part in text_parts:
            text_ids += encoded["input_ids"][index]
            text_offsets += [
                (a + start, b + start) if (a, b) != (0, 0) else (0, 0)
                for a, b in flat_offsets[index]
            ]  # (0, 0): a special token, as the tokenizer marks it
            start += len(part) + len(part_separator or "")
            index += 1
        ids.append(text_ids)
        offsets.append(text_offsets)
    return ids, offsets


def encode_documents(
    tokenizer: PreTrainedTokenizerBase,
    texts: Sequence[object],
    *,
    max_tokens: int,
    prepend_bos: bool = False,
    windowed: bool = False,
    spans: bool = False,
    part_separator: str | None = None,
) -> list[EncodedDocument]:
    """Tokenise a batch of texts; bad inputs get a status instead of raising.

    Documents over ``max_tokens`` are cut to it (status truncated), or with ``windowed``
    keep all their tokens (status windowed) for sliding-window scoring. ``spans`` also
    returns each token's character span (needs a fast tokenizer). With ``part_separator``
    each part of a text between separators is tokenised on its own (the order test's
    examples: the same tokens in every ordering of them).
    """
    if spans and not getattr(tokenizer, "is_fast", False):
        raise ValueError("token spans need a fast (Rust) tokenizer; this one is not")
    bos = bos_token_id(tokenizer) if prepend_bos else None
    documents: list[EncodedDocument | None] = [None] * len(texts)
    valid_positions: list[int] = []
    for position, text in enumerate(texts):
        if text is None or (isinstance(text, str) and not text.replace("\x00", "").strip()):
            documents[position] = EncodedDocument("", (), EMPTY)
        elif not isinstance(text, str):
            documents[position] = EncodedDocument("", (), NOT_TEXT)
        else:
            valid_positions.append(position)

    if valid_positions:
        encoded, offsets = _encode(
            tokenizer, [texts[i] for i in valid_positions], spans, part_separator
        )
        for position, ids, offset in zip(valid_positions, encoded, offsets, strict=True):
            if bos is not None and (not ids or ids[0] != bos):
                ids, offset = [bos, *ids], [(0, 0), *offset] if spans else offset
            status = OK
            if len(ids) > max_tokens:
                ids, status = (ids, WINDOWED) if windowed else (ids[:max_tokens], TRUNCATED)
                offset = offset[: len(ids)]
            if len(ids) < 2:
                status = TOO_SHORT
            documents[position] = EncodedDocument(
                str(texts[position]), tuple(ids), status, tuple(offset)
            )
    return [doc for doc in documents if doc is not None]


def plan_batches(
    lengths: Sequence[int], *, batch_tokens: int, max_batch_size: int
) -> list[list[int]]:
    """Group indices into batches of similar length under a padded-token budget.

    Sorting by length keeps padding small; a batch of b documents padded to length L
    holds b * L <= batch_tokens (a single document longer than the budget gets its own).
    """
    order = sorted(range(len(lengths)), key=lambda i: lengths[i], reverse=True)
    batches: list[list[int]] = []
    current: list[int] = []
    for index in order:
        longest = lengths[current[0]] if current else lengths[index]
        if current and (
            (len(current) + 1) * longest > batch_tokens or len(current) >= max_batch_size
        ):
            batches.append(current)
            current = []
        current.append(index)
    if current:
        batches.append(current)
    return batches


# Packed rows of short documents are widened to twice their longest document, up to this
# many positions, so that documents over half a row can still share one: attention work per
# token grows with the row's width, but at this width it stays small next to the padding
# it saves (benchmarks/bench_packing.py measures both).
PACKED_ROW_TOKENS = 512


def row_width(longest: int) -> int:
    """Width of a packed row whose longest sequence has ``longest`` tokens."""
    return max(longest, min(2 * longest, PACKED_ROW_TOKENS))


def plan_packed_batches(
    lengths: Sequence[int],
    *,
    batch_tokens: int,
    max_rows: int,
    widths: Callable[[int], int] = row_width,
) -> list[list[list[int]]]:
    """Group indices into batches of rows, several sequences per row (first fit, longest
    first), so that few positions of a forward pass are padding.

    A batch's rows are ``widths(longest)`` wide (by default `row_width`: its longest
    sequence, twice that for short ones, up to `PACKED_ROW_TOKENS`) and hold at most
    ``batch_tokens`` positions together (at least one row) in at most ``max_rows`` rows.
    """
    remaining = sorted(range(len(lengths)), key=lambda i: lengths[i], reverse=True)
    batches: list[list[list[int]]] = []
    while remaining:
        width = widths(lengths[remaining[0]])
        n_rows = max(1, min(max_rows, batch_tokens // width))
        rows: list[list[int]] = [[] for _ in range(n_rows)]
        free = [width] * n_rows
        left: list[int] = []
        for index in remaining:
            row = next((r for r in range(n_rows) if lengths[index] <= free[r]), None)
            if row is None:
                left.append(index)
            else:
                rows[row].append(index)
                free[row] -= lengths[index]
        batches.append([row for row in rows if row])
        remaining = left
    return batches
