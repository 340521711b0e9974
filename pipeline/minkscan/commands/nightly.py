"""`minkscan nightly`: score the input shards that are new or changed since the last scan,
then report over all of them and diff against the previous report."""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from minkscan.commands.common import add_config_arguments, config_from_args


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser(
        "nightly", help="re-score new/changed shards, report and diff against the last scan"
    )
    parser.add_argument("--input", nargs="+", help="files, directories or globs (data.input)")
    parser.add_argument("--output", help="scores root kept between scans (data.output)")
    add_config_arguments(parser)
    parser.add_argument("--calibration", required=True, help="JSON from `minkscan calibrate`")
    parser.add_argument("--report", required=True, type=Path, help="report directory")
    parser.add_argument("--fail-above", type=float, help="contamination bound per shard")
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    """Exit 1 when --fail-above is given and a shard's estimated contamination exceeds it."""
    from minkscan.calibration import load_calibration
    from minkscan.commands.nightly_scan import nightly_scan

    config = config_from_args(args, {"data.input": args.input, "data.output": args.output})
    result = nightly_scan(config, load_calibration(args.calibration), args.report)
    changes = result.changes
    print(
        f"nightly scan: {len(changes.new)} new, {len(changes.changed)} changed, "
        f"{len(changes.unchanged)} unchanged, {len(changes.removed)} removed shards; "
        f"report in {args.report}"
    )
    if args.fail_above is None:
        return 0
    summary = json.loads((args.report / "report.json").read_text())
    primary = summary["primary_method"]
    return int(
        any(
            row["contamination"] > args.fail_above
            for row in summary["results"]
            if row["method"] == primary
        )
    )
