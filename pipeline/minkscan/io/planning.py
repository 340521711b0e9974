"""Planning a run's reads: the pieces of every input file (about ``data.piece_rows`` rows
each) and its content fingerprint, from file listings and Parquet footers only (the bytes
of other formats are hashed), so planning and resuming never read a Parquet row; the files
that cannot be opened; byte-identical files read once; ``data.limit`` applied.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Any

import pyarrow.fs as pafs
import pyarrow.parquet as pq

from minkscan.config import DataConfig
from minkscan.io import content
from minkscan.io.inputs import (
    SAME_CONTENT,
    InputError,
    InputFile,
    Piece,
    ShardError,
    column_names,
    discover,
)
from minkscan.io.reading import read_table
from minkscan.schema import (
    PARQUET,
)

_NO_TEXT = "no column"


@dataclass(frozen=True)
class InputPlan:
    """The pieces to read, the files that cannot be opened ({path: reason}), whether the
    readable files carry the id column, the columns the files have, and the files the
    inputs hold that are not read ({path: reason}: `Discovery.skipped`, and files whose
    content another input already has)."""

    pieces: list[Piece]
    bad: dict[str, str]
    has_ids: bool
    columns: tuple[str, ...] = ()
    skipped: dict[str, str] = field(default_factory=dict)
    root: str = ""  # the input root relative paths start from


def plan_pieces(
    fs: pafs.FileSystem,
    files: list[InputFile],
    *,
    piece_rows: int,
    text_column: str,
    id_column: str,
    keep_columns: tuple[str, ...] = (),
) -> InputPlan:
    """Fingerprint every file and cut it into pieces, reading footers (Parquet) or first
    records only.

    A file that cannot be opened or lacks the text column is reported now, before any work,
    instead of failing inside the pipeline; so is one lacking a kept column (a user error,
    not a bad shard). Ids must be in every file or in none. A file with the content of one
    listed before it is not read (`SAME_CONTENT`).
    """
    pieces: list[Piece] = []
    bad: dict[str, str] = {}
    same: dict[str, str] = {}
    keys: set[str] = set()
    with_ids: dict[str, bool] = {}
    columns_seen: list[list[str]] = []
    for file in files:
        try:
            metadata: Any = None
            if file.format == PARQUET:
                with fs.open_input_file(file.path) as handle:
                    file = replace(file, content=content.parquet(fs, file.path, handle))
                    metadata = pq.ParquetFile(handle).metadata
                names = metadata.schema.to_arrow_schema().names
            else:
                file = replace(file, content=content.fingerprint(fs, file.path, file.format))
                names = column_names(fs, file)
            if file.key in keys:
                same[file.path] = SAME_CONTENT
                continue
            keys.add(file.key)
            columns_seen.append(names)
            if text_column not in names:
                raise ShardError(f"{_NO_TEXT} '{text_column}' (has {names[:10]})")
        except (OSError, ValueError, ShardError) as error:
            bad[file.path] = str(error)
            continue
        missing = [name for name in keep_columns if name not in names]
        if missing:
            raise InputError(
                f"--keep-columns: {file.path} has no column(s) {missing} (has {names[:10]})"
            )
        with_ids[file.relpath] = id_column in names
        if metadata is None:
            pieces.append(Piece(file, 0, None))
            continue
        start, groups, rows = 0, [], 0
        for index in range(metadata.num_row_groups):
            groups.append(index)
            rows += metadata.row_group(index).num_rows
            if rows >= piece_rows or index == metadata.num_row_groups - 1:
                if rows:
                    pieces.append(Piece(file, start, start + rows, tuple(groups)))
                start, groups, rows = start + rows, [], 0
    found = sorted({name for names in columns_seen for name in names})
    if bad and not pieces and all(reason.startswith(_NO_TEXT) for reason in bad.values()):
        raise InputError(
            f"no input has the text column '{text_column}' (columns found: "
            f"{', '.join(found[:10]) or 'none'}): name it with --text-column"
        )
    if len(set(with_ids.values())) > 1:
        missing = sorted(path for path, has in with_ids.items() if not has)
        raise ShardError(
            f"id column '{id_column}' is missing from some inputs ({', '.join(missing[:5])}): "
            "give it in every file, or in none to derive ids from file and row"
        )
    return InputPlan(pieces, bad, any(with_ids.values()), tuple(found), same)


def limit_pieces(
    fs: pafs.FileSystem, pieces: list[Piece], limit: int, text_column: str
) -> list[Piece]:
    """The pieces holding the first ``limit`` rows, the last one cut short. Files without an
    index are read here to count their rows, only until the limit is reached."""
    kept: list[Piece] = []
    remaining = limit
    for piece in pieces:
        if remaining <= 0:
            break
        rows = (
            piece.end - piece.start if piece.end is not None
            else read_table(fs, piece, [text_column], text_column).num_rows
        )  # fmt: skip
        take = min(rows, remaining)
        kept.append(Piece(piece.file, piece.start, piece.start + take, piece.row_groups))
        remaining -= take
    return kept


def plan_inputs(
    fs: pafs.FileSystem,
    data: DataConfig,
    *,
    id_column: str,
    keep_columns: tuple[str, ...] = (),
) -> InputPlan:
    """The pieces of ``data.input`` (cut to ``data.limit`` rows), planned before any work.

    Raises ShardError for an unreadable shard unless ``data.skip_bad_shards`` (then it is
    listed in ``bad``), and InputError when the inputs hold no rows at all.
    """
    found = discover(data.input, fs, format=data.format, root=data.input_root)
    inputs = plan_pieces(
        fs,
        found.files,
        piece_rows=data.piece_rows,
        text_column=data.text_column,
        id_column=id_column,
        keep_columns=keep_columns,
    )
    if inputs.bad and not data.skip_bad_shards:
        path, reason = next(iter(inputs.bad.items()))
        raise ShardError(f"cannot read input shard {path}: {reason} (--skip-bad-shards skips it)")
    if not inputs.pieces and not inputs.bad:
        raise InputError(f"the inputs hold no rows: {', '.join(data.input)}")
    if "id_column" in data.model_fields_set and inputs.pieces and not inputs.has_ids:
        raise InputError(
            f"no input has the id column '{id_column}' (columns found: "
            f"{', '.join(inputs.columns[:10])}): name it with --id-column, or leave it out to "
            "derive ids from file and row"
        )
    inputs = replace(inputs, skipped=found.skipped | inputs.skipped, root=found.root)
    if data.limit is None:
        return inputs
    return replace(inputs, pieces=limit_pieces(fs, inputs.pieces, data.limit, data.text_column))
