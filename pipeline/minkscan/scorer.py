"""The model stage: one loaded model scoring tokenised documents in packed batches.

`DocumentScorer` is what a Ray actor holds (one replica each) and what `score_texts`
uses in-process; it owns batching and device placement, while the math lives in
`minkscan.scoring` and the forward pass in `minkscan.models.forward`.

A call is queued work until its result is read: `DocumentScorer.submit` builds each batch on
the host and launches it without waiting for the device, and `PendingScores` aggregates
every document on the device and copies all scores back in one transfer, queued behind the
call's passes (`queue_read`) and waited for by `result`. So the host prepares batch i+1
while the GPU computes batch i, and `score_frame` reads one chunk of texts back and
tokenises the next while the GPU scores the chunk between them.

Memory: between calls the scorer holds the model and its head's tensors only; at the peak
of a batch, at most `minkscan.models.workspace.batch_bytes` more (`workspace_bytes`).
"""

from __future__ import annotations

import functools
import logging
from collections.abc import Sequence
from typing import Any

import polars as pl
import pyarrow as pa

from minkscan.config import DEFAULT_MODEL, ModelConfig, ScoringConfig
from minkscan.methods import single_pass_columns, single_pass_methods
from minkscan.models.compiled import Body, fixed_width
from minkscan.models.forward import Segment, Tiles, TokenBatch, batch_token_stats
from minkscan.models.loading import LoadedModel, load_model
from minkscan.models.names import first_use_note
from minkscan.models.probe_cache import probe_cache
from minkscan.models.probes import choose_head_path, packing_agrees
from minkscan.models.workspace import Shapes, auto_batch_tokens, batch_bytes, head_tiles
from minkscan.schema import (
    CHARS_PER_TOKEN,
    frame_schema,
)
from minkscan.scoring.pending import Aggregation, PendingScores
from minkscan.scoring.token_stats import TokenStats
from minkscan.scoring.windows import Window, plan_windows
from minkscan.text.frequencies import read_frequencies
from minkscan.text.tokenize import (
    EncodedDocument,
    encode_documents,
    plan_batches,
    plan_packed_batches,
    row_width,
)

logger = logging.getLogger(__name__)

PROBE_TEXT = "The quick brown fox jumps over the lazy dog near the bank of the river."
# Rows per forward batch when scoring.max_batch_size is unset: on a CPU more rows only cost
# memory; on a GPU the token budget alone bounds a batch.
CPU_MAX_ROWS = 64
# Texts tokenised at a time by `DocumentScorer.score_frame` (the next chunk is tokenised
# while the device scores this one).
FRAME_CHUNK = 1024


class DocumentScorer:
    """Scores tokenised documents with every single-pass method in one forward pass each."""

    def __init__(
        self, loaded: LoadedModel, scoring: ScoringConfig, expected_tokens: int | None = None
    ) -> None:
        """``expected_tokens``: how much this scorer is likely to score (decides whether
        compiling the model body pays, `minkscan.models.compiled`)."""
        self.loaded = loaded
        self.scoring = scoring
        self.methods = single_pass_methods(scoring)
        self.columns = single_pass_columns(scoring)
        self.reference = (
            None if scoring.dcpdd_frequencies is None
            else read_frequencies(scoring.dcpdd_frequencies)
        )  # fmt: skip
        tokenizer = loaded.tokenizer
        self.pad_id = next(
            int(i) for i in (tokenizer.pad_token_id, tokenizer.eos_token_id, 0) if i is not None
        )
        self.shapes = Shapes.of(loaded.model)
        device = loaded.model.get_output_embeddings().weight.device
        self._tiles_for = lambda kernel: head_tiles(
            device, self.shapes, kernel, scoring.row_chunk, scoring.vocab_chunk
        )
        probe = self.encode([PROBE_TEXT] * 2)
        probe_ids = [probe[0].input_ids, probe[1].input_ids[:-3]]
        probe_batch = self.pad([(ids, 0) for ids in probe_ids])
        # Start-up decisions that cost seconds are remembered between runs on a GPU.
        cache = probe_cache(loaded.model) if device.type == "cuda" else None
        self.head = choose_head_path(
            loaded.model, scoring.head, probe_batch, self._tiles_for, cache=cache
        )
        self.tiles: Tiles = self._tiles_for(self.head.kernel if self.head else "logits")
        self.packing = scoring.packing and packing_agrees(
            loaded.model, self.head, probe_ids, self.pad_id, self.tiles
        )
        self.batch_tokens = (
            auto_batch_tokens(device, self.shapes, self.head, self.tiles, self.row_width)
            if scoring.batch_tokens == "auto" else scoring.batch_tokens
        )  # fmt: skip
        self.max_rows = scoring.max_batch_size or (
            CPU_MAX_ROWS if loaded.device.type != "cuda" else self.batch_tokens
        )
        compile_mode = scoring.compile if self.packing and self.head is not None else False
        self.body = Body(loaded.model, compile_mode, expected_tokens=expected_tokens, cache=cache)
        self.aggregation = Aggregation(
            scoring, self.methods, self.columns, self.batch_tokens, self.reference
        )

    @property
    def head_path(self) -> str:
        """'triton', 'chunked', 'fused' or 'logits': how logits reach the reduction."""
        if self.head is None:
            return "logits"
        return "fused" if self.head.kernel == "torch" else self.head.kernel

    @property
    def row_width(self) -> int:
        """The widest row a batch can have: ``max_tokens``, or a packed row of them."""
        return row_width(self.scoring.max_tokens) if self.packing else self.scoring.max_tokens

    def workspace_bytes(self) -> int:
        """The most memory one batch takes beyond the weights (`batch_tokens` positions in
        rows of up to `row_width`; `minkscan.models.workspace.batch_bytes`)."""
        return batch_bytes(self.shapes, self.head, self.tiles, self.batch_tokens, self.row_width)

    def encode(self, texts: Sequence[object]) -> list[EncodedDocument]:
        """Tokenise with this model's tokenizer and the configured truncation / BOS rules.

        With ``scoring.window_stride``, documents over ``max_tokens`` keep all their tokens
        (status windowed) instead of being truncated.
        """
        return encode_documents(
            self.loaded.tokenizer,
            texts,
            max_tokens=self.scoring.max_tokens,
            prepend_bos=self.scoring.prepend_bos,
            windowed=self.scoring.window_stride is not None,
            spans=self.scoring.token_scores,
            part_separator=self.scoring.part_separator,
        )

    def pad(self, segments: Sequence[Segment]) -> TokenBatch:
        """Sequences as one padded batch (a row each) on the model's device."""
        return TokenBatch.padded(
            segments, self.pad_id, self.scoring.padding_side, self.loaded.device
        )

    def rows(self, rows: Sequence[Sequence[Segment]]) -> TokenBatch:
        """Rows of sequences as one batch: packed when the model allows it (then a row may
        hold several; in a compiled body's fixed shape when it has one), else padded (a row
        holds one)."""
        if self.packing:
            shape = None
            if self.body.fixed_shapes:
                longest = max(len(ids) for row in rows for ids, _ in row)
                width = fixed_width(row_width(longest))  # as `_plan_rows` planned it
                shape = (self._fixed_rows(width), width)
            return TokenBatch.packed(rows, self.loaded.device, shape)
        return self.pad([segment for row in rows for segment in row])

    def _fixed_rows(self, width: int) -> int:
        return max(1, min(self.max_rows, self.batch_tokens // width))

    def token_stats(self, batch: TokenBatch) -> TokenStats:
        """TokenStats of a batch's kept predictions by this scorer's head path."""
        return batch_token_stats(
            self.loaded.model,
            batch,
            head=self.head,
            tiles=self.tiles,
            compiled=self.scoring.compile_reduction,
            body=self.body,
        )

    def windows(self, n_tokens: int) -> list[Window]:
        """The forward passes over a document of ``n_tokens`` ids: sliding windows of
        ``max_tokens`` when it is longer and ``window_stride`` is set, else one pass."""
        stride = self.scoring.window_stride
        if stride is None or n_tokens <= self.scoring.max_tokens:
            return [Window(0, n_tokens, 1)]
        return plan_windows(n_tokens, self.scoring.max_tokens, stride)

    def submit(self, documents: Sequence[EncodedDocument]) -> PendingScores:
        """Launch the forward passes of ``documents`` without waiting for the device.

        The windows of all documents (one per document unless it is windowed) share the
        packed (or length-bucketed) batches; each batch keeps only its windows' new
        predictions.
        """
        scorable = [i for i, doc in enumerate(documents) if doc.n_scored > 0]
        pieces = [
            (index, window)
            for index in scorable
            for window in self.windows(len(documents[index].input_ids))
        ]
        launched: list[int] = []
        outputs: list[TokenStats] = []
        for rows in self._plan_rows([window.end - window.start for _, window in pieces]):
            segments = [
                [
                    (documents[pieces[j][0]].input_ids[pieces[j][1].start : pieces[j][1].end],
                     pieces[j][1].first_kept)
                    for j in row
                ]
                for row in rows
            ]  # fmt: skip
            outputs.append(self.token_stats(self.rows(segments)))
            launched.extend(j for row in rows for j in row)
        return PendingScores(self.aggregation, list(documents), scorable, pieces, launched, outputs)

    def score_documents(self, documents: Sequence[EncodedDocument]) -> dict[str, list[Any]]:
        """Columns ``n_tokens``, ``status`` and every score column, one entry per document
        (and `TOKEN_COLUMNS` with ``scoring.token_scores``); scores are None for documents
        with no scored token."""
        return self.submit(documents).result()

    def _plan_rows(self, lengths: Sequence[int]) -> list[list[list[int]]]:
        """Forward batches as rows of piece indices (one per row unless packing)."""
        if self.packing:
            widths = (lambda n: fixed_width(row_width(n))) if self.body.fixed_shapes else row_width
            return plan_packed_batches(
                lengths, batch_tokens=self.batch_tokens, max_rows=self.max_rows, widths=widths
            )
        return [
            [[j] for j in batch]
            for batch in plan_batches(
                lengths, batch_tokens=self.batch_tokens, max_batch_size=self.max_rows
            )
        ]

    def score_frame(self, texts: Sequence[object]) -> pl.DataFrame:
        """Tokenise and score ``texts``; one row per input, in input order.

        Each chunk of `FRAME_CHUNK` texts is launched with its read queued behind it, and the
        previous chunk is read back after that: the wait ends with the previous chunk's own
        work, so the host reads it and tokenises the next chunk while the device computes
        this one."""
        parts: list[dict[str, list[Any]]] = []
        pending: PendingScores | None = None
        for start in range(0, max(len(texts), 1), FRAME_CHUNK):
            launched = self.submit(self.encode(texts[start : start + FRAME_CHUNK]))
            launched.queue_read()
            if pending is not None:
                parts.append(pending.result())
            pending = launched
        if pending is not None:
            parts.append(pending.result())
        columns = {name: [v for part in parts for v in part[name]] for name in parts[0]}
        return pl.from_arrow(pa.table(columns, schema=frame_schema(list(columns))))


def _split_options(options: dict[str, Any]) -> tuple[dict[str, Any], dict[str, Any]]:
    model_keys = set(ModelConfig.model_fields) - {"name"}
    scoring_keys = set(ScoringConfig.model_fields)
    unknown = set(options) - model_keys - scoring_keys
    if unknown:
        known = ", ".join(sorted(model_keys | scoring_keys))
        raise TypeError(f"unknown option(s) {sorted(unknown)}; known: {known}")
    return (
        {k: v for k, v in options.items() if k in model_keys},
        {k: v for k, v in options.items() if k in scoring_keys},
    )


def expected_tokens(texts: Sequence[object]) -> int:
    """The tokens ``texts`` are likely to hold, from their characters: what a scorer is told
    to expect (whether compiling its body pays) before anything is tokenised."""
    return sum(len(text) for text in texts if isinstance(text, str)) // CHARS_PER_TOKEN


def score_texts(
    texts: Sequence[object], model: str | LoadedModel = DEFAULT_MODEL, **options: Any
) -> pl.DataFrame:
    """Score texts in-process; one row per text with ``n_tokens``, ``status`` and scores.

    ``model`` is a name (see `minkscan.models.loading`) or an already loaded model.
    ``options`` are fields of `ModelConfig` (dtype, device, ...) or `ScoringConfig`
    (k_percentages, max_tokens, prepend_bos, batch_tokens, ...).
    """
    model_options, scoring_options = _split_options(options)
    scoring = ScoringConfig(**scoring_options)
    texts = list(texts)
    if isinstance(model, LoadedModel):
        if model_options:
            raise TypeError(
                f"model options {sorted(model_options)} need a model name, not a LoadedModel"
            )
        scorer = DocumentScorer(model, scoring, expected_tokens=expected_tokens(texts))
        return scorer.score_frame(texts)
    config = ModelConfig(name=model, **model_options)
    return _cached_scorer(config.model_dump_json(), scoring.model_dump_json()).score_frame(texts)


# Scorers `score_texts` keeps between calls, each with its model, start-up probes and head
# path: the second call on a model pays none of their set-up. Bounded, so a loop over many
# models holds at most this many; `release_scorers` frees them.
SCORER_CACHE_SIZE = 2


@functools.lru_cache(maxsize=SCORER_CACHE_SIZE)
def _cached_scorer(model: str, scoring: str) -> DocumentScorer:
    """The scorer of one model and settings (both as JSON: hashable). A bundled model's
    first use says it converts (a minute or two, once), as the CLI does: a library's
    caller sees warnings only."""
    config = ModelConfig.model_validate_json(model)
    note = first_use_note(config.name, config.cache_dir)
    if note:
        logger.warning(note)
    loaded = load_model(config)
    return DocumentScorer(loaded, ScoringConfig.model_validate_json(scoring))


def release_scorers() -> None:
    """Drop the scorers (and their models) `score_texts` keeps, freeing their memory."""
    _cached_scorer.cache_clear()
