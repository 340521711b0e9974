"""`minkscan calibrate`: decision thresholds per method at a target FPR, written as JSON."""

from __future__ import annotations

import argparse
import sys

from minkscan.errors import UserError
from minkscan.schema import ID, LABEL


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser(
        "calibrate",
        help="pick per-method thresholds at a target FPR from known non-members",
        epilog="example:\n  minkscan calibrate --nonmembers out/nonmember-scores "
        "--output out/calibration.json",
    )
    parser.add_argument(
        "--input",
        help="scores (`minkscan score` output or Parquet; local or s3://) of members and "
        "non-members, labelled by --label-column or --labels (default: none; this or "
        "--nonmembers)",
    )
    parser.add_argument(
        "--label-column",
        default=LABEL,
        help="score column holding 1 (member) / 0 (non-member), e.g. kept with "
        "`score --keep-columns label` (default: label)",
    )
    parser.add_argument(
        "--labels", help="Parquet with columns id, label, joined on id (default: none)"
    )
    parser.add_argument(
        "--nonmembers", help="scores of known non-members only (default: none; or --input)"
    )
    parser.add_argument(
        "--target-fpr",
        type=float,
        default=0.05,
        help="false-positive rate each threshold is set at, on the non-members (default: 0.05)",
    )
    parser.add_argument(
        "--confidence",
        type=float,
        default=0.95,
        help="level of the bootstrap and Clopper-Pearson intervals (default: 0.95)",
    )
    parser.add_argument(
        "--output",
        default="calibration.json",
        help="calibration JSON to write, local or s3:// (default: calibration.json)",
    )
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    import polars as pl

    from minkscan.calibration import calibrate
    from minkscan.calibration.threshold import primary_method, sample_size_warning
    from minkscan.io.labels import checked_labels, joined_labels, unique_labels
    from minkscan.io.score_reader import read_scores
    from minkscan.reporting.numbers import rate, significant_digits

    if args.nonmembers:
        data = read_scores(args.nonmembers)
        nonmembers, members = pl.from_arrow(data.table), None
    elif args.input:
        data = read_scores(args.input)
        scores = pl.from_arrow(data.table)
        if args.labels:
            labels = pl.from_arrow(read_scores(args.labels).table)
            scores = joined_labels(scores, labels, f"--labels {args.labels}")
            label = LABEL
        elif args.label_column in scores.columns:
            label = args.label_column
        else:
            raise UserError(
                f"the scores have no '{args.label_column}' column: keep it with "
                f"`minkscan score --keep-columns {args.label_column}`, or give --labels"
            )
        scores = scores.with_columns(checked_labels(scores[label], f"column '{label}'"))
        if ID in scores.columns:
            unique_labels(scores.select(ID, label), label, f"the scores' '{label}' column")
        nonmembers = scores.filter(pl.col(label) == 0)
        members = scores.filter(pl.col(label) == 1)
    else:
        raise UserError("give --nonmembers, or --input (with a label column or --labels)")
    try:
        result = calibrate(
            nonmembers,
            members,
            target_fpr=args.target_fpr,
            confidence=args.confidence,
            model=data.model,
        )
    except ValueError as error:
        raise UserError(str(error)) from None
    for name, method in result.methods.items():
        tpr = "" if method.tpr is None else f" tpr={rate(method.tpr)} auroc={rate(method.auroc)}"
        print(
            f"{name}: flagged when score > {significant_digits(method.threshold)} "
            f"[{significant_digits(method.threshold_low)}, "
            f"{significant_digits(method.threshold_high)}] fpr={rate(method.fpr)}{tpr}"
        )
    warning = sample_size_warning(result, primary_method(list(result.methods)))
    if warning:
        print(f"warning: {warning}", file=sys.stderr)
    print(f"wrote {result.write(args.output)}")
    return 0
