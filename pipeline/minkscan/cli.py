"""`minkscan` command line: one sub-command module per verb under `minkscan.commands`.

Each module exposes ``register(subparsers)``, which adds its parser and sets
``func(args) -> int`` as the handler; this file wires them together and turns errors into
one line on stderr (``-v`` adds the traceback): a `UserError` exits with its own code (2
for a bad command, config or input, 1 for a run that failed on the data), anything else 1.
"""

from __future__ import annotations

import argparse
import importlib
import logging
import sys
import traceback
from importlib.metadata import version

from minkscan.errors import UserError

COMMAND_MODULES = [
    "minkscan.commands.score",
    "minkscan.commands.benchmark",
    "minkscan.commands.calibrate",
    "minkscan.commands.report",
    "minkscan.commands.nightly",
    "minkscan.commands.frequencies",
]


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="minkscan",
        description="Pre-training data detection (Min-K%++ and baselines) over corpora with Ray.",
    )
    parser.add_argument("-v", "--verbose", action="store_true", help="debug logging, tracebacks")
    parser.add_argument("--version", action="version", version=f"minkscan {version('minkscan')}")
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
    except Exception as error:  # noqa: BLE001 - every failure becomes one line
        if args.verbose:
            traceback.print_exc()
        message = str(error).strip().splitlines()[0] if str(error).strip() else ""
        if isinstance(error, UserError):
            print(f"minkscan {args.command}: {message}", file=sys.stderr)
            return error.exit_code
        hint = "" if args.verbose else " (-v shows the traceback)"
        print(f"minkscan {args.command}: {type(error).__name__}: {message}{hint}", file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main())
