"""The score output directory: the one reader and writer of score shards, markers and the
run manifest, on local disk or S3.

Layout (everything minkscan writes, and nothing else, may be in the directory):

- ``_minkscan.json``: written first; marks the directory as a minkscan output and records
  the run it belongs to: its columns, piece layout, model identity and every
  setting that changes a score, and a fingerprint (size, modification time) of each input
  file. A later run resumes it only when all of these agree (`ScoreOutput.check`,
  `ScoreOutput.check_inputs`).
- ``_lease.json``: which run is writing the directory now (`minkscan.io.lease`).
- ``part-<file key>-<start>-<end>-<first row>-<rows>.parquet``: scores of some rows of one
  input piece (rows [start, end) of the file whose relative path hashes to ``file key``).
  A file appears whole or not at all (written under ``_tmp/`` and renamed; one PUT on S3),
  and its name is a function of its rows, so a retried write replaces it.
- ``_bad/<file key>.json``: an input shard that failed while being read, why, and its
  fingerprint (it is skipped again, unread, until it changes).
- ``_manifest.json``: the last run's configuration, versions and statistics.

Completion is read from file names alone: a piece is complete when its files hold
``end - start`` rows. Resuming therefore lists the directory and reads no row; readers see
complete pieces only, so each input row appears exactly once even while a run is going on.
"""

from __future__ import annotations

import json
import os
import uuid
from collections import defaultdict
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.fs as pafs
import pyarrow.parquet as pq

from minkscan.config import S3Config
from minkscan.errors import RunFailed, UserError
from minkscan.io.inputs import InputFile
from minkscan.io.paths import filesystem_for, fs_path
from minkscan.io.record import RunRecord, differences
from minkscan.schema import (
    BAD_DIR,
    MANIFEST,
    MARKER,
    OUTPUT_NAMES,
    ROW,
    TMP_DIR,
    PieceKey,
    parse_part_name,
    part_name,
)

FORMAT_VERSION = 2
# Layout keys older outputs recorded that no longer bind a resume: commits are cut by rows,
# time and whole pieces, and completion is read from the rows the files hold.
RETIRED_LAYOUT = ("commit_rows",)


class OutputError(UserError, ValueError):
    """The output path cannot hold this run's scores; the message says why."""


class OutputWriteError(RunFailed):
    """Writing to the output failed (read-only or full disk, S3 denied); names the path."""


@dataclass(frozen=True)
class PartFile:
    """One score shard, described by its name: rows of ``piece``, the smallest ``first``."""

    path: str
    piece: PieceKey
    first: int
    rows: int

    @property
    def key(self) -> str:
        """The input file's key (`minkscan.io.inputs.InputFile.key`)."""
        return self.piece.file


class ScoreOutput:
    """One score output directory (``root`` as the filesystem sees it)."""

    def __init__(self, fs: pafs.FileSystem, root: str) -> None:
        self.fs = fs
        self.root = root.rstrip("/")

    def _entries(self) -> list[pafs.FileInfo]:
        selector = pafs.FileSelector(self.root, recursive=False, allow_not_found=True)
        return self.fs.get_file_info(selector)

    def exists(self) -> bool:
        return self.fs.get_file_info(f"{self.root}/{MARKER}").type == pafs.FileType.File

    def check(self, record: RunRecord) -> None:
        """Refuse an output that is a file, holds anything minkscan did not write, or holds
        scores of another run: other columns, layout, model or score-changing settings,
        each difference named. Nothing is written."""
        info = self.fs.get_file_info(self.root)
        if info.type == pafs.FileType.File:
            raise OutputError(f"output {self.root} is a file; give a directory")
        if info.type == pafs.FileType.NotFound:
            if isinstance(self.fs, pafs.LocalFileSystem):
                self._check_creatable()
            return
        names = [entry.base_name for entry in self._entries()]
        foreign = sorted(n for n in names if n not in OUTPUT_NAMES and not parse_part_name(n))
        if foreign:
            raise OutputError(
                f"output {self.root} holds files minkscan did not write ({', '.join(foreign[:5])}"
                f"{', ...' if len(foreign) > 5 else ''}); give an empty or new directory"
            )
        if any(parse_part_name(name) for name in names) and not self.exists():
            raise OutputError(f"output {self.root} has score files but no {MARKER}")
        if not self.exists():
            return
        marker = self.read_json(MARKER)
        if marker.get("format", 1) < FORMAT_VERSION:  # before outputs recorded their run
            recorded = {"columns": marker.get("columns"), "layout": marker.get("settings", {})}
            wanted = {"columns": record.columns,
                      "layout": {k: record.layout.get(k) for k in recorded["layout"]}}  # fmt: skip
        else:
            recorded = {key: marker.get(key) for key in ("columns", "layout", "identity")}
            wanted = {"columns": record.columns, "layout": record.layout,
                      "identity": record.identity}  # fmt: skip
        recorded["layout"] = {k: v for k, v in (recorded["layout"] or {}).items()
                              if k not in RETIRED_LAYOUT}  # fmt: skip
        if recorded["columns"] != wanted["columns"]:
            recorded["columns"], wanted["columns"] = (
                ", ".join(recorded["columns"] or []), ", ".join(wanted["columns"]))  # fmt: skip
        changed = differences(recorded, wanted)
        if changed:
            shown = "; ".join(changed[:4]) + ("; ..." if len(changed) > 4 else "")
            raise OutputError(
                f"output {self.root} holds scores of another run ({shown}): resume it with the "
                "same model and settings, or give a new --output"
            )

    def check_inputs(self, files: list[InputFile]) -> None:
        """Refuse input files that changed since their rows were first scored here: their
        old scores would mix with the new content's."""
        if not self.exists():
            return
        recorded = self.read_json(MARKER).get("inputs", {})
        changed = [
            f"{file.relpath} (size {recorded[file.relpath]['size']} -> {file.size} bytes)"
            if recorded[file.relpath]["size"] != file.size
            else f"{file.relpath} (modified since)"
            for file in files
            if file.relpath in recorded and recorded[file.relpath] != file.fingerprint
        ]
        if changed:
            raise OutputError(
                f"input changed since it was scored into {self.root}: {', '.join(changed[:3])}"
                f"{', ...' if len(changed) > 3 else ''}; its old and new scores would mix: "
                "give a new --output"
            )

    def _check_creatable(self) -> None:
        """A new local output's nearest existing ancestor must be a writable directory."""
        ancestor = Path(self.root)
        while not ancestor.exists():
            ancestor = ancestor.parent
        if not ancestor.is_dir() or not os.access(ancestor, os.W_OK | os.X_OK):
            raise OutputError(f"output {self.root} cannot be created: {ancestor} is not a "
                              "writable directory")  # fmt: skip

    def create(self, record: RunRecord, files: list[InputFile]) -> None:
        """Create the directory and write its marker: the run record and the fingerprints of
        the input files (those of earlier runs kept). Also proves the output is writable."""
        inputs = {}
        if self.exists():
            inputs = self.read_json(MARKER).get("inputs", {})
        else:
            self.fs.create_dir(self.root, recursive=True)
        inputs |= {file.relpath: file.fingerprint for file in files}
        self.write_json(MARKER, {"format": FORMAT_VERSION, "columns": record.columns,
                                 "layout": record.layout, "identity": record.identity,
                                 "inputs": inputs})  # fmt: skip
        self.tidy()  # a killed run's temporary files

    def tidy(self) -> None:
        """Remove the directory of files being written (`TMP_DIR`): at the start of a run,
        a killed run's; at the end of one, the empty directory it leaves."""
        if self.fs.get_file_info(f"{self.root}/{TMP_DIR}").type == pafs.FileType.Directory:
            self.fs.delete_dir(f"{self.root}/{TMP_DIR}")

    def parts(self) -> list[PartFile]:
        """Every score shard in the directory, from the listing alone."""
        parts = []
        for entry in self._entries():
            parsed = parse_part_name(entry.base_name)
            if parsed and entry.type == pafs.FileType.File:
                parts.append(PartFile(entry.path, *parsed))
        return parts

    @staticmethod
    def completion(
        parts: list[PartFile],
    ) -> tuple[set[PieceKey], dict[PieceKey, list[PartFile]]]:
        """Complete pieces, and the files of incomplete pieces by piece."""
        by_piece: dict[PieceKey, list[PartFile]] = defaultdict(list)
        for part in parts:
            by_piece[part.piece].append(part)
        complete = {
            piece for piece, files in by_piece.items() if sum(f.rows for f in files) == piece.rows
        }
        return complete, {p: f for p, f in by_piece.items() if p not in complete}

    def committed_rows(self, files: list[PartFile]) -> list[int]:
        """Input rows held by some score files (of an incomplete piece)."""
        rows: list[int] = []
        for part in files:
            with self.fs.open_input_file(part.path) as handle:
                rows.extend(pq.read_table(handle, columns=[ROW])[ROW].to_pylist())
        return rows

    def write_part(self, table: pa.Table, piece: str, first: int) -> str:
        """Write the score rows of one piece so that the file appears whole or not at all."""
        final = f"{self.root}/{part_name(piece, first, table.num_rows)}"
        with self._writing(final):
            self._atomically(final, lambda path: pq.write_table(table, path, filesystem=self.fs))
        return final

    def _atomically(self, final: str, write: Any) -> None:
        """``write(path)`` so that ``final`` appears whole or not at all: under ``_tmp/`` and
        renamed on local disk; directly on S3, whose objects appear when their upload ends."""
        if not isinstance(self.fs, pafs.LocalFileSystem):
            write(final)
            return
        tmp = f"{self.root}/{TMP_DIR}/{uuid.uuid4().hex}-{final.rsplit('/', 1)[-1]}"
        self.fs.create_dir(f"{self.root}/{TMP_DIR}", recursive=True)
        write(tmp)
        self.fs.move(tmp, final)

    @staticmethod
    @contextmanager
    def _writing(path: str) -> Iterator[None]:
        """OS and S3 errors of a write as one OutputWriteError naming the path."""
        try:
            yield
        except (OSError, pa.ArrowException) as error:
            cause = str(error).strip().splitlines()[0] if str(error).strip() else repr(error)
            raise OutputWriteError(f"cannot write {path}: {cause}") from None

    def delete_parts(self, files: list[PartFile]) -> None:
        for part in files:
            self.fs.delete_file(part.path)

    def mark_bad(self, file: InputFile, reason: str) -> None:
        """Record that ``file`` failed while being read (it is skipped until it changes)."""
        with self._writing(f"{self.root}/{BAD_DIR}"):
            self.fs.create_dir(f"{self.root}/{BAD_DIR}", recursive=True)
        self.write_json(
            f"{BAD_DIR}/{file.key}.json",
            {"path": file.path, "reason": reason, "fingerprint": file.fingerprint},
        )

    def forget_bad(self, keys: list[str]) -> None:
        for key in keys:
            self.fs.delete_file(f"{self.root}/{BAD_DIR}/{key}.json")

    def bad_shards(self) -> dict[str, dict[str, Any]]:
        """{file key: {path, reason, fingerprint}} of the shards that failed while being
        read."""
        selector = pafs.FileSelector(f"{self.root}/{BAD_DIR}", allow_not_found=True)
        found = {}
        for entry in self.fs.get_file_info(selector):
            found[entry.base_name.removesuffix(".json")] = self.read_json(
                f"{BAD_DIR}/{entry.base_name}"
            )
        return found

    def read_json(self, name: str) -> dict[str, Any]:
        with self.fs.open_input_stream(f"{self.root}/{name}") as stream:
            return json.loads(stream.read())

    def write_json(self, name: str, value: dict[str, Any]) -> str:
        """Write ``name`` whole or not at all (readers never see half a marker)."""
        path = f"{self.root}/{name}"
        content = json.dumps(value, indent=2, default=str).encode()

        def write(target: str) -> None:
            with self.fs.open_output_stream(target) as stream:
                stream.write(content)

        with self._writing(path):
            self._atomically(path, write)
        return path

    def read(self, columns: list[str] | None = None) -> pa.Table:
        """The score rows of every complete piece (``columns`` of them, default all).

        Never deletes or rewrites anything; an empty table when nothing is complete.
        """
        parts = self.parts()
        complete, _ = self.completion(parts)
        tables = []
        for part in sorted(parts, key=lambda p: p.path):
            if part.piece in complete:
                with self.fs.open_input_file(part.path) as handle:
                    tables.append(pq.read_table(handle, columns=columns))
        if not tables:
            if self.exists():
                names = columns or self.read_json(MARKER)["columns"]
                return pa.table({name: pa.array([], pa.null()) for name in names})
            raise OutputError(f"{self.root} holds no minkscan scores")
        return pa.concat_tables(tables, promote_options="permissive")


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
            return ScoreData(pq.read_table(handle), None, [])
    output = ScoreOutput(fs, where)
    table = output.read()
    manifest = output.read_json(MANIFEST) if _exists(fs, f"{where}/{MANIFEST}") else {}
    identity = output.read_json(MARKER).get("identity") if output.exists() else None
    return ScoreData(table, manifest.get("model"), list(manifest.get("inputs", [])), identity)


def _exists(fs: pafs.FileSystem, path: str) -> bool:
    return fs.get_file_info(path).type == pafs.FileType.File
