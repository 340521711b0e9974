"""Resolve input specs (files, directories, globs; local or ``s3://``) to Parquet shard paths.

Everything goes through one pyarrow filesystem per run, so Ray Data reads and writes local
disk and S3 the same way; paths handed to Ray are filesystem paths (no ``s3://`` prefix).
"""

from __future__ import annotations

import fnmatch
from dataclasses import dataclass
from pathlib import Path

import pyarrow.fs as pafs
import pyarrow.parquet as pq

from pipeline.config import S3Config

S3_SCHEME = "s3://"
GLOB_CHARS = "*?["


class ShardError(RuntimeError):
    """An input shard cannot be read; the message names its path."""


def is_s3(path: str) -> bool:
    return path.startswith(S3_SCHEME)


def s3_filesystem(options: S3Config) -> pafs.S3FileSystem:
    """A pyarrow S3 filesystem from the config; unset options fall back to the AWS env vars."""
    kwargs: dict[str, object] = {"anonymous": options.anon}
    if options.endpoint_url:
        kwargs["endpoint_override"] = options.endpoint_url
        if options.endpoint_url.startswith("http://"):
            kwargs["scheme"] = "http"
    if options.region:
        kwargs["region"] = options.region
    if options.access_key_id:
        kwargs["access_key"] = options.access_key_id
        kwargs["secret_key"] = options.secret_access_key
    return pafs.S3FileSystem(**kwargs)


def filesystem_for(paths: list[str], options: S3Config) -> pafs.FileSystem:
    """The one filesystem serving all ``paths``: S3 or local, never a mix."""
    kinds = {is_s3(p) for p in paths}
    if len(kinds) > 1:
        raise ValueError(f"inputs and output mix s3:// and local paths: {paths}")
    return s3_filesystem(options) if kinds == {True} else pafs.LocalFileSystem()


def fs_path(path: str) -> str:
    """The path as the filesystem sees it: ``bucket/key`` for S3, absolute for local."""
    if is_s3(path):
        return path[len(S3_SCHEME):].rstrip("/")
    return str(Path(path).expanduser().resolve())


def _list_parquet(fs: pafs.FileSystem, directory: str) -> list[str]:
    selector = pafs.FileSelector(directory, recursive=True)
    return sorted(
        info.path
        for info in fs.get_file_info(selector)
        if info.type == pafs.FileType.File and info.path.endswith(".parquet")
    )


def expand_inputs(specs: list[str], fs: pafs.FileSystem) -> list[str]:
    """Every Parquet file named by ``specs``, sorted and deduplicated; missing specs raise."""
    if not specs:
        raise ValueError("no input given (data.input / --input)")
    found: list[str] = []
    for spec in specs:
        path = fs_path(spec)
        if any(c in path for c in GLOB_CHARS):
            base = path[: min(path.index(c) for c in GLOB_CHARS if c in path)].rsplit("/", 1)[0]
            matches = [p for p in _list_parquet(fs, base) if fnmatch.fnmatch(p, path)]
        else:
            info = fs.get_file_info(path)
            if info.type == pafs.FileType.Directory:
                matches = _list_parquet(fs, path)
            elif info.type == pafs.FileType.File:
                matches = [path]
            else:
                raise FileNotFoundError(f"input not found: {spec}")
        if not matches:
            raise FileNotFoundError(f"no Parquet files match input: {spec}")
        found.extend(matches)
    return sorted(set(found))


@dataclass(frozen=True)
class ShardCheck:
    """Readable shards, skipped bad shards with their reasons, and whether ids are present."""

    readable: list[str]
    skipped: dict[str, str]
    has_id_column: bool


def check_shards(
    paths: list[str],
    fs: pafs.FileSystem,
    *,
    text_column: str,
    id_column: str,
    skip_bad: bool,
) -> ShardCheck:
    """Read every shard's footer before any work starts.

    A shard that cannot be opened or lacks the text column fails the run with its
    path, or is skipped and listed when ``skip_bad``. Ids must be in all shards or none.
    """
    readable: list[str] = []
    skipped: dict[str, str] = {}
    with_ids: list[bool] = []
    for path in paths:
        try:
            with fs.open_input_file(path) as handle:
                names = pq.read_schema(handle).names
            if text_column not in names:
                raise ShardError(f"no column '{text_column}' (has {names})")
        except (OSError, ValueError, ShardError) as error:
            if not skip_bad:
                raise ShardError(f"cannot read input shard {path}: {error}") from error
            skipped[path] = str(error)
            continue
        readable.append(path)
        with_ids.append(id_column in names)
    if not readable:
        raise ShardError(f"no readable input shards (skipped: {sorted(skipped)})")
    if len(set(with_ids)) > 1:
        missing = [p for p, has in zip(readable, with_ids, strict=True) if not has]
        raise ShardError(f"id column '{id_column}' is missing from some shards: {missing}")
    return ShardCheck(readable, skipped, with_ids[0])
