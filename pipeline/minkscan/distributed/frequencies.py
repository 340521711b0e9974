"""`count_tokens`: token frequencies of a reference corpus with Ray Data, for DC-PDD.

Input pieces (any format `minkscan score` reads) -> read tasks -> tokenizer actors that turn
each batch into one vector of counts per token id -> the driver adds the vectors as they
stream in. Memory is one vocabulary-sized vector per batch in flight, whatever the corpus
size. Each document counts its first ``max_tokens`` tokens, as in the DC-PDD code.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass

import numpy as np
import pyarrow as pa
import pyarrow.fs as pafs
import ray

from minkscan.config import ScanConfig
from minkscan.distributed.pipeline import LIGHT_TASK_CPUS
from minkscan.distributed.progress import quiet_ray
from minkscan.distributed.session import ray_session
from minkscan.distributed.spec import StageSpec
from minkscan.io.inputs import DESCRIPTOR, InputError, piece_descriptor, piece_from_descriptor
from minkscan.io.paths import filesystem_for
from minkscan.io.planning import plan_inputs
from minkscan.io.reading import read_piece
from minkscan.models.loading import load_tokenizer
from minkscan.schema import TEXT
from minkscan.text.frequencies import exists, write_frequencies


def _read_texts(batch: pa.Table, *, fs: pafs.FileSystem, text_column: str) -> Iterator[pa.Table]:
    for descriptor in batch[DESCRIPTOR].to_pylist():
        piece = piece_from_descriptor(descriptor)
        for block in read_piece(fs, piece, text_column=text_column, id_column=None):
            yield block.select([TEXT])


class CountTokens:
    """Tokenizer actor: a batch of texts -> one row holding its token counts per id."""

    def __init__(self, config: ScanConfig) -> None:
        self.tokenizer = load_tokenizer(config.model)
        self.vocab_size = len(self.tokenizer)
        self.max_tokens = config.scoring.max_tokens

    def __call__(self, batch: pa.Table) -> pa.Table:
        texts = [t for t in batch[TEXT].to_pylist() if isinstance(t, str) and t.strip()]
        counts = np.zeros(self.vocab_size, dtype=np.int64)
        tokens = 0
        if texts:
            for ids in self.tokenizer(texts, add_special_tokens=True)["input_ids"]:
                ids = ids[: self.max_tokens]
                counts += np.bincount(ids, minlength=self.vocab_size)[: self.vocab_size]
                tokens += len(ids)
        return pa.table({"counts": [counts], "documents": [len(texts)], "tokens": [tokens]})


@dataclass(frozen=True)
class FrequencySummary:
    output: str
    documents: int
    tokens: int
    distinct: int

    def line(self) -> str:
        return (
            f"counted {self.tokens} tokens of {self.documents} documents "
            f"({self.distinct} distinct ids); wrote {self.output}"
        )


def count_tokens(config: ScanConfig, output: str) -> FrequencySummary:
    """Count the tokens of ``config.data.input`` with ``config.model``'s tokenizer into
    ``output`` (a frequency file, local or s3://)."""
    data = config.data
    if exists(output):
        raise InputError(f"{output} already exists; give a new path for the frequency file")
    fs = filesystem_for(list(data.input), data.s3)
    pieces = plan_inputs(fs, data, id_column="").pieces
    if not pieces:  # every shard was bad and skipped
        raise InputError(f"the inputs hold no rows: {', '.join(data.input)}")
    stages = [
        StageSpec("read", _read_texts, {"fs": fs, "text_column": data.text_column},
                  cpus=LIGHT_TASK_CPUS, batch_rows=1),
        StageSpec("count", CountTokens, {"config": config}, cpus=1,
                  batch_rows=config.ray.block_rows,
                  pool=(config.ray.num_actors, config.ray.num_actors)),
    ]  # fmt: skip
    with quiet_ray(), ray_session(config, stages):
        dataset = ray.data.from_items(
            [piece_descriptor(piece) for piece in pieces], override_num_blocks=len(pieces)
        )
        for spec in stages:
            dataset = spec.apply(dataset)
        total, documents, tokens = None, 0, 0
        for batch in dataset.iter_batches(batch_format="pyarrow", batch_size=None):
            for counts in batch["counts"].to_numpy(zero_copy_only=False):
                total = counts if total is None else total + counts
            documents += int(sum(batch["documents"].to_pylist()))
            tokens += int(sum(batch["tokens"].to_pylist()))
    facts = {
        "tokenizer": config.model.name,
        "documents": documents,
        "tokens": tokens,
        "max_tokens": config.scoring.max_tokens,
        "inputs": list(data.input),
    }
    write_frequencies(output, total, facts)
    return FrequencySummary(output, documents, tokens, int((total > 0).sum()))
