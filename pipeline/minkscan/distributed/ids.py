"""Repeated and null document ids, counted over the whole input with Ray Data before scoring.

Completion is tracked per input piece, so repeated ids cost no row; they are still worth
knowing (a join on ``id`` downstream would multiply rows), and ``data.require_unique_ids``
refuses them. The count is a distributed group-by on the id column alone; the driver only
receives per-block totals and a few examples.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING

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


@dataclass
class IdReport:
    """How many ids repeat (and how many extra rows they hold), how many rows have none."""

    repeated_ids: int = 0
    extra_rows: int = 0
    null_ids: int = 0
    examples: list[str] = field(default_factory=list)

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


def _ids(
    batch: pa.Table, *, fs: pafs.FileSystem, id_column: str, output_root: str, skip_bad: bool
) -> pa.Table:
    """The ids of each piece; a piece that cannot be read fails the run naming its shard,
    or with ``skip_bad`` is recorded as a bad shard (as the read stage would) and skipped."""
    arrays = []
    for descriptor in batch[DESCRIPTOR].to_pylist():
        piece = piece_from_descriptor(descriptor)
        try:
            arrays.append(read_ids(fs, piece, id_column))
        except ShardError as error:
            if not skip_bad:
                raise
            ScoreOutput(fs, output_root).mark_bad(piece.file, str(error))
    return pa.table({ID: pa.concat_arrays(arrays) if arrays else pa.array([], pa.string())})


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


def check_ids(
    data: DataConfig, pieces: list[Piece], fs: pafs.FileSystem, output_root: str
) -> IdReport:
    """Count repeated and null ids over every input piece; with ``require_unique_ids``
    raise InputError (before any scoring) when there are any. Shards that cannot be read
    are skipped and recorded under ``data.skip_bad_shards``, else fail the run."""
    ids = ray.data.from_items(
        [piece_descriptor(piece) for piece in pieces], override_num_blocks=len(pieces)
    ).map_batches(
        _ids,
        batch_format="pyarrow",
        batch_size=1,
        num_cpus=ID_TASK_CPUS,
        fn_kwargs={
            "fs": fs,
            "id_column": data.id_column,
            "output_root": output_root,
            "skip_bad": data.skip_bad_shards,
        },
    )
    report = IdReport()
    # A handful of partitions: the id column is small next to the documents it names.
    # Ray Data's sort-based shuffle runs as plain tasks: it starts in about a second where the
    # hash shuffle's aggregator actors take ~20 s on a small node.
    with data_context(shuffle_strategy=ShuffleStrategy.SORT_SHUFFLE_PULL_BASED):
        totals = ids.groupby(ID, num_partitions=ID_PARTITIONS).count()
        for row in totals.map_batches(_totals, batch_format="pyarrow").iter_rows():
            report.repeated_ids += row["repeated"]
            report.extra_rows += row["extra"]
            report.null_ids += row["nulls"]
            report.examples = (report.examples + list(row["examples"]))[:EXAMPLES]
    if data.require_unique_ids and report.line():
        raise InputError(f"input ids are not unique: {report.line()} (data.require_unique_ids)")
    return report
