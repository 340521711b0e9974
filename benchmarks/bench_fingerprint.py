"""What content identity costs at planning: the fingerprint of every input file
(`minkscan.io.content`), beside what reading the same files for scoring costs, measured side
by side in one run.

Builds a corpus of JSON lines and Parquet files, then times, per format:
- the fingerprints a run's planning takes (Parquet: footers; JSON lines: SHA-256 of bytes);
- a read of every file into Arrow, as the scoring pipeline reads it;
and prints their ratio. The page cache is warm for both (the files are read once before
timing); each fingerprint is taken once, as on a run's first plan.

    .venv/bin/python benchmarks/bench_fingerprint.py --megabytes 400
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from pathlib import Path

import pyarrow as pa
import pyarrow.fs as pafs
import pyarrow.json as pajson
import pyarrow.parquet as pq

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "pipeline"))
from minkscan.io import content  # noqa: E402

FILES = 16
TEXT = "the quick brown fox jumps over a lazy dog near the river bank at dawn " * 8


def build(directory: Path, megabytes: int) -> None:
    """FILES JSON lines and FILES Parquet files of about ``megabytes`` each in all."""
    line = json.dumps({"id": "x", "text": TEXT}) + "\n"
    rows = megabytes * (1 << 20) // FILES // len(line)
    for index in range(FILES):
        records = (json.dumps({"id": f"{index}-{r}", "text": TEXT}) + "\n" for r in range(rows))
        (directory / f"{index}.jsonl").write_text("".join(records))
        table = pa.table({"id": [f"{index}-{r}" for r in range(rows)], "text": [TEXT] * rows})
        pq.write_table(table, directory / f"{index}.parquet", row_group_size=5000)


def timed(work, paths: list[str]) -> float:
    start = time.perf_counter()
    work(paths)
    return time.perf_counter() - start


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--megabytes", type=int, default=400)
    args = parser.parse_args()
    fs = pafs.LocalFileSystem()
    with tempfile.TemporaryDirectory() as name:
        directory = Path(name)
        build(directory, args.megabytes)
        for suffix, format, read in [
            ("jsonl", "jsonl", lambda p: pajson.read_json(p)),
            ("parquet", "parquet", lambda p: pq.read_table(p)),
        ]:
            paths = sorted(str(p) for p in directory.glob(f"*.{suffix}"))
            size = sum(Path(p).stat().st_size for p in paths) / (1 << 20)

            def fingerprints(paths: list[str], format: str = format) -> None:
                for path in paths:
                    content.fingerprint(fs, path, format)

            def reads(paths: list[str], read=read) -> None:
                for path in paths:
                    read(path)

            reads(paths)  # the page cache warm for both
            hashing, reading = timed(fingerprints, paths), timed(reads, paths)
            print(
                f"{format}: {len(paths)} files, {size:.0f} MiB: fingerprints {hashing:.3f} s, "
                f"read into Arrow {reading:.3f} s, ratio {hashing / reading:.3f}"
            )


if __name__ == "__main__":
    main()
