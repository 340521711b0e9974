"""`minkscan score`: score Parquet files (local or s3://) into Parquet score shards with Ray."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

import yaml

from minkscan.config import ConfigError, ScanConfig, load_config


def add_score_arguments(parser: argparse.ArgumentParser) -> None:
    """The flags shared by `minkscan score` and the `jobs/score.py` Ray job entry point."""
    parser.add_argument("--config", type=Path, help="YAML config (default: built-in defaults)")
    parser.add_argument(
        "--input", nargs="+", help="Parquet/JSONL/CSV/Arrow files, directories or globs"
    )
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
    parser.add_argument(
        "--set",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="any config key, e.g. --set scoring.max_tokens=512 (repeatable; YAML values)",
    )
    parser.add_argument(
        "--require-unique-ids",
        action="store_const",
        const=True,
        help="refuse inputs with repeated or null ids before scoring",
    )


def config_from_args(args: argparse.Namespace) -> ScanConfig:
    """YAML (``--config``, else the typed defaults), then ``--set`` pairs, then the flags."""
    flags = {
        "data.input": args.input,
        "data.output": args.output,
        "model.name": args.model,
        "data.text_column": args.text_column,
        "data.id_column": args.id_column,
        "data.skip_bad_shards": args.skip_bad_shards,
        "data.require_unique_ids": args.require_unique_ids,
        "ray.num_actors": args.num_actors,
        "ray.address": args.address,
    }
    given = {key: value for key, value in flags.items() if value is not None}
    return load_config(args.config, parse_set(args.set) | given)


def parse_set(pairs: list[str]) -> dict[str, Any]:
    """``["a.b=1", ...]`` as dotted-key overrides, each value read as YAML."""
    overrides = {}
    for pair in pairs:
        key, sep, value = pair.partition("=")
        if not sep or not key:
            raise ConfigError(f"--set takes KEY=VALUE, got '{pair}'")
        overrides[key.strip()] = yaml.safe_load(value)
    return overrides


def run(args: argparse.Namespace) -> int:
    """Validate the whole config, then run the pipeline and print its summary line."""
    from minkscan.distributed.runner import run_scoring

    summary = run_scoring(config_from_args(args))
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
