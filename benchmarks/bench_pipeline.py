"""End-to-end `minkscan score` (Ray Data pipeline) vs the in-process scorer on all WikiMIA-24
documents with smollm2-135m; prints docs/s of both and their ratio (target >= 0.85).

    .venv/bin/python benchmarks/bench_pipeline.py [--num-actors 1] [--cpus-per-actor 1.5]
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import polars as pl
from minkscan import score_texts
from minkscan.config import ModelConfig
from minkscan.models.loading import load_model

REPO = Path(__file__).resolve().parents[1]
DATA = REPO.parent / "shared" / "data" / "wikimia24"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--num-actors", type=int, default=1)
    parser.add_argument("--cpus-per-actor", type=float, default=1.5)
    args = parser.parse_args()
    shards = sorted(DATA.glob("*.parquet"))
    texts = pl.concat([pl.read_parquet(p).select("text") for p in shards])["text"].to_list()

    loaded = load_model(ModelConfig(name="smollm2-135m", device="cpu"))
    started = time.perf_counter()
    score_texts(texts, loaded)
    in_process = len(texts) / (time.perf_counter() - started)
    print(f"in-process scorer: {len(texts)} docs, {in_process:.1f} docs/s")
    del loaded

    with tempfile.TemporaryDirectory() as scratch:
        command = [
            str(Path(sys.executable).parent / "minkscan"), "score",
            "--input", *map(str, shards), "--output", str(Path(scratch) / "out"),
            "--model", "smollm2-135m", "--device", "cpu",
            "--num-actors", str(args.num_actors),
            "--set", f"ray.cpus_per_actor={args.cpus_per_actor}",
        ]  # fmt: skip
        started = time.perf_counter()
        result = subprocess.run(command, capture_output=True, text=True, check=True)
        wall = time.perf_counter() - started
    summary = result.stdout.strip().splitlines()[-1]
    print(f"minkscan score: {summary}")
    pipeline_rate = len(texts) / wall
    print(
        f"minkscan score end-to-end (incl. Ray start-up and model load): {wall:.1f} s, "
        f"{pipeline_rate:.1f} docs/s; ratio vs in-process: {pipeline_rate / in_process:.2f}"
    )


if __name__ == "__main__":
    main()
