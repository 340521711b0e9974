"""What an input file holds, apart from where it is: its content fingerprint. The output's
keys come from it (`minkscan.io.inputs.InputFile.key`), so renaming or moving a file, or
reaching it from another root, never re-scores a row, and an edit -- whatever its size and
modification time -- never mixes old and new scores.

- Parquet: SHA-256 of the footer (schema, and every row group's row count, byte sizes,
  offsets and column statistics), one ranged read at the file's end, local or S3. An edit
  that keeps all of these (same-size pages, unchanged min/max) is not seen. A footer
  without min/max statistics on some column cannot tell even a changed value apart, so
  then the fingerprint also covers the data pages: the SHA-256 of the file's bytes (local,
  one more read of the file) or its ETag (S3); a reader checks the footer's part.
- Other formats on local disk: SHA-256 of the file's bytes (compressed bytes for ``.gz``),
  streamed; the reader checks the bytes it reads against it (`verify`).
- Other formats on S3: the object's ETag and size (a HEAD, no byte read). A copy made by a
  multipart upload gets another ETag, so its rows are scored again.
"""

from __future__ import annotations

import hashlib
import os
from typing import Any

import pyarrow.fs as pafs

from minkscan.schema import PARQUET

_BLOCK = 1 << 22
_MAGIC = b"PAR1"
# Local files already hashed by this process, by (path, size, mtime, inode, ctime): a plan
# is made up to three times per run. An edit or a rename always moves the ctime.
_hashed: dict[tuple[str, int, int, int, int], str] = {}


class ContentChanged(ValueError):
    """A file's content is not what the run planned for: it changed meanwhile."""


def parquet_footer(handle: Any) -> str:
    """The fingerprint of an open Parquet file: its size and the SHA-256 of its footer."""
    size = handle.size()
    if size < 12:
        raise ValueError(f"not a Parquet file ({size} bytes)")
    handle.seek(size - 8)
    tail = handle.read(8)
    length = int.from_bytes(tail[:4], "little")
    if tail[4:] != _MAGIC or length > size - 12:
        raise ValueError("not a Parquet file (no footer at its end)")
    handle.seek(size - 8 - length)
    digest = hashlib.sha256(handle.read(length)).hexdigest()
    handle.seek(0)
    return f"parquet-footer:{size}:{digest}"


def has_statistics(metadata: Any) -> bool:
    """Whether every column chunk of a Parquet file's footer has min/max statistics (without
    them a same-length edit of a page leaves the footer as it was)."""
    for group in range(metadata.num_row_groups):
        row_group = metadata.row_group(group)
        for column in range(row_group.num_columns):
            chunk = row_group.column(column)
            if not chunk.is_stats_set or chunk.statistics is None:
                return False
            if not chunk.statistics.has_min_max:
                return False
    return True


def parquet(fs: pafs.FileSystem, path: str, handle: Any) -> str:
    """A Parquet file's fingerprint: its footer's (`parquet_footer`) and, where the footer
    lacks statistics, its data pages' too -- the SHA-256 of the file's bytes (local) or its
    ETag (S3) -- so a same-length edit is seen."""
    import pyarrow.parquet as pq

    footer = parquet_footer(handle)
    if has_statistics(pq.ParquetFile(handle).metadata):
        return footer
    handle.seek(0)
    if not isinstance(fs, pafs.LocalFileSystem):
        return f"{footer}+{of_etag(handle.metadata())}"
    return f"{footer}+{_local_digest(fs, path)}"


def footer_part(fingerprint: str) -> str:
    """The footer's part of a Parquet fingerprint (what a reader checks as it reads)."""
    return fingerprint.split("+", 1)[0]


def of_bytes(raw: bytes) -> str:
    """The fingerprint of a whole file's bytes."""
    return f"sha256:{hashlib.sha256(raw).hexdigest()}"


def of_etag(metadata: dict[Any, Any]) -> str:
    """The fingerprint of an S3 object from its metadata (ETag and size)."""
    values = {(k.decode() if isinstance(k, bytes) else k).lower(): v for k, v in metadata.items()}
    etag, size = values.get("etag"), values.get("content-length")
    if not etag:
        raise ValueError("the object has no ETag")
    text = [v.decode() if isinstance(v, bytes) else str(v) for v in (etag, size)]
    return f"etag:{text[1]}:{text[0].strip(chr(34))}"


def fingerprint(fs: pafs.FileSystem, path: str, format: str) -> str:
    """The content fingerprint of one input file (OSError / ValueError when unreadable)."""
    if format == PARQUET:
        with fs.open_input_file(path) as handle:
            return parquet(fs, path, handle)
    if not isinstance(fs, pafs.LocalFileSystem):
        with fs.open_input_file(path) as handle:
            return of_etag(handle.metadata())
    return _local_digest(fs, path)


def _local_digest(fs: pafs.FileSystem, path: str) -> str:
    """'sha256:<hex>' of a local file's bytes, streamed, once per version of the file."""
    stat = os.stat(path)
    seen = (path, stat.st_size, stat.st_mtime_ns, stat.st_ino, stat.st_ctime_ns)
    if seen not in _hashed:
        digest = hashlib.sha256()
        with fs.open_input_stream(path, compression=None) as stream:
            while block := stream.read(_BLOCK):
                digest.update(block)
        _hashed[seen] = f"sha256:{digest.hexdigest()}"
    return _hashed[seen]


def verify(path: str, expected: str, found: str) -> None:
    """Refuse to go on reading ``path`` when what was read is not the planned content."""
    if found != expected:
        raise ContentChanged(
            f"{path} changed since the run planned it: re-run to score its new content"
        )
