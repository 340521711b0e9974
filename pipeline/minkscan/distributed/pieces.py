"""The light ends of the pipeline: reading input pieces into rows, and committing scored
rows as score files. They import no model code, so their Ray workers start in a second.

Every row carries ``id``, ``source``, ``row``, ``_piece``, ``_piece_rows`` and the kept
input columns from the read to the commit, so the committed files say which input rows they
hold and the commit knows when it has seen all of a piece. The model
stages add each row's share of their compute seconds per forward pass (`seconds_column`);
the commit sums those into its statistics and drops them.
"""

from __future__ import annotations

import json
import time
from collections import Counter, defaultdict
from collections.abc import Callable, Iterator

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.fs as pafs

from minkscan.io.inputs import DESCRIPTOR, ShardError, piece_from_descriptor
from minkscan.io.reading import read_piece
from minkscan.io.scores import ScoreOutput
from minkscan.schema import N_TOKENS, PIECE, PIECE_ROWS, ROW, SECONDS_PREFIX, STATUS

# What the commit streams back to the driver, one row per piece per call (`CommitStage`).
STATISTICS = pa.schema(
    [("piece", pa.string()), ("arrived", pa.int64()), ("rows", pa.int64()),
     ("tokens", pa.int64()), ("statuses", pa.string()), ("seconds", pa.string())]
)  # fmt: skip


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


class CommitStage:
    """Writes scored rows as score files (one per input piece per commit), from one actor
    that sees every scored block as it arrives, and streams statistics rows back.

    It holds rows back until one of: ``commit_rows`` rows are held, the oldest held row
    arrived ``commit_seconds`` ago (checked as each block arrives; 0 commits every block),
    or every row this run reads of a piece has arrived (`PIECE_ROWS`), so the last rows of
    the run are always written. A kill loses only the rows held. ``clock`` is injectable
    for tests. Each call returns one statistics row per piece: ``arrived`` (rows scored,
    for progress) and, for a piece it wrote, its rows, tokens, statuses and compute seconds
    per forward pass (the driver's progress and summary come from these, never from
    re-reading). A write that fails raises OutputWriteError naming the file and the cause.
    """

    def __init__(
        self,
        *,
        fs: pafs.FileSystem,
        output_root: str,
        commit_rows: int,
        commit_seconds: float,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.output = ScoreOutput(fs, output_root)
        self.commit_rows, self.commit_seconds, self.clock = commit_rows, commit_seconds, clock
        self.held: dict[str, list[pa.Table]] = defaultdict(list)
        self.held_rows = 0
        self.arrived: Counter = Counter()  # rows seen of each piece not yet all written
        self.expected: dict[str, int] = {}  # and the rows this run reads of it
        self.oldest: float | None = None  # when the oldest row held arrived

    def __call__(self, batch: pa.Table) -> pa.Table:
        now = self.clock()
        self.oldest = now if self.oldest is None else self.oldest
        arrived: Counter = Counter()
        for piece in pc.unique(batch[PIECE]).to_pylist():
            rows = batch.filter(pc.equal(batch[PIECE], piece))
            self.held[piece].append(rows)
            self.held_rows += rows.num_rows
            arrived[piece] += rows.num_rows
            self.arrived[piece] += rows.num_rows
            self.expected[piece] = rows[PIECE_ROWS][0].as_py()
        if self.held_rows >= self.commit_rows or now - self.oldest >= self.commit_seconds:
            due = list(self.held)
        else:
            due = [piece for piece in self.held if self.arrived[piece] == self.expected[piece]]
        written = {piece: self._write(piece) for piece in due}
        for piece in due:
            if self.arrived[piece] == self.expected[piece]:  # all of it written: forget it
                del self.arrived[piece], self.expected[piece]
        if not self.held:
            self.oldest = None
        nothing = {"rows": 0, "tokens": 0, "statuses": "{}", "seconds": "{}"}
        return pa.Table.from_pylist(
            [{"piece": piece, "arrived": arrived[piece], **written.get(piece, nothing)}
             for piece in sorted(set(arrived) | set(written))],
            schema=STATISTICS,
        )  # fmt: skip

    def _write(self, piece: str) -> dict[str, object]:
        """Write the rows held of ``piece`` as one score file; its statistics."""
        rows = pa.concat_tables(self.held.pop(piece))
        self.held_rows -= rows.num_rows
        timing = [name for name in rows.column_names if name.startswith(SECONDS_PREFIX)]
        self.output.write_part(
            rows.drop_columns([PIECE, PIECE_ROWS, *timing]), piece, pc.min(rows[ROW]).as_py()
        )
        return {
            "rows": rows.num_rows,
            "tokens": int(pc.sum(rows[N_TOKENS]).as_py() or 0),
            "statuses": json.dumps(Counter(rows[STATUS].to_pylist())),
            "seconds": json.dumps(
                {name.removeprefix(SECONDS_PREFIX): pc.sum(rows[name]).as_py() for name in timing}
            ),  # fmt: skip
        }
