"""The score output directory: the one reader and writer of score shards, markers and the
run manifest, on local disk or S3.

Layout (everything minkscan writes, and nothing else, may be in the directory):

- ``_minkscan.json``: written first; marks the directory as a minkscan output and records
  its columns, so a later run resumes only with the same columns.
- ``part-<file key>-<start>-<end>-<first row>-<rows>.parquet``: scores of some rows of one
  input piece (rows [start, end) of the file whose relative path hashes to ``file key``).
  A file appears whole or not at all (written under ``_tmp/`` and renamed; one PUT on S3),
  and its name is a function of its rows, so a retried write replaces it.
- ``_bad/<file key>.json``: an input shard that failed while being read, and why.
- ``_manifest.json``: the last run's configuration, versions and statistics.

Completion is read from file names alone: a piece is complete when its files hold
``end - start`` rows. Resuming therefore lists the directory and reads no row; readers see
complete pieces only, so each input row appears exactly once even while a run is going on.
"""

from __future__ import annotations

import json
import os
import re
import uuid
from collections import defaultdict
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.fs as pafs
import pyarrow.parquet as pq

from minkscan.config import S3Config
from minkscan.errors import UserError
from minkscan.io.paths import filesystem_for, fs_path

MARKER = "_minkscan.json"
MANIFEST = "_manifest.json"
TMP_DIR = "_tmp"
BAD_DIR = "_bad"
FORMAT_VERSION = 1
_PART = re.compile(
    r"part-(?P<key>[0-9a-f]{16})-(?P<start>\d+)-(?P<end>\d+)-(?P<first>\d+)-(?P<rows>\d+)\.parquet"
)
_OWN_NAMES = {MARKER, MANIFEST, TMP_DIR, BAD_DIR, "_nightly_manifest.json", "runs"}


class OutputError(UserError, ValueError):
    """The output path cannot hold this run's scores; the message says why."""


@dataclass(frozen=True)
class PartFile:
    """One score shard, described by its name."""

    path: str
    key: str
    start: int
    end: int
    first: int
    rows: int

    @property
    def piece(self) -> str:
        return f"{self.key}-{self.start}-{self.end}"


def part_name(piece: str, first: int, rows: int) -> str:
    """The file name of ``rows`` rows of ``piece`` whose smallest row is ``first``."""
    return f"part-{piece}-{first}-{rows}.parquet"


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

    def check(self, columns: list[str], settings: dict[str, Any]) -> None:
        """Refuse an output that is a file, holds anything minkscan did not write, or holds
        scores with other columns or piece settings. Nothing is written."""
        info = self.fs.get_file_info(self.root)
        if info.type == pafs.FileType.File:
            raise OutputError(f"output {self.root} is a file; give a directory")
        if info.type == pafs.FileType.NotFound:
            if isinstance(self.fs, pafs.LocalFileSystem):
                self._check_creatable()
            return
        names = [entry.base_name for entry in self._entries()]
        foreign = sorted(n for n in names if n not in _OWN_NAMES and not _PART.fullmatch(n))
        if foreign:
            raise OutputError(
                f"output {self.root} holds files minkscan did not write ({', '.join(foreign[:5])}"
                f"{', ...' if len(foreign) > 5 else ''}); give an empty or new directory"
            )
        if names and not self.exists():
            raise OutputError(f"output {self.root} has score files but no {MARKER}")
        if self.exists():
            marker = self.read_json(MARKER)
            recorded = {"columns": marker.get("columns"), **marker.get("settings", {})}
            wanted = {"columns": columns, **settings}
            differ = sorted(k for k in wanted if recorded.get(k) != wanted[k])
            if differ:
                raise OutputError(
                    f"output {self.root} holds scores written with other {', '.join(differ)} "
                    f"({', '.join(str(recorded.get(k)) for k in differ)}): resume with the same "
                    "settings, or give a new output"
                )

    def _check_creatable(self) -> None:
        """A new local output's nearest existing ancestor must be a writable directory."""
        ancestor = Path(self.root)
        while not ancestor.exists():
            ancestor = ancestor.parent
        if not ancestor.is_dir() or not os.access(ancestor, os.W_OK | os.X_OK):
            raise OutputError(f"output {self.root} cannot be created: {ancestor} is not a "
                              "writable directory")  # fmt: skip

    def create(self, columns: list[str], settings: dict[str, Any]) -> None:
        """Create the directory and its marker (also proves it is writable)."""
        if not self.exists():
            self.fs.create_dir(self.root, recursive=True)
            self.write_json(
                MARKER, {"format": FORMAT_VERSION, "columns": columns, "settings": settings}
            )
        for own in (BAD_DIR, TMP_DIR):  # bad shards are tried again; a killed run's temp files
            if self.fs.get_file_info(f"{self.root}/{own}").type == pafs.FileType.Directory:
                self.fs.delete_dir(f"{self.root}/{own}")

    def parts(self) -> list[PartFile]:
        """Every score shard in the directory, from the listing alone."""
        parts = []
        for entry in self._entries():
            match = _PART.fullmatch(entry.base_name)
            if match and entry.type == pafs.FileType.File:
                numbers = {k: int(v) for k, v in match.groupdict().items() if k != "key"}
                parts.append(PartFile(entry.path, match["key"], **numbers))
        return parts

    @staticmethod
    def completion(parts: list[PartFile]) -> tuple[set[str], dict[str, list[PartFile]]]:
        """Complete piece ids, and the files of incomplete pieces by piece id."""
        by_piece: dict[str, list[PartFile]] = defaultdict(list)
        for part in parts:
            by_piece[part.piece].append(part)
        complete = {
            piece for piece, files in by_piece.items()
            if sum(f.rows for f in files) == files[0].end - files[0].start
        }  # fmt: skip
        return complete, {p: f for p, f in by_piece.items() if p not in complete}

    def committed_rows(self, files: list[PartFile]) -> list[int]:
        """Input rows held by some score files (of an incomplete piece)."""
        rows: list[int] = []
        for part in files:
            with self.fs.open_input_file(part.path) as handle:
                rows.extend(pq.read_table(handle, columns=["row"])["row"].to_pylist())
        return rows

    def write_part(self, table: pa.Table, piece: str, first: int) -> str:
        """Write the score rows of one piece so that the file appears whole or not at all."""
        name = part_name(piece, first, table.num_rows)
        final = f"{self.root}/{name}"
        if isinstance(self.fs, pafs.LocalFileSystem):
            tmp = f"{self.root}/{TMP_DIR}/{uuid.uuid4().hex}-{name}"
            self.fs.create_dir(f"{self.root}/{TMP_DIR}", recursive=True)
            pq.write_table(table, tmp, filesystem=self.fs)
            self.fs.move(tmp, final)
        else:  # an S3 object becomes visible only when its upload completes
            pq.write_table(table, final, filesystem=self.fs)
        return final

    def delete_parts(self, files: list[PartFile]) -> None:
        for part in files:
            self.fs.delete_file(part.path)

    def mark_bad(self, key: str, path: str, reason: str) -> None:
        self.fs.create_dir(f"{self.root}/{BAD_DIR}", recursive=True)
        self.write_json(f"{BAD_DIR}/{key}.json", {"path": path, "reason": reason})

    def bad_shards(self) -> dict[str, dict[str, str]]:
        """{file key: {path, reason}} of the shards that failed while being read."""
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
        path = f"{self.root}/{name}"
        with self.fs.open_output_stream(path) as stream:
            stream.write(json.dumps(value, indent=2, default=str).encode())
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
    return ScoreData(table, manifest.get("model"), list(manifest.get("inputs", [])))


def _exists(fs: pafs.FileSystem, path: str) -> bool:
    return fs.get_file_info(path).type == pafs.FileType.File
