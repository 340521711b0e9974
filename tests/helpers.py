"""Helpers several test modules share: running `minkscan score` as a user would, reading
what it wrote, and breaking input files the ways real corpora break."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import polars as pl
import pyarrow as pa
import pyarrow.fs as pafs
import pyarrow.parquet as pq
from minkscan.cli import main
from minkscan.io.scores import ScoreOutput

REPO = Path(__file__).resolve().parents[1]


def score(model_dir: Path, inputs: Path | str | list, output: Path, *extra: str) -> int:
    """`minkscan score` in this process (id counting off unless ``extra`` turns it on)."""
    specs = [str(i) for i in inputs] if isinstance(inputs, list) else [str(inputs)]
    return main(
        ["score", "--input", *specs, "--output", str(output), "--model", str(model_dir),
         "--set", "data.check_ids=false", *extra]
    )  # fmt: skip


def score_process(
    model_dir: Path, inputs: Path, output: Path, *extra: str, env: dict | None = None
) -> subprocess.Popen:
    """`minkscan score` as its own process (stdout and stderr piped, text)."""
    command = [str(Path(sys.executable).parent / "minkscan"), "score", "--input", str(inputs),
               "--output", str(output), "--model", str(model_dir), *extra]  # fmt: skip
    return subprocess.Popen(
        command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env
    )


def scores(output: Path) -> pl.DataFrame:
    """The rows of every complete piece of a score output, by id."""
    return pl.from_arrow(ScoreOutput(pafs.LocalFileSystem(), str(output)).read()).sort("id")


def corrupt_pages(path: Path, row_group: int = 0) -> None:
    """Overwrite the start of a Parquet row group's first data page, footer intact: only
    reading its rows fails."""
    raw = bytearray(path.read_bytes())
    start = pq.ParquetFile(path).metadata.row_group(row_group).column(0).data_page_offset
    raw[start : start + 32] = b"\xde\xad\xbe\xef" * 8
    path.write_bytes(bytes(raw))


def write_parquet(path: Path, **columns: list) -> Path:
    """A Parquet file of the given columns, uncompressed (so pages can be broken)."""
    pq.write_table(pa.table(columns), path, compression="none")
    return path
