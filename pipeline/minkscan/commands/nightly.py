"""`minkscan nightly`: score the input shards that are new or changed since the last scan,
then report over all of them and diff against the previous report."""

from __future__ import annotations

import argparse

from minkscan.commands.common import (
    add_config_arguments,
    add_keep_columns_argument,
    config_from_args,
    fail_above_help,
    for_key,
    gate,
    print_verdict,
)
from minkscan.schema import SHARD


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser(
        "nightly",
        help="re-score new/changed shards, report and diff against the last scan",
        epilog="example:\n  minkscan nightly --input corpus/ --keep-columns text --output "
        "out/nightly --calibration out/calibration.json --report out/nightly-report",
    )
    parser.add_argument(
        "--input", nargs="+", help=for_key("data.input", "files, directories or globs")
    )
    parser.add_argument("--output", help=for_key("data.output", "scores root kept between scans"))
    add_config_arguments(parser)
    add_keep_columns_argument(parser)
    parser.add_argument("--calibration", required=True, help="JSON from `minkscan calibrate`")
    parser.add_argument(
        "--report", required=True, help="report directory, local or s3:// (rewritten each scan)"
    )
    parser.add_argument("--fail-above", type=float, help=fail_above_help(SHARD))
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    """The verdict as `report` prints it, and `report`'s --fail-above gate per shard."""
    from minkscan.calibration import load_calibration
    from minkscan.commands.nightly_scan import nightly_scan

    config = config_from_args(
        args,
        {"data.input": args.input, "data.output": args.output,
         "data.keep_columns": args.keep_columns},
    )  # fmt: skip
    result = nightly_scan(config, load_calibration(args.calibration), args.report)
    changes, report = result.changes, result.report
    if result.scoring is not None:
        print(result.scoring.line())
    print(
        f"nightly scan: {len(changes.new)} new, {len(changes.changed)} changed, "
        f"{len(changes.unchanged)} unchanged, {len(changes.moved)} moved, "
        f"{len(changes.removed)} removed shards; "
        f"report in {args.report}"
    )
    print_verdict(report)
    return 0 if args.fail_above is None else gate(report, args.fail_above, "nightly", SHARD)
