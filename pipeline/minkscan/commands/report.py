"""`minkscan report`: the contamination verdict (HTML, Markdown, JSON) at calibrated
thresholds; the verdict and any warning are also printed."""

from __future__ import annotations

import argparse
import logging

from minkscan.commands.common import fail_above_help, gate, print_verdict
from minkscan.errors import UserError
from minkscan.evaluation.blind import BLIND_AUROC_WARN
from minkscan.schema import GROUP

# Also `minkscan.reporting.audits.DEFAULT_FDR` and
# `minkscan.evaluation.dataset_inference.DEFAULT_SPLITS`; spelled here so --help imports
# neither (tests/test_report_audits.py checks they agree).
DEFAULT_FDR = 0.05
DEFAULT_SPLITS = 10


DEFAULT_TOP = 20  # documents the report files show when --top is not given


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser(
        "report",
        help="verdict, flagged fractions, tests and evidence documents per group",
        epilog="example:\n  minkscan report --input out/testset-scores --calibration "
        "out/calibration.json --output out/report",
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
        "--top",
        type=int,
        help="most member-like documents shown in the report files, and printed here when "
        f"given (default: {DEFAULT_TOP} in the files, none printed)",
    )
    parser.add_argument("--fail-above", type=float, help=fail_above_help(GROUP))
    parser.add_argument(
        "--blind-auroc-warn",
        type=float,
        default=BLIND_AUROC_WARN,
        help="a group's verdict is inconclusive when a model-free text classifier tells it "
        "from the calibration non-members with an AUROC whose lower end exceeds this (a "
        f"negative value turns the check off; default: {BLIND_AUROC_WARN})",
    )
    parser.add_argument(
        "--fdr",
        type=float,
        default=DEFAULT_FDR,
        help="select documents by Benjamini-Hochberg over conformal p-values at this false "
        f"discovery rate, listed in selected.csv (default: {DEFAULT_FDR})",
    )
    parser.add_argument(
        "--heldout",
        help="scores of an i.i.d. held-out split of the audited data (same model and "
        "settings): dataset inference against it (default: none)",
    )
    parser.add_argument(
        "--heldout-splits",
        type=int,
        default=DEFAULT_SPLITS,
        help=f"seeded splits of dataset inference (default: {DEFAULT_SPLITS})",
    )
    parser.add_argument(
        "--csv",
        action="store_true",
        help="also write every audited document's decision as decisions.csv (default: "
        "decisions.parquet only)",
    )
    parser.add_argument(
        "--order-test",
        help="order_test.json of `minkscan order-test`, shown in the report (default: none)",
    )
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    import polars as pl

    from minkscan.calibration import load_calibration
    from minkscan.io.ownership import check_owned, writing
    from minkscan.io.score_reader import read_scores
    from minkscan.reporting import build_report, write_report
    from minkscan.schema import REPORT_FILES

    if not 0 < args.alpha < 1:
        raise UserError(f"--alpha must be in (0, 1), got {args.alpha}")
    if not 0 < args.fdr < 1:
        raise UserError(f"--fdr must be in (0, 1), got {args.fdr}")
    if args.heldout_splits < 1:
        raise UserError(f"--heldout-splits must be at least 1, got {args.heldout_splits}")
    check_owned(args.output, REPORT_FILES, "--output")
    order_test = _order_test(args.order_test) if args.order_test else None
    data = read_scores(args.input)
    heldout = _heldout(args.heldout, data) if args.heldout else None
    with writing(args.output):  # one run writes a report directory at a time
        try:
            report = build_report(
                pl.from_arrow(data.table).lazy(),
                load_calibration(args.calibration),
                primary_method=args.method,
                group_column=args.group_column,
                top_n=DEFAULT_TOP if args.top is None else args.top,
                alpha=args.alpha,
                model=data.model,
                inputs=data.inputs or [args.input],
                blind_auroc_warn=None if args.blind_auroc_warn < 0 else args.blind_auroc_warn,
                fdr=args.fdr,
                heldout=heldout,
                heldout_name=args.heldout or "",
                heldout_splits=args.heldout_splits,
                order_test=order_test,
            )
        except ValueError as error:
            raise UserError(str(error)) from None
        print_verdict(report)
        if args.top is not None:
            from minkscan.reporting.render import top_lines

            print("\n".join(top_lines(report)))
        for path in write_report(report, args.output, csv=args.csv):
            print(f"wrote {path}")
    return 0 if args.fail_above is None else gate(report, args.fail_above, "report")


def _order_test(path: str) -> dict:
    """An order_test.json, or a one-line refusal."""
    import json

    from minkscan.io.paths import read_text

    try:
        result = json.loads(read_text(path))
    except FileNotFoundError:
        raise UserError(f"--order-test: no file at {path} (write one with "
                        "`minkscan order-test`)") from None  # fmt: skip
    except ValueError as error:
        raise UserError(f"--order-test: {path} is not JSON: {error}") from None
    if not isinstance(result, dict) or not isinstance(result.get("verdict"), list):
        raise UserError(f"--order-test: {path} is not an order_test.json of "
                        "`minkscan order-test`")  # fmt: skip
    return result


def _heldout(path: str, audited):
    """The held-out scores as a frame, refused in one line when they share documents with
    the audited ones or were scored with another model or other score-changing settings."""
    import polars as pl

    from minkscan.io.record import scoring_differences
    from minkscan.io.score_reader import read_scores
    from minkscan.reporting.audits import shared_documents

    heldout = read_scores(path)
    frame = pl.from_arrow(heldout.table)
    shared = shared_documents(pl.from_arrow(audited.table), frame)
    if shared:
        raise UserError(f"--heldout {path} shares documents with the audited scores "
                        f"({'; '.join(shared)}): dataset inference needs a held-out split "
                        "disjoint from the audited set")  # fmt: skip
    if heldout.identity is not None and audited.identity is not None:
        changed = scoring_differences(audited.identity, heldout.identity)
        if changed:
            raise UserError(
                f"--heldout {path} was scored with other settings than the audited scores "
                f"({'; '.join(changed[:3])}): score both with the same model and settings"
            )
    else:
        logging.getLogger(__name__).warning(
            "cannot check that --heldout %s was scored like the audited scores (a plain "
            "score file has no run record); dataset inference assumes it was",
            path,
        )
    return frame
