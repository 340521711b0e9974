"""Input files: which files an input spec names (paths, directories, globs; local or S3),
their columns from a header, and the *piece* -- the unit of work and of completion: a range
of whole Parquet row groups or a whole file for formats without an index -- with its
descriptor, the plain string a Ray Data item carries.

A file's key is its content's (`minkscan.io.content`), never its path. Derived ids are
``<path relative to the input root>:<row>``: they survive moving the whole input tree and
do not depend on Ray; a reader shows the rows of a renamed file under its new path.
"""

from __future__ import annotations

import csv
import hashlib
import io
import json
import os
import posixpath
import re
from collections import Counter
from dataclasses import dataclass

import pyarrow as pa
import pyarrow.fs as pafs
from fsspec.utils import glob_translate

from minkscan.errors import RunFailed, UserError
from minkscan.io.paths import fs_path
from minkscan.schema import (
    ARROW,
    CSV,
    EXTENSIONS,
    FORMATS,
    MARKER,
    PieceKey,
)

GLOB_CHARS = "*?["
# The one column of the items a pipeline starts from: a piece as JSON (`piece_descriptor`).
DESCRIPTOR = "piece"


class ShardError(RunFailed):
    """An input shard cannot be read; the message names its path. The reader's own text
    (pyarrow's can span lines) is joined into one line, as the CLI, the summary and the
    bad-shard records show it."""

    def __init__(self, message: str) -> None:
        super().__init__(" ".join(message.split()))


class InputError(UserError, ValueError):
    """An input spec names nothing readable; the message names the spec."""


def file_format(path: str) -> str | None:
    """The format of ``path`` from its extension (None: not an input file)."""
    name = posixpath.basename(path).lower()
    for extension, kind in sorted(EXTENSIONS.items(), key=lambda item: -len(item[0])):
        if name.endswith(extension):
            return kind
    return None


# Why a file a directory or glob holds is not read (`Discovery.skipped`).
HIDDEN = "hidden (_ or . name)"
IN_OUTPUT = "in a score output"
UNKNOWN_FORMAT = "unknown format"
SECOND_PATH = "second path to a file (symlink)"
SAME_CONTENT = "same content as another input (scored once)"
HF_METADATA = ("state.json", "dataset_info.json")  # beside a saved dataset's Arrow files


def not_read_note(skipped_files: dict[str, str]) -> str:
    """'; files not read: 3 (2 unknown format, 1 hidden (_ or . name); -v lists them)', or
    '' when every file the inputs hold is read."""
    if not skipped_files:
        return ""
    reasons = Counter(skipped_files.values()).most_common()
    counts = ", ".join(f"{n} {reason}" for reason, n in reasons)
    return f"; files not read: {len(skipped_files)} ({counts}; -v lists them)"


def _walk(fs: pafs.FileSystem, directory: str, skipped: dict[str, str]) -> list[pafs.FileInfo]:
    """The files under ``directory``, minus hidden ones (``_`` or ``.``) and everything
    inside a minkscan score output (a directory holding its marker): scores are never
    read back as documents. What it leaves out goes into ``skipped`` with the reason."""
    selector = pafs.FileSelector(directory, recursive=True)
    infos = [i for i in fs.get_file_info(selector) if i.type == pafs.FileType.File]
    infos = _once(fs, infos, skipped)
    outputs = tuple(info.path[: -len(MARKER)] for info in infos if info.base_name == MARKER)
    kept = []
    for info in sorted(infos, key=lambda info: info.path):
        if info.path.startswith(outputs or ("\0",)):
            skipped[info.path] = IN_OUTPUT
        elif any(p.startswith(("_", ".")) for p in info.path[len(directory) :].split("/")):
            skipped[info.path] = HIDDEN
        else:
            kept.append(info)
    return kept


def _once(
    fs: pafs.FileSystem, infos: list[pafs.FileInfo], skipped: dict[str, str]
) -> list[pafs.FileInfo]:
    """Each real file once: on a local disk, a file reached through symlinks (a link loop
    reaches one file many times) is kept under its shortest path; the others go into
    ``skipped``."""
    if not isinstance(fs, pafs.LocalFileSystem):
        return infos
    seen: dict[str, pafs.FileInfo] = {}
    for info in sorted(infos, key=lambda i: (i.path.count("/"), i.path)):
        if seen.setdefault(os.path.realpath(info.path), info) is not info:
            skipped[info.path] = SECOND_PATH
    return sorted(seen.values(), key=lambda info: info.path)


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
    """One input file: where it is, its path relative to the input root, its format, its
    size and modification time, and its content fingerprint (`minkscan.io.content`; empty
    until planning reads it)."""

    path: str
    relpath: str
    format: str
    size: int = -1
    mtime_ns: int = -1
    content: str = ""

    @property
    def key(self) -> str:
        """A short key of what the file holds (its format and content fingerprint), used in
        output file names: equal content, wherever it lies, has one key."""
        if not self.content:
            raise ValueError(f"{self.path}: no content fingerprint yet")
        return hashlib.sha256(f"{self.format}\0{self.content}".encode()).hexdigest()[:16]

    @property
    def stat(self) -> dict[str, int]:
        """Size and modification time, as format-2 outputs recorded each input."""
        return {"size": self.size, "mtime_ns": self.mtime_ns}


def _input_file(info: pafs.FileInfo, relpath: str, format: str) -> InputFile:
    mtime = info.mtime_ns if info.mtime_ns is not None else -1
    return InputFile(info.path, relpath, format, info.size or 0, mtime)


@dataclass(frozen=True)
class Discovery:
    """The input files, the root their relative paths start from, and every file the
    directories and globs hold that is not read, with the reason ({path: reason})."""

    files: list[InputFile]
    root: str
    skipped: dict[str, str]


def discover(
    specs: list[str],
    fs: pafs.FileSystem,
    *,
    format: str | None = None,
    root: str | None = None,
) -> Discovery:
    """Every input file named by ``specs`` (local or ``s3://``) and the input root their
    relative paths start from (``root``, else the common directory of the specs).

    A directory with a Hugging Face ``save_to_disk`` layout (``state.json``) is read as its
    Arrow files. Files whose format is unknown are skipped inside directories (and named in
    ``skipped``) and refused when named directly.
    """
    if not specs:
        raise InputError("no input given (data.input / --input)")
    found: dict[str, pafs.FileInfo] = {}
    skipped: dict[str, str] = {}
    roots: list[str] = []
    for spec in specs:
        path = fs_path(spec)
        info = fs.get_file_info(path)
        if any(c in path for c in GLOB_CHARS):
            base = _spec_root(path)
            pattern = re.compile(glob_translate(path))  # shell rules: ** for any depth
            walked: dict[str, str] = {}
            matches = [i for i in _walk(fs, base, walked) if pattern.fullmatch(i.path)]
            skipped |= {path: why for path, why in walked.items() if pattern.fullmatch(path)}
            roots.append(base)
        elif info.type == pafs.FileType.Directory:
            if fs.get_file_info(f"{path}/{MARKER}").type == pafs.FileType.File:
                raise InputError(
                    f"input {spec} is a minkscan score output, not documents: give the "
                    "documents it scored, or read it with calibrate, report or benchmark"
                )
            matches = _walk(fs, path, skipped)
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
            arrow_dirs = {posixpath.dirname(i.path) for i in matches if i.path.endswith(".arrow")}
            skipped |= {
                i.path: UNKNOWN_FORMAT for i in matches if file_format(i.path) is None
                and not (i.base_name in HF_METADATA and posixpath.dirname(i.path) in arrow_dirs)
            }  # fmt: skip
            matches = [i for i in matches if file_format(i.path) is not None]
        if not matches:
            raise InputError(f"no input files match {spec} (formats: {', '.join(FORMATS)})")
        found.update((i.path, i) for i in matches)
    found = {info.path: info for info in _once(fs, list(found.values()), skipped)}
    input_root = fs_path(root) if root else posixpath.commonpath(roots)
    files = []
    for path in sorted(found):
        if not path.startswith(input_root + "/"):
            raise InputError(f"input {path} is outside the input root {input_root}")
        relpath = path[len(input_root) + 1 :]
        files.append(_input_file(found[path], relpath, format or file_format(path)))
    return Discovery(files, input_root, {p: why for p, why in skipped.items() if p not in found})


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


def piece_descriptor(piece: Piece) -> dict[str, str]:
    """A piece as one JSON string (Ray Data items stay plain strings)."""
    file = piece.file
    return {DESCRIPTOR: json.dumps(
        {"path": file.path, "relpath": file.relpath, "format": file.format, "size": file.size,
         "mtime_ns": file.mtime_ns, "content": file.content, "start": piece.start, "end": piece.end,
         "row_groups": list(piece.row_groups), "done_rows": list(piece.done_rows)}
    )}  # fmt: skip


def piece_from_descriptor(text: str) -> Piece:
    value = json.loads(text)
    file = InputFile(
        value["path"],
        value["relpath"],
        value["format"],
        value["size"],
        value["mtime_ns"],
        value["content"],
    )
    return Piece(
        file,
        value["start"],
        value["end"],
        tuple(value["row_groups"]),
        tuple(value["done_rows"]),
    )
