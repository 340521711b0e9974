"""Reading scores back: the rows of a score output's complete pieces, each under its
input's path now and its columns under their names now, or one plain score Parquet file;
the one way calibrate, report, benchmark, order-test and nightly read scores."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import pyarrow as pa
import pyarrow.fs as pafs
import pyarrow.parquet as pq

from minkscan.config import S3Config
from minkscan.io.paths import filesystem_for, fs_path
from minkscan.io.scores import OutputError, ScoreOutput
from minkscan.methods import FORMER_NAMES
from minkscan.schema import ID, MANIFEST, MARKER, ROW, SOURCE, derived_id


def read_output(output: ScoreOutput, columns: list[str] | None = None) -> pa.Table:
    """The score rows of every complete piece of ``output``'s recorded inputs (``columns``
    of them, default all), each under its input's path now (a renamed file's rows show its
    new ``source`` and derived ``id``) and each column under its name now (`FORMER_NAMES`:
    an older minkscan's ``loss`` is read as ``mean_logprob``).

    Never deletes or rewrites anything; an empty table when nothing is complete.
    """
    recorded = output.recorded_inputs()
    inputs = recorded or {}
    parts = [p for p in output.parts() if recorded is None or p.key in recorded]
    complete, _ = output.completion(parts)
    # Every score file has source and row: read them to put the rows at their path.
    wanted = columns and [*columns, *(c for c in (SOURCE, ROW) if c not in columns)]
    tables = []
    for part in sorted(parts, key=lambda p: p.path):
        if part.piece in complete:
            with output.fs.open_input_file(part.path) as handle:
                parquet = pq.ParquetFile(handle)
                stored = wanted and _stored_names(wanted, parquet.schema_arrow.names)
                table = _current_names(parquet.read(columns=stored))
            table = _at_path(table, inputs.get(part.key))
            tables.append(table if columns is None else table.select(columns))
    if not tables:
        if output.exists():
            names = columns or current_columns(output.read_json(MARKER)["columns"])
            return pa.table({name: pa.array([], pa.null()) for name in names})
        raise OutputError(f"{output.root} holds no minkscan scores")
    return pa.concat_tables(tables, promote_options="permissive")


def current_columns(names: list[str]) -> list[str]:
    """Column names as this version names them (`FORMER_NAMES`)."""
    return [FORMER_NAMES.get(name, name) for name in names]


def _stored_names(wanted: list[str], present: list[str]) -> list[str]:
    """The names ``wanted`` columns have in a file whose columns are ``present``."""
    former = {now: then for then, now in FORMER_NAMES.items() if then in present}
    return [name if name in present else former.get(name, name) for name in wanted]


def _current_names(table: pa.Table) -> pa.Table:
    names = table.column_names
    renamed = [FORMER_NAMES[n] if n in FORMER_NAMES and FORMER_NAMES[n] not in names else n
               for n in names]  # fmt: skip
    return table if renamed == names else table.rename_columns(renamed)


def _at_path(table: pa.Table, entry: dict[str, Any] | None) -> pa.Table:
    """Score rows under the path their input has now (``entry``, its marker record):
    ``source`` and, where ids are derived from it, ``id``."""
    if entry is None or SOURCE not in table.column_names or table.num_rows == 0:
        return table
    path = entry["path"]
    if table[SOURCE][0].as_py() == path:
        return table
    table = table.set_column(table.schema.get_field_index(SOURCE), SOURCE,
                             pa.array([path] * table.num_rows, pa.string()))  # fmt: skip
    if entry.get("derived_ids") and ID in table.column_names:
        ids = [derived_id(path, row) for row in table[ROW].to_pylist()]
        table = table.set_column(table.schema.get_field_index(ID), ID, pa.array(ids, pa.string()))
    return table


@dataclass(frozen=True)
class ScoreData:
    """Score rows with what produced them (from the run manifest, when there is one)."""

    table: pa.Table
    model: str | None
    inputs: list[str]
    identity: dict[str, Any] | None = None  # the run record's (None: a plain score file)


def read_scores(path: str, s3: S3Config | None = None) -> ScoreData:
    """A `minkscan score` output directory (its complete pieces) or one score Parquet file,
    local or ``s3://``; the one way calibrate, report, benchmark and nightly read scores."""
    fs = filesystem_for([path], s3 or S3Config())
    where = fs_path(path)
    info = fs.get_file_info(where)
    if info.type == pafs.FileType.NotFound:
        raise OutputError(f"no scores at {path}")
    if info.type == pafs.FileType.File:
        with fs.open_input_file(where) as handle:
            try:
                return ScoreData(pq.read_table(handle), None, [])
            except (pa.ArrowException, OSError) as error:
                problem = " ".join(str(error).split())
                raise OutputError(f"{path} is not a Parquet score file ({info.size} bytes: "
                                  f"{problem})") from None  # fmt: skip
    output = ScoreOutput(fs, where)
    table = read_output(output)
    manifest = output.read_json(MANIFEST) if _exists(fs, f"{where}/{MANIFEST}") else {}
    identity = output.read_json(MARKER).get("identity") if output.exists() else None
    return ScoreData(table, manifest.get("model"), list(manifest.get("inputs", [])), identity)


def _exists(fs: pafs.FileSystem, path: str) -> bool:
    return fs.get_file_info(path).type == pafs.FileType.File
