"""Repeated and null document ids, counted over the whole input with Ray Data before scoring.

Completion is tracked per input piece, so repeated ids cost no row; they are still worth
knowing (a join on ``id`` downstream would multiply rows), and ``data.require_unique_ids``
refuses them. Over a large input the count is a distributed group-by on the id column
alone, and the driver only receives per-block totals and a few examples; a small input (an
audited test set, a nightly delta) has its ids counted on the driver, where they take a
fraction of a second instead of the seconds a distributed group-by needs to start.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.fs as pafs
import ray
from ray.data.context import ShuffleStrategy

from minkscan.distributed.context import data_context
from minkscan.io.inputs import (
    DESCRIPTOR,
    InputError,
    Piece,
    ShardError,
    piece_descriptor,
    piece_from_descriptor,
)
from minkscan.io.reading import read_ids
from minkscan.io.scores import ScoreOutput
from minkscan.schema import ID

if TYPE_CHECKING:
    from minkscan.config import DataConfig

EXAMPLES = 5
ID_PARTITIONS = 4
ID_TASK_CPUS = 0.25
COUNT = "count()"
# At most this many input bytes in at most this many files: ids counted on the driver.
DRIVER_BYTES = 64 << 20
DRIVER_FILES = 256


@dataclass
class IdReport:
    """How many ids repeat (and how many extra rows they hold), how many rows have none."""

    repeated_ids: int = 0
    extra_rows: int = 0
    null_ids: int = 0
    examples: list[str] = field(default_factory=list)

    def add(self, totals: dict[str, Any]) -> None:
        """Fold in one `_totals` row."""
        self.repeated_ids += totals["repeated"]
        self.extra_rows += totals["extra"]
        self.null_ids += totals["nulls"]
        self.examples = (self.examples + list(totals["examples"]))[:EXAMPLES]

    def line(self) -> str:
        """'' when every id is present and unique, else what is wrong, with examples."""
        parts = []
        if self.repeated_ids:
            parts.append(
                f"{self.repeated_ids} repeated ids ({self.extra_rows} extra rows; e.g. "
                f"{', '.join(self.examples)})"
            )
        if self.null_ids:
            parts.append(f"{self.null_ids} rows without an id")
        return ", ".join(parts)


def _piece_ids(
    fs: pafs.FileSystem, piece: Piece, id_column: str, output_root: str, skip_bad: bool
) -> pa.Array | None:
    """The ids of a piece; a piece that cannot be read fails the run naming its shard, or
    with ``skip_bad`` is recorded as a bad shard (as the read stage would) and gives None."""
    try:
        return read_ids(fs, piece, id_column)
    except ShardError as error:
        if not skip_bad:
            raise
        ScoreOutput(fs, output_root).mark_bad(piece.file, str(error))
        return None


def _concat(arrays: list[pa.Array | None]) -> pa.Table:
    present = [array for array in arrays if array is not None]
    return pa.table({ID: pa.concat_arrays(present) if present else pa.array([], pa.string())})


def _ids(
    batch: pa.Table, *, fs: pafs.FileSystem, id_column: str, output_root: str, skip_bad: bool
) -> pa.Table:
    """The ids of each piece of a batch of piece descriptors (see `_piece_ids`)."""
    return _concat([
        _piece_ids(fs, piece_from_descriptor(descriptor), id_column, output_root, skip_bad)
        for descriptor in batch[DESCRIPTOR].to_pylist()
    ])  # fmt: skip


def _totals(groups: pa.Table) -> pa.Table:
    """Per block of (id, count) groups: repeated ids, their extra rows, null-id rows."""
    counts = groups[COUNT]
    present = pc.is_valid(groups[ID])
    repeated = groups.filter(pc.and_(present, pc.greater(counts, 1)))
    nulls = groups.filter(pc.invert(present))
    return pa.table(
        {
            "repeated": [repeated.num_rows],
            "extra": [int(pc.sum(repeated[COUNT]).as_py() or 0) - repeated.num_rows],
            "nulls": [int(pc.sum(nulls[COUNT]).as_py() or 0)],
            "examples": [repeated[ID].to_pylist()[:EXAMPLES]],
        }
    )


def on_driver(pieces: list[Piece]) -> bool:
    """Whether the input is small enough to count its ids on the driver."""
    files = {piece.file.path: piece.file.size for piece in pieces}
    known = all(size >= 0 for size in files.values())
    return known and len(files) <= DRIVER_FILES and sum(files.values()) <= DRIVER_BYTES


def check_ids(
    data: DataConfig, pieces: list[Piece], fs: pafs.FileSystem, output_root: str
) -> IdReport:
    """Count repeated and null ids over every input piece; with ``require_unique_ids``
    raise InputError (before any scoring) when there are any. Shards that cannot be read
    are skipped and recorded under ``data.skip_bad_shards``, else fail the run."""
    report = IdReport()
    reading = {"id_column": data.id_column, "output_root": output_root,
               "skip_bad": data.skip_bad_shards}  # fmt: skip
    if on_driver(pieces):
        ids = _concat([_piece_ids(fs, piece, **reading) for piece in pieces])
        groups = ids.group_by(ID).aggregate([([], "count_all")])
        report.add(_totals(pa.table({ID: groups[ID], COUNT: groups["count_all"]})).to_pylist()[0])
    else:
        for totals in _distributed_totals(pieces, fs, reading):
            report.add(totals)
    if data.require_unique_ids and report.line():
        raise InputError(f"input ids are not unique: {report.line()} (data.require_unique_ids)")
    return report


def _distributed_totals(
    pieces: list[Piece], fs: pafs.FileSystem, reading: dict[str, Any]
) -> Iterator[dict[str, Any]]:
    """`_totals` rows of a Ray Data group-by over the ids of every piece."""
    ids = ray.data.from_items(
        [piece_descriptor(piece) for piece in pieces], override_num_blocks=len(pieces)
    ).map_batches(
        _ids, batch_format="pyarrow", batch_size=1, num_cpus=ID_TASK_CPUS,
        fn_kwargs={"fs": fs, **reading},
    )  # fmt: skip
    # A handful of partitions: the id column is small next to the documents it names.
    # Ray Data's sort-based shuffle runs as plain tasks: it starts in about a second where the
    # hash shuffle's aggregator actors take ~20 s on a small node.
    with data_context(shuffle_strategy=ShuffleStrategy.SORT_SHUFFLE_PULL_BASED):
        totals = ids.groupby(ID, num_partitions=ID_PARTITIONS).count()
        yield from totals.map_batches(_totals, batch_format="pyarrow").iter_rows()
