"""The model-side stages Ray Data runs: CPU tokenisation, the model actor and the
reference-model actor. Each maps a pyarrow batch to a pyarrow batch; the math stays in
`minkscan.scorer` / `minkscan.scoring` / `minkscan.baselines`. Reading pieces and
committing scores are in `minkscan.distributed.pieces`.
"""

from __future__ import annotations

import functools
import time
from collections.abc import Callable
from typing import Any

import numpy as np
import polars as pl
import pyarrow as pa
import torch
from transformers import PreTrainedTokenizerBase

from minkscan.baselines.batch import RunnerBatch
from minkscan.config import BaselinesConfig, ModelConfig, ScoringConfig
from minkscan.distributed.pieces import seconds_column
from minkscan.methods import LOSS, MAIN_PASS, extra_pass_methods, reads_target_logprobs
from minkscan.models.loading import load_model, load_tokenizer
from minkscan.schema import (
    INPUT_IDS,
    N_TOKENS,
    PRESET_STATUS,
    SPAN_END,
    SPAN_START,
    STATUS,
    TARGET_LOGPROBS,
    TEXT,
    TOKEN_COLUMNS,
    arrow_type,
)
from minkscan.scorer import DocumentScorer
from minkscan.text.tokenize import EncodedDocument, encode_documents


def _carried(batch: pa.Table, *owned: str) -> dict[str, pa.ChunkedArray]:
    """The columns a stage passes on untouched (id, source, row, piece, kept input columns)."""
    return {name: batch[name] for name in batch.column_names if name not in owned}


@functools.cache
def _tokenizer(model: str) -> PreTrainedTokenizerBase:
    """One tokenizer per worker process and model section (JSON of a ModelConfig): a
    tokenising task's worker keeps it for every later batch and run."""
    return load_tokenizer(ModelConfig.model_validate_json(model))


def tokenize(batch: pa.Table, *, model: str, scoring: ScoringConfig) -> pa.Table:
    """CPU stage: text -> token ids and a status per row (bad text gets a status, not an
    error). ``model`` is the model section as JSON (hashable, for `_tokenizer`).

    Tasks, not an actor: each worker loads the tokenizer once and stays warm across blocks,
    and tokenising scales with the CPUs Ray has. With ``scoring.window_stride`` long
    documents keep all their tokens (status windowed) for the scoring actors' sliding
    windows; without, they are truncated to ``max_tokens``.
    """
    documents = encode_documents(
        _tokenizer(model),
        batch[TEXT].to_pylist(),
        max_tokens=scoring.max_tokens,
        prepend_bos=scoring.prepend_bos,
        windowed=scoring.window_stride is not None,
        spans=scoring.token_scores,
        part_separator=scoring.part_separator,
    )
    for position, preset in enumerate(batch[PRESET_STATUS].to_pylist()):
        if preset is not None:  # decided when the row was read (bad encoding, not text)
            documents[position] = EncodedDocument("", (), preset)
    columns = {
        **_carried(batch, TEXT, PRESET_STATUS),
        TEXT: pa.array([doc.text for doc in documents], pa.large_string()),
        INPUT_IDS: pa.array([list(doc.input_ids) for doc in documents], pa.list_(pa.int32())),
        STATUS: pa.array([doc.status for doc in documents], pa.string()),
    }
    if scoring.token_scores:
        for name, side in ((SPAN_START, 0), (SPAN_END, 1)):
            columns[name] = pa.array(
                [[span[side] for span in doc.spans] for doc in documents], pa.list_(pa.int32())
            )
    return pa.table(columns)


def _with_columns(table: pa.Table, frame: pl.DataFrame) -> pa.Table:
    for name, column in zip(frame.columns, frame.to_arrow().columns, strict=True):
        table = table.append_column(name, column)
    return table


def _with_seconds(table: pa.Table, pass_key: str, started: float) -> pa.Table:
    """``table`` with the rows' shares of the seconds since ``started`` spent on ``pass_key``."""
    return table.append_column(
        *seconds_column(pass_key, time.perf_counter() - started, table.num_rows)
    )


def _extra_passes(
    table: pa.Table,
    runners: list[tuple[str, Callable[..., pl.DataFrame]]],
    scorer: DocumentScorer,
    batch: RunnerBatch,
) -> pa.Table:
    """``table`` with each runner's columns and its seconds, in order. ``batch.documents``
    are encoded by ``scorer``'s tokenizer."""
    for key, run in runners:
        started = time.perf_counter()
        columns = run(scorer, batch)
        table = _with_seconds(_with_columns(table, columns), key, started)
    return table


def _runners(baselines: BaselinesConfig, on: str) -> list[tuple[str, Callable[..., Any]]]:
    """(key, runner) of each enabled extra-pass method run on the ``on`` model's actors."""
    return [(m.key, m.runner(baselines)) for m in extra_pass_methods(baselines) if m.on == on]


def _target_logprobs(batch: pa.Table) -> list[np.ndarray | None]:
    """The main pass's per-token log p of each row, as the scoring stage passed them on."""
    return [None if v is None else np.asarray(v) for v in batch[TARGET_LOGPROBS].to_pylist()]


class ScoreStage:
    """Model actor: one replica of the target model scoring tokenised rows (packed
    batches), plus the extra-pass methods that run on the target model (Lowercase,
    Neighbor) when enabled.

    Those need nothing but the target model, so they run on this actor's replica: a stage
    of their own would hold a second copy of the same model per actor and ship every row
    once more. The text is passed on with ``keep_text`` (kept, or read by a later stage).
    """

    def __init__(
        self,
        model: ModelConfig,
        scoring: ScoringConfig,
        threads: int,
        baselines: BaselinesConfig,
        keep_text: bool = False,
        gpus: int = 1,
        expected_tokens: int | None = None,
    ) -> None:
        torch.set_num_threads(threads)
        self.scorer = DocumentScorer(load_model(model, gpus), scoring, expected_tokens)
        self.runners = _runners(baselines, "target")
        self.give_logprobs = reads_target_logprobs(baselines)
        self.keep_text = keep_text

    def __call__(self, batch: pa.Table) -> pa.Table:
        started = time.perf_counter()
        texts = batch[TEXT].to_pylist()
        n = batch.num_rows
        starts, ends = (
            (batch[name].to_pylist() for name in (SPAN_START, SPAN_END))
            if SPAN_START in batch.column_names
            else ([[]] * n, [[]] * n)
        )
        documents = [
            EncodedDocument(text, tuple(ids), status, tuple(zip(start, end, strict=True)))
            for text, ids, status, start, end in zip(
                texts, batch[INPUT_IDS].to_pylist(), batch[STATUS].to_pylist(), starts, ends,
                strict=True,
            )
        ]  # fmt: skip
        runner_batch = RunnerBatch.on_main_pass(documents, self.scorer)  # runners may read it
        columns = runner_batch.scores(self.scorer)
        arrays = _carried(batch, TEXT, INPUT_IDS, STATUS, SPAN_START, SPAN_END)
        own = [N_TOKENS, STATUS, *self.scorer.columns]
        own += list(TOKEN_COLUMNS) if self.scorer.scoring.token_scores else []
        for name in own:
            arrays[name] = pa.array(columns[name], arrow_type(name))
        if self.give_logprobs:
            arrays[TARGET_LOGPROBS] = pa.array(
                [None if v is None else v.tolist() for v in runner_batch.logprobs(self.scorer)],
                pa.list_(pa.float64()),
            )
        table = _with_seconds(pa.table(arrays), MAIN_PASS, started)
        table = _extra_passes(table, self.runners, self.scorer, runner_batch)
        return table.append_column(TEXT, batch[TEXT]) if self.keep_text else table


class PassStage:
    """Model actor for the extra-pass methods that run on a model of their own (``on``):
    the reference model's (Ref: each row's text on the reference tokenizer, against the
    row's target ``loss``) or a target replica of GradNorm's (its backward passes need
    memory the scoring actors keep for batches). It drops the text unless ``keep_text``.

    The tokenizer runs here, not in a CPU stage: its ids are only this actor's (the
    reference model has its own tokenizer; the scoring stage drops the target's ids).
    """

    def __init__(
        self,
        model: ModelConfig,
        scoring: ScoringConfig,
        threads: int,
        baselines: BaselinesConfig,
        on: str,
        keep_text: bool = False,
        gpus: int = 1,
    ) -> None:
        torch.set_num_threads(threads)
        # Token scores are the target model's main pass; this stage scores documents only.
        self.scorer = DocumentScorer(
            load_model(model, gpus), scoring.model_copy(update={"token_scores": False})
        )
        self.runners = _runners(baselines, on)
        # The stage that reads the main pass's per-token log p is the last to need them.
        self.reads_logprobs = reads_target_logprobs(baselines, on)
        self.keep_text = keep_text

    def __call__(self, batch: pa.Table) -> pa.Table:
        documents = self.scorer.encode(batch[TEXT].to_pylist())
        runner_batch = RunnerBatch(
            documents, pl.Series(batch[LOSS].to_pylist(), dtype=pl.Float64),
            target_logprobs=_target_logprobs(batch) if self.reads_logprobs else None,
        )  # fmt: skip
        dropped = [TEXT, *([TARGET_LOGPROBS] if self.reads_logprobs else [])]
        table = _extra_passes(batch.drop_columns(dropped), self.runners, self.scorer, runner_batch)
        return table.append_column(TEXT, batch[TEXT]) if self.keep_text else table
