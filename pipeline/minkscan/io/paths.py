"""Local and ``s3://`` paths: the one pyarrow filesystem of a run and paths as it sees them.

Everything goes through one pyarrow filesystem per run, so Ray Data reads and writes local
disk and S3 the same way; paths handed to Ray are filesystem paths (no ``s3://`` prefix).
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pyarrow.fs as pafs

from minkscan.config import S3Config

S3_SCHEME = "s3://"


def is_s3(path: str) -> bool:
    return path.startswith(S3_SCHEME)


def s3_filesystem(options: S3Config) -> pafs.S3FileSystem:
    """A pyarrow S3 filesystem from the config; unset options fall back to the AWS env vars
    (``AWS_ENDPOINT_URL_S3`` / ``AWS_ENDPOINT_URL`` for the endpoint, as the AWS CLI)."""
    kwargs: dict[str, object] = {"anonymous": options.anon}
    endpoint = (
        options.endpoint_url
        or os.environ.get("AWS_ENDPOINT_URL_S3")
        or os.environ.get("AWS_ENDPOINT_URL")
    )
    if endpoint:
        kwargs["endpoint_override"] = endpoint
        if endpoint.startswith("http://"):
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
        return path[len(S3_SCHEME) :].rstrip("/")
    return str(Path(path).expanduser().resolve())


def write_text(destination: str, text: str, options: S3Config | None = None) -> str:
    """Write ``text`` to a local path or ``s3://`` URI (parent directories made locally);
    returns the destination as given."""
    fs = filesystem_for([destination], options or S3Config())
    path = fs_path(destination)
    if isinstance(fs, pafs.LocalFileSystem):
        Path(path).parent.mkdir(parents=True, exist_ok=True)
    with fs.open_output_stream(path) as stream:
        stream.write(text.encode("utf-8"))
    return destination


def write_parquet(destination: str, frame: Any, options: S3Config | None = None) -> str:
    """Write a polars frame as Parquet to a local path or ``s3://`` URI (parent directories
    made locally); returns the destination as given."""
    import pyarrow.parquet as pq

    fs = filesystem_for([destination], options or S3Config())
    path = fs_path(destination)
    if isinstance(fs, pafs.LocalFileSystem):
        Path(path).parent.mkdir(parents=True, exist_ok=True)
    with fs.open_output_stream(path) as stream:
        pq.write_table(frame.to_arrow(), stream)
    return destination


def read_text(source: str, options: S3Config | None = None) -> str:
    """The text of a local path or ``s3://`` URI (FileNotFoundError when there is none)."""
    fs = filesystem_for([source], options or S3Config())
    path = fs_path(source)
    if fs.get_file_info(path).type != pafs.FileType.File:
        raise FileNotFoundError(source)
    with fs.open_input_stream(path) as stream:
        return stream.read().decode("utf-8")


def join(directory: str, name: str) -> str:
    """``directory/name`` for a local path or an ``s3://`` URI."""
    return f"{directory.rstrip('/')}/{name}"
