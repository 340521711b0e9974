"""Seconds a small `minkscan score` takes from the command to its summary: this tree against a
baseline revision, side by side in one run.

What an audit of a benchmark test set or a nightly delta pays whatever its size: Python and
Ray start-up, planning, the id count, the workers' imports and the model load. The model is
a 1-layer random Llama over bytes (its compute is negligible), the input ``--docs`` short
documents with ids in ``--shards`` Parquet shards. Each version runs as the user's command
does (a fresh process, an embedded local Ray, a fresh output), the two versions alternating,
``--repeats`` times each; the medians are compared.

    .venv/bin/python benchmarks/bench_startup.py --baseline 0976c10 --repeats 3

The baseline is checked out into a temporary git worktree and run from there.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
COMMAND = "import sys; from minkscan.cli import main; sys.exit(main(sys.argv[1:]))"


def make_inputs(scratch: Path, docs: int, shards: int) -> tuple[Path, Path]:
    """A saved 1-layer byte-level Llama and ``docs`` documents with ids in ``shards`` files."""
    import polars as pl
    import synthetic

    model = scratch / "model"
    synthetic.tiny_llama().save_pretrained(model)
    synthetic.byte_tokenizer().save_pretrained(model)
    inputs = scratch / "in"
    inputs.mkdir()
    texts = synthetic.texts(docs, shortest=16, longest=128, seed=1)
    per_shard = -(-docs // shards)
    for shard, start in enumerate(range(0, docs, per_shard)):
        ids = [f"doc-{i}" for i in range(start, min(start + per_shard, docs))]
        frame = pl.DataFrame({"id": ids, "text": texts[start : start + len(ids)]})
        frame.write_parquet(inputs / f"part-{shard:03d}.parquet")
    return model, inputs


def timed_run(pipeline: Path, model: Path, inputs: Path, output: Path, cache: Path) -> float:
    """Wall seconds of one `minkscan score` in a fresh process of the given version."""
    env = os.environ | {"PYTHONPATH": str(pipeline), "MINKSCAN_CACHE": str(cache)}
    command = [sys.executable, "-c", COMMAND, "score", "--input", str(inputs),
               "--output", str(output), "--model", str(model)]  # fmt: skip
    start = time.perf_counter()
    subprocess.run(command, env=env, capture_output=True, text=True, check=True)
    return time.perf_counter() - start


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--baseline", default="0976c10", help="git revision to compare with")
    parser.add_argument("--docs", type=int, default=200)
    parser.add_argument("--shards", type=int, default=8)
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="minkscan-startup-") as directory:
        scratch = Path(directory)
        model, inputs = make_inputs(scratch, args.docs, args.shards)
        worktree = scratch / "tree"
        subprocess.run(["git", "-C", str(REPO), "worktree", "add", "--detach", "-q",
                        str(worktree), args.baseline], check=True)  # fmt: skip
        versions = {f"before ({args.baseline})": worktree / "pipeline",
                    "after (this tree)": REPO / "pipeline"}  # fmt: skip
        seconds: dict[str, list[float]] = {label: [] for label in versions}
        try:
            for repeat in range(args.repeats):
                for label, pipeline in versions.items():
                    output = scratch / f"out-{repeat}-{label[:5]}"
                    cache = scratch / "cache"
                    seconds[label].append(timed_run(pipeline, model, inputs, output, cache))
                    print(f"repeat {repeat + 1}, {label}: {seconds[label][-1]:.2f} s", flush=True)
        finally:
            subprocess.run(["git", "-C", str(REPO), "worktree", "remove", "--force",
                            str(worktree)], check=True)  # fmt: skip
    print(f"`minkscan score` of {args.docs} documents with ids in {args.shards} shards, "
          f"1-layer random byte-level Llama, CPU ({os.cpu_count()} cores), "
          f"median of {args.repeats}")  # fmt: skip
    print("| version | seconds, command to summary |")
    print("|---|---|")
    medians = {label: statistics.median(values) for label, values in seconds.items()}
    for label, median in medians.items():
        print(f"| {label} | {median:.2f} |")
    before, after = medians.values()
    print(f"after / before: {after / before:.2f}")


if __name__ == "__main__":
    main()
