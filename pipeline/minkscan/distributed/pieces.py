"""The light ends of the pipeline: reading input pieces into rows, and committing scored
rows as score files. They import no model code, so their Ray workers start in a second.

Every row carries ``id``, ``source``, ``row``, ``_piece`` and the kept input columns from
the read to the commit, so the committed files say which input rows they hold. The model
stages add each row's share of their compute seconds per forward pass (`seconds_column`);
the commit sums those into its statistics and drops them.
"""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Iterator

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.fs as pafs

from minkscan.io.inputs import DESCRIPTOR, ShardError, piece_from_descriptor
from minkscan.io.reading import read_piece
from minkscan.io.scores import ScoreOutput
from minkscan.schema import N_TOKENS, PIECE, ROW, SECONDS_PREFIX, STATUS


def seconds_column(pass_key: str, seconds: float, rows: int) -> tuple[str, pa.Array]:
    """The hidden column giving each of ``rows`` rows an equal share of ``seconds`` spent on
    the forward pass(es) ``pass_key`` (a `minkscan.methods` key or MAIN_PASS)."""
    return f"{SECONDS_PREFIX}{pass_key}", pa.array([seconds / max(rows, 1)] * rows, pa.float64())


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
    for descriptor in batch[DESCRIPTOR].to_pylist():
        piece = piece_from_descriptor(descriptor)
        try:
            yield from read_piece(
                fs, piece, text_column=text_column, id_column=id_column, keep_columns=keep_columns
            )
        except ShardError as error:
            if not skip_bad:
                raise
            ScoreOutput(fs, output_root).mark_bad(piece.file, str(error))


def commit_scores(batch: pa.Table, *, fs: pafs.FileSystem, output_root: str) -> pa.Table:
    """Write the batch's rows as one score file per input piece; return one statistics row
    per file (the driver's progress and summary come from these, never from re-reading):
    its piece, rows, tokens, statuses and compute seconds per forward pass, the last two as
    JSON. A write that fails raises OutputWriteError naming the file and the cause."""
    output = ScoreOutput(fs, output_root)
    timing = [name for name in batch.column_names if name.startswith(SECONDS_PREFIX)]
    stats: dict[str, list] = {
        "piece": [], "rows": [], "tokens": [], "statuses": [], "seconds": []
    }  # fmt: skip
    for piece in pc.unique(batch[PIECE]).to_pylist():
        rows = batch.filter(pc.equal(batch[PIECE], piece))
        output.write_part(rows.drop_columns([PIECE, *timing]), piece, pc.min(rows[ROW]).as_py())
        stats["piece"].append(piece)
        stats["rows"].append(rows.num_rows)
        stats["tokens"].append(int(pc.sum(rows[N_TOKENS]).as_py() or 0))
        stats["statuses"].append(json.dumps(Counter(rows[STATUS].to_pylist())))
        seconds = {name.removeprefix(SECONDS_PREFIX): pc.sum(rows[name]).as_py() for name in timing}
        stats["seconds"].append(json.dumps(seconds))
    return pa.table(stats)
