"""The score output directory: the one writer of score shards, markers and the run
manifest, on local disk or S3, and what may be in it (its rows are read back by
`minkscan.io.score_reader`; outputs of an older format are brought to this one by
`minkscan.io.older_outputs`).

Layout (everything minkscan writes, and nothing else, may be in the directory):

- ``_minkscan.json``: written first; marks the directory as a minkscan output and records
  the run it belongs to: its columns, piece layout, model identity and every setting that
  changes a score (`ScoreOutput.check`), and the inputs of its last run by content key:
  each one's path relative to the input root, content fingerprint (`minkscan.io.content`)
  and whether its ids are derived. Readers see the rows of these inputs only.
- ``_lease.json``: which run is writing the directory now (`minkscan.io.lease`).
- ``part-<file key>-<start>-<end>-<first row>-<rows>.parquet``: scores of some rows of one
  input piece (rows [start, end) of the file whose content has the key ``file key``).
  A file appears whole or not at all (written under ``_tmp/`` and renamed; one PUT on S3),
  and its name is a function of its rows, so a retried write replaces it.
- ``_bad/<file key>.json``: an input shard that failed while being read, and why (it is
  skipped again, unread, until its content changes).
- ``_manifest.json``: the last run's configuration, versions and statistics.

Completion is read from file names alone: a piece is complete when its files hold
``end - start`` rows. Resuming therefore lists the directory and reads no row; readers see
complete pieces of the recorded inputs only, so each input row appears exactly once even
while a run is going on. The score files of content the last run did not name (an edited
input's old content, a dropped input) are deleted once its marker is written.
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

from minkscan.errors import RunFailed, UserError
from minkscan.io.inputs import InputFile
from minkscan.io.record import RunRecord, differences
from minkscan.methods import FORMER_NAMES
from minkscan.schema import (
    BAD_DIR,
    MARKER,
    OUTPUT_NAMES,
    ROW,
    TMP_DIR,
    PieceKey,
    parse_part_name,
    part_name,
)

# 3: score files keyed by content, inputs recorded by key. 2: keyed by relative path, each
# input's size and mtime recorded (adopted by `minkscan.io.older_outputs`). 1: no run record.
FORMAT_VERSION = 3
RECORDS_RUN = 2  # the first format whose marker records the run's identity
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
        if marker.get("format", 1) < RECORDS_RUN:
            recorded = {"columns": marker.get("columns"), "layout": marker.get("settings", {})}
            wanted = {"columns": record.columns,
                      "layout": {k: record.layout.get(k) for k in recorded["layout"]}}  # fmt: skip
        else:
            recorded = {key: marker.get(key) for key in ("columns", "layout", "identity")}
            wanted = {"columns": record.columns, "layout": record.layout,
                      "identity": record.identity}  # fmt: skip
        recorded["layout"] = {k: v for k, v in (recorded["layout"] or {}).items()
                              if k not in RETIRED_LAYOUT}  # fmt: skip
        recorded["columns"] = [FORMER_NAMES.get(name, name) for name in recorded["columns"] or []]
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

    def recorded_inputs(self) -> dict[str, dict[str, Any]] | None:
        """{file key: {path, content, derived_ids}} of the inputs the last run named; None
        for an output of an older format (readers then see every complete piece)."""
        if not self.exists():
            return {}
        marker = self.read_json(MARKER)
        return marker.get("inputs", {}) if marker.get("format", 1) >= FORMAT_VERSION else None

    def _check_creatable(self) -> None:
        """A new local output's nearest existing ancestor must be a writable directory."""
        ancestor = Path(self.root)
        while not ancestor.exists():
            ancestor = ancestor.parent
        if not ancestor.is_dir() or not os.access(ancestor, os.W_OK | os.X_OK):
            raise OutputError(f"output {self.root} cannot be created: {ancestor} is not a "
                              "writable directory")  # fmt: skip

    def create(self, record: RunRecord, files: list[InputFile], derived_ids: bool) -> None:
        """Create the directory and write its marker: the run record and this run's inputs
        by content key. Readers now see their rows and no other input's, whose score files
        are then deleted (edited or dropped inputs). Also proves the output is writable."""
        if not self.exists():
            self.fs.create_dir(self.root, recursive=True)
        self.write_marker({"columns": record.columns, "layout": record.layout,
                            "identity": record.identity}, files, derived_ids)  # fmt: skip
        keys = {file.key for file in files}
        self.delete_parts([part for part in self.parts() if part.key not in keys])
        self.tidy()  # a killed run's temporary files

    def write_marker(self, run: dict[str, Any], files: list[InputFile], derived_ids: bool) -> None:
        inputs = {file.key: {"path": file.relpath, "content": file.content,
                             "derived_ids": derived_ids} for file in files}  # fmt: skip
        self.write_json(MARKER, {"format": FORMAT_VERSION, **run, "inputs": inputs})

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
        """Record that ``file`` failed while being read (skipped until its content changes:
        the record is named by its content key)."""
        with self._writing(f"{self.root}/{BAD_DIR}"):
            self.fs.create_dir(f"{self.root}/{BAD_DIR}", recursive=True)
        self.write_json(
            f"{BAD_DIR}/{file.key}.json",
            {"path": file.path, "reason": reason, "content": file.content},
        )

    def forget_bad(self, keys: list[str]) -> None:
        for key in keys:
            self.fs.delete_file(f"{self.root}/{BAD_DIR}/{key}.json")

    def bad_shards(self) -> dict[str, dict[str, Any]]:
        """{file key: {path, reason, content}} of the shards that failed while being read."""
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

    def visible(self, parts: list[PartFile]) -> list[PartFile]:
        """The score files of the inputs the last run named (all, in an older format)."""
        inputs = self.recorded_inputs()
        return parts if inputs is None else [part for part in parts if part.key in inputs]
