"""`minkscan` command line: one sub-command module per verb under `pipeline.commands`.

Each module exposes ``register(subparsers)``, which adds its parser and sets
``func(args) -> int`` as the handler; this file only wires them together.
"""

from __future__ import annotations

import argparse
import importlib
import logging
import sys

from pipeline.config import ConfigError

COMMAND_MODULES = [
    "pipeline.commands.score",
    "pipeline.commands.benchmark",
    "pipeline.commands.calibrate",
    "pipeline.commands.report",
]


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="minkscan",
        description="Pre-training data detection (Min-K%++ and baselines) over Parquet with Ray.",
    )
    parser.add_argument("-v", "--verbose", action="store_true", help="debug logging")
    subparsers = parser.add_subparsers(dest="command", required=True)
    for module_name in COMMAND_MODULES:
        importlib.import_module(module_name).register(subparsers)
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    logging.basicConfig(
        level=logging.DEBUG if args.verbose else logging.INFO,
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
    )
    try:
        return int(args.func(args) or 0)
    except ConfigError as error:
        print(f"minkscan: {error}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
