"""The light ends of the pipeline: reading input pieces into rows, and committing scored
rows as score files. They import no model code, so their Ray workers start in a second.

Every row carries ``id``, ``source``, ``row``, ``_piece`` and the kept input columns from
the read to the commit, so the committed files say which input rows they hold.
"""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Iterator

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.fs as pafs

from minkscan.io.scores import ScoreOutput
from minkscan.io.sources import (
    PIECE,
    ROW,
    ShardError,
    piece_from_descriptor,
    read_piece,
)

STATUS = "status"


def read_pieces(
    batch: pa.Table,
    *,
    fs: pafs.FileSystem,
    output_root: str,
    text_column: str,
    id_column: str | None,
    keep_columns: tuple[str, ...],
    skip_bad: bool,
) -> Iterator[pa.Table]:
    """Read input pieces (one descriptor per row) into blocks of the pipeline's columns.

    A piece that fails while being read (broken data page, missing column) fails the run
    with its path, or with ``skip_bad`` is recorded in the output's ``_bad/`` and yields no
    row; the driver then drops that shard's other pieces so none of it is half-written.
    """
    for descriptor in batch["piece"].to_pylist():
        piece = piece_from_descriptor(descriptor)
        try:
            yield from read_piece(
                fs, piece, text_column=text_column, id_column=id_column, keep_columns=keep_columns
            )
        except ShardError as error:
            if not skip_bad:
                raise
            ScoreOutput(fs, output_root).mark_bad(piece.file.key, piece.file.path, str(error))


def commit_scores(batch: pa.Table, *, fs: pafs.FileSystem, output_root: str) -> pa.Table:
    """Write the batch's rows as one score file per input piece; return one statistics row
    per file (the driver's progress and summary come from these, never from re-reading)."""
    output = ScoreOutput(fs, output_root)
    stats: dict[str, list] = {
        "piece": [], "rows": [], "tokens": [], "statuses": []
    }  # fmt: skip
    for piece in pc.unique(batch[PIECE]).to_pylist():
        rows = batch.filter(pc.equal(batch[PIECE], piece))
        output.write_part(rows.drop_columns([PIECE]), piece, pc.min(rows[ROW]).as_py())
        stats["piece"].append(piece)
        stats["rows"].append(rows.num_rows)
        stats["tokens"].append(int(pc.sum(rows["n_tokens"]).as_py() or 0))
        stats["statuses"].append(json.dumps(Counter(rows[STATUS].to_pylist())))
    return pa.table(stats)
