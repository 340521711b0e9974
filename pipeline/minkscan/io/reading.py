"""Reading one piece into the rows the pipeline scores. Every piece is read into the same
columns (``id`` and ``text`` as strings, ``source``, ``row``, ``_piece``, ``_status``),
whatever types its file had, so shards that disagree on types cannot break the run, and a
row whose text cannot be decoded gets a status instead of failing its piece.
"""

from __future__ import annotations

import io
import json
from collections.abc import Iterator

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.csv as pacsv
import pyarrow.fs as pafs
import pyarrow.json as pajson
import pyarrow.parquet as pq

from minkscan.io import content
from minkscan.io.inputs import InputFile, Piece, ShardError
from minkscan.schema import (
    BAD_ENCODING,
    CSV,
    ID,
    JSONL,
    NOT_TEXT,
    PARQUET,
    PIECE,
    PIECE_ROWS,
    PRESET_STATUS,
    ROW,
    SOURCE,
    TEXT,
    derived_id,
)

# Rows per block yielded by a piece read: small blocks keep every scoring actor busy.
READ_BLOCK_ROWS = 1024
# Set by a JSONL read whose text column mixes strings with other values (see `_read_jsonl`).
NOT_TEXT_FLAG = "_not_text"


def read_table(
    fs: pafs.FileSystem,
    piece: Piece,
    columns: list[str],
    text_column: str | None = None,
    id_column: str | None = None,
) -> pa.Table:
    """The raw columns of a piece (those of ``columns`` the file has; ``text_column`` is
    the one that holds the documents, ``id_column`` the ids, if among them). In CSV both
    are read as the text they are (no number or date inference: ``007`` stays ``007``),
    and in JSON lines ids that are strings stay strings (a date is not parsed).

    What is read is checked against the content the piece was planned for: a file changed
    since raises `content.ContentChanged` instead of mixing its new rows with old ones."""
    file = piece.file
    if file.format == PARQUET:
        with fs.open_input_file(file.path) as handle:
            if file.content:
                found = content.parquet_footer(handle)
                content.verify(file.path, content.footer_part(file.content), found)
            parquet = pq.ParquetFile(handle)
            present = [c for c in columns if c in parquet.schema_arrow.names]
            return parquet.read_row_groups(list(piece.row_groups), columns=present)
    raw = raw_bytes(fs, file)
    as_text = [c for c in (text_column, id_column) if c]
    if file.format == JSONL:
        schema = pa.schema([(id_column, pa.string())]) if id_column else None
        options = pajson.ParseOptions(explicit_schema=schema, unexpected_field_behavior="infer")
        try:
            table = pajson.read_json(io.BytesIO(raw), parse_options=options)
        except pa.ArrowInvalid:  # a column whose type changes between rows, numeric ids
            return _read_jsonl(raw, columns, text_column)
    elif file.format == CSV:
        options = pacsv.ConvertOptions(column_types={c: pa.string() for c in as_text})
        table = pacsv.read_csv(io.BytesIO(raw), convert_options=options)
    else:
        table = pa.ipc.open_stream(io.BytesIO(raw)).read_all()
    return table.select([c for c in columns if c in table.column_names])


def raw_bytes(fs: pafs.FileSystem, file: InputFile) -> bytes:
    """A whole file's bytes, checked against its planned content (if it has one),
    decompressed if ``.gz``."""
    with fs.open_input_stream(file.path, compression=None) as stream:
        raw = stream.read()
        if file.content:
            found = (
                content.of_bytes(raw) if isinstance(fs, pafs.LocalFileSystem)
                else content.of_etag(stream.metadata())
            )  # fmt: skip
            content.verify(file.path, file.content, found)
    if file.path.lower().endswith(".gz"):
        return pa.input_stream(pa.py_buffer(raw), compression="gzip").read()
    return raw


def read_file(fs: pafs.FileSystem, file: InputFile, columns: list[str]) -> pa.Table:
    """Every row of one input file, in file order, with those of ``columns`` it has
    (ShardError naming the file when it cannot be read)."""
    try:
        if file.format == PARQUET:
            with fs.open_input_file(file.path) as handle:
                parquet = pq.ParquetFile(handle)
                present = [c for c in columns if c in parquet.schema_arrow.names]
                return parquet.read(columns=present)
        return read_table(fs, Piece(file, 0, None), columns)
    except (OSError, ValueError, pa.ArrowException) as error:
        raise ShardError(f"cannot read input {file.path}: {error}") from error


def _read_jsonl(raw: bytes, columns: list[str], text_column: str | None) -> pa.Table:
    """JSON lines whose columns mix types (ids 1 and "b", say), parsed record by record:
    each column becomes strings (`_typed_string`), except that a text column value that is
    not a string is flagged in `NOT_TEXT_FLAG` (its row gets status not_text)."""
    records = []
    for number, line in enumerate(raw.decode("utf-8").splitlines(), start=1):
        if not line.strip():
            continue
        try:
            records.append(json.loads(line))
        except json.JSONDecodeError as error:  # the file's line, not the record's
            raise ValueError(f"line {number} is not JSON ({error.msg})") from None
    present = [c for c in columns if any(c in record for record in records)]
    table = {}
    for name in present:
        values = [record.get(name) for record in records]
        table[name] = pa.array([_typed_string(v) for v in values], pa.large_string())
        if name == text_column:
            table[name] = pa.array([v if isinstance(v, str) else None for v in values],
                                   pa.large_string())  # fmt: skip
            table[NOT_TEXT_FLAG] = pa.array([v is not None and not isinstance(v, str)
                                             for v in values])  # fmt: skip
    return pa.table(table)


def _typed_string(value: object) -> str | None:
    """A value as an id string that keeps its type apart: 2 -> "2", 2.0 -> "2.0"."""
    if value is None or isinstance(value, str):
        return value
    if isinstance(value, float):
        return repr(value)
    if isinstance(value, (int, bool)):
        return str(value)
    return json.dumps(value, sort_keys=True, default=str)  # dates and the like as text


def _text_and_status(column: pa.ChunkedArray) -> tuple[pa.Array, pa.Array]:
    """The text column as strings plus a preset status per row: ``bad_encoding`` for bytes
    that are not UTF-8, ``not_text`` for values of a non-text type, null otherwise."""
    array = column.combine_chunks()
    n = len(array)
    if pa.types.is_string(array.type) or pa.types.is_large_string(array.type):
        try:
            array.validate(full=True)
            return array.cast(pa.large_string()), pa.nulls(n, pa.string())
        except pa.ArrowInvalid:
            array = array.cast(pa.large_binary() if pa.types.is_large_string(array.type)
                               else pa.binary())  # fmt: skip
    if pa.types.is_binary(array.type) or pa.types.is_large_binary(array.type):
        texts, statuses = [], []
        for value in array.to_pylist():
            try:
                texts.append(None if value is None else value.decode("utf-8"))
                statuses.append(None)
            except UnicodeDecodeError:
                texts.append(None)
                statuses.append(BAD_ENCODING)
        return pa.array(texts, pa.large_string()), pa.array(statuses, pa.string())
    if pa.types.is_null(array.type):
        return pa.nulls(n, pa.large_string()), pa.nulls(n, pa.string())
    statuses = pa.array([None if v is None else NOT_TEXT for v in array.to_pylist()], pa.string())
    return pa.nulls(n, pa.large_string()), statuses


def _ids_as_strings(column: pa.ChunkedArray) -> pa.Array:
    """Ids as strings that keep their type apart: the integer 2 is "2", the float 2.0 is
    "2.0" (Arrow's cast would make both "2")."""
    array = column.combine_chunks()
    if pa.types.is_floating(array.type) or not (
        pa.types.is_integer(array.type)
        or pa.types.is_string(array.type)
        or pa.types.is_large_string(array.type)
    ):
        return pa.array([_typed_string(v) for v in array.to_pylist()], pa.string())
    return array.cast(pa.string())


def read_piece(
    fs: pafs.FileSystem,
    piece: Piece,
    *,
    text_column: str,
    id_column: str | None,
    keep_columns: tuple[str, ...] = (),
) -> Iterator[pa.Table]:
    """The rows of ``piece`` not yet committed, in blocks, with the pipeline's columns.

    ``id_column`` None derives ids from the relative path and row. Raises ShardError naming
    the file when it cannot be read (a broken footer or data page, a missing column).
    """
    columns = [text_column, *([id_column] if id_column else []), *keep_columns]
    try:
        table = read_table(fs, piece, columns, text_column, id_column)
    except (OSError, ValueError, pa.ArrowException) as error:
        raise ShardError(f"cannot read input shard {piece.file.path}: {error}") from error
    missing = [c for c in columns if c not in table.column_names]
    if missing:
        raise ShardError(f"cannot read input shard {piece.file.path}: no column(s) {missing}")
    if piece.end is not None:  # a piece cut short by data.limit
        table = table.slice(0, piece.end - piece.start)
    end = piece.start + table.num_rows
    rows = np.arange(piece.start, end, dtype=np.int64)
    text, status = _text_and_status(table[text_column])
    if NOT_TEXT_FLAG in table.column_names:
        status = pc.if_else(table[NOT_TEXT_FLAG], pa.scalar(NOT_TEXT), status)
    relpath = piece.file.relpath
    ids = (
        _ids_as_strings(table[id_column]) if id_column
        else pa.array([derived_id(relpath, row) for row in rows.tolist()], pa.string())
    )  # fmt: skip
    out = pa.table(
        {
            ID: ids,
            TEXT: text,
            SOURCE: pa.array([relpath] * table.num_rows, pa.string()),
            ROW: rows,
            PIECE: pa.array([str(piece.key(end))] * table.num_rows, pa.string()),
            PRESET_STATUS: status,
            **{name: table[name] for name in keep_columns},
        }
    )
    if piece.done_rows:
        done = pa.array(np.asarray(piece.done_rows, dtype=np.int64))
        out = out.filter(pc.invert(pc.is_in(out[ROW], value_set=done)))
    out = out.append_column(PIECE_ROWS, pa.array([out.num_rows] * out.num_rows, pa.int64()))
    for offset in range(0, out.num_rows, READ_BLOCK_ROWS):
        yield out.slice(offset, READ_BLOCK_ROWS)


def read_ids(fs: pafs.FileSystem, piece: Piece, id_column: str) -> pa.Array:
    """The ids of a piece as strings, reading the id column alone where the format allows."""
    try:
        table = read_table(fs, piece, [id_column], id_column=id_column)
    except (OSError, ValueError, pa.ArrowException) as error:
        raise ShardError(f"cannot read input shard {piece.file.path}: {error}") from error
    if piece.end is not None:
        table = table.slice(0, piece.end - piece.start)
    return _ids_as_strings(table[id_column])
