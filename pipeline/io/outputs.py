"""The score output directory: what earlier (possibly crashed) runs already finished, and the
JSON run manifest written next to the score shards.

A crashed run can leave a score shard without its Parquet footer; such files hold no
finished rows, so they are deleted before resuming, and only ids in complete shards count.
"""

from __future__ import annotations

import json
import logging
from typing import Any

import pyarrow as pa
import pyarrow.fs as pafs
import pyarrow.parquet as pq

logger = logging.getLogger(__name__)

MANIFEST_NAME = "_manifest.json"


def score_shards(fs: pafs.FileSystem, output: str) -> list[str]:
    """Parquet files already in the output directory (none when it does not exist)."""
    if fs.get_file_info(output).type != pafs.FileType.Directory:
        return []
    selector = pafs.FileSelector(output, recursive=False)
    return sorted(
        info.path
        for info in fs.get_file_info(selector)
        if info.type == pafs.FileType.File and info.path.endswith(".parquet")
    )


def read_columns(fs: pafs.FileSystem, output: str, columns: list[str]) -> pa.Table:
    """``columns`` of every complete score shard; incomplete shards are deleted."""
    tables = []
    for path in score_shards(fs, output):
        try:
            with fs.open_input_file(path) as handle:
                tables.append(pq.read_table(handle, columns=columns))
        except (OSError, pa.ArrowInvalid) as error:
            logger.warning("removing incomplete score shard %s (%s)", path, error)
            fs.delete_file(path)
    return pa.concat_tables(tables) if tables else pa.table({c: [] for c in columns})


def existing_columns(fs: pafs.FileSystem, output: str) -> list[str] | None:
    """Column names of the first score shard already in the output; None when there is none."""
    shards = score_shards(fs, output)
    if not shards:
        return None
    with fs.open_input_file(shards[0]) as handle:
        return pq.read_schema(handle).names


def write_manifest(fs: pafs.FileSystem, output: str, manifest: dict[str, Any]) -> str:
    """Write the run manifest as ``<output>/_manifest.json``; returns its path."""
    path = f"{output}/{MANIFEST_NAME}"
    fs.create_dir(output, recursive=True)
    with fs.open_output_stream(path) as stream:
        stream.write(json.dumps(manifest, indent=2, default=str).encode())
    return path
