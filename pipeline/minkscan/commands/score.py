"""`minkscan score`: score documents (Parquet, JSONL, CSV, Arrow; local or s3://) into score
files with Ray. The same flags serve `jobs/score.py` for `ray job submit`."""

from __future__ import annotations

import argparse
import time
from collections.abc import Sequence
from importlib.resources import files

from minkscan.commands.common import (
    add_config_arguments,
    add_format_arguments,
    add_keep_columns_argument,
    config_from_args,
    for_key,
)
from minkscan.commands.prefixes import add_prefix_arguments, prefix_flags


def sample_path() -> str:
    """The 64 WikiMIA-24 texts shipped in the package (a first run needs no data)."""
    return str(files("minkscan") / "data" / "sample.parquet")


def add_score_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--input",
        nargs="+",
        help="files, directories or globs (default: the bundled sample of 64 texts)",
    )
    parser.add_argument(
        "--output", help="directory for score files and _manifest.json (default: none; required)"
    )
    add_config_arguments(parser)
    add_prefix_arguments(parser)
    add_format_arguments(parser)
    parser.add_argument(
        "--id-column",
        help=for_key("data.id_column", "ids are derived from file and row when absent"),
    )
    add_keep_columns_argument(parser)
    parser.add_argument(
        "--token-scores",
        action="store_const",
        const=True,
        help=for_key(
            "scoring.token_scores",
            "also write each token's Min-K%%++ z-score and "
            "character span, and the text (the report marks the words that pulled a "
            "score down)",
        ),  # fmt: skip
    )
    parser.add_argument(
        "--skip-bad-shards",
        action="store_const",
        const=True,
        help=for_key("data.skip_bad_shards", "skip and list unreadable shards instead of failing"),
    )
    parser.add_argument(
        "--drop-missing",
        action="store_const",
        const=True,
        help=for_key("data.drop_missing", "drop the rows of inputs this run no longer names"),
    )
    parser.add_argument(
        "--require-unique-ids",
        action="store_const",
        const=True,
        help=for_key("data.require_unique_ids", "refuse repeated or null ids before scoring"),
    )


def run(args: argparse.Namespace) -> int:
    """Validate the whole config, then run the pipeline and print its summary line."""
    config = config_from_args(
        args,
        {
            "data.input": args.input,
            "data.output": args.output,
            "data.id_column": args.id_column,
            "data.keep_columns": args.keep_columns,
            "scoring.token_scores": args.token_scores,
            "data.skip_bad_shards": args.skip_bad_shards,
            "data.drop_missing": args.drop_missing,
            "data.require_unique_ids": args.require_unique_ids,
            **prefix_flags(args),
        },
    )
    if not config.data.input:
        config.data.input = [sample_path()]
    # Everything that can be wrong is found by the plan, which imports nothing heavy.
    from minkscan.distributed.plan import plan_run
    from minkscan.io.inputs import not_read_note

    plan = plan_run(config)
    if not plan.to_score and not plan.stale and not plan.marker_outdated:
        print(f"nothing to do: all {plan.rows_done_before} documents already scored in "
              f"{config.data.output}{not_read_note(plan.skipped_files)}")  # fmt: skip
        for path, reason in plan.bad.items():
            print(f"skipped shard {path}: {reason}")
        _list_inputs(plan.skipped_files)
        return 0
    from minkscan.distributed.runner import run_scoring

    summary = run_scoring(config)
    print(summary.line(wall_seconds=time.perf_counter() - args.started))
    for path, reason in summary.skipped_shards.items():
        print(f"skipped shard {path}: {reason}")
    _list_inputs(summary.skipped_files, summary.input_changes.lines())
    return 0


def _list_inputs(skipped_files: dict[str, str], changes: Sequence[str] = ()) -> None:
    """With -v, each file the inputs hold that was not read, and why, and each input that
    changed, moved or went since the output's last run."""
    from minkscan.distributed.session import verbose

    if verbose():
        for path, reason in sorted(skipped_files.items()):
            print(f"not read {path}: {reason}")
        for line in changes:
            print(line)


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser(
        "score",
        help="score documents with Ray Data actor pools",
        epilog="example:\n  minkscan score --input testset.parquet --keep-columns label,text "
        "--output out/testset-scores",
    )
    add_score_arguments(parser)
    parser.set_defaults(func=run)
