"""`minkscan report`: contamination report (HTML, Markdown, JSON) at calibrated thresholds."""

from __future__ import annotations

import argparse
import sys


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser(
        "report", help="flagged fractions, binomial tests and contamination estimates per group"
    )
    parser.add_argument(
        "--input", required=True, help="`minkscan score` output directory or a score Parquet"
    )
    parser.add_argument("--calibration", required=True, help="JSON from `minkscan calibrate`")
    parser.add_argument("--output", required=True, help="directory for report.{html,md,json}")
    parser.add_argument("--method", help="primary score column (default minkpp_k20)")
    parser.add_argument("--group-column", help="column naming the dataset/group of each row")
    parser.add_argument("--top", type=int, default=20, help="most suspicious documents to list")
    parser.add_argument(
        "--fail-above",
        type=float,
        help="exit 1 when any group's estimated contamination exceeds this fraction",
    )
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from minkscan.calibration import load_calibration, scan_scores
    from minkscan.reporting import build_report, write_report

    report = build_report(
        scan_scores(args.input),
        load_calibration(args.calibration),
        primary_method=args.method,
        group_column=args.group_column,
        top_n=args.top,
    )
    for path in write_report(report, args.output):
        print(f"wrote {path}")
    if args.fail_above is not None:
        exceeding = report.exceeding(args.fail_above)
        for row in exceeding:
            print(
                f"minkscan report: group '{row.group}' estimated contamination "
                f"{row.contamination:.3f} > {args.fail_above}",
                file=sys.stderr,
            )
        if exceeding:
            return 1
    return 0
