"""`minkscan frequencies`: token counts of a reference corpus (for DC-PDD), with Ray Data."""

from __future__ import annotations

import argparse

from minkscan.commands.common import (
    add_config_arguments,
    add_format_arguments,
    config_from_args,
    for_key,
)


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser(
        "frequencies",
        help="count the tokens of a reference corpus (the target model's tokenizer) for DC-PDD",
        epilog="example:\n  minkscan frequencies --input corpus/ --output freq.parquet",
    )
    parser.add_argument("--input", nargs="+", required=True, help="reference corpus files")
    parser.add_argument("--output", required=True, help="frequency file to write (.parquet)")
    add_config_arguments(parser, scoring=False)
    add_format_arguments(parser)
    parser.add_argument(
        "--num-actors", type=int, help=for_key("ray.num_actors", "tokenizer actors")
    )
    parser.add_argument(
        "--skip-bad-shards",
        action="store_const",
        const=True,
        help=for_key("data.skip_bad_shards", "skip unreadable shards instead of failing"),
    )
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    config = config_from_args(
        args,
        {
            "data.input": args.input,
            "ray.num_actors": args.num_actors,
            "data.skip_bad_shards": args.skip_bad_shards,
        },
    )
    from minkscan.distributed.frequencies import count_tokens

    print(count_tokens(config, args.output).line())
    print(f"score with: --set scoring.dcpdd_frequencies={args.output}")
    return 0
