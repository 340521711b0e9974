"""`minkscan calibrate`: decision thresholds per method at a target FPR, written as JSON."""

from __future__ import annotations

import argparse

from minkscan.errors import UserError


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser(
        "calibrate", help="pick per-method thresholds at a target FPR from known non-members"
    )
    parser.add_argument(
        "--input", help="`minkscan score` output (or Parquet) of members and non-members"
    )
    parser.add_argument("--labels", help="Parquet with columns id, label (1 member, 0 non-member)")
    parser.add_argument("--nonmembers", help="score Parquet of known non-members only")
    parser.add_argument("--target-fpr", type=float, default=0.05)
    parser.add_argument("--confidence", type=float, default=0.95)
    parser.add_argument("--output", default="calibration.json")
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    import polars as pl

    from minkscan.calibration import calibrate, scan_scores

    if args.nonmembers:
        nonmembers, members = scan_scores(args.nonmembers).collect(), None
    elif args.input and args.labels:
        labels = pl.read_parquet(args.labels, columns=["id", "label"])
        joined = scan_scores(args.input).collect().join(labels, on="id", how="inner")
        if joined.is_empty():
            raise UserError("no score id matches a label id")
        nonmembers = joined.filter(pl.col("label") == 0)
        members = joined.filter(pl.col("label") == 1)
    else:
        raise UserError("give --nonmembers, or --input with --labels")
    result = calibrate(nonmembers, members, target_fpr=args.target_fpr, confidence=args.confidence)
    for name, method in result.methods.items():
        tpr = "" if method.tpr is None else f" tpr={method.tpr:.3f} auroc={method.auroc:.3f}"
        print(
            f"{name}: threshold={method.threshold:.4f} "
            f"[{method.threshold_low:.4f}, {method.threshold_high:.4f}] fpr={method.fpr:.3f}{tpr}"
        )
    print(f"wrote {result.write(args.output)}")
    return 0
