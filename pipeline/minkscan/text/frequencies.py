"""Token-frequency files: how often each token id of a tokenizer occurs in a reference corpus.

DC-PDD calibrates a document's token probabilities by these frequencies. A file is Parquet
with one row per token id (``token_id``, ``count``) and the run's facts in its schema
metadata (tokenizer, documents, tokens, max_tokens); `minkscan frequencies` writes it.
Reading applies the add-one smoothing of the DC-PDD code: p_ref(v) = (count(v) + 1) /
(total + V), so a token the corpus never showed still has a finite log p_ref.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass

import numpy as np
import pyarrow as pa
import pyarrow.fs as pafs
import pyarrow.parquet as pq

from minkscan.errors import UserError

METADATA_KEY = b"minkscan.frequencies"


class FrequencyFileError(UserError, ValueError):
    """A token-frequency file cannot be read; the message names it."""


@dataclass(frozen=True)
class ReferenceFrequencies:
    """Smoothed log p_ref per token id, and the value for ids beyond the file's vocabulary."""

    log_p: np.ndarray
    log_unseen: float
    tokenizer: str

    def of(self, token_ids: np.ndarray) -> np.ndarray:
        """log p_ref of each id (ids the counting tokenizer did not have count as unseen)."""
        inside = token_ids < self.log_p.size
        return np.where(inside, self.log_p[np.where(inside, token_ids, 0)], self.log_unseen)


def _filesystem(path: str) -> tuple[pafs.FileSystem, str]:
    if "://" in path:
        return pafs.FileSystem.from_uri(path)
    return pafs.LocalFileSystem(), os.path.abspath(os.path.expanduser(path))


def exists(path: str) -> bool:
    fs, where = _filesystem(path)
    return fs.get_file_info(where).type != pafs.FileType.NotFound


def write_frequencies(path: str, counts: np.ndarray, facts: dict[str, object]) -> None:
    """Write per-id ``counts`` with ``facts`` (tokenizer name, documents, tokens...)."""
    table = pa.table(
        {"token_id": pa.array(np.arange(counts.size), pa.int32()), "count": counts}
    ).replace_schema_metadata({METADATA_KEY: json.dumps(facts).encode()})
    fs, where = _filesystem(path)
    with fs.open_output_stream(where) as stream:
        pq.write_table(table, stream)


def read_frequencies(path: str) -> ReferenceFrequencies:
    """Smoothed reference log-probabilities from a file `write_frequencies` wrote."""
    fs, where = _filesystem(path)
    try:
        with fs.open_input_file(where) as handle:
            table = pq.read_table(handle)
    except (OSError, pa.ArrowException) as error:
        raise FrequencyFileError(f"cannot read token frequencies {path}: {error}") from None
    metadata = table.schema.metadata or {}
    if METADATA_KEY not in metadata:
        raise FrequencyFileError(f"{path} is not a token-frequency file (write one with `minkscan "
                         "frequencies`)")  # fmt: skip
    facts = json.loads(metadata[METADATA_KEY])
    ids = table["token_id"].to_numpy()
    counts = np.zeros(int(ids.max()) + 1 if ids.size else 0, dtype=np.float64)
    counts[ids] = table["count"].to_numpy()
    denominator = counts.sum() + counts.size
    return ReferenceFrequencies(
        np.log((counts + 1) / denominator), float(np.log(1 / denominator)), facts["tokenizer"]
    )
