"""Input documents: which files an input spec names, how they are cut into pieces, and how
one piece is read into the rows the pipeline scores.

A *piece* is the unit of work and of completion: a range of whole Parquet row groups (about
``data.piece_rows`` rows) or a whole file for formats without an index. Pieces are planned
from file listings and Parquet footers only, so planning and resuming cost O(files), never
O(rows). Every piece is read into the same columns (``id`` and ``text`` as strings,
``source``, ``row``, ``_piece``, ``_status``), whatever types its file had, so shards that
disagree on types cannot break the run, and a row whose text cannot be decoded gets a
status instead of failing its piece.

Derived ids are ``<path relative to the input root>:<row>``: they survive moving the data
and do not depend on Ray.
"""

from __future__ import annotations

import csv
import fnmatch
import hashlib
import io
import json
import posixpath
from collections.abc import Iterator
from dataclasses import dataclass, replace

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.csv as pacsv
import pyarrow.fs as pafs
import pyarrow.json as pajson
import pyarrow.parquet as pq

from minkscan.config import DataConfig
from minkscan.errors import RunFailed, UserError
from minkscan.io.paths import fs_path
from minkscan.schema import (
    ARROW,
    BAD_ENCODING,
    CSV,
    EXTENSIONS,
    FORMATS,
    ID,
    JSONL,
    MARKER,
    NOT_TEXT,
    PARQUET,
    PIECE,
    PRESET_STATUS,
    ROW,
    SOURCE,
    TEXT,
    PieceKey,
)

GLOB_CHARS = "*?["
# Rows per block yielded by a piece read: small blocks keep every scoring actor busy.
READ_BLOCK_ROWS = 1024
_NO_TEXT = "no column"
# Set by a JSONL read whose text column mixes strings with other values (see `_read_jsonl`).
NOT_TEXT_FLAG = "_not_text"


class ShardError(RunFailed):
    """An input shard cannot be read; the message names its path."""


class InputError(UserError, ValueError):
    """An input spec names nothing readable; the message names the spec."""


def file_format(path: str) -> str | None:
    """The format of ``path`` from its extension (None: not an input file)."""
    name = posixpath.basename(path).lower()
    for extension, kind in sorted(EXTENSIONS.items(), key=lambda item: -len(item[0])):
        if name.endswith(extension):
            return kind
    return None


def _walk(fs: pafs.FileSystem, directory: str) -> list[pafs.FileInfo]:
    """The files under ``directory``, minus hidden ones (``_`` or ``.``) and everything
    inside a minkscan score output (a directory holding its marker): scores are never
    read back as documents."""
    selector = pafs.FileSelector(directory, recursive=True)
    infos = [info for info in fs.get_file_info(selector) if info.type == pafs.FileType.File]
    outputs = tuple(info.path[: -len(MARKER)] for info in infos if info.base_name == MARKER)
    return sorted(
        (
            info for info in infos
            if not any(p.startswith(("_", ".")) for p in info.path[len(directory) :].split("/"))
            and not info.path.startswith(outputs or ("\0",))
        ),
        key=lambda info: info.path,
    )  # fmt: skip


def _spec_root(spec_path: str) -> str:
    """The directory an input spec is relative to: the spec if a directory, the part before
    the first glob character, else the file's parent."""
    if any(c in spec_path for c in GLOB_CHARS):
        return spec_path[: min(spec_path.index(c) for c in GLOB_CHARS if c in spec_path)].rsplit(
            "/", 1
        )[0]
    return spec_path


@dataclass(frozen=True)
class InputFile:
    """One input file: where it is, its path relative to the input root, its format, and
    its size and modification time (its fingerprint: a changed file is never mixed with
    the scores of its old content)."""

    path: str
    relpath: str
    format: str
    size: int = -1
    mtime_ns: int = -1

    @property
    def key(self) -> str:
        """A short stable key of the relative path, used in output file names."""
        return hashlib.sha1(self.relpath.encode()).hexdigest()[:16]

    @property
    def fingerprint(self) -> dict[str, int]:
        return {"size": self.size, "mtime_ns": self.mtime_ns}


def _input_file(info: pafs.FileInfo, relpath: str, format: str) -> InputFile:
    mtime = info.mtime_ns if info.mtime_ns is not None else -1
    return InputFile(info.path, relpath, format, info.size or 0, mtime)


def discover(
    specs: list[str], fs: pafs.FileSystem, *, format: str | None = None, root: str | None = None
) -> tuple[list[InputFile], str]:
    """Every input file named by ``specs`` (local or ``s3://``) and the input root their
    relative paths start from (``root``, else the common directory of the specs).

    A directory with a Hugging Face ``save_to_disk`` layout (``state.json``) is read as its
    Arrow files. Files whose format is unknown are ignored inside directories and refused
    when named directly.
    """
    if not specs:
        raise InputError("no input given (data.input / --input)")
    found: dict[str, pafs.FileInfo] = {}
    roots: list[str] = []
    for spec in specs:
        path = fs_path(spec)
        info = fs.get_file_info(path)
        if any(c in path for c in GLOB_CHARS):
            base = _spec_root(path)
            matches = [i for i in _walk(fs, base) if fnmatch.fnmatch(i.path, path)]
            roots.append(base)
        elif info.type == pafs.FileType.Directory:
            matches = _walk(fs, path)
            roots.append(path)
        elif info.type == pafs.FileType.File:
            if format is None and file_format(path) is None:
                raise InputError(
                    f"input {spec}: unknown format (extensions: {', '.join(EXTENSIONS)}; "
                    "or --format)"
                )
            matches = [info]
            roots.append(posixpath.dirname(path))
        else:
            raise InputError(f"input not found: {spec}")
        if format is None:
            matches = [i for i in matches if file_format(i.path) is not None]
        if not matches:
            raise InputError(f"no input files match {spec} (formats: {', '.join(FORMATS)})")
        found.update((i.path, i) for i in matches)
    input_root = fs_path(root) if root else posixpath.commonpath(roots)
    files = []
    for path in sorted(found):
        if not path.startswith(input_root + "/"):
            raise InputError(f"input {path} is outside the input root {input_root}")
        relpath = path[len(input_root) + 1 :]
        files.append(_input_file(found[path], relpath, format or file_format(path)))
    return files, input_root


def spec_roots(specs: list[str]) -> list[tuple[str, bool]]:
    """Per input spec, the directory it reads from and whether it reads a whole tree (a
    directory or a glob) rather than the one file it names."""
    roots = []
    for spec in specs:
        path = fs_path(spec)
        if any(c in path for c in GLOB_CHARS):
            roots.append((_spec_root(path), True))
        elif file_format(path) is not None:
            roots.append((posixpath.dirname(path), False))
        else:
            roots.append((path, True))
    return roots


def column_names(fs: pafs.FileSystem, file: InputFile) -> list[str]:
    """The columns of a JSONL, CSV or Arrow file, from its header or first record only."""
    if file.format == ARROW:
        with fs.open_input_stream(file.path) as stream:
            return pa.ipc.open_stream(stream).schema.names
    with fs.open_input_stream(file.path) as stream:  # .gz is decompressed by extension
        first = io.TextIOWrapper(stream, encoding="utf-8", errors="replace").readline()
    if file.format == CSV:
        return next(csv.reader([first]), [])
    record = json.loads(first)  # a JSONDecodeError is a ValueError: the shard is bad
    return list(record) if isinstance(record, dict) else []


@dataclass(frozen=True)
class Piece:
    """Rows [start, end) of one input file; ``end`` None until read (formats without an
    index are read whole). ``done_rows`` are rows already committed by an earlier run."""

    file: InputFile
    start: int
    end: int | None
    row_groups: tuple[int, ...] = ()
    done_rows: tuple[int, ...] = ()

    def key(self, end: int | None = None) -> PieceKey:
        return PieceKey(self.file.key, self.start, self.end if end is None else end)


@dataclass(frozen=True)
class InputPlan:
    """The pieces to read, the files that cannot be opened ({path: reason}), whether the
    readable files carry the id column, and the columns the files have."""

    pieces: list[Piece]
    bad: dict[str, str]
    has_ids: bool
    columns: tuple[str, ...] = ()


def plan_pieces(
    fs: pafs.FileSystem,
    files: list[InputFile],
    *,
    piece_rows: int,
    text_column: str,
    id_column: str,
    keep_columns: tuple[str, ...] = (),
) -> InputPlan:
    """Cut every file into pieces, reading footers (Parquet) or first records only.

    A file that cannot be opened or lacks the text column is reported now, before any work,
    instead of failing inside the pipeline; so is one lacking a kept column (a user error,
    not a bad shard). Ids must be in every file or in none.
    """
    pieces: list[Piece] = []
    bad: dict[str, str] = {}
    with_ids: dict[str, bool] = {}
    columns_seen: list[list[str]] = []
    for file in files:
        try:
            if file.format == PARQUET:
                with fs.open_input_file(file.path) as handle:
                    metadata = pq.ParquetFile(handle).metadata
                names = metadata.schema.to_arrow_schema().names
            else:
                metadata, names = None, column_names(fs, file)
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
    return InputPlan(pieces, bad, any(with_ids.values()), tuple(found))


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
            else _read_table(fs, piece, [text_column], text_column).num_rows
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
    files, _ = discover(data.input, fs, format=data.format, root=data.input_root)
    inputs = plan_pieces(
        fs,
        files,
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
    if data.limit is None:
        return inputs
    return replace(inputs, pieces=limit_pieces(fs, inputs.pieces, data.limit, data.text_column))


def _read_table(
    fs: pafs.FileSystem, piece: Piece, columns: list[str], text_column: str | None = None
) -> pa.Table:
    """The raw columns of a piece (those of ``columns`` the file has; ``text_column`` is
    the one that holds the documents, if among them)."""
    file = piece.file
    if file.format == PARQUET:
        with fs.open_input_file(file.path) as handle:
            parquet = pq.ParquetFile(handle)
            present = [c for c in columns if c in parquet.schema_arrow.names]
            return parquet.read_row_groups(list(piece.row_groups), columns=present)
    with fs.open_input_stream(file.path) as stream:  # .gz is decompressed by extension
        raw = stream.read()
    if file.format == JSONL:
        try:
            table = pajson.read_json(io.BytesIO(raw))
        except pa.ArrowInvalid:  # a column whose type changes between rows
            return _read_jsonl(raw, columns, text_column)
    elif file.format == CSV:
        table = pacsv.read_csv(io.BytesIO(raw))
    else:
        table = pa.ipc.open_stream(io.BytesIO(raw)).read_all()
    return table.select([c for c in columns if c in table.column_names])


def _read_jsonl(raw: bytes, columns: list[str], text_column: str | None) -> pa.Table:
    """JSON lines whose columns mix types (ids 1 and "b", say), parsed record by record:
    each column becomes strings (`_typed_string`), except that a text column value that is
    not a string is flagged in `NOT_TEXT_FLAG` (its row gets status not_text)."""
    records = [json.loads(line) for line in raw.decode("utf-8").splitlines() if line.strip()]
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
    return json.dumps(value, sort_keys=True)


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
        table = _read_table(fs, piece, columns, text_column)
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
        else pa.array([f"{relpath}:{row}" for row in rows.tolist()], pa.string())
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
    for offset in range(0, out.num_rows, READ_BLOCK_ROWS):
        yield out.slice(offset, READ_BLOCK_ROWS)


def read_ids(fs: pafs.FileSystem, piece: Piece, id_column: str) -> pa.Array:
    """The ids of a piece as strings, reading the id column alone where the format allows."""
    try:
        table = _read_table(fs, piece, [id_column])
    except (OSError, ValueError, pa.ArrowException) as error:
        raise ShardError(f"cannot read input shard {piece.file.path}: {error}") from error
    if piece.end is not None:
        table = table.slice(0, piece.end - piece.start)
    return _ids_as_strings(table[id_column])


def piece_descriptor(piece: Piece) -> dict[str, str]:
    """A piece as one JSON string (Ray Data items stay plain strings)."""
    file = piece.file
    return {"piece": json.dumps(
        {"path": file.path, "relpath": file.relpath, "format": file.format, "size": file.size,
         "mtime_ns": file.mtime_ns, "start": piece.start, "end": piece.end,
         "row_groups": list(piece.row_groups), "done_rows": list(piece.done_rows)}
    )}  # fmt: skip


def piece_from_descriptor(text: str) -> Piece:
    value = json.loads(text)
    file = InputFile(
        value["path"], value["relpath"], value["format"], value["size"], value["mtime_ns"]
    )
    return Piece(
        file, value["start"], value["end"], tuple(value["row_groups"]), tuple(value["done_rows"])
    )
