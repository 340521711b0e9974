"""`minkscan report`: the contamination verdict (HTML, Markdown, JSON) at calibrated
thresholds; the verdict and any warning are also printed."""

from __future__ import annotations

import argparse
import sys

from minkscan.errors import UserError
from minkscan.evaluation.blind import BLIND_AUROC_WARN


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser(
        "report", help="verdict, flagged fractions, tests and evidence documents per group"
    )
    parser.add_argument(
        "--input", required=True, help="`minkscan score` output or a score Parquet (or s3://)"
    )
    parser.add_argument("--calibration", required=True, help="JSON from `minkscan calibrate`")
    parser.add_argument("--output", required=True, help="directory for report.{html,md,json}")
    parser.add_argument(
        "--method", help="primary score column the verdict rests on (default minkpp_k20)"
    )
    parser.add_argument(
        "--group-column",
        help="column naming each row's dataset/group (keep it with `score --keep-columns`; "
        "default: none, one group)",
    )
    parser.add_argument("--alpha", type=float, default=0.05, help="test level (default 0.05)")
    parser.add_argument(
        "--top", type=int, default=20, help="most member-like documents shown (default: 20)"
    )
    parser.add_argument(
        "--fail-above",
        type=float,
        help="exit 1 when a group is contaminated at --alpha and the lower end of its "
        "contamination interval exceeds this fraction (the verdict's own evidence; default: "
        "none, no gate)",
    )
    parser.add_argument(
        "--blind-auroc-warn",
        type=float,
        default=BLIND_AUROC_WARN,
        help="caution a group's verdict when a model-free text classifier tells it from the "
        "calibration non-members with an AUROC whose lower end exceeds this (a negative "
        f"value turns the check off; default: {BLIND_AUROC_WARN})",
    )
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    import polars as pl

    from minkscan.calibration import load_calibration
    from minkscan.io.scores import read_scores
    from minkscan.reporting import build_report, write_report

    if not 0 < args.alpha < 1:
        raise UserError(f"--alpha must be in (0, 1), got {args.alpha}")
    data = read_scores(args.input)
    try:
        report = build_report(
            pl.from_arrow(data.table).lazy(),
            load_calibration(args.calibration),
            primary_method=args.method,
            group_column=args.group_column,
            top_n=args.top,
            alpha=args.alpha,
            model=data.model,
            inputs=data.inputs or [args.input],
            blind_auroc_warn=None if args.blind_auroc_warn < 0 else args.blind_auroc_warn,
        )
    except ValueError as error:
        raise UserError(str(error)) from None
    print(report.headline())
    for row in report.primary:
        print(f"  {report.sentence(row)}")
    for line in report.blind_lines():
        print(f"  {line}")
    for warning in report.warnings:
        print(f"warning: {warning}", file=sys.stderr)
    for path in write_report(report, args.output):
        print(f"wrote {path}")
    if args.fail_above is not None:
        exceeding = report.exceeding(args.fail_above)
        for row in exceeding:
            print(
                f"minkscan report: group '{row.group}' is contaminated (Holm p = "
                f"{row.p_adjusted:.2g}) and its contamination is at least "
                f"{row.contamination_low:.3f} > {args.fail_above} (estimate {row.estimate()})",
                file=sys.stderr,
            )
        if exceeding:
            return 1
    return 0
