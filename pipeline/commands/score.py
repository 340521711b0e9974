"""`minkscan score`: score Parquet files (local or s3://) into Parquet score shards with Ray."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from pipeline.config import ScanConfig, load_config
from pipeline.io.paths import ShardError

DEFAULT_CONFIG = Path(__file__).resolve().parents[2] / "configs" / "default.yaml"


def add_score_arguments(parser: argparse.ArgumentParser) -> None:
    """The flags shared by `minkscan score` and the `jobs/score.py` Ray job entry point."""
    parser.add_argument("--config", type=Path, help=f"YAML config (default: {DEFAULT_CONFIG})")
    parser.add_argument("--input", nargs="+", help="Parquet files, directories or globs")
    parser.add_argument("--output", help="directory for score shards and _manifest.json")
    parser.add_argument("--model", help="model name, HF id or local directory")
    parser.add_argument("--text-column")
    parser.add_argument("--id-column", help="ids are derived from file and row when absent")
    parser.add_argument("--num-actors", type=int, help="model replicas")
    parser.add_argument("--address", help="Ray cluster address (default: embedded local Ray)")
    parser.add_argument(
        "--skip-bad-shards",
        action="store_const",
        const=True,
        help="skip and list unreadable shards instead of failing",
    )


def config_from_args(args: argparse.Namespace) -> ScanConfig:
    """YAML (``--config`` or configs/default.yaml) with the flags given on top."""
    return load_config(
        args.config or DEFAULT_CONFIG,
        {
            "data.input": args.input,
            "data.output": args.output,
            "model.name": args.model,
            "data.text_column": args.text_column,
            "data.id_column": args.id_column,
            "data.skip_bad_shards": args.skip_bad_shards,
            "ray.num_actors": args.num_actors,
            "ray.address": args.address,
        },
    )


def run(args: argparse.Namespace) -> int:
    """Validate the whole config, then run the pipeline and print its summary line."""
    from pipeline.distributed import run_scoring

    config = config_from_args(args)
    try:
        summary = run_scoring(config)
    except (ShardError, OSError, ValueError) as error:
        print(f"minkscan score: {error}", file=sys.stderr)
        return 1
    print(summary.line())
    for path, reason in summary.skipped_shards.items():
        print(f"skipped shard {path}: {reason}")
    return 0


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser(
        "score", help="score Parquet documents with a Ray Data actor pool"
    )
    add_score_arguments(parser)
    parser.set_defaults(func=run)
