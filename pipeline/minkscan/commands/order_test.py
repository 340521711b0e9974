"""`minkscan order-test`: does the model prefer a benchmark file's published order? (the
sharded test of Oren et al., ICLR 2024; `minkscan.evaluation.order_run`). Same input flags
as `score`; the run is scored on the same Ray actor pools and resumes like it."""

from __future__ import annotations

import argparse

from minkscan.commands.common import (
    add_config_arguments,
    add_format_arguments,
    config_from_args,
)
from minkscan.schema import ORDER_RESULT

DEFAULT_SHARDS = 50
DEFAULT_PERMUTATIONS = 50
DEFAULT_SEPARATOR = "\n\n"


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser(
        "order-test",
        help="test whether the model prefers a benchmark's published example order "
        "(needs no non-members; detects training on the file as published)",
    )
    parser.add_argument(
        "--input", nargs="+", required=True,
        help="the benchmark in its published order: files (read in path order), "
        "directories or globs; local or s3://",
    )  # fmt: skip
    parser.add_argument(
        "--output", required=True,
        help="directory for the orderings, their scores and order_test.json",
    )  # fmt: skip
    add_config_arguments(parser)
    add_format_arguments(parser)
    parser.add_argument(
        "--template",
        help="each example's text from its columns, e.g. 'Q: {question}\\nA: {answer}' "
        "(Python format fields; \\n and \\t read as newline and tab; a list column is "
        "one item per line; default: none, the text column)",
    )
    parser.add_argument(
        "--separator", default=DEFAULT_SEPARATOR,
        help="between examples in a shard (\\n and \\t read as newline and tab; default: a "
        "blank line)",
    )  # fmt: skip
    parser.add_argument(
        "--shards", type=int, default=DEFAULT_SHARDS,
        help=f"contiguous shards, each tested on its own (default: {DEFAULT_SHARDS})",
    )  # fmt: skip
    parser.add_argument(
        "--permutations", type=int, default=DEFAULT_PERMUTATIONS,
        help=f"seeded shuffles per shard (default: {DEFAULT_PERMUTATIONS})",
    )  # fmt: skip
    parser.add_argument("--seed", type=int, default=0, help="seed of the shuffles (default: 0)")
    parser.add_argument("--alpha", type=float, default=0.05, help="test level (default: 0.05)")
    parser.add_argument(
        "--window-stride",
        type=int,
        help="sliding windows for orderings over scoring.max_tokens advance by this many "
        "tokens (default: half of scoring.max_tokens)",
    )
    parser.set_defaults(func=run)


def _unescape(text: str | None) -> str | None:
    return None if text is None else text.replace("\\n", "\n").replace("\\t", "\t")


def run(args: argparse.Namespace) -> int:
    from minkscan.errors import UserError

    if args.shards < 2:
        raise UserError(f"the order test needs at least 2 shards (a t-test across them), "
                        f"got {args.shards}")  # fmt: skip
    if args.permutations < 1:
        raise UserError(f"--permutations must be at least 1, got {args.permutations}")
    if not 0 < args.alpha < 1:
        raise UserError(f"--alpha must be in (0, 1), got {args.alpha}")
    config = config_from_args(
        args,
        {
            "data.input": args.input,
            "scoring.window_stride": args.window_stride,
        },
    )
    from minkscan.evaluation.order_run import run_order_test
    from minkscan.evaluation.order_test import OrderSettings

    settings = OrderSettings(
        template=_unescape(args.template),
        separator=_unescape(args.separator) or "",
        shards=args.shards,
        permutations=args.permutations,
        seed=args.seed,
    )
    result = run_order_test(config, settings, args.output, alpha=args.alpha)
    for line in result.verdict():
        print(line)
    print(f"cost: {result.cost.line(estimate=False)}")
    print(f"wrote {args.output.rstrip('/')}/{ORDER_RESULT}")
    return 0
