"""The per-batch stages Ray Data runs: id assignment and resume filtering, CPU tokenisation,
and the model actor. Each stage maps a pyarrow batch to a pyarrow batch; the math stays in
`pipeline.scorer` / `pipeline.scoring`.
"""

from __future__ import annotations

import math

import pyarrow as pa
import pyarrow.compute as pc
import torch
from transformers import AutoTokenizer, PreTrainedTokenizerBase

from pipeline.config import ModelConfig, ScoringConfig
from pipeline.io.ids import derived_ids
from pipeline.models.loading import BUNDLED_GGUF, cached_bundled_model, load_model
from pipeline.scorer import DocumentScorer
from pipeline.text.tokenize import EncodedDocument, encode_documents

ID = "id"
TEXT = "text"
INPUT_IDS = "input_ids"
STATUS = "status"


def load_tokenizer(config: ModelConfig) -> PreTrainedTokenizerBase:
    """Only the tokenizer of ``config.name`` (bundled models are dequantised on first use)."""
    source = (
        cached_bundled_model(config.name, config.cache_dir)
        if config.name in BUNDLED_GGUF
        else config.name
    )
    return AutoTokenizer.from_pretrained(
        source, revision=config.revision, trust_remote_code=config.trust_remote_code
    )


def prepare_rows(
    batch: pa.Table, *, text_column: str, id_column: str | None, finished: pa.Array
) -> pa.Table:
    """Columns ``id`` and ``text`` of the rows not already in the output.

    ``id_column`` None derives ids from Ray's ``path`` / ``row_hash`` columns.
    """
    if id_column is None:
        ids = pa.array(
            derived_ids(batch["path"].to_pylist(), batch["row_hash"].to_numpy()), pa.string()
        )
    else:
        ids = batch[id_column].combine_chunks()
    rows = pa.table({ID: ids, TEXT: batch[text_column]})
    if len(finished):
        rows = rows.filter(pc.invert(pc.is_in(rows[ID], value_set=finished.cast(ids.type))))
    return rows


class TokenizeStage:
    """CPU stage: text -> token ids and a status per row (bad text gets a status, not an error)."""

    def __init__(self, model: ModelConfig, scoring: ScoringConfig) -> None:
        self.tokenizer = load_tokenizer(model)
        self.scoring = scoring

    def __call__(self, batch: pa.Table) -> pa.Table:
        documents = encode_documents(
            self.tokenizer,
            batch[TEXT].to_pylist(),
            max_tokens=self.scoring.max_tokens,
            prepend_bos=self.scoring.prepend_bos,
        )
        return pa.table(
            {
                ID: batch[ID],
                TEXT: pa.array([doc.text for doc in documents], pa.string()),
                INPUT_IDS: pa.array(
                    [list(doc.input_ids) for doc in documents], pa.list_(pa.int32())
                ),
                STATUS: pa.array([doc.status for doc in documents], pa.string()),
            }
        )


class ScoreStage:
    """Model actor: one replica of the model scoring tokenised rows (length-bucketed batches)."""

    def __init__(self, model: ModelConfig, scoring: ScoringConfig, threads: int) -> None:
        torch.set_num_threads(threads)
        self.scorer = DocumentScorer(load_model(model), scoring)

    def __call__(self, batch: pa.Table) -> pa.Table:
        documents = [
            EncodedDocument(text, tuple(ids), status)
            for text, ids, status in zip(
                batch[TEXT].to_pylist(),
                batch[INPUT_IDS].to_pylist(),
                batch[STATUS].to_pylist(),
                strict=True,
            )
        ]
        columns = self.scorer.score_documents(documents)
        arrays = {ID: batch[ID], "n_tokens": pa.array(columns["n_tokens"], pa.int64())}
        arrays[STATUS] = pa.array(columns[STATUS], pa.string())
        for name in self.scorer.columns:
            arrays[name] = pa.array(columns[name], pa.float64())
        return pa.table(arrays)


def torch_threads(cpus_per_actor: float) -> int:
    """Intra-op threads for an actor holding ``cpus_per_actor`` CPUs (at least one)."""
    return max(1, math.floor(cpus_per_actor + 0.5))
